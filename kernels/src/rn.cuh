// The round-to-nearest fp32 operations of the kernels' arithmetic files (attention_rows.cuh,
// flash_tc.cuh, rope_rows.cuh, fire_rows.cuh), written once for the device and the CPU replays that
// include those files with the host compiler. On the device each is its _rn intrinsic, which nvcc never
// contracts: a product followed by an add would otherwise become one fma, rounded once instead of twice,
// and the kernel would no longer be bitwise its replay and its twin. On the host each is the plain
// expression (the host build does not enable FMA contraction) and std::fma.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define MANYADD_RN __host__ __device__ __forceinline__
#else
#define MANYADD_RN inline
#endif

namespace manyadd::kernels {

MANYADD_RN float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MANYADD_RN float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
MANYADD_RN float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
MANYADD_RN float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
MANYADD_RN float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

}  // namespace manyadd::kernels
