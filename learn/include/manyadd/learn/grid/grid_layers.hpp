// Layers of the grid universal transformer (paper 003, Cognolato and Testolin; learn/README.md, "The
// grid universal transformer") as forward/backward pairs in the style of layers.hpp: outputs first,
// gradients prefixed d, every backward *accumulates* (+=) into dinp and the parameter gradients.
// Templated on the scalar: float trains, double runs the finite-difference checks (tests/test_grid_grad).
// layers.hpp's LayerNorm, matrix product and cross-entropy are reused as they are.
//
// Shape legend: R rows; C d_emb; H, W grid rows and columns (a grid is (H W, C), row-major: cell (i, j)
// is row i W + j, (0, *) the top row); S sequence length; A = 3 Seq2Grid actions (TLU, NLP, NOP, the
// authors' order); NH heads of DH = C / NH channels; G groups of CG = C / G channels; K kernel (odd),
// KK = K^2 neighbours, P = K / 2; SC context rows; T keys of the context attention (= H W).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "manyadd/learn/decoder/layers.hpp"

namespace manyadd::learn::grid {

// ---- the float products on oneDNN (GridView::fast; cpu_gemm.hpp: kernels JIT-compiled for this CPU,
// AVX-512 where it has them, each call on the calling thread: deterministic). The same mathematics as
// layers.hpp's matmul_forward / matmul_backward in another summation order. Defined in grid_model.cpp.
void fast_matmul_forward(float* out, const float* inp, const float* w, int R, int C, int OC);
void fast_matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int R, int C,
                          int OC);
// SiLU's forward and backward on the fast device's kernels (cpu_fast_kernels.hpp: AVX-512 where the CPU
// has it, exp by a polynomial within 2 ulp): the same operations as silu_forward / silu_backward below.
void fast_silu_forward(float* out, const float* inp, std::int64_t n);
void fast_silu_backward(float* dinp, const float* dout, const float* inp, std::int64_t n);
// The local attention with one channel per head (heads = d_emb; window K x K <= 64) on the fast
// device's kernels: the same operations as local_attention_forward / _backward below, 16 channels per
// vector, exp by the polynomial. fast_local_attention_runs: whether they take these arguments.
inline bool fast_local_attention_runs(int C, int NH, int K) { return NH == C && K * K <= 64; }
void fast_local_attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                                  const float* rel, const float* qe, int H, int W, int C, int K);
void fast_local_attention_backward(float* dq, float* dk, float* dv, float* drel, float* dqe, const float* dout,
                                   const float* att, const float* q, const float* k, const float* v, const float* rel,
                                   const float* qe, int H, int W, int C, int K);
// Why the fast products cannot run here (oneDNN not loadable), or empty; require_fast_products throws
// InputError (exit 2) saying so.
const std::string& fast_products_unavailable();
void require_fast_products();

// ---- linear with bias: out (R, OC) = inp (R, C) w^T + b, w (OC, C), b (OC) or null ----------------
// fast: the products on oneDNN (float only; the double twin ignores it).
template <class S>
void linear_forward(S* out, const S* inp, const S* w, const S* b, int R, int C, int OC, bool fast = false) {
  if constexpr (std::is_same_v<S, float>) {
    if (fast) fast_matmul_forward(out, inp, w, R, C, OC);
    else matmul_forward(out, inp, w, R, C, OC);
  } else {
    (void)fast;
    matmul_forward(out, inp, w, R, C, OC);
  }
  if (b)
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < OC; ++o) out[std::int64_t(r) * OC + o] += b[o];
}
// dinp += dout w ; dw += dout^T inp ; db += column sums of dout
template <class S>
void linear_backward(S* dinp, S* dw, S* db, const S* dout, const S* inp, const S* w, int R, int C, int OC,
                     bool fast = false) {
  if constexpr (std::is_same_v<S, float>) {
    if (fast) fast_matmul_backward(dinp, dw, dout, inp, w, R, C, OC);
    else matmul_backward(dinp, dw, dout, inp, w, R, C, OC);
  } else {
    (void)fast;
    matmul_backward(dinp, dw, dout, inp, w, R, C, OC);
  }
  if (db)
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < OC; ++o) db[o] += dout[std::int64_t(r) * OC + o];
}

