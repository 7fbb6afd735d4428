// The arithmetic of the causal attention kernels of train.cu, written once for two executors: the
// device (one warp per row, each thread one lane) and the host replay in
// tests/test_cuda_train_kernels.cpp (one thread plays all 32 lanes of a warp). Plain C++ where nvcc
// is not compiling (MANYADD_HD is empty), so the test includes this file with the host compiler.
//
// A warp policy W supplies only what differs between the two executors:
//   W::kLanes                 lanes this thread plays: 1 on the device, 32 in the replay
//   w.lane(l)                 lane id (0..31) of the l-th lane played
//   w.sum(part)               the warp sum of the lanes' partials, by the butterfly of warp_sum in
//                             train.cu (5 rounds of x + x[lane ^ o], o = 16, 8, 4, 2, 1): the same
//                             value in every lane, so the replay returns it once
//   w.load<NPL>(a, row, ln, HS)   a[e] = row[ln NPL + e] widened to float, 0 for dims >= HS
//   w.store<NPL>(row, a, ln, HS)  row[ln NPL + e] = a[e] rounded to the I/O type, dims < HS only
//   w.max(part)               the warp max by the same butterfly (exact: the same value in every lane)
//   w.narrow<IO>(x)           x rounded to the I/O type (float: x)
//   w.exp(x), w.log(x)        expf / logf (CUDA's, <= 2 and 1 ulp) and the host's
// Everything else is below: which head dims a lane holds (a contiguous chunk of NPL dims: lane ln
// holds dims [ln NPL, ln NPL + NPL), NPL = dims_per_lane(HS), so 32 NPL >= HS), the order of every
// fp32 operation, the online softmax. The accumulations are explicit fmas (one rounding each, the
// same on both executors) and the other products are mul_rn (never contracted into an add), so the
// replay follows the kernel operation by operation and differs from it only where exp/log differ.
//
// Row layout of the flash kernels (train.hpp; varlen, as the packed batches of learn/batch.hpp): q, k,
// v, out, dout are (R, NH HS) row-major, head h in columns [h HS, h HS + HS); sequence b owns rows
// [off_b, off_b + T_b) (offsets, B + 1 of them); lse and dsum hold (NH, T_b) per sequence from NH off_b,
// i.e. NH R floats. Warp w of NH R handles the sequence b with NH off_b <= w < NH off_{b+1} (a binary
// search over the offsets: row_of), head h = (w - NH off_b) / T_b, row i = (w - NH off_b) % T_b; its
// lse entry is w itself. The flash kernels (forward_warp, dq_warp, dkv_warp) hold a row's head dims
// across the lanes; the row kernels of the tensor-core path (softmax_warp, dscore_warp; uniform (B, NH,
// T, Tp) score matrices, not varlen) hold a (T x Tp) score row's columns, lane ln the columns ln, ln + 32, ...
#pragma once

#include "rn.cuh"  // mul_rn, add_rn, sub_rn, div_rn, fma_rn
#include <cmath>

#include "manyadd/kernels/score_bias.hpp"

#if defined(__CUDACC__)
#define MANYADD_HD __host__ __device__ inline
#else
#define MANYADD_HD inline
#endif

namespace manyadd::kernels::attention_rows {

using kernels::add_rn, kernels::div_rn, kernels::fma_rn, kernels::mul_rn, kernels::sub_rn;

constexpr int kMaxHeadDim = 512;

// Dims per lane: the smallest power of two NPL with 32 NPL >= HS (HS in [1, 512]). Powers of two keep
// the instantiations to five and make a lane's chunk a whole number of 16-byte loads (or one smaller
// load) when HS = 32 NPL.
constexpr int dims_per_lane(int HS) { return HS <= 32 ? 1 : HS <= 64 ? 2 : HS <= 128 ? 4 : HS <= 256 ? 8 : 16; }



// A score bias (kernels/score_bias.hpp: FIRE's): entry (h, i, j) of every sequence at bias[h stride +
// tri(i) + i - j], added to the scaled score (s scale + b: learn's fp32 attention). The backward's pass 2
// writes x_ij = P_ij (dP_ij - dsum_i) to dslots[NH soff[seq] + h tri(T) + tri(i) + i - j] (its key row's
// warp, lane 0: one writer per entry).
using Bias = ScoreBias;
MANYADD_HD int tri(int i) { return i * (i + 1) / 2; }  // i <= 46340 (the launchers check the rows)

// This lane's part of a dot product over its NPL dims, in dim order.
template <int NPL>
MANYADD_HD float lane_dot(const float (&a)[NPL], const float (&b)[NPL]) {
  float s = 0.f;
  for (int e = 0; e < NPL; ++e) s = fma_rn(a[e], b[e], s);
  return s;
}

// Where warp w works: its (sequence, head) block of rows and its row.
struct Row {
  long long base;  // element offset of row 0 of (b, h) in an (R, D) buffer: off_b D + h HS
  long long stat;  // offset of (b, h, 0) in an lse or dsum buffer: NH off_b + h T_b
  int i;           // the row within the sequence (query row in forward and dq, key row in dkv)
  int T;           // the sequence's rows T_b
  int b, h;        // the sequence and the head
};
// offsets (B + 1, increasing strictly: every sequence has >= 1 row); w < NH offsets[B].
MANYADD_HD Row row_of(long long w, const int* offsets, int B, int NH, int HS) {
  int lo = 0, hi = B;  // NH offsets[lo] <= w < NH offsets[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if ((long long)NH * offsets[mid] <= w) lo = mid;
    else hi = mid;
  }
  const long long o = offsets[lo], local = w - NH * o;
  const int T = offsets[lo + 1] - offsets[lo];
  const int h = int(local / T), i = int(local % T);
  return {o * NH * HS + (long long)h * HS, NH * o + (long long)h * T, i, T, lo, h};
}

