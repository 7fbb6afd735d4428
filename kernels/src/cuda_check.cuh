// CUDA_CHECK for the .cu files of kernels/: a failing CUDA runtime call throws std::runtime_error
// with the call, the file and the line. LAUNCH_CHECK() checks the last kernel launch.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace manyadd::kernels::detail {
inline void cuda_check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + " (" + file + ":" + std::to_string(line) +
                             "): " + cudaGetErrorString(e));
}
}  // namespace manyadd::kernels::detail

#define CUDA_CHECK(x) ::manyadd::kernels::detail::cuda_check((x), #x, __FILE__, __LINE__)
#define LAUNCH_CHECK() ::manyadd::kernels::detail::cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
