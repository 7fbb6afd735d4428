// The fused causal attention of bf16 training on tensor cores (FlashAttention-2 style, varlen), written
// once for two executors: the device (kernels/src/flash_tc.cu: a CTA of warps, each thread one lane,
// mma.sync / ldmatrix / cp.async) and the host replay in tests/test_cuda_train_kernels.cpp (one thread
// plays every warp and lane of a CTA: the MMA and ldmatrix emulated from their PTX fragment layouts).
// Plain C++ where nvcc is not compiling, so the test includes this file with the host compiler.
//
// What it computes (the rounding points of learn's bf16 attention, layers.hpp, which is its CPU twin;
// per sequence b, head h, query row i, keys j <= i of the same sequence):
//   z_ij = fl(s_ij c2), s_ij = q_i.k_j (MMA, fp32 accumulation), c2 = fl(scale log2 e) (scale_log2e):
//          the scale and the base change folded into one product, so the softmax runs on exp2;
//   forward, online over key blocks: m_i a running INTEGER max (ceil of the block maxima), the weights
//          p_ij = exp2(z_ij - m_i), l_i = sum of the fp32 weights, out_i = (sum_j bf16(p_ij) v_j) / l_i:
//          the weights are rounded to bf16 before they multiply v (FlashAttention-2's point). A new max
//          rescales l and the accumulators by 2^(m_old - m_new), a power of two: exact, and rounding
//          commutes with it, so bf16(p_ij) 2^m_i is the same number whatever blocks came before (the
//          twin computes it from the row's final max, layers.hpp). lse2_i = m_i + log2 l_i (base 2).
//   backward: P_ij = exp2(z_ij - lse2_i) (fp32, normalized), D_i = dout_i . out_i (out the forward's
//          bf16 output, as FlashAttention-2), dP_ij = dout_i . v_j (MMA),
//          dS_ij = bf16(P_ij (dP_ij - D_i)) before it multiplies k or q, dv_j = sum_i bf16(P_ij) dout_i,
//          dq_i = bf16(scale sum_j dS_ij k_j), dk_j = bf16(scale sum_i dS_ij q_i) (the scale after the sum;
//          or fp32 dq, dk, the same values unrounded, for RoPE's inverse rotation before the rounding).
// With a score bias b (FIRE's; kernels/score_bias.hpp), z_ij = fl(s_ij c2) + fl(b_ij fl(log2 e)) (each
// product rounded on its own, then the sum), everywhere z is formed; the dq kernel writes the bias's
// gradient x_ij = P_ij (dP_ij - D_i) (fp32, before dS's rounding) to its slot.
// No atomics: three kernels, each owning its outputs: the forward and dq by query blocks (dq also
// writes D for the third), dk and dv by key blocks; each sums its partner blocks in order.
//
// Tiling (Cfg): a CTA owns BR = 16 WR rows (query rows; key rows in the dk/dv kernel) of one (sequence,
// head) and walks the partner rows in blocks of BC = 64. Its WR x WC warps: warp (wr, wc) owns rows
// [16 wr, 16 wr + 16) and, in the score phase, partner columns [wc NS, wc NS + NS) (NS = BC / WC) over the
// whole head; the scores' bf16 results go through shared memory, and in the product phase the warp
// accumulates columns [wc CH, wc CH + CH) (CH = HSP / WC) of its rows over all BC partner rows. WC > 1
// splits a head too wide for one warp's registers (16 rows x HSP fp32) across warps. HSP: the head size
// padded to the kernel's power of two (16 .. 512); padding columns are zero in shared memory (exact zero
// products).
//
// Executors. A CTA policy C supplies: warp_begin/warp_end/slot (the warps this thread plays and where
// its state lives: one on the device, all on the host), thread_begin/thread_end (the threads it plays),
// sync() (a barrier), copy16(dst, src, valid) (16 bytes global -> shared, zeros if !valid),
// commit()/wait<N>() (cp.async groups), warp(w) (a warp policy). A warp policy W supplies: kLanes (1
// device, 32 host), lane(l), mma<H>(d, a, b) (D += A B, m16n8k16 bf16, B = registers 2H, 2H + 1 of b),
// ldsm_x4 / ldsm_x4_t(r, addr) (ldmatrix .x4 [.trans] from the lanes' row addresses), quad_max /
// quad_sum (x op x[lane^1], then op x[lane^2]), warp_sum (the 5-round butterfly), exp2, log2,
// pack(lo, hi) (two floats to bf16, round to nearest even, lo in the low half), st32. Everything else
// (which lane holds what, addresses, masks, the order of every fp32 operation outside the MMA) is here.
#pragma once

#include "rn.cuh"  // mul_rn, add_rn, sub_rn, div_rn, fma_rn
#include <cmath>
#include <cstdint>

#include "manyadd/kernels/score_bias.hpp"

#if defined(__CUDACC__)
#define FTC_HD __host__ __device__ __forceinline__
#else
#define FTC_HD inline
#endif
#if defined(__CUDA_ARCH__)  // the device pass only (the host compiler does not know the pragma)
#define FTC_UNROLL _Pragma("unroll")
#else
#define FTC_UNROLL
#endif