// ---- forward: out_i = sum_{j <= i} softmax_j(scale q_i.k_j) v_j, lse_i = log sum_j exp(scale q_i.k_j) --
// Keys in order 0..i with a running max mx, running sum l and running weighted sum acc (online softmax):
// a new max rescales l and acc by exp(mx_old - mx_new), which is 0 for the first key (mx = -inf).
// With a bias: the score is s scale + b_ij (one more rounding), everything after it unchanged.
template <int NPL, class W, class IO>
MANYADD_HD void forward_warp(W w, IO* out, float* lse, const IO* q, const IO* k, const IO* v, const Row& r, int NH,
                             int HS, float scale, const Bias& bs = {}) {
  constexpr int L = W::kLanes;
  const long long D = (long long)NH * HS;
  const IO* k0 = k + r.base;
  const IO* v0 = v + r.base;
  const float* bh = bs.bias ? bs.bias + r.h * bs.stride + tri(r.i) + r.i : nullptr;  // bh[-j]: key j
  float qv[L][NPL], acc[L][NPL];
  for (int l = 0; l < L; ++l) {
    w.template load<NPL>(qv[l], q + r.base + r.i * D, w.lane(l), HS);
    for (int e = 0; e < NPL; ++e) acc[l][e] = 0.f;
  }
  float mx = -INFINITY, sum = 0.f;
  for (int j = 0; j <= r.i; ++j) {
    float part[L];
    for (int l = 0; l < L; ++l) {
      float kr[NPL];
      w.template load<NPL>(kr, k0 + j * D, w.lane(l), HS);
      part[l] = lane_dot<NPL>(qv[l], kr);
    }
    float s = mul_rn(w.sum(part), scale);
    if (bh) s = add_rn(s, bh[-j]);
    if (s > mx) {
      const float sc = w.exp(mx - s);
      sum = mul_rn(sum, sc);
      for (int l = 0; l < L; ++l)
        for (int e = 0; e < NPL; ++e) acc[l][e] = mul_rn(acc[l][e], sc);
      mx = s;
    }
    const float p = w.exp(s - mx);
    sum += p;
    for (int l = 0; l < L; ++l) {
      float vr[NPL];
      w.template load<NPL>(vr, v0 + j * D, w.lane(l), HS);
      for (int e = 0; e < NPL; ++e) acc[l][e] = fma_rn(p, vr[e], acc[l][e]);
    }
  }
  for (int l = 0; l < L; ++l) {
    float o[NPL];
    for (int e = 0; e < NPL; ++e) o[e] = acc[l][e] / sum;
    w.template store<NPL>(out + r.base + r.i * D, o, w.lane(l), HS);
  }
  if (w.lane(0) == 0) lse[r.stat + r.i] = mx + w.log(sum);
}