// ---- SiLU (Elfving et al.; the paper's Eq. 1): y = x sigma(x), dy/dx = sigma(x) (1 + x (1 - sigma(x)))
template <class S>
S sigmoid(S x) {
  return x >= 0 ? S(1) / (S(1) + std::exp(-x)) : std::exp(x) / (S(1) + std::exp(x));
}
// fast: on the fast device's kernels (float only; the double twin ignores it).
template <class S>
void silu_forward(S* out, const S* inp, std::int64_t n, bool fast = false) {
  if constexpr (std::is_same_v<S, float>) {
    if (fast) return fast_silu_forward(out, inp, n);
  }
  (void)fast;
  using Arr = Eigen::Array<S, Eigen::Dynamic, 1>;
  const Eigen::Map<const Arr> x(inp, n);
  Eigen::Map<Arr>(out, n) = x / (S(1) + (-x).exp());  // Eigen's vectorized exp; exp(-x) = inf gives -0
}
template <class S>
void silu_backward(S* dinp, const S* dout, const S* inp, std::int64_t n, bool fast = false) {
  if constexpr (std::is_same_v<S, float>) {
    if (fast) return fast_silu_backward(dinp, dout, inp, n);
  }
  (void)fast;
  using Arr = Eigen::Array<S, Eigen::Dynamic, 1>;
  const Eigen::Map<const Arr> x(inp, n), g(dout, n);
  const Arr s = S(1) / (S(1) + (-x).exp());
  Eigen::Map<Arr>(dinp, n) += g * s * (S(1) + x * (S(1) - s));
}