namespace manyadd::kernels::flash_tc {

using kernels::add_rn, kernels::div_rn, kernels::fma_rn, kernels::mul_rn, kernels::sub_rn;

using u16 = std::uint16_t;
using u32 = std::uint32_t;

constexpr int kMaxHeadDim = 512;
constexpr double kLog2e = 1.4426950408889634074;
constexpr float kLog2eF = float(kLog2e);  // fl(log2 e): a bias's factor to base 2 (learn's twin: the same)

// The kernel instance for a head size: the next of 16, 32, ..., 512 (HS in [1, 512]).
constexpr int padded_head(int HS) {
  return HS <= 16 ? 16 : HS <= 32 ? 32 : HS <= 64 ? 64 : HS <= 128 ? 128 : HS <= 256 ? 256 : 512;
}
// c2 = fl(scale log2 e): the factor from a score to its base-2 exponent (the twin computes it the same way).
inline float scale_log2e(float scale) { return float(double(scale) * kLog2e); }

template <int HSP>
struct Cfg {
  static_assert(HSP == 16 || HSP == 32 || HSP == 64 || HSP == 128 || HSP == 256 || HSP == 512, "head size class");
  static constexpr int WC = HSP <= 64 ? 1 : HSP == 128 ? 2 : 4;  // warps across the head's columns
  static constexpr int WR = HSP == 512 ? 2 : 4;                  // warps across the owner rows
  static constexpr int WARPS = WR * WC, THREADS = 32 * WARPS;
  static constexpr int BR = 16 * WR;  // owner rows of a CTA
  static constexpr int BC = 64;       // partner rows per step
  static constexpr int NS = BC / WC;  // partner columns of a warp's score tile (a multiple of 16)
  static constexpr int CH = HSP / WC; // accumulator columns of a warp (a multiple of 16)
  static constexpr int KS = HSP / 16; // k-steps of a score product
  static constexpr int LD = HSP + 8;  // shared row stride of a row tile, elements: 16-byte rows, and the
                                      // 8 rows of an ldmatrix fall in distinct bank quads
  static constexpr int LDP = BC + 8;  // shared row stride of a P / dS tile
  static constexpr int NT = NS / 8, NA = CH / 8;  // n-tiles of a score tile, of an accumulator
  // Shared memory of each kernel, bytes (row tiles bf16, statistics fp32).
  static constexpr int fwd_smem = 2 * (BR * LD + 2 * BC * LD + BR * LDP) + 4 * 2 * WC * BR;
  static constexpr int dq_smem = 2 * (2 * BR * LD + 2 * BC * LD + BR * LDP) + 4 * 2 * BR;
  static constexpr int dkv_smem = 2 * (2 * BR * LD + 2 * BC * LD + 2 * BR * LDP) + 4 * 2 * BC;
};

// Everything a kernel reads and writes. Row buffers are (R, NH HS) bf16 bits, row-major, head h in
// columns [h HS, h HS + HS); the statistics (lse2, D) hold sequence b's (NH, T_b) block at NH off_b.
struct Params {
  const u16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *dout = nullptr;
  u16 *out = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  float *dq32 = nullptr, *dk32 = nullptr;  // set: dq, dk written in fp32 instead (not rounded), dq and dk unused
  float* lse = nullptr;    // forward: written; backward: read
  float* dsum = nullptr;   // backward: D, written by the dq kernel, read by the dk/dv kernel
  const int* off = nullptr;
  const float* bias = nullptr;     // score bias (score_bias.hpp) or null; head h's entries from h bias_stride
  long long bias_stride = 0;
  float* dslots = nullptr;         // dq kernel: the bias's gradient slots, or null
  const long long* soff = nullptr;
  int B = 0, R = 0, NH = 0, HS = 0;
  float scale = 1.f, c2 = 1.f;
  bool vec = false;  // 16-byte fills: HS % 8 == 0 and every row 16-byte aligned
};

// ---- scalar helpers (the explicit roundings are rn.cuh's), exact powers of two ----------------------
FTC_HD float max_f(float a, float b) { return b > a ? b : a; }
FTC_HD float ceil_f(float x) {
#if defined(__CUDA_ARCH__)
  return ceilf(x);
#else
  return std::ceil(x);
#endif
}
// 2^d for an integer-valued d <= 0 (or -inf), exactly: 0 below 2^-126 (a weight that small next to the
// row maximum, which is >= 1/2, is below fp32 resolution of the sums it enters).
FTC_HD float pow2_int(float d) {
  if (!(d >= -126.f)) return 0.f;
  const u32 bits = u32(127 + int(d)) << 23;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
#endif
}
FTC_HD float bf16_bits_to_float(u16 b) {
  const u32 bits = u32(b) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
#endif
}
FTC_HD int ceil_div(int a, int b) { return (a + b - 1) / b; }
FTC_HD int min_i(int a, int b) { return a < b ? a : b; }
FTC_HD int tri(int i) { return i * (i + 1) / 2; }  // the bias table's pairs before row i (i <= 46340)
// The kernels' compile-time variants: kBias (a score bias, Params::bias; the dq kernel writes its gradient
// to Params::dslots when set), kF32Grad (dq, dk written in fp32 to Params::dq32, dk32). Separate instances,
// so that the plain kernel carries none of their code or registers.
constexpr int kBias = 1, kF32Grad = 2;
FTC_HD int variant(const Params& p) { return (p.bias ? kBias : 0) | (p.dq32 ? kF32Grad : 0); }
// z of a valid (i, j): fl(s c2), plus fl(b fl(log2 e)) with a bias (bh: the head's entries).
template <bool BIAS>
FTC_HD float score_z(float s, float c2, const float* bh, int i, int j) {
  const float z = mul_rn(s, c2);
  if constexpr (BIAS) return add_rn(z, mul_rn(bh[tri(i) + i - j], kLog2eF));
  else return (void)bh, (void)i, (void)j, z;
}

// ---- where a CTA works ---------------------------------------------------------------------------------
// Sequence b owns CTAs [F(b), F(b + 1)), F(b) = b + ceil(off_b / BR): at least ceil(T_b / BR) of them (the
// first ceil(T_b / BR) work, the rest return at once), and F(B) = B + ceil(R / BR) in all, so the grid needs
// only B and R, and a CTA finds its sequence by binary search over the offsets (as attention_rows.cuh).
FTC_HD int first_block(const int* off, int b, int BR) { return b + ceil_div(off[b], BR); }
FTC_HD int grid_blocks(int B, int R, int BR) { return B + ceil_div(R, BR); }
struct Place {
  int b, blk, row0, T;  // sequence, owner block within it, its first row in R, its length
};
FTC_HD bool locate(const int* off, int B, int BR, int x, Place& p) {
  int lo = 0, hi = B;  // F(lo) <= x < F(hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (first_block(off, mid, BR) <= x) lo = mid;
    else hi = mid;
  }
  p.b = lo, p.blk = x - first_block(off, lo, BR), p.row0 = off[lo], p.T = off[lo + 1] - off[lo];
  return p.blk * BR < p.T;
}

