// Internal: the device side of cuda_engine, with plain pointers only (no Eigen in nvcc's way).
#pragma once
#include <cstdint>
#include <string>

namespace manyadd::cuda {

constexpr int kMaxD = 48;  // query/key width P + 1 <= 2 log2(N) + 1 = 45 at N = 2^22

bool device_count(std::string* why);

// Shapes: q, k (4, N, D) row-major, D a multiple of 8 in [8, kMaxD] (zero-padded), v (4, N); out (4, N - first). Rows first..N-1 are queries.
// Returns the attention pass's device time in seconds. Throws std::runtime_error on CUDA errors.
double attention(const float* q, const float* k, const float* v, float* out, int D, std::int64_t N, std::int64_t first);
double attention(const double* q, const double* k, const double* v, double* out, int D, std::int64_t N, std::int64_t first);

}  // namespace manyadd::cuda
