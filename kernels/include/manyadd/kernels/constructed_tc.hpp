// The arithmetic of the tensor-core attention kernel (src/constructed_attention.cu) that its CPU twin
// must replay bit for bit: the q/k/v preparation from tokens and IDs, and the split of a float into
// two tf32 parts. Plain C++ and `__host__ __device__` under nvcc, so the kernel and the twin
// (construct/src/cuda_engine.cpp) compile the same lines. No CUDA header.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define MANYADD_HD __host__ __device__
#else
#define MANYADD_HD
#endif

namespace manyadd::kernels::tc {

// Launch geometry, also the twin's replay order: a block of kWarps warps owns kBlockRows query rows
// (16 per warp, one m16 MMA tile); keys stream through shared memory kTileKeys at a time, as 8
// n8 blocks. Lane (g = lane / 4, t = lane % 4) of a warp holds rows g and g + 8 of its 16, and of each
// n8 block the keys 2t and 2t + 1 (the m16n8k8 accumulator layout): its own partial sums run over
// keys nb * 8 + 2t + e of a tile, nb = 0..7, e = 0..1, in that order.
constexpr int kWarps = 8;
constexpr int kBlockRows = 16 * kWarps;
constexpr int kTileKeys = 64;
constexpr double kLog2e = 1.4426950408889634074;  // log2(e) rounded to double

// Score MMA order per (16 rows x 8 keys) block, KS = D / 8 k-steps of 8 dims (dims 8 ks .. 8 ks + 7):
//   c = 0; c += q_lo k_hi (ks = 0..KS-1); c += q_hi k_lo (ks = 0..KS-1); c += q_hi k_hi (ks = 0..KS-1)
// the small products first, so that they are not lost against the large accumulator.
enum class Part { lo_hi = 0, hi_lo = 1, hi_hi = 2 };

// The MMA's accumulation, which NVIDIA does not document. The rounding model
// (proofs-check/include/manyadd/kernel_rounding.hpp, step 1) and the twin (construct's tc_twin.cpp)
// assume only this of a k8 step c' = c + sum of 8 tf32 products (each exact in float: 11 x 11
// bits): it is some tree of fused sums, each aligning its inputs to the largest, keeping at least
// float's 24 bits of every input from there (truncated or rounded) and rounding its result to float
// (or wider) with an error below 1 ulp of float. With n nonzero products a tree has at most n
// nonzero-input nodes and n aligned inputs that are not the largest of their node: a step errs by
// < 2 n 2^-23 M (M bounding every input and partial result), whatever the grouping: one 9-input sum,
// A100's measured two of c + 4 products (Fasi, Higham, Mikaitis, Pranesh 2021, "Numerical behavior
// of NVIDIA tensor cores"), or eight of one product. A zero product and a sum of c with zeros are exact.
// Testable on a device: mma_probe.hpp runs this very instruction on targeted and random steps against
// the exact set of results this allows (test_mma_probe, MmaProbeGpu); not yet run on a GPU.

MANYADD_HD inline std::uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
MANYADD_HD inline float bits_float(std::uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

// The far-tile skip: key tiles far below the row's running max are left out, allowed because the
// certificate charges what they could add (below). For one row, a 64-key tile whose computed scores all lie
// more than `skip` below the row's running max m, RN(m - tile max) > skip, adds nothing to the row:
// no exp2f, no additions (and no rise: its max is below m). skip = tile_skip_threshold(lambda, P) of
// the head: at least 32, so every weight it drops is below 2^-32 of the running max, and at least
// 2^-14 lambda P log2 e, more than twice the kernel's score bound, so a tile holding a key of the top
// score (a matched key) is never skipped: the dropped keys are unmatched and their weight 0 lies in
// the rounding model's [0, eps] (proofs-check/include/manyadd/kernel_rounding.hpp, step 5). At
// lambda = 12 the unmatched scores lie 2 lambda log2 e = 34.6 below the top: every tile without a
// matched key is skipped. Host only; rounded up to float.
inline float tile_skip_threshold(double lambda, int P) {
  const double t = std::max(32.0, std::ldexp(lambda * P * kLog2e, -14));
  float f = float(t);
  if (double(f) < t) f = std::nextafter(f, HUGE_VALF);
  return f;
}

// x rounded to tf32 (1 + 10 fraction bits, float's exponent range), to nearest, ties to even, by
// integer operations on both sides (no cvt instruction whose rounding the twin would have to trust).
// Inf and NaN pass through; a finite x that rounds past FLT_MAX becomes inf (not reached: |q|, |k| < 1e3).
MANYADD_HD inline float tf32_rn(float x) {
  std::uint32_t u = float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  u += 0xfffu + ((u >> 13) & 1u);
  return bits_float(u & 0xffffe000u);
}

// x = hi + lo + e: hi = tf32(x), lo = tf32(x - hi) (x - hi is exact in float), |e| <= 2^-22 |x|.
struct Split {
  float hi, lo;
};
MANYADD_HD inline Split split_tf32(float x) {
  const float hi = tf32_rn(x);
  return {hi, tf32_rn(x - hi)};
}

// How the device builds q, k, v (plain arrays; construct/ fills them from the model, the kernel knows
// no model). Token i's input column x (width d) is emb[token_i] plus binary codes of its two integer
// IDs: code c writes at columns [col, col + bits) the signs of the bits (most significant first,
// bit 1 -> -1, bit 0 -> +1) of (ids[id] + shift - 1) mod 2^bits, and nothing when ids[id] == 0.
// Output row o (q rows h D + r, k rows 4 D + h D + r, v rows 8 D + h; h = head 0..3, r < D) is the
// sparse dot product over nz entries [row_start[o], row_start[o + 1]) of (nz_col, nz_w), summed in
// double in list order; q is then multiplied by log2(e) in double (scores in base-2 units: the
// kernel's exp is exp2) and all are rounded once to float.
struct PlanCode {
  std::int32_t id, shift, bits, col;
};
struct PlanView {
  int d, D, vocab, ncodes;
  const double* emb;          // (vocab, d)
  const PlanCode* codes;      // (ncodes)
  const std::int32_t* col_code;  // (d): index of the code writing column c, or -1
  const std::int32_t* row_start;  // (8 D + 4 + 1)
  const std::int32_t* nz_col;
  const double* nz_w;
};

MANYADD_HD inline double dadd(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
MANYADD_HD inline double dmul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// Entry c of token (tok, id0, id1)'s input column.
MANYADD_HD inline double plan_x(const PlanView& P, int tok, const std::int32_t* ids, int c) {
  double x = P.emb[tok * P.d + c];
  const int ci = P.col_code[c];
  if (ci >= 0) {
    const PlanCode pc = P.codes[ci];
    const std::int64_t id = ids[pc.id];
    if (id != 0) {
      const std::uint64_t code = std::uint64_t(id + pc.shift - 1) & ((std::uint64_t(1) << pc.bits) - 1);
      const int b = c - pc.col;  // bit b counted from the most significant
      x = dadd(x, ((code >> (pc.bits - 1 - b)) & 1u) ? -1.0 : 1.0);
    }
  }
  return x;
}

// Output row o of the plan at one token, as the device stores it (float).
MANYADD_HD inline float plan_row(const PlanView& P, int tok, const std::int32_t* ids, int o) {
  double acc = 0;
  for (int e = P.row_start[o]; e < P.row_start[o + 1]; ++e)
    acc = dadd(acc, dmul(P.nz_w[e], plan_x(P, tok, ids, P.nz_col[e])));
  if (o < 4 * P.D) acc = dmul(acc, kLog2e);
  return float(acc);
}

}  // namespace manyadd::kernels::tc