// ---- global -> shared fills (one thread's share; every thread of the CTA runs its own) ----------------
// rows x HSP of a head: dst row r, column c <- src[r ld + c] for r < nvalid and c < HS, else 0.
template <int HSP, class C>
FTC_HD void fill_rows(C& cta, int tid, int nthreads, u16* dst, int ldd, int rows, const u16* src, long long lds,
                      int nvalid, int HS, bool vec) {
  if (vec) {
    constexpr int per_row = HSP / 8;
    for (int c = tid; c < rows * per_row; c += nthreads) {
      const int r = c / per_row, k8 = 8 * (c % per_row);
      const bool valid = r < nvalid && k8 < HS;
      cta.copy16(dst + r * ldd + k8, valid ? src + r * lds + k8 : src, valid);
    }
  } else {
    for (int e = tid; e < rows * HSP; e += nthreads) {
      const int r = e / HSP, c = e % HSP;
      dst[r * ldd + c] = (r < nvalid && c < HS) ? src[r * lds + c] : u16(0);
    }
  }
}
FTC_HD void fill_floats(int tid, int nthreads, float* dst, int n, const float* src, int nvalid) {
  for (int e = tid; e < n; e += nthreads) dst[e] = e < nvalid ? src[e] : 0.f;
}

// ---- warp products on shared tiles -----------------------------------------------------------------------
// c (16 x 8 NT per lane-fragment) += X[16 rows] . Y[8 NT rows]^T over KS 16-column steps: X and Y row-major
// in shared memory (rows of a head, ld elements apart): A fragments of X, B fragments of Y's rows
// (B(k, n) = Y[n][k], ldmatrix without transpose).
template <int NT, int KS, class W>
FTC_HD void mma_xyt(W& w, float (&c)[NT][W::kLanes][4], const u16* X, int ldx, const u16* Y, int ldy) {
  constexpr int L = W::kLanes;
  FTC_UNROLL
  for (int ks = 0; ks < KS; ++ks) {
    u32 a[L][4];
    const u16* pa[L];
    FTC_UNROLL
    for (int l = 0; l < L; ++l) {
      const int ln = w.lane(l);
      pa[l] = X + (ln % 8 + 8 * ((ln / 8) % 2)) * ldx + 16 * ks + 8 * (ln / 16);
    }
    w.ldsm_x4(a, pa);
    FTC_UNROLL
    for (int np = 0; np < NT / 2; ++np) {
      u32 b[L][4];
      const u16* pb[L];
      FTC_UNROLL
      for (int l = 0; l < L; ++l) {
        const int ln = w.lane(l);
        pb[l] = Y + (16 * np + ln % 8 + 8 * (ln / 16)) * ldy + 16 * ks + 8 * ((ln / 8) % 2);
      }
      w.ldsm_x4(b, pb);
      w.template mma<0>(c[2 * np], a, b);
      w.template mma<1>(c[2 * np + 1], a, b);
    }
  }
}
// acc (16 x 8 NA) += E[16 rows x 16 KS] . Z[16 KS rows x 8 NA columns]: E row-major (a P or dS tile), Z
// row-major [partner row][column] (B(k, n) = Z[k][n]: ldmatrix with transpose).
template <int NA, int KS, class W>
FTC_HD void mma_ez(W& w, float (&acc)[NA][W::kLanes][4], const u16* E, int lde, const u16* Z, int ldz) {
  constexpr int L = W::kLanes;
  FTC_UNROLL
  for (int ks = 0; ks < KS; ++ks) {
    u32 a[L][4];
    const u16* pa[L];
    FTC_UNROLL
    for (int l = 0; l < L; ++l) {
      const int ln = w.lane(l);
      pa[l] = E + (ln % 8 + 8 * ((ln / 8) % 2)) * lde + 16 * ks + 8 * (ln / 16);
    }
    w.ldsm_x4(a, pa);
    FTC_UNROLL
    for (int np = 0; np < NA / 2; ++np) {
      u32 b[L][4];
      const u16* pb[L];
      FTC_UNROLL
      for (int l = 0; l < L; ++l) {
        const int ln = w.lane(l);
        pb[l] = Z + (16 * ks + ln % 8 + 8 * ((ln / 8) % 2)) * ldz + 16 * np + 8 * (ln / 16);
      }
      w.ldsm_x4_t(b, pb);
      w.template mma<0>(acc[2 * np], a, b);
      w.template mma<1>(acc[2 * np + 1], a, b);
    }
  }
}
template <int N, class W>
FTC_HD void zero(float (&x)[N][W::kLanes][4]) {
  FTC_UNROLL
  for (int n = 0; n < N; ++n)
    for (int l = 0; l < W::kLanes; ++l)
      for (int e = 0; e < 4; ++e) x[n][l][e] = 0.f;
}
// A fragment element e of n-tile nt: row g + 8 (e / 2), column 8 nt + 2 t + e % 2 (g = lane / 4, t = lane % 4).

