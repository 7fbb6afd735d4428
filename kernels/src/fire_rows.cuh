// The arithmetic of FIRE's kernels (fire.cu; train.hpp "FIRE"), written once for the device (one thread
// per entry) and the host replay in tests/test_cuda_train_kernels.cpp. Plain C++ where nvcc is not
// compiling, so the test includes this file with the host compiler. The CPU twin: learn/layers.hpp
// fire_distances, fire_mlp_forward (h1), fire_distances_backward (per pair), and model.cpp's order of the
// bias gradient's sum (layer by layer, each layer's sequences in order).
//
// Pairs (score_bias.hpp): the device evaluates FIRE's MLP on every (query index i, distance d <= i) of the
// batch's longest sequence T, pair p = tri(i) + d, P = tri(T) in all, without merging the rows that share
// their normalizer (the twin's FirePairs do: those rows' u are equal, so their values are too). Which rows
// share depends on L = L_sqrt^2, a parameter that lives on the device; the unmerged table needs no host
// knowledge of it and costs T^2 / 2 MLP rows (the twin's `min` threshold costs as much).
// Every fp32 operation is an explicit _rn intrinsic on the device (no contraction) and the same
// expression in the twin's order on the host; log1pf (device, <= 1 ulp) and std::log1p (host) differ.
#pragma once

#include "rn.cuh"  // mul_rn, add_rn, sub_rn, div_rn, fma_rn
#include <cmath>

#if defined(__CUDACC__)
#define FIRE_HD __host__ __device__ inline
#else
#define FIRE_HD inline
#endif

namespace manyadd::kernels::fire_rows {

using kernels::add_rn, kernels::div_rn, kernels::fma_rn, kernels::mul_rn, kernels::sub_rn;

constexpr float kEps = 1e-6f;  // learn::kFireEps as the twin's float: S(kFireEps)

FIRE_HD float log1p_f(float x) {
#if defined(__CUDA_ARCH__)
  return log1pf(x);
#else
  return std::log1p(x);
#endif
}

FIRE_HD float abs_f(float x) {
#if defined(__CUDA_ARCH__)
  return fabsf(x);
#else
  return std::fabs(x);
#endif
}
FIRE_HD double sqrt_d(double x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}

FIRE_HD long long tri(long long i) { return i * (i + 1) / 2; }
// The row i of pair p: tri(i) <= p < tri(i + 1).
FIRE_HD int pair_row(long long p) {
  int i = int((sqrt_d(8.0 * double(p) + 1.0) - 1.0) / 2.0);
  while (tri(i) > p) --i;
  while (tri(i + 1) <= p) ++i;
  return i;
}

// Row i's normalizer: n = L where the threshold binds (max: L > i, the FIRE paper's max(i, L); min: L < i,
// the authors' clamp to L), else i; L = L_sqrt^2 in float (the twin's double(Ls * Ls) holds that float).
struct Norm {
  float n;
  bool on_L;
};
FIRE_HD Norm norm_of(int i, float L, bool max_threshold) {
  const bool on_L = max_threshold ? L > float(i) : L < float(i);
  return {on_L ? L : float(i), on_L};
}

// u(i, d) = log1p(|c| d) / (log1p(|c| n_i) + eps) (fire_distances).
FIRE_HD float distance_u(float d, const Norm& nm, float c) {
  const float ac = abs_f(c);
  const float a = log1p_f(mul_rn(ac, d));
  const float b = add_rn(log1p_f(mul_rn(ac, nm.n)), kEps);
  return div_rn(a, b);
}

// Pair p's MLP input: u[p], h1[p H + k] = relu(u w1[k]) for k < H (fire_mlp_forward's first layer).
FIRE_HD void mlp_input_entry(float* u, float* h1, const float* w1, long long p, int H, float c, float L,
                             bool max_threshold) {
  const int i = pair_row(p);
  const float x = distance_u(float(p - tri(i)), norm_of(i, L, max_threshold), c);
  u[p] = x;
  for (int k = 0; k < H; ++k) {
    const float y = mul_rn(x, w1[k]);
    h1[p * H + k] = y > 0.f ? y : 0.f;
  }
}

// Pair p's terms of d c and d L_sqrt from du[p] (fire_distances_backward, one pair, its expression order):
//   tc = du sgn(c) (d / (|c| d + 1) / b - a n / ((|c| n + 1) b^2)),
//   tl = du (-a |c| / ((|c| n + 1) b^2)) 2 L_sqrt where n = L (on_L), else 0.
FIRE_HD void scalar_terms_entry(float* tc, float* tl, const float* du, long long p, float c, float L_sqrt, float L,
                                bool max_threshold) {
  const int i = pair_row(p);
  const Norm nm = norm_of(i, L, max_threshold);
  const float d = float(p - tri(i)), n = nm.n, ac = abs_f(c), sg = c > 0 ? 1.f : c < 0 ? -1.f : 0.f;
  const float a = log1p_f(mul_rn(ac, d)), b = add_rn(log1p_f(mul_rn(ac, n)), kEps);
  const float den = mul_rn(mul_rn(add_rn(mul_rn(ac, n), 1.f), b), b);  // (|c| n + 1) b b
  const float t1 = div_rn(div_rn(d, add_rn(mul_rn(ac, d), 1.f)), b);
  const float t2 = div_rn(mul_rn(a, n), den);
  tc[p] = mul_rn(mul_rn(du[p], sg), sub_rn(t1, t2));
  tl[p] = nm.on_L ? mul_rn(mul_rn(mul_rn(du[p], div_rn(mul_rn(-a, ac), den)), 2.f), L_sqrt) : 0.f;
}

// soff (B + 1): where each sequence's slots start (score_bias.hpp: soff[b] = sum_{b' < b} tri(T_b')).
FIRE_HD void slot_offsets(long long* soff, const int* offsets, int B) {
  long long o = 0;
  soff[0] = 0;
  for (int b = 0; b < B; ++b) soff[b + 1] = o += tri(offsets[b + 1] - offsets[b]);
}

// The bias gradient of pair p of head h (dbias (NH, P), P = tri(T)): dbias += the slots of the sequences
// longer than the pair's row, in sequence order (one layer's attention backward wrote them; calls in layer
// order give the twin's order of additions: layer by layer, each layer's sequences in order).
FIRE_HD void dbias_reduce_entry(float* dbias, const float* slots, const long long* soff, const int* offsets, int B,
                                int NH, long long P, long long e) {
  const int h = int(e / P);
  const long long p = e % P;
  const int i = pair_row(p);
  float acc = dbias[e];
  for (int b = 0; b < B; ++b) {
    const int T = offsets[b + 1] - offsets[b];
    if (i < T) acc = add_rn(acc, slots[NH * soff[b] + h * tri(T) + p]);
  }
  dbias[e] = acc;
}

}  // namespace manyadd::kernels::fire_rows
