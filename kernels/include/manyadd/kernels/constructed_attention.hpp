// The constructed model's attention pass on the device (kernels/src/constructed_attention.cu): the
// four heads' causal real softmax over host arrays, plain pointers only (no Eigen in nvcc's way).
// construct/'s CUDA engine (cuda_engine.hpp) prepares q, k, v and runs the FFN around it.
#pragma once
#include <cstdint>

namespace manyadd::kernels {

constexpr int kMaxD = 48;  // query/key width P + 1 <= 2 log2(N) + 1 = 45 at N = 2^22

// Shapes: q, k (4, N, D) row-major, D a multiple of 8 in [8, kMaxD] (zero-padded), v (4, N); out (4, N - first).
// Rows first..N-1 are queries. Returns the attention pass's device time in seconds. Throws
// std::runtime_error on CUDA errors.
double constructed_attention(const float* q, const float* k, const float* v, float* out, int D, std::int64_t N,
                             std::int64_t first);
double constructed_attention(const double* q, const double* k, const double* v, double* out, int D, std::int64_t N,
                             std::int64_t first);

}  // namespace manyadd::kernels