// Stores a score tile's bf16 results (pairs of columns, one 32-bit word) into a P / dS tile.
template <int NT, class W>
FTC_HD void store_pairs(W& w, const float (&x)[NT][W::kLanes][4], u16* tile, int ldt) {
  FTC_UNROLL
  for (int nt = 0; nt < NT; ++nt)
    for (int l = 0; l < W::kLanes; ++l) {
      const int ln = w.lane(l), g = ln / 4, t = ln % 4;
      FTC_UNROLL
      for (int r = 0; r < 2; ++r)
        w.st32(tile + (g + 8 * r) * ldt + 8 * nt + 2 * t, w.pack(x[nt][l][2 * r], x[nt][l][2 * r + 1]));
    }
}

// ---- forward ----------------------------------------------------------------------------------------------
template <int HSP, int L>
struct FwdState {
  using G = Cfg<HSP>;
  float acc[G::NA][L][4];  // out accumulators (unnormalized), columns wc CH + 8 n + ...
  float s[G::NT][L][4];    // this block's z, then its weights
  float m[2][L], l[2][L];  // rows g, g + 8: running integer max, this lane's sum of weights
  float mt[2][L];          // this block's max (WC = 1)
};

// Phase A: z = fl(s c2) on this warp's NS keys of the block (-inf where masked: key after the row or
// past the sequence), and the block max of each row, to `red` (WC > 1) or the state.
template <int HSP, bool BIAS, class W>
FTC_HD void fwd_scores(W& w, FwdState<HSP, W::kLanes>& st, int warp, const u16* sQ, const u16* sK, float* red,
                       float c2, const float* bh, int i0, int j0, int T) {
  using G = Cfg<HSP>;
  constexpr int L = W::kLanes;
  const int wr = warp / G::WC, wc = warp % G::WC;
  zero<G::NT, W>(st.s);
  mma_xyt<G::NT, G::KS>(w, st.s, sQ + 16 * wr * G::LD, G::LD, sK + wc * G::NS * G::LD, G::LD);
  float mt[2][L];
  FTC_UNROLL
  for (int l = 0; l < L; ++l) {
    const int ln = w.lane(l), g = ln / 4, t = ln % 4;
    FTC_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int i = i0 + 16 * wr + g + 8 * r;
      float m = -INFINITY;
      FTC_UNROLL
      for (int nt = 0; nt < G::NT; ++nt)
        for (int e = 0; e < 2; ++e) {
          const int j = j0 + wc * G::NS + 8 * nt + 2 * t + e;
          // (rows past the sequence, i >= T, are computed and never stored: no bias read there)
          const float x = st.s[nt][l][2 * r + e];
          const float z = !(j <= i && j < T) ? -INFINITY
                          : (BIAS && i < T)  ? score_z<true>(x, c2, bh, i, j)
                                             : mul_rn(x, c2);
          st.s[nt][l][2 * r + e] = z;
          m = max_f(m, z);
        }
      mt[r][l] = m;
    }
  }
  FTC_UNROLL
  for (int r = 0; r < 2; ++r) w.quad_max(mt[r]);
  FTC_UNROLL
  for (int l = 0; l < L; ++l) {
    const int ln = w.lane(l), g = ln / 4;
    FTC_UNROLL
    for (int r = 0; r < 2; ++r) {
      if constexpr (G::WC > 1) {
        if (ln % 4 == 0) red[wc * G::BR + 16 * wr + g + 8 * r] = mt[r][l];
      } else {
        st.mt[r][l] = mt[r][l];
      }
    }
  }
}

// Phase B: the new integer max m = max(m, ceil(block max)), the exact rescale 2^(m_old - m) of the sums
// and accumulators, the weights p = exp2(z - m) (0 where masked), this lane's l += p in column order,
// the weights rounded to bf16 into the P tile.
template <int HSP, class W>
FTC_HD void fwd_softmax(W& w, FwdState<HSP, W::kLanes>& st, int warp, u16* sP, const float* red) {
  using G = Cfg<HSP>;
  constexpr int L = W::kLanes;
  const int wr = warp / G::WC, wc = warp % G::WC;
  FTC_UNROLL
  for (int l = 0; l < L; ++l) {
    const int ln = w.lane(l), g = ln / 4;
    FTC_UNROLL
    for (int r = 0; r < 2; ++r) {
      float mt = -INFINITY;
      if constexpr (G::WC > 1) {
        FTC_UNROLL
        for (int c = 0; c < G::WC; ++c) mt = max_f(mt, red[c * G::BR + 16 * wr + g + 8 * r]);
      } else {
        mt = st.mt[r][l];
      }
      const float mnew = max_f(st.m[r][l], ceil_f(mt));
      const float alpha = pow2_int(st.m[r][l] - mnew);  // 0 for the first block (m_old = -inf)
      const float mu = mnew == -INFINITY ? 0.f : mnew;
      st.m[r][l] = mnew;
      st.l[r][l] = mul_rn(st.l[r][l], alpha);
      FTC_UNROLL
      for (int n = 0; n < G::NA; ++n) {
        st.acc[n][l][2 * r] = mul_rn(st.acc[n][l][2 * r], alpha);
        st.acc[n][l][2 * r + 1] = mul_rn(st.acc[n][l][2 * r + 1], alpha);
      }
      FTC_UNROLL
      for (int nt = 0; nt < G::NT; ++nt)
        for (int e = 0; e < 2; ++e) {
          const float p = w.exp2(sub_rn(st.s[nt][l][2 * r + e], mu));  // exp2(-inf) = +0 exactly
          st.s[nt][l][2 * r + e] = p;
          st.l[r][l] = add_rn(st.l[r][l], p);
        }
    }
  }
  store_pairs<G::NT>(w, st.s, sP + 16 * wr * G::LDP + wc * G::NS, G::LDP);
}

// Phase C: acc += bf16(P) v over the block's BC keys, this warp's CH columns.
template <int HSP, class W>
FTC_HD void fwd_pv(W& w, FwdState<HSP, W::kLanes>& st, int warp, const u16* sP, const u16* sV) {
  using G = Cfg<HSP>;
  const int wr = warp / G::WC, wc = warp % G::WC;
  mma_ez<G::NA, G::BC / 16>(w, st.acc, sP + 16 * wr * G::LDP, G::LDP, sV + wc * G::CH, G::LD);
}