// ---- backward, pass 1 (query rows): dq_i and dsum_i ------------------------------------------------
// With P_ij = exp(scale q_i.k_j - lse_i), dP_ij = dout_i.v_j and dsum_i = sum_j P_ij dP_ij (the row
// term of the softmax backward, recomputed here from P and dP: it needs no forward output):
//   dq_i = scale sum_j P_ij (dP_ij - dsum_i) k_j = scale (a - dsum_i b),
//   a = sum_j P_ij dP_ij k_j,  b = sum_j P_ij k_j,
// all three sums in one pass over keys 0..i.
template <int NPL, class W, class IO>
MANYADD_HD void dq_warp(W w, IO* dq, float* dsum, const IO* dout, const float* lse, const IO* q, const IO* k,
                        const IO* v, const Row& r, int NH, int HS, float scale, const Bias& bs = {}) {
  constexpr int L = W::kLanes;
  const long long D = (long long)NH * HS;
  const IO* k0 = k + r.base;
  const IO* v0 = v + r.base;
  const float* bh = bs.bias ? bs.bias + r.h * bs.stride + tri(r.i) + r.i : nullptr;  // bh[-j]: key j
  float qv[L][NPL], dov[L][NPL], a[L][NPL], b[L][NPL];
  for (int l = 0; l < L; ++l) {
    w.template load<NPL>(qv[l], q + r.base + r.i * D, w.lane(l), HS);
    w.template load<NPL>(dov[l], dout + r.base + r.i * D, w.lane(l), HS);
    for (int e = 0; e < NPL; ++e) a[l][e] = b[l][e] = 0.f;
  }
  const float Li = lse[r.stat + r.i];
  float ds = 0.f;  // dsum_i
  for (int j = 0; j <= r.i; ++j) {
    float ps[L], pd[L], kr[L][NPL];
    for (int l = 0; l < L; ++l) {
      float vr[NPL];
      w.template load<NPL>(kr[l], k0 + j * D, w.lane(l), HS);
      w.template load<NPL>(vr, v0 + j * D, w.lane(l), HS);
      ps[l] = lane_dot<NPL>(qv[l], kr[l]);
      pd[l] = lane_dot<NPL>(dov[l], vr);
    }
    float s = mul_rn(w.sum(ps), scale);
    if (bh) s = add_rn(s, bh[-j]);
    const float p = w.exp(s - Li);
    const float pdp = mul_rn(p, w.sum(pd));
    ds += pdp;
    for (int l = 0; l < L; ++l)
      for (int e = 0; e < NPL; ++e) {
        a[l][e] = fma_rn(pdp, kr[l][e], a[l][e]);
        b[l][e] = fma_rn(p, kr[l][e], b[l][e]);
      }
  }
  for (int l = 0; l < L; ++l) {
    float o[NPL];
    for (int e = 0; e < NPL; ++e) o[e] = mul_rn(scale, fma_rn(-ds, b[l][e], a[l][e]));
    w.template store<NPL>(dq + r.base + r.i * D, o, w.lane(l), HS);
  }
  if (w.lane(0) == 0) dsum[r.stat + r.i] = ds;
}

// ---- backward, pass 2 (key rows; after pass 1 has written dsum): dk_j and dv_j ----------------------
//   dv_j = sum_{i >= j} P_ij dout_i ;  dk_j = scale sum_{i >= j} P_ij (dP_ij - dsum_i) q_i
// P_ij and dP_ij are recomputed with the same lane partials and tree as in the forward and pass 1
// (fma(a, b, c) = fma(b, a, c)) and the same operations after them, so P_ij is the P_ij of pass 1. With
// a bias, g = P_ij (dP_ij - dsum_i) is also the bias's gradient: written to its slot (lane 0).
template <int NPL, class W, class IO>
MANYADD_HD void dkv_warp(W w, IO* dk, IO* dv, const IO* dout, const float* lse, const float* dsum, const IO* q,
                         const IO* k, const IO* v, const Row& r, int NH, int HS, float scale, const Bias& bs = {}) {
  constexpr int L = W::kLanes;
  const long long D = (long long)NH * HS;
  const IO* q0 = q + r.base;
  const IO* do0 = dout + r.base;
  const float* bh = bs.bias ? bs.bias + r.h * bs.stride - r.i : nullptr;  // bh[tri(i) + i]: query i
  float* sl = bs.bias && bs.dslots ? bs.dslots + NH * bs.soff[r.b] + r.h * (long long)tri(r.T) - r.i : nullptr;
  float kv[L][NPL], vv[L][NPL], ak[L][NPL], av[L][NPL];
  for (int l = 0; l < L; ++l) {
    w.template load<NPL>(kv[l], k + r.base + r.i * D, w.lane(l), HS);
    w.template load<NPL>(vv[l], v + r.base + r.i * D, w.lane(l), HS);
    for (int e = 0; e < NPL; ++e) ak[l][e] = av[l][e] = 0.f;
  }
  for (int i = r.i; i < r.T; ++i) {
    float ps[L], pd[L], qr[L][NPL], dr[L][NPL];
    for (int l = 0; l < L; ++l) {
      w.template load<NPL>(qr[l], q0 + i * D, w.lane(l), HS);
      w.template load<NPL>(dr[l], do0 + i * D, w.lane(l), HS);
      ps[l] = lane_dot<NPL>(kv[l], qr[l]);
      pd[l] = lane_dot<NPL>(vv[l], dr[l]);
    }
    float s = mul_rn(w.sum(ps), scale);
    if (bh) s = add_rn(s, bh[tri(i) + i]);
    const float p = w.exp(s - lse[r.stat + i]);
    const float g = mul_rn(p, w.sum(pd) - dsum[r.stat + i]);
    if (sl && w.lane(0) == 0) MANYADD_SLOT_STORE(sl + tri(i) + i, g);
    for (int l = 0; l < L; ++l)
      for (int e = 0; e < NPL; ++e) {
        av[l][e] = fma_rn(p, dr[l][e], av[l][e]);
        ak[l][e] = fma_rn(g, qr[l][e], ak[l][e]);
      }
  }
  for (int l = 0; l < L; ++l) {
    float ok[NPL];
    for (int e = 0; e < NPL; ++e) ok[e] = mul_rn(scale, ak[l][e]);
    w.template store<NPL>(dk + r.base + r.i * D, ok, w.lane(l), HS);
    w.template store<NPL>(dv + r.base + r.i * D, av[l], w.lane(l), HS);
  }
}