// ---- dropout as torch.nn.Dropout in training: out = inp * mask, mask 0 (probability p) or 1 / (1 - p)
// The mask comes from a counter-based stream (DropoutStream): a function of (seed, step, sample,
// recurrent step, site) alone, so a run is the same on any thread count and after a resume, and the
// gradient checks see a fixed function. Each 64-bit draw gives two 32-bit uniforms; unit i is dropped
// when its uniform u_i < p 2^32 (the drop probability is p to within 2^-32).
struct DropoutStream {
  static constexpr std::uint64_t kIncrement = 0x9E3779B97F4A7C15ull;  // splitmix64's state step per draw
  std::uint64_t state;
  explicit DropoutStream(std::uint64_t seed) : state(seed) {}
  std::uint64_t next() {  // splitmix64
    std::uint64_t z = (state += kIncrement);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};
// The float masks on the fast device's kernels (8 draws per vector; the same bits as the loop below).
void fast_dropout_mask(float* mask, std::int64_t n, std::uint64_t state, std::uint64_t cut, float keep);
// mask (n) for drop probability p (p = 0: every entry 1).
template <class S>
void dropout_mask(S* mask, std::int64_t n, double p, DropoutStream& rs) {
  if (p <= 0) {
    std::fill(mask, mask + n, S(1));
    return;
  }
  const std::uint64_t cut = std::uint64_t(p * 4294967296.0);
  const S keep = S(1.0 / (1.0 - p));
  if constexpr (std::is_same_v<S, float>) {
    fast_dropout_mask(mask, n, rs.state, cut, keep);
    rs.state += std::uint64_t((n + 1) / 2) * DropoutStream::kIncrement;  // the draws taken
    return;
  }
  for (std::int64_t i = 0; i < n; i += 2) {
    const std::uint64_t z = rs.next();
    mask[i] = (z & 0xFFFFFFFFull) < cut ? S(0) : keep;
    if (i + 1 < n) mask[i + 1] = (z >> 32) < cut ? S(0) : keep;
  }
}
template <class S>
void dropout_forward(S* out, const S* inp, const S* mask, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = mask ? inp[i] * mask[i] : inp[i];
}
template <class S>
void dropout_backward(S* dinp, const S* dout, const S* mask, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dinp[i] += mask ? dout[i] * mask[i] : dout[i];
}

// ---- FFN_L (the paper's Eq. 1) with dropout before every linear layer -----------------------------------
// FFN_1(x) = W_1 x + b_1, FFN_L(x) = W_L SiLU(FFN_{L-1}(x)) + b_L; the authors' modules drop out the
// input of every linear layer (tag-cat: nn.Sequential(Dropout, Linear, SiLU, Dropout, Linear, ...) in
// TransformerLikeConv.step, PonderNetModule.step, WrapperSIGO.decoder; none in Seq2Grid's action
// decoder and the halting head: mask null there). Per layer l (width in_l -> out_l) the activations keep
// in[l] (R, in_l), the layer's input after dropout, mask[l] (R, in_l) or empty, and z[l] (R, out_l), its
// pre-activation (the last layer's is the output, written to `out` only).
template <class S>
struct FfnLayer {
  const S* w;  // (out, in)
  const S* b;  // (out) or null
  int in, out;
  bool fast = false;  // the products on oneDNN (linear_forward)
};
template <class S>
struct FfnActs {
  std::vector<std::vector<S>> in, mask, z;
};
// mask(l, buf, n): the dropout mask of layer l's input (n entries, written into buf) or null for none.
template <class S, class MaskFn>
void ffn_forward(S* out, FfnActs<S>& a, std::vector<S>& tmp, const S* x, const std::vector<FfnLayer<S>>& layers, int R,
                 const MaskFn& mask) {
  const std::size_t L = layers.size();
  a.in.resize(L), a.mask.resize(L), a.z.resize(L);
  const S* cur = x;
  for (std::size_t l = 0; l < L; ++l) {
    const FfnLayer<S>& f = layers[l];
    const std::size_t n = std::size_t(R) * std::size_t(f.in), no = std::size_t(R) * std::size_t(f.out);
    a.in[l].resize(n);
    dropout_forward(a.in[l].data(), cur, mask(int(l), a.mask[l], n), std::int64_t(n));
    if (l + 1 == L) {
      linear_forward(out, a.in[l].data(), f.w, f.b, R, f.in, f.out, f.fast);
    } else {
      a.z[l].resize(no);
      linear_forward(a.z[l].data(), a.in[l].data(), f.w, f.b, R, f.in, f.out, f.fast);
      tmp.resize(no);
      silu_forward(tmp.data(), a.z[l].data(), std::int64_t(no), f.fast);
      cur = tmp.data();
    }
  }
}
// Reverse: dx += dL/dx from dout = dL/d out; dw[l], db[l] (db[l] null for a layer without bias)
// accumulate. scratch: two buffers, resized here.
template <class S>
void ffn_backward(S* dx, S* const* dw, S* const* db, const FfnActs<S>& a, const S* dout,
                  const std::vector<FfnLayer<S>>& layers, int R, std::vector<S>& s0, std::vector<S>& s1) {
  const S* g = dout;
  for (std::size_t l = layers.size(); l-- > 0;) {
    const FfnLayer<S>& f = layers[l];
    const std::size_t n = std::size_t(R) * std::size_t(f.in);
    const S* m = a.mask[l].empty() ? nullptr : a.mask[l].data();
    if (l == 0) {
      s0.assign(n, S(0));
      linear_backward(s0.data(), dw[l], db[l], g, a.in[l].data(), f.w, R, f.in, f.out, f.fast);
      dropout_backward(dx, s0.data(), m, std::int64_t(n));
      return;
    }
    // d in[l] into s0, then d z[l-1] = silu'(z[l-1]) mask d in[l] into s1, which the next layer reads
    s0.assign(n, S(0));
    linear_backward(s0.data(), dw[l], db[l], g, a.in[l].data(), f.w, R, f.in, f.out, f.fast);
    if (m)
      for (std::size_t e = 0; e < n; ++e) s0[e] *= m[e];
    s1.assign(n, S(0));  // g (s1 from the layer above) has been read: s1 takes d z[l-1]
    silu_backward(s1.data(), s0.data(), a.z[l - 1].data(), std::int64_t(n), layers[l - 1].fast);
    g = s1.data();
  }
}

// ---- softmax of each row: out (R, N) -----------------------------------------------------------------
template <class S>
void softmax_rows_forward(S* out, const S* inp, int R, int N) {
  for (int r = 0; r < R; ++r) {
    const S* z = inp + std::int64_t(r) * N;
    S* p = out + std::int64_t(r) * N;
    S mx = z[0];
    for (int i = 1; i < N; ++i) mx = std::max(mx, z[i]);
    S sum = 0;
    for (int i = 0; i < N; ++i) sum += (p[i] = std::exp(z[i] - mx));
    for (int i = 0; i < N; ++i) p[i] /= sum;
  }
}
// dz_i += p_i (dp_i - sum_j p_j dp_j)
template <class S>
void softmax_rows_backward(S* dinp, const S* dout, const S* out, int R, int N) {
  for (int r = 0; r < R; ++r) {
    const S* p = out + std::int64_t(r) * N;
    const S* g = dout + std::int64_t(r) * N;
    S dot = 0;
    for (int i = 0; i < N; ++i) dot += p[i] * g[i];
    for (int i = 0; i < N; ++i) dinp[std::int64_t(r) * N + i] += p[i] * (g[i] - dot);
  }
}

// ---- Seq2Grid (paper Sec. III-B2, Eq. 3; Kim et al. 2021, mirrored) ---------------------------------
// From G^(0) = 0, each input vector x_t with its actions a_t = (TLU, NLP, NOP) (Eq. 2) updates the grid
//   G^(t) = a_TLU TLU(G^(t-1), x_t) + a_NLP NLP(G^(t-1), x_t) + a_NOP G^(t-1)
// where (0-based; the paper's row 1 / column W are our row 0 / column W - 1):
//   TLU: x enters the top row at its right end (0, W-1) and the top row shifts left (its leftmost
//        entry falls off); the other rows stay.
//   NLP: x enters (0, W-1) of a new, otherwise empty top row; every row moves down one (the bottom row
//        falls off).
// Collected per cell, the update is
//   row 0, j < W-1:  a_T G(0, j+1) + a_O G(0, j)                      (NLP leaves 0 there)
//   row 0, j = W-1:  (a_T + a_N) x_t + a_O G(0, W-1)
//   row i >= 1:      (a_T + a_O) G(i, j) + a_N G(i-1, j)
// The authors compute the same grid backwards in t as a sum of per-token position distributions
// (tag-cat, tagcat/modules/seq2grid.py, forward/devolve); both cost O(S H W C), and this forward keeps
// the definition, step by step. grids (S + 1, H W, C): grids[t] = G^(t) (grids[0] = 0); the last is the
// output. Only the backward needs the intermediate grids; with keep_all = false only G^(S) is kept
// (grids has H W C entries).
template <class S>
void seq2grid_step(S* g, const S* x, const S* a, int H, int W, int C) {
  const S aT = a[0], aN = a[1], aO = a[2];
  // rows from the bottom up: row i reads row i - 1 before it is overwritten
  for (int i = H - 1; i >= 1; --i) {
    S* row = g + std::int64_t(i) * W * C;
    const S* up = g + std::int64_t(i - 1) * W * C;
    for (std::int64_t e = 0; e < std::int64_t(W) * C; ++e) row[e] = (aT + aO) * row[e] + aN * up[e];
  }
  // row 0 left to right: column j reads j + 1 before it is overwritten
  for (int j = 0; j + 1 < W; ++j) {
    S* c0 = g + std::int64_t(j) * C;
    const S* c1 = c0 + C;
    for (int c = 0; c < C; ++c) c0[c] = aT * c1[c] + aO * c0[c];
  }
  S* last = g + std::int64_t(W - 1) * C;
  for (int c = 0; c < C; ++c) last[c] = (aT + aN) * x[c] + aO * last[c];
}
template <class S>
void seq2grid_forward(S* grids, const S* x, const S* act, int Sq, int H, int W, int C, bool keep_all) {
  const std::int64_t n = std::int64_t(H) * W * C;
  std::fill(grids, grids + n, S(0));
  for (int t = 0; t < Sq; ++t) {
    S* g = keep_all ? grids + std::int64_t(t + 1) * n : grids;
    if (keep_all) std::copy(grids + std::int64_t(t) * n, grids + std::int64_t(t) * n + n, g);
    seq2grid_step(g, x + std::int64_t(t) * C, act + std::int64_t(t) * 3, H, W, C);
  }
}
// Reverse of one step with dnew = dL/dG^(t), old = G^(t-1) (from the per-cell update above):
//   da_T = sum_{j<W-1} dnew(0,j).old(0,j+1) + dnew(0,W-1).x + sum_{i>=1} dnew(i).old(i)
//   da_N = dnew(0,W-1).x + sum_{i>=1} dnew(i).old(i-1)
//   da_O = sum_j dnew(0,j).old(0,j) + sum_{i>=1} dnew(i).old(i)
//   dx  += (a_T + a_N) dnew(0,W-1)
//   dold(0,j) = a_O dnew(0,j) + a_T dnew(0,j-1) [j >= 1] + a_N dnew(1,j) [H > 1]
//   dold(i,j) = (a_T + a_O) dnew(i,j) + a_N dnew(i+1,j) [i + 1 < H]        (i >= 1)
// dgrid holds dL/dG^(S) on entry and is overwritten by dL/dG^(0) (which nothing reads: G^(0) = 0).
// dact (S, 3) and dx (S, C) accumulate. scratch: H W C.
template <class S>
void seq2grid_backward(S* dx, S* dact, S* dgrid, S* scratch, const S* grids, const S* x, const S* act, int Sq, int H,
                       int W, int C) {
  const std::int64_t n = std::int64_t(H) * W * C, WC = std::int64_t(W) * C;
  for (int t = Sq - 1; t >= 0; --t) {
    const S* old = grids + std::int64_t(t) * n;
    const S* xt = x + std::int64_t(t) * C;
    const S* a = act + std::int64_t(t) * 3;
    const S aT = a[0], aN = a[1], aO = a[2];
    const S* dn = dgrid;
    S dT = 0, dN = 0, dO = 0;
    for (int j = 0; j + 1 < W; ++j)
      for (int c = 0; c < C; ++c) {
        dT += dn[std::int64_t(j) * C + c] * old[std::int64_t(j + 1) * C + c];
        dO += dn[std::int64_t(j) * C + c] * old[std::int64_t(j) * C + c];
      }
    for (int c = 0; c < C; ++c) {
      const S g = dn[(W - 1) * std::int64_t(C) + c];
      dT += g * xt[c];
      dN += g * xt[c];
      dO += g * old[(W - 1) * std::int64_t(C) + c];
      dx[std::int64_t(t) * C + c] += (aT + aN) * g;
    }
    for (int i = 1; i < H; ++i)
      for (std::int64_t e = 0; e < WC; ++e) {
        const S g = dn[i * WC + e];
        dT += g * old[i * WC + e];
        dO += g * old[i * WC + e];
        dN += g * old[(i - 1) * WC + e];
      }
    dact[std::int64_t(t) * 3 + 0] += dT;
    dact[std::int64_t(t) * 3 + 1] += dN;
    dact[std::int64_t(t) * 3 + 2] += dO;
    // dL/dG^(t-1) into scratch, then swapped into dgrid
    for (int j = 0; j < W; ++j)
      for (int c = 0; c < C; ++c) {
        S v = aO * dn[std::int64_t(j) * C + c];
        if (j >= 1) v += aT * dn[std::int64_t(j - 1) * C + c];
        if (H > 1) v += aN * dn[WC + std::int64_t(j) * C + c];
        scratch[std::int64_t(j) * C + c] = v;
      }
    for (int i = 1; i < H; ++i)
      for (std::int64_t e = 0; e < WC; ++e)
        scratch[i * WC + e] = (aT + aO) * dn[i * WC + e] + (i + 1 < H ? aN * dn[(i + 1) * WC + e] : S(0));
    std::copy(scratch, scratch + n, dgrid);
  }
}

// ---- grouped 1x1 projection (the paper's Eq. 6; a Conv2d(C, C, 1, groups=G, bias=False)) ------------
// out[:, l CG : (l+1) CG] = inp[:, l CG : (l+1) CG] w_l^T, w (C, CG) = the G blocks w_l (CG, CG) stacked
// (torch's conv weight (C, CG, 1, 1) without its unit dimensions). G = 1 is a plain matrix product.
template <class S>
void grouped_linear_forward(S* out, const S* inp, const S* w, int R, int C, int G, bool fast = false) {
  if (G == 1 && fast) return linear_forward(out, inp, w, static_cast<const S*>(nullptr), R, C, C, fast);
  const int CG = C / G;
  using Str = Eigen::OuterStride<>;
  for (int l = 0; l < G; ++l) {
    Eigen::Map<const MatR<S>, 0, Str> X(inp + l * CG, R, CG, Str(C));
    Eigen::Map<MatR<S>, 0, Str> Y(out + l * CG, R, CG, Str(C));
    Y.noalias() = X * CMapR<S>(w + std::int64_t(l) * CG * CG, CG, CG).transpose();
  }
}
template <class S>
void grouped_linear_backward(S* dinp, S* dw, const S* dout, const S* inp, const S* w, int R, int C, int G,
                             bool fast = false) {
  if (G == 1 && fast) return linear_backward(dinp, dw, static_cast<S*>(nullptr), dout, inp, w, R, C, C, fast);
  const int CG = C / G;
  using Str = Eigen::OuterStride<>;
  for (int l = 0; l < G; ++l) {
    Eigen::Map<const MatR<S>, 0, Str> X(inp + l * CG, R, CG, Str(C)), dY(dout + l * CG, R, CG, Str(C));
    Eigen::Map<MatR<S>, 0, Str> dX(dinp + l * CG, R, CG, Str(C));
    dX.noalias() += dY * CMapR<S>(w + std::int64_t(l) * CG * CG, CG, CG);
    MapR<S>(dw + std::int64_t(l) * CG * CG, CG, CG).noalias() += dY.transpose() * X;
  }
}

// ---- local self-attention on the grid (the paper's Eq. 7; tag-cat's AttentionConvFull) ---------------
// For cell (i, j), head m (channels [m DH, (m+1) DH)), neighbour (u, v) in [0, K)^2 at
// (a, b) = (i + u - P, j + v - P):
//   score_m(uv) = (q_ij + s)_m . (k_ab + r_uv)_m ,  A_m = softmax_uv(score_m) ,  y_ij,m = sum_uv A_m(uv) v_ab,m
// with q, k, v (H W, C) the projections, s (C) the query encoding (q_emb), r (KK, C) the relative
// encodings (rel_emb, r_uv = r_{a-i, b-j}). No 1/sqrt(DH) scale (neither Eq. 7 nor the authors' code
// has one). A neighbour outside the grid has k_ab = v_ab = 0 but is not masked: its score is
// (q + s).r_uv and it adds nothing to y -- the authors' code pads the grid with zeros before the
// bias-free projections (attention.py, AttentionConvFull.forward: F.pad then the 1x1 convolutions), so
// the softmax always runs over the KK positions of the window. att (H W, KK, NH) post-softmax. The
// per-cell work runs channel-wise (vectorized; DH = 1 in the paper's models, one head per channel).
namespace detail {
// (a, b) of neighbour uv of cell (i, j), and whether it is inside the grid.
inline bool neighbour(int i, int j, int uv, int K, int H, int W, std::int64_t& cell) {
  const int a = i + uv / K - K / 2, b = j + uv % K - K / 2;
  cell = std::int64_t(a) * W + b;
  return a >= 0 && a < H && b >= 0 && b < W;
}
// per-channel products x (C) summed per head into out (NH): out_m = sum_{c in m} x_c
template <class S>
void head_sums(S* out, const S* x, int C, int DH) {
  if (DH == 1) {
    std::copy_n(x, C, out);
    return;
  }
  for (int m = 0; m < C / DH; ++m) {
    S s = 0;
    for (int c = m * DH; c < (m + 1) * DH; ++c) s += x[c];
    out[m] = s;
  }
}
// a head's value per channel: out_c = x_{c / DH}
template <class S>
void head_spread(S* out, const S* x, int C, int DH) {
  if (DH == 1) {
    std::copy_n(x, C, out);
    return;
  }
  for (int c = 0; c < C; ++c) out[c] = x[c / DH];
}
}  // namespace detail

// fast: on the fast device's kernels where they run (float, one channel per head); the double twin and
// the other shapes ignore it.
template <class S>
void local_attention_forward(S* out, S* att, const S* q, const S* k, const S* v, const S* rel, const S* qe, int H,
                             int W, int C, int NH, int K, bool fast = false) {
  if constexpr (std::is_same_v<S, float>) {
    if (fast && fast_local_attention_runs(C, NH, K))
      return fast_local_attention_forward(out, att, q, k, v, rel, qe, H, W, C, K);
  }
  const int DH = C / NH, KK = K * K;
  using Arr = Eigen::Array<S, Eigen::Dynamic, 1>;
  using ArrR = Eigen::Array<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Arr qs(C), prod(C), pc(C);
  for (int i = 0; i < H; ++i)
    for (int j = 0; j < W; ++j) {
      const std::int64_t cell = std::int64_t(i) * W + j;
      qs = Eigen::Map<const Arr>(q + cell * C, C) + Eigen::Map<const Arr>(qe, C);
      Eigen::Map<ArrR> A(att + cell * KK * NH, KK, NH);
      for (int uv = 0; uv < KK; ++uv) {
        std::int64_t nb;
        const bool in = detail::neighbour(i, j, uv, K, H, W, nb);
        if (in)
          prod = qs * (Eigen::Map<const Arr>(k + nb * C, C) + Eigen::Map<const Arr>(rel + std::int64_t(uv) * C, C));
        else
          prod = qs * Eigen::Map<const Arr>(rel + std::int64_t(uv) * C, C);
        detail::head_sums(&A(uv, 0), prod.data(), C, DH);
      }
      // softmax over the window, per head
      const Eigen::Array<S, 1, Eigen::Dynamic> mx = A.colwise().maxCoeff();
      A.rowwise() -= mx;
      A = A.exp();
      const Eigen::Array<S, 1, Eigen::Dynamic> sum = A.colwise().sum();
      A.rowwise() /= sum;
      Eigen::Map<Arr> y(out + cell * C, C);
      y.setZero();
      for (int uv = 0; uv < KK; ++uv) {
        std::int64_t nb;
        if (!detail::neighbour(i, j, uv, K, H, W, nb)) continue;
        detail::head_spread(pc.data(), &A(uv, 0), C, DH);
        y += pc * Eigen::Map<const Arr>(v + nb * C, C);
      }
    }
}
// Reverse, per cell and head, with A the saved weights and g = dy_ij:
//   dA(uv) = g_m . v_ab,m ;  dscore = A (dA - sum A dA)
//   d(q_ij + s)_m += sum_uv dscore(uv) (k_ab + r_uv)_m  -> dq_ij and ds
//   dk_ab,m += dscore(uv) (q_ij + s)_m [inside] ;  dr_uv,m += dscore(uv) (q_ij + s)_m ;  dv_ab,m += A(uv) g_m [inside]
template <class S>
void local_attention_backward(S* dq, S* dk, S* dv, S* drel, S* dqe, const S* dout, const S* att, const S* q,
                              const S* k, const S* v, const S* rel, const S* qe, int H, int W, int C, int NH, int K,
                              bool fast = false) {
  if constexpr (std::is_same_v<S, float>) {
    if (fast && fast_local_attention_runs(C, NH, K))
      return fast_local_attention_backward(dq, dk, dv, drel, dqe, dout, att, q, k, v, rel, qe, H, W, C, K);
  }
  const int DH = C / NH, KK = K * K;
  using Arr = Eigen::Array<S, Eigen::Dynamic, 1>;
  using ArrR = Eigen::Array<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Arr qs(C), dqs(C), pc(C), prod(C);
  ArrR dA(KK, NH);
  for (int i = 0; i < H; ++i)
    for (int j = 0; j < W; ++j) {
      const std::int64_t cell = std::int64_t(i) * W + j;
      Eigen::Map<const ArrR> A(att + cell * KK * NH, KK, NH);
      Eigen::Map<const Arr> g(dout + cell * C, C);
      qs = Eigen::Map<const Arr>(q + cell * C, C) + Eigen::Map<const Arr>(qe, C);
      dqs.setZero();
      for (int uv = 0; uv < KK; ++uv) {  // dA and dv
        std::int64_t nb;
        if (!detail::neighbour(i, j, uv, K, H, W, nb)) {
          dA.row(uv).setZero();
          continue;
        }
        prod = g * Eigen::Map<const Arr>(v + nb * C, C);
        detail::head_sums(&dA(uv, 0), prod.data(), C, DH);
        detail::head_spread(pc.data(), A.data() + std::int64_t(uv) * NH, C, DH);
        Eigen::Map<Arr>(dv + nb * C, C) += pc * g;
      }
      // softmax reverse: dscore = A (dA - sum_uv A dA), into dA
      const Eigen::Array<S, 1, Eigen::Dynamic> dot = (A * dA).colwise().sum();
      dA = A * (dA.rowwise() - dot);
      for (int uv = 0; uv < KK; ++uv) {
        std::int64_t nb;
        const bool in = detail::neighbour(i, j, uv, K, H, W, nb);
        detail::head_spread(pc.data(), &dA(uv, 0), C, DH);
        Eigen::Map<const Arr> r(rel + std::int64_t(uv) * C, C);
        dqs += in ? (pc * (Eigen::Map<const Arr>(k + nb * C, C) + r)).eval() : (pc * r).eval();
        prod = pc * qs;
        Eigen::Map<Arr>(drel + std::int64_t(uv) * C, C) += prod;
        if (in) Eigen::Map<Arr>(dk + nb * C, C) += prod;
      }
      Eigen::Map<Arr>(dq + cell * C, C) += dqs;
      Eigen::Map<Arr>(dqe, C) += dqs;
    }
}

// ---- the context attention with the grid's ALiBi (paper Eq. 13-14; torch.nn.MultiheadAttention) -------
// SC context rows attend to the T = H W grid cells (flattened row-major, F_n), NH heads of DH = C / NH:
//   score_h(i, t) = q_i,h . k_t,h / sqrt(DH) - slope_h row(t) ,  A_h = softmax_t ,  o_i,h = sum_t A_h(i, t) v_t,h
// row(t) = t / W, the grid row of cell t (0 for the top row, so M = 0, -1, -2, ... down the grid as the
// paper adapts ALiBi). Slopes: alibi_slopes (Press et al.'s geometric sequence, as the authors' code).
// q (SC, C), k, v (T, C) already projected; att (NH, SC, T). slopes null: no bias (use_posenc false).
inline std::vector<double> alibi_slopes(int n) {
  // ALiBi's get_slopes (Press et al.; tag-cat, pondernet.py, ALiBiPositionalEmbedding): for a power of
  // two n, start = 2^(-8/n) and slope_h = start^(h+1); otherwise the slopes of the largest power of two
  // below n, then every other slope of twice that, until n.
  auto pow2 = [](int m) {
    std::vector<double> s;
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(double(m)) - 3)));
    for (int i = 0; i < m; ++i) s.push_back(start * std::pow(start, i));
    return s;
  };
  const double l2 = std::log2(double(n));
  if (l2 == std::floor(l2)) return pow2(n);
  const int closest = 1 << int(std::floor(l2));
  std::vector<double> s = pow2(closest), t = alibi_slopes(2 * closest);
  for (int i = 0; i < n - closest; ++i) s.push_back(t[std::size_t(2 * i)]);
  return s;
}
template <class S>
void context_attention_forward(S* out, S* att, const S* q, const S* k, const S* v, const S* slopes, int SC, int T,
                               int W, int C, int NH) {
  const int DH = C / NH;
  const S scale = S(1) / std::sqrt(S(DH));
  for (int h = 0; h < NH; ++h) {
    MapR<S> A(att + std::int64_t(h) * SC * T, SC, T);
    using Str = Eigen::OuterStride<>;
    Eigen::Map<const MatR<S>, 0, Str> Q(q + h * DH, SC, DH, Str(C)), Kh(k + h * DH, T, DH, Str(C)),
        Vh(v + h * DH, T, DH, Str(C));
    Eigen::Map<MatR<S>, 0, Str> O(out + h * DH, SC, DH, Str(C));
    A.noalias() = Q * Kh.transpose();
    A *= scale;
    if (slopes)
      for (int t = 0; t < T; ++t) A.col(t).array() -= slopes[h] * S(t / W);
    softmax_rows_forward(A.data(), A.data(), SC, T);
    O.noalias() = A * Vh;
  }
}
// Reverse per head: dA = do_h v_h^T ; dv_h += A^T do_h ; dscore = A (dA - rowsum(A dA)) ;
// dq_h += scale dscore k_h ; dk_h += scale dscore^T q_h. (The slopes are constants.) scratch: SC T.
template <class S>
void context_attention_backward(S* dq, S* dk, S* dv, S* scratch, const S* dout, const S* att, const S* q, const S* k,
                                const S* v, int SC, int T, int C, int NH) {
  const int DH = C / NH;
  const S scale = S(1) / std::sqrt(S(DH));
  using Str = Eigen::OuterStride<>;
  for (int h = 0; h < NH; ++h) {
    CMapR<S> A(att + std::int64_t(h) * SC * T, SC, T);
    MapR<S> dA(scratch, SC, T);
    Eigen::Map<const MatR<S>, 0, Str> Q(q + h * DH, SC, DH, Str(C)), Kh(k + h * DH, T, DH, Str(C)),
        Vh(v + h * DH, T, DH, Str(C)), G(dout + h * DH, SC, DH, Str(C));
    Eigen::Map<MatR<S>, 0, Str> dQ(dq + h * DH, SC, DH, Str(C)), dK(dk + h * DH, T, DH, Str(C)),
        dV(dv + h * DH, T, DH, Str(C));
    dV.noalias() += A.transpose() * G;
    dA.noalias() = G * Vh.transpose();
    for (int i = 0; i < SC; ++i) {
      const S dot = A.row(i).dot(dA.row(i));
      dA.row(i) = (A.row(i).array() * (dA.row(i).array() - dot)).matrix() * scale;
    }
    dQ.noalias() += dA * Kh;
    dK.noalias() += dA.transpose() * Q;
  }
}