// Epilogue, 1: each row's l over its quad ((l0 + l1) + (l2 + l3)), to `red` (WC > 1).
template <int HSP, class W>
FTC_HD void fwd_rowsum(W& w, FwdState<HSP, W::kLanes>& st, int warp, float* red) {
  using G = Cfg<HSP>;
  const int wr = warp / G::WC, wc = warp % G::WC;
  FTC_UNROLL
  for (int r = 0; r < 2; ++r) w.quad_sum(st.l[r]);
  if constexpr (G::WC > 1)
    for (int l = 0; l < W::kLanes; ++l) {
      const int ln = w.lane(l), g = ln / 4;
      if (ln % 4 == 0)
        for (int r = 0; r < 2; ++r) red[wc * G::BR + 16 * wr + g + 8 * r] = st.l[r][l];
    }
}
// Epilogue, 2: l = the warps' sums in order (WC > 1); out = acc / l rounded to bf16; lse2 = m + log2 l.
template <int HSP, class W>
FTC_HD void fwd_store(W& w, FwdState<HSP, W::kLanes>& st, int warp, const float* red, u16* out, long long ldo,
                      float* lse, int i0, int T, int HS) {
  using G = Cfg<HSP>;
  const int wr = warp / G::WC, wc = warp % G::WC;
  FTC_UNROLL
  for (int l = 0; l < W::kLanes; ++l) {
    const int ln = w.lane(l), g = ln / 4, t = ln % 4;
    FTC_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int row = 16 * wr + g + 8 * r, i = i0 + row;
      float sum = st.l[r][l];
      if constexpr (G::WC > 1) {
        sum = red[row];
        FTC_UNROLL
        for (int c = 1; c < G::WC; ++c) sum = add_rn(sum, red[c * G::BR + row]);
      }
      if (i >= T) continue;
      FTC_UNROLL
      for (int n = 0; n < G::NA; ++n)
        for (int e = 0; e < 2; ++e) {
          const int col = wc * G::CH + 8 * n + 2 * t + e;
          if (col < HS) out[i * ldo + col] = u16(w.pack(div_rn(st.acc[n][l][2 * r + e], sum), 0.f) & 0xffffu);
        }
      if (wc == 0 && t == 0) lse[i] = add_rn(st.m[r][l], w.log2(sum));
    }
  }
}

// One CTA of the forward: owner block x of the (sequence, head) grid, head h.
template <int HSP, int V, class C>
FTC_HD void forward_cta(C& cta, char* smem, const Params& p, int x, int h) {
  constexpr bool BIAS = (V & kBias) != 0;
  using G = Cfg<HSP>;
  using W = typename C::W;
  Place pl;
  if (!locate(p.off, p.B, G::BR, x, pl)) return;
  const long long ld = (long long)p.NH * p.HS;
  const long long base = pl.row0 * ld + (long long)h * p.HS;
  const int i0 = pl.blk * G::BR, T = pl.T;
  const int nkb = min_i(ceil_div(i0 + G::BR, G::BC), ceil_div(T, G::BC));  // key blocks 0 .. nkb - 1
  const float* bh = BIAS ? p.bias + h * p.bias_stride : nullptr;
  u16* sQ = reinterpret_cast<u16*>(smem);
  u16* sK = sQ + G::BR * G::LD;
  u16* sV = sK + G::BC * G::LD;
  u16* sP = sV + G::BC * G::LD;
  float* red = reinterpret_cast<float*>(sP + G::BR * G::LDP);  // [max | sum][WC][BR]
  FwdState<HSP, W::kLanes> st[C::template slots<G::WARPS>()];
  for (int t = cta.thread_begin(); t < cta.thread_end(); ++t) {
    fill_rows<HSP>(cta, t, G::THREADS, sQ, G::LD, G::BR, p.q + base + i0 * ld, ld, T - i0, p.HS, p.vec);
    fill_rows<HSP>(cta, t, G::THREADS, sK, G::LD, G::BC, p.k + base, ld, T, p.HS, p.vec);
  }
  cta.commit();
  for (int t = cta.thread_begin(); t < cta.thread_end(); ++t)
    fill_rows<HSP>(cta, t, G::THREADS, sV, G::LD, G::BC, p.v + base, ld, T, p.HS, p.vec);
  cta.commit();
  for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
    auto& s = st[cta.slot(w)];
    zero<G::NA, W>(s.acc);
    FTC_UNROLL
    for (int r = 0; r < 2; ++r)
      for (int l = 0; l < W::kLanes; ++l) s.m[r][l] = -INFINITY, s.l[r][l] = 0.f, s.mt[r][l] = -INFINITY;
  }
  for (int kb = 0; kb < nkb; ++kb) {
    const int j0 = kb * G::BC;
    cta.template wait<1>();  // Q and this block's K (its V may still be in flight)
    cta.sync();
    for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
      W ww = cta.warp(w);
      fwd_scores<HSP, BIAS>(ww, st[cta.slot(w)], w, sQ, sK, red, p.c2, bh, i0, j0, T);
    }
    cta.sync();  // every warp done with K; the block maxima visible
    const bool more = kb + 1 < nkb;
    if (more) {
      for (int t = cta.thread_begin(); t < cta.thread_end(); ++t)
        fill_rows<HSP>(cta, t, G::THREADS, sK, G::LD, G::BC, p.k + base + (j0 + G::BC) * ld, ld, T - j0 - G::BC,
                       p.HS, p.vec);
      cta.commit();
    }
    for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
      W ww = cta.warp(w);
      fwd_softmax<HSP>(ww, st[cta.slot(w)], w, sP, red);
    }
    if (more) cta.template wait<1>();  // this block's V (the next K may stay in flight)
    else cta.template wait<0>();
    cta.sync();  // P and V visible
    for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
      W ww = cta.warp(w);
      fwd_pv<HSP>(ww, st[cta.slot(w)], w, sP, sV);
    }
    cta.sync();  // every warp done with V and P
    if (more) {
      for (int t = cta.thread_begin(); t < cta.thread_end(); ++t)
        fill_rows<HSP>(cta, t, G::THREADS, sV, G::LD, G::BC, p.v + base + (j0 + G::BC) * ld, ld, T - j0 - G::BC,
                       p.HS, p.vec);
      cta.commit();
    }
  }
  float* rsum = red + G::WC * G::BR;
  for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
    W ww = cta.warp(w);
    fwd_rowsum<HSP>(ww, st[cta.slot(w)], w, rsum);
  }
  cta.sync();
  const long long stat = (long long)p.NH * pl.row0 + (long long)h * T;
  for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
    W ww = cta.warp(w);
    fwd_store<HSP>(ww, st[cta.slot(w)], w, rsum, p.out + base, ld, p.lse + stat, i0, T, p.HS);
  }
}