// ---- the tensor-core path's row kernels (attention_gemm_steps.hpp runs them between batched GEMMs) ------
// S, dP (B, NH, T, Tp) fp32: S_ij = q_i.k_j unscaled, dP_ij = dout_i.v_j (GEMM outputs; columns j > i
// are computed but never read). P, dS (B, NH, T, Tp) of the I/O type, columns j < T written.

// P_ij = exp(scale S_ij - lse_i) for j <= i, 0 for i < j < T (rounded to IO: it multiplies v in a GEMM);
// lse_i = mx + log sum_{j <= i} exp(scale S_ij - mx), mx the row max; each lane sums its columns in order.
template <class W, class IO>
MANYADD_HD void softmax_warp(W w, IO* P, float* lse, const float* S, int T, int Tp, float scale, long long warp) {
  constexpr int L = W::kLanes;
  const int i = int(warp % T);
  const long long row = warp;  // ((b NH + h) T + i): the row of S and P, and the index of lse
  const float* s = S + row * Tp;
  IO* p = P + row * Tp;
  float part[L];
  for (int l = 0; l < L; ++l) {
    float m = -INFINITY;
    for (int j = w.lane(l); j <= i; j += 32) {
      const float x = mul_rn(scale, s[j]);
      m = x > m ? x : m;
    }
    part[l] = m;
  }
  const float mx = w.max(part);
  for (int l = 0; l < L; ++l) {
    float a = 0.f;
    for (int j = w.lane(l); j <= i; j += 32) a += w.exp(mul_rn(scale, s[j]) - mx);
    part[l] = a;
  }
  const float Li = mx + w.log(w.sum(part));
  for (int l = 0; l < L; ++l)
    for (int j = w.lane(l); j < T; j += 32) p[j] = w.template narrow<IO>(j <= i ? w.exp(mul_rn(scale, s[j]) - Li) : 0.f);
  if (w.lane(0) == 0) lse[row] = Li;
}

// With P_ij = exp(scale S_ij - lse_i) recomputed in fp32 and dsum_i = sum_{j <= i} P_ij dP_ij:
// dS_ij = scale P_ij (dP_ij - dsum_i) for j <= i, 0 for i < j < T (rounded to IO: it feeds the dq, dk GEMMs).
template <class W, class IO>
MANYADD_HD void dscore_warp(W w, IO* dS, const float* S, const float* lse, const float* dP, int T, int Tp, float scale,
                            long long warp) {
  constexpr int L = W::kLanes;
  const int i = int(warp % T);
  const long long row = warp;
  const float* s = S + row * Tp;
  const float* dp = dP + row * Tp;
  IO* ds = dS + row * Tp;
  const float Li = lse[row];
  float part[L];
  for (int l = 0; l < L; ++l) {
    float a = 0.f;
    for (int j = w.lane(l); j <= i; j += 32) a = fma_rn(w.exp(mul_rn(scale, s[j]) - Li), dp[j], a);
    part[l] = a;
  }
  const float D = w.sum(part);
  for (int l = 0; l < L; ++l)
    for (int j = w.lane(l); j < T; j += 32)
      ds[j] = w.template narrow<IO>(j <= i ? mul_rn(scale, mul_rn(w.exp(mul_rn(scale, s[j]) - Li), dp[j] - D)) : 0.f);
}

}  // namespace manyadd::kernels::attention_rows