// ---- PonderNet's halting distribution (paper Eq. 9-10; tag-cat pondernet.py, try_halting_and_loss) ----
// From the conditional halting probabilities lambda_0..lambda_N of a sample that halted at step N:
//   p_n = lambda_n prod_{i<n} (1 - lambda_i)   (n < N) ,   p_N = 1 - sum_{n<N} p_n
// (the authors add the residual 1 - sum to the step at which they stop; in exact arithmetic p_N =
// prod_{i<N} (1 - lambda_i)). p (N + 1).
template <class S>
void halting_distribution_forward(S* p, const S* lambda, int N) {
  S q = 1, sum = 0;
  for (int n = 0; n < N; ++n) {
    p[n] = lambda[n] * q;
    q *= S(1) - lambda[n];
    sum += p[n];
  }
  p[N] = S(1) - sum;
}
// Reverse: p_N = 1 - sum gives dp_n' = dp_n - dp_N (n < N); then with q_n = prod_{i<n} (1 - lambda_i),
// p_n = lambda_n q_n: dlambda_n += dp_n' q_n, dq_n = dp_n' lambda_n + dq_{n+1} (1 - lambda_n),
// dlambda_n -= dq_{n+1} q_n (q_{n+1} = q_n (1 - lambda_n)), walked from n = N - 1 down. lambda_N gets no
// gradient (p_N does not read it). dlambda (N + 1) accumulates.
template <class S>
void halting_distribution_backward(S* dlambda, const S* dp, const S* lambda, int N) {
  std::vector<S> q(std::size_t(N) + 1);
  q[0] = 1;
  for (int n = 0; n < N; ++n) q[std::size_t(n) + 1] = q[std::size_t(n)] * (S(1) - lambda[n]);
  S dq_next = 0;  // dL/dq_{n+1}
  for (int n = N - 1; n >= 0; --n) {
    const S g = dp[n] - dp[N];
    dlambda[n] += g * q[std::size_t(n)] - dq_next * q[std::size_t(n)];
    dq_next = g * lambda[n] + dq_next * (S(1) - lambda[n]);
  }
}