// ---- backward, kernel 1: dq by query blocks (and D = dout . out for kernel 2) ------------------------------
template <int HSP, int L>
struct DqState {
  using G = Cfg<HSP>;
  float acc[G::NA][L][4];   // dq accumulators (unscaled)
  float lse[2][L], D[2][L];  // rows g, g + 8
};

// D_i = dout_i . out_i for the CTA's rows, one warp per row in turn: lane ln sums columns ln, ln + 32, ...
// by fma in column order, then the 5-round butterfly. Written to sD (0 past the sequence) and, once, to D.
template <class W>
FTC_HD void dq_rowdot(W& w, int warp, int warps, int rows, float* sD, float* Dg, const u16* dout, const u16* o,
                      long long ld, int i0, int T, int HS) {
  constexpr int L = W::kLanes;
  for (int rr = warp; rr < rows; rr += warps) {
    const int i = i0 + rr;
    float part[L];
    FTC_UNROLL
    for (int l = 0; l < L; ++l) {
      float a = 0.f;
      if (i < T)
        for (int c = w.lane(l); c < HS; c += 32)
          a = fma_rn(bf16_bits_to_float(dout[i * ld + c]), bf16_bits_to_float(o[i * ld + c]), a);
      part[l] = a;
    }
    const float d = w.warp_sum(part);
    FTC_UNROLL
    for (int l = 0; l < L; ++l)
      if (w.lane(l) == 0) {
        sD[rr] = d;
        if (i < T) Dg[i] = d;
      }
  }
}

// Phase A: S = Q K^T and dP = dO V^T on this warp's NS keys; P = exp2(fl(S c2) - lse2), x = P (dP - D),
// 0 where masked; bf16(x) = dS into the tile.
template <int HSP, bool BIAS, class W>
FTC_HD void dq_scores(W& w, DqState<HSP, W::kLanes>& st, int warp, const u16* sQ, const u16* sdO, const u16* sK,
                      const u16* sV, u16* sdS, float c2, const float* bh, float* sl, int i0, int j0, int T) {
  using G = Cfg<HSP>;
  constexpr int L = W::kLanes;
  const int wr = warp / G::WC, wc = warp % G::WC;
  float s[G::NT][L][4], dp[G::NT][L][4];
  zero<G::NT, W>(s);
  zero<G::NT, W>(dp);
  mma_xyt<G::NT, G::KS>(w, s, sQ + 16 * wr * G::LD, G::LD, sK + wc * G::NS * G::LD, G::LD);
  mma_xyt<G::NT, G::KS>(w, dp, sdO + 16 * wr * G::LD, G::LD, sV + wc * G::NS * G::LD, G::LD);
  FTC_UNROLL
  for (int l = 0; l < L; ++l) {
    const int ln = w.lane(l), g = ln / 4, t = ln % 4;
    FTC_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int i = i0 + 16 * wr + g + 8 * r;
      FTC_UNROLL
      for (int nt = 0; nt < G::NT; ++nt)
        for (int e = 0; e < 2; ++e) {
          const int j = j0 + wc * G::NS + 8 * nt + 2 * t + e;
          const bool valid = j <= i && i < T;
          const float P =
              valid ? w.exp2(sub_rn(score_z<BIAS>(s[nt][l][2 * r + e], c2, bh, i, j), st.lse[r][l])) : 0.f;
          const float x = valid ? mul_rn(P, sub_rn(dp[nt][l][2 * r + e], st.D[r][l])) : 0.f;
          if constexpr (BIAS)
            if (sl && valid) MANYADD_SLOT_STORE(sl + tri(i) + i - j, x);  // the bias's gradient, unrounded
          s[nt][l][2 * r + e] = x;
        }
    }
  }
  store_pairs<G::NT>(w, s, sdS + 16 * wr * G::LDP + wc * G::NS, G::LDP);
}

