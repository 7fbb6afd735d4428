// The arithmetic of the RoPE kernels of rope.cu (learn::rope_rotate's, Su et al. 2021, Eq. 34), written
// once for two executors: the device (one thread per (row, head, pair)) and the host replay in
// tests/test_cuda_train_kernels.cpp (one loop over every thread). Plain C++ where nvcc is not compiling
// (MANYADD_HD is empty), so the test includes this file with the host compiler.
//
// Rows are varlen (train.hpp, attention): row r of the (R, NH HS) buffer belongs to the sequence b with
// offsets[b] <= r < offsets[b + 1] (a binary search over the B + 1 offsets) and is turned by its index
// t = r - offsets[b] within that sequence, never by r itself: RoPE's scores depend on position
// differences only, so a rotation by the batch row would leave every logit and gradient unchanged up to
// rounding, and only a test of the rotated rows (the replay, the GPU test) can tell.
// Each output is two products rounded on their own and their sum, as learn::rope_rotate evaluates
// `a * c - b * s` in float without contraction: the device uses __fmul_rn / __fadd_rn / __fsub_rn (nvcc
// would fuse a product into the add otherwise), so device, replay and twin are bitwise equal.
#pragma once

#include "rn.cuh"  // mul_rn, add_rn, sub_rn, div_rn, fma_rn
#include <cstdint>

#if defined(__CUDACC__)
#define MANYADD_HD __host__ __device__ inline
#else
#define MANYADD_HD inline  // (attention_rows.cuh and embedding_rows.cuh define it identically)
#endif

namespace manyadd::kernels::rope_rows {

using kernels::add_rn, kernels::div_rn, kernels::fma_rn, kernels::mul_rn, kernels::sub_rn;


// The sequence of row r: the largest b < B with offsets[b] <= r (offsets[0] = 0 <= r < offsets[B]).
MANYADD_HD int sequence_of(const std::int32_t* offsets, int B, long long r) {
  int lo = 0, hi = B - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= r) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// One rotated pair: the element offset of its first value and the two values.
struct Pair {
  long long at;
  float x0, x1;
};

// Entry e < R NH K (K = HS / 2) of the grid: row r = e / (NH K), head h, pair k; reads (in[at], in[at +
// 1]) and the tables' row t (cs, sn: (rows, K), learn::rope_tables<float>), and turns the pair by +angle
// (sign +1, forward) or -angle (sign -1, the backward of an orthogonal map), as learn::rope_rotate:
//   x'_2k = x_2k c - x_2k+1 s' ;  x'_2k+1 = x_2k s' + x_2k+1 c ,  s' = sign s
MANYADD_HD Pair rotate_entry(const float* in, const float* cs, const float* sn, const std::int32_t* offsets, int B,
                             int NH, int HS, int sign, long long e) {
  const int K = HS / 2;
  const long long per_row = (long long)NH * K;
  const long long r = e / per_row;
  const int h = int((e % per_row) / K), k = int(e % K);
  const long long t = r - offsets[sequence_of(offsets, B, r)];
  const float c = cs[t * K + k], s = sign > 0 ? sn[t * K + k] : -sn[t * K + k];
  const long long at = r * NH * HS + (long long)h * HS + 2 * k;
  const float a = in[at], b = in[at + 1];
  return {at, sub_rn(mul_rn(a, c), mul_rn(b, s)), add_rn(mul_rn(a, s), mul_rn(b, c))};
}

}  // namespace manyadd::kernels::rope_rows