// ---- the halting regularizers R(p) of one sample (paper Eq. 11-12; tag-cat losses.py) ----------------
// Explore-Reinforce (closed_form_explore_reinforce):  R = sum_n p_n [(1 - a) log(p_n + tol) + a log(1 + n)]
//   = -(1 - a) H(p) + a E[log(1 + N_h)] up to the tol inside the log; a = the sample's accuracy.
// KL to a geometric prior of parameter lp (closed_form_kldiv_pondernet):
//   R = sum_n p_n [log(p_n + tol) - n log(1 - lp + tol)] - log(lp + tol)
// tol = 1e-6 (theirs). Returns R; dp (N + 1) accumulates scale dR/dp_n:
//   ER: (1 - a) (log(p_n + tol) + p_n / (p_n + tol)) + a log(1 + n)
//   KL: log(p_n + tol) + p_n / (p_n + tol) - n log(1 - lp + tol)
enum class Regularizer { er, kl };
inline constexpr double kRegTol = 1e-6;
template <class S>
S halting_regularizer(S* dp, const S* p, int N, Regularizer kind, S a, S lp, S scale) {
  const S tol = S(kRegTol);
  S R = kind == Regularizer::kl ? -std::log(lp + tol) : S(0);
  for (int n = 0; n <= N; ++n) {
    const S lg = std::log(p[n] + tol), d = lg + p[n] / (p[n] + tol);
    if (kind == Regularizer::er) {
      R += p[n] * ((S(1) - a) * lg + a * std::log(S(1 + n)));
      if (dp) dp[n] += scale * ((S(1) - a) * d + a * std::log(S(1 + n)));
    } else {
      const S gl = S(n) * std::log(S(1) - lp + tol);
      R += p[n] * (lg - gl);
      if (dp) dp[n] += scale * (d - gl);
    }
  }
  return R;
}

}  // namespace manyadd::learn::grid