template <int HSP, int V, class C>
FTC_HD void dq_cta(C& cta, char* smem, const Params& p, int x, int h) {
  constexpr bool BIAS = (V & kBias) != 0, F32G = (V & kF32Grad) != 0;
  using G = Cfg<HSP>;
  using W = typename C::W;
  Place pl;
  if (!locate(p.off, p.B, G::BR, x, pl)) return;
  const long long ld = (long long)p.NH * p.HS;
  const long long base = pl.row0 * ld + (long long)h * p.HS;
  const long long stat = (long long)p.NH * pl.row0 + (long long)h * pl.T;
  const int i0 = pl.blk * G::BR, T = pl.T;
  const int nkb = min_i(ceil_div(i0 + G::BR, G::BC), ceil_div(T, G::BC));
  const float* bh = BIAS ? p.bias + h * p.bias_stride : nullptr;
  float* sl = BIAS && p.dslots ? p.dslots + (long long)p.NH * p.soff[pl.b] + (long long)h * tri(T) : nullptr;
  u16* sQ = reinterpret_cast<u16*>(smem);
  u16* sdO = sQ + G::BR * G::LD;
  u16* sK = sdO + G::BR * G::LD;
  u16* sV = sK + G::BC * G::LD;
  u16* sdS = sV + G::BC * G::LD;
  float* sD = reinterpret_cast<float*>(sdS + G::BR * G::LDP);
  float* sL = sD + G::BR;
  DqState<HSP, W::kLanes> st[C::template slots<G::WARPS>()];
  for (int t = cta.thread_begin(); t < cta.thread_end(); ++t) {
    fill_rows<HSP>(cta, t, G::THREADS, sQ, G::LD, G::BR, p.q + base + i0 * ld, ld, T - i0, p.HS, p.vec);
    fill_rows<HSP>(cta, t, G::THREADS, sdO, G::LD, G::BR, p.dout + base + i0 * ld, ld, T - i0, p.HS, p.vec);
    fill_floats(t, G::THREADS, sL, G::BR, p.lse + stat + i0, T - i0);
  }
  cta.commit();
  for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
    W ww = cta.warp(w);
    dq_rowdot(ww, w, G::WARPS, G::BR, sD, p.dsum + stat, p.dout + base, p.o + base, ld, i0, T, p.HS);
    zero<G::NA, W>(st[cta.slot(w)].acc);
  }
  for (int kb = 0; kb < nkb; ++kb) {
    const int j0 = kb * G::BC;
    for (int t = cta.thread_begin(); t < cta.thread_end(); ++t) {
      fill_rows<HSP>(cta, t, G::THREADS, sK, G::LD, G::BC, p.k + base + j0 * ld, ld, T - j0, p.HS, p.vec);
      fill_rows<HSP>(cta, t, G::THREADS, sV, G::LD, G::BC, p.v + base + j0 * ld, ld, T - j0, p.HS, p.vec);
    }
    cta.commit();
    cta.template wait<0>();
    cta.sync();  // K, V (and in the first block Q, dO, lse2, D) visible
    for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
      W ww = cta.warp(w);
      auto& s = st[cta.slot(w)];
      if (kb == 0)
        for (int l = 0; l < W::kLanes; ++l)
          for (int r = 0; r < 2; ++r) {
            const int row = 16 * (w / G::WC) + ww.lane(l) / 4 + 8 * r;
            s.lse[r][l] = sL[row], s.D[r][l] = sD[row];
          }
      dq_scores<HSP, BIAS>(ww, s, w, sQ, sdO, sK, sV, sdS, p.c2, bh, sl, i0, j0, T);
    }
    cta.sync();  // dS visible
    for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
      W ww = cta.warp(w);
      const int wr = w / G::WC, wc = w % G::WC;
      mma_ez<G::NA, G::BC / 16>(ww, st[cta.slot(w)].acc, sdS + 16 * wr * G::LDP, G::LDP, sK + wc * G::CH, G::LD);
    }
    cta.sync();  // every warp done with K, V, dS
  }
  for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
    W ww = cta.warp(w);
    const int wr = w / G::WC, wc = w % G::WC;
    auto& s = st[cta.slot(w)];
    FTC_UNROLL
    for (int l = 0; l < W::kLanes; ++l) {
      const int ln = ww.lane(l), g = ln / 4, t = ln % 4;
      FTC_UNROLL
      for (int r = 0; r < 2; ++r) {
        const int i = i0 + 16 * wr + g + 8 * r;
        if (i >= T) continue;
        FTC_UNROLL
        for (int n = 0; n < G::NA; ++n)
          for (int e = 0; e < 2; ++e) {
            const int col = wc * G::CH + 8 * n + 2 * t + e;
            if (col >= p.HS) continue;
            const float dqx = mul_rn(p.scale, s.acc[n][l][2 * r + e]);
            if constexpr (F32G) p.dq32[base + i * ld + col] = dqx;
            else p.dq[base + i * ld + col] = u16(ww.pack(dqx, 0.f) & 0xffffu);
          }
      }
    }
  }
}

// ---- backward, kernel 2: dk, dv by key blocks -------------------------------------------------------------
template <int HSP, int L>
struct DkvState {
  using G = Cfg<HSP>;
  float acck[G::NA][L][4], accv[G::NA][L][4];
};

// Phase A, transposed: S^T = K Q^T and dP^T = V dO^T on this warp's NS query columns; P (as in dq_scores,
// the same expressions) rounded to bf16 into the P^T tile, x = P (dP - D) rounded into the dS^T tile.
template <int HSP, bool BIAS, class W>
FTC_HD void dkv_scores(W& w, int warp, const u16* sK, const u16* sV, const u16* sQ, const u16* sdO, const float* sL,
                       const float* sD, u16* sPt, u16* sdSt, float c2, const float* bh, int j0, int i0, int T) {
  using G = Cfg<HSP>;
  constexpr int L = W::kLanes;
  const int wr = warp / G::WC, wc = warp % G::WC;
  float s[G::NT][L][4], dp[G::NT][L][4];
  zero<G::NT, W>(s);
  zero<G::NT, W>(dp);
  mma_xyt<G::NT, G::KS>(w, s, sK + 16 * wr * G::LD, G::LD, sQ + wc * G::NS * G::LD, G::LD);
  mma_xyt<G::NT, G::KS>(w, dp, sV + 16 * wr * G::LD, G::LD, sdO + wc * G::NS * G::LD, G::LD);
  FTC_UNROLL
  for (int l = 0; l < L; ++l) {
    const int ln = w.lane(l), g = ln / 4, t = ln % 4;
    FTC_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int j = j0 + 16 * wr + g + 8 * r;
      FTC_UNROLL
      for (int nt = 0; nt < G::NT; ++nt)
        for (int e = 0; e < 2; ++e) {
          const int col = wc * G::NS + 8 * nt + 2 * t + e, i = i0 + col;
          const bool valid = j <= i && i < T;
          const float P = valid ? w.exp2(sub_rn(score_z<BIAS>(s[nt][l][2 * r + e], c2, bh, i, j), sL[col])) : 0.f;
          s[nt][l][2 * r + e] = P;
          dp[nt][l][2 * r + e] = valid ? mul_rn(P, sub_rn(dp[nt][l][2 * r + e], sD[col])) : 0.f;
        }
    }
  }
  store_pairs<G::NT>(w, s, sPt + 16 * wr * G::LDP + wc * G::NS, G::LDP);
  store_pairs<G::NT>(w, dp, sdSt + 16 * wr * G::LDP + wc * G::NS, G::LDP);
}

template <int HSP, int V, class C>
FTC_HD void dkv_cta(C& cta, char* smem, const Params& p, int x, int h) {
  constexpr bool BIAS = (V & kBias) != 0, F32G = (V & kF32Grad) != 0;
  using G = Cfg<HSP>;
  using W = typename C::W;
  Place pl;
  if (!locate(p.off, p.B, G::BR, x, pl)) return;
  const long long ld = (long long)p.NH * p.HS;
  const long long base = pl.row0 * ld + (long long)h * p.HS;
  const long long stat = (long long)p.NH * pl.row0 + (long long)h * pl.T;
  const int j0 = pl.blk * G::BR, T = pl.T;
  const int qb0 = j0 / G::BC, nqb = ceil_div(T, G::BC);  // query blocks holding rows >= j0
  const float* bh = BIAS ? p.bias + h * p.bias_stride : nullptr;
  u16* sK = reinterpret_cast<u16*>(smem);
  u16* sV = sK + G::BR * G::LD;
  u16* sQ = sV + G::BR * G::LD;
  u16* sdO = sQ + G::BC * G::LD;
  u16* sPt = sdO + G::BC * G::LD;
  u16* sdSt = sPt + G::BR * G::LDP;
  float* sL = reinterpret_cast<float*>(sdSt + G::BR * G::LDP);
  float* sD = sL + G::BC;
  DkvState<HSP, W::kLanes> st[C::template slots<G::WARPS>()];
  for (int t = cta.thread_begin(); t < cta.thread_end(); ++t) {
    fill_rows<HSP>(cta, t, G::THREADS, sK, G::LD, G::BR, p.k + base + j0 * ld, ld, T - j0, p.HS, p.vec);
    fill_rows<HSP>(cta, t, G::THREADS, sV, G::LD, G::BR, p.v + base + j0 * ld, ld, T - j0, p.HS, p.vec);
  }
  cta.commit();
  for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
    zero<G::NA, W>(st[cta.slot(w)].acck);
    zero<G::NA, W>(st[cta.slot(w)].accv);
  }
  for (int qb = qb0; qb < nqb; ++qb) {
    const int i0 = qb * G::BC;
    for (int t = cta.thread_begin(); t < cta.thread_end(); ++t) {
      fill_rows<HSP>(cta, t, G::THREADS, sQ, G::LD, G::BC, p.q + base + i0 * ld, ld, T - i0, p.HS, p.vec);
      fill_rows<HSP>(cta, t, G::THREADS, sdO, G::LD, G::BC, p.dout + base + i0 * ld, ld, T - i0, p.HS, p.vec);
      fill_floats(t, G::THREADS, sL, G::BC, p.lse + stat + i0, T - i0);
      fill_floats(t, G::THREADS, sD, G::BC, p.dsum + stat + i0, T - i0);
    }
    cta.commit();
    cta.template wait<0>();
    cta.sync();
    for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
      W ww = cta.warp(w);
      dkv_scores<HSP, BIAS>(ww, w, sK, sV, sQ, sdO, sL, sD, sPt, sdSt, p.c2, bh, j0, i0, T);
    }
    cta.sync();
    for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
      W ww = cta.warp(w);
      const int wr = w / G::WC, wc = w % G::WC;
      auto& s = st[cta.slot(w)];
      mma_ez<G::NA, G::BC / 16>(ww, s.accv, sPt + 16 * wr * G::LDP, G::LDP, sdO + wc * G::CH, G::LD);
      mma_ez<G::NA, G::BC / 16>(ww, s.acck, sdSt + 16 * wr * G::LDP, G::LDP, sQ + wc * G::CH, G::LD);
    }
    cta.sync();
  }
  for (int w = cta.warp_begin(); w < cta.warp_end(); ++w) {
    W ww = cta.warp(w);
    const int wr = w / G::WC, wc = w % G::WC;
    auto& s = st[cta.slot(w)];
    FTC_UNROLL
    for (int l = 0; l < W::kLanes; ++l) {
      const int ln = ww.lane(l), g = ln / 4, t = ln % 4;
      FTC_UNROLL
      for (int r = 0; r < 2; ++r) {
        const int j = j0 + 16 * wr + g + 8 * r;
        if (j >= T) continue;
        FTC_UNROLL
        for (int n = 0; n < G::NA; ++n)
          for (int e = 0; e < 2; ++e) {
            const int col = wc * G::CH + 8 * n + 2 * t + e;
            if (col >= p.HS) continue;
            p.dv[base + j * ld + col] = u16(ww.pack(s.accv[n][l][2 * r + e], 0.f) & 0xffffu);
            const float dkx = mul_rn(p.scale, s.acck[n][l][2 * r + e]);
            if constexpr (F32G) p.dk32[base + j * ld + col] = dkx;
            else p.dk[base + j * ld + col] = u16(ww.pack(dkx, 0.f) & 0xffffu);
          }
      }
    }
  }
}

}  // namespace manyadd::kernels::flash_tc
