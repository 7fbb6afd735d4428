// Layers of the learned transformer as forward/backward free-function pairs (llm.c style): outputs
// first, gradients prefixed d, values saved by forward passed back to backward explicitly. Templated
// on the scalar so the same code runs in fp32 (training) and double (finite-difference checks).
// Every backward *accumulates* (+=) into its parameter gradients and into dinp, so callers zero once.
//
// Shape legend (model.hpp runs these on a batch of B sequences of T rows each, R = B T rows):
//   R  rows (every row-wise layer takes R rows; a single sequence is R = T)
//   T  rows of one sequence (attention runs per sequence)          Tk  key rows (attention_forward)
//   C  d_model      V  vocabulary (14)      NH heads      HS d_head      F  d_ff (GEGLU hidden width)
// All activations are row-major (R, ...) buffers; a weight W of an nn.Linear(C -> OC) is (OC, C).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <Eigen/Core>

#include "manyadd/learn/decoder/fire_pairs.hpp"

namespace manyadd::learn {

template <class S>
using MatR = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using MapR = Eigen::Map<MatR<S>>;
template <class S>
using CMapR = Eigen::Map<const MatR<S>>;
template <class S>
using MapV = Eigen::Map<Eigen::Matrix<S, Eigen::Dynamic, 1>>;
template <class S>
using CMapV = Eigen::Map<const Eigen::Matrix<S, Eigen::Dynamic, 1>>;

// ---- embedding: token table plus one position table per level, summed ----------------------------
// out (R, C) = wte[tok[t]] + sum_{lv < L} wpe[lv][pos[lv][t]]
template <class S>
void embedding_forward(S* out, const std::uint8_t* tok, const std::int32_t* const* pos, int L, const S* wte,
                       const S* const* wpe, int R, int C) {
  for (int t = 0; t < R; ++t) {
    S* o = out + std::int64_t(t) * C;
    const S* e = wte + std::int64_t(tok[t]) * C;
    for (int c = 0; c < C; ++c) o[c] = e[c];
    for (int lv = 0; lv < L; ++lv) {
      const S* p = wpe[lv] + std::int64_t(pos[lv][t]) * C;
      for (int c = 0; c < C; ++c) o[c] += p[c];
    }
  }
}
// d of the sum above: each row of dout flows to the rows it was read from.
template <class S>
void embedding_backward(S* dwte, S* const* dwpe, const S* dout, const std::uint8_t* tok,
                        const std::int32_t* const* pos, int L, int R, int C) {
  for (int t = 0; t < R; ++t) {
    const S* g = dout + std::int64_t(t) * C;
    S* e = dwte + std::int64_t(tok[t]) * C;
    for (int c = 0; c < C; ++c) e[c] += g[c];
    for (int lv = 0; lv < L; ++lv) {
      if (!dwpe[lv]) continue;  // a frozen table (model.pos_codes): no gradient
      S* p = dwpe[lv] + std::int64_t(pos[lv][t]) * C;
      for (int c = 0; c < C; ++c) p[c] += g[c];
    }
  }
}

// ---- RMSNorm: out = w * x * rstd, rstd = (mean(x^2) + eps)^(-1/2) ---------------------------------
template <class S>
void rmsnorm_forward(S* out, S* rstd, const S* inp, const S* w, int R, int C, S eps) {
  for (int t = 0; t < R; ++t) {
    const S* x = inp + std::int64_t(t) * C;
    S ss = 0;
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const S r = S(1) / std::sqrt(ss / S(C) + eps);
    rstd[t] = r;
    S* o = out + std::int64_t(t) * C;
    for (int c = 0; c < C; ++c) o[c] = w[c] * x[c] * r;
  }
}
// From y_c = w_c x_c r with dr/dx_j = -r^3 x_j / C:
//   dx_j = w_j g_j r - x_j r^3 / C * sum_c g_c w_c x_c ;  dw_c += g_c x_c r
template <class S>
void rmsnorm_backward(S* dinp, S* dw, const S* dout, const S* inp, const S* w, const S* rstd, int R, int C) {
  for (int t = 0; t < R; ++t) {
    const S* x = inp + std::int64_t(t) * C;
    const S* g = dout + std::int64_t(t) * C;
    S* dx = dinp + std::int64_t(t) * C;
    const S r = rstd[t];
    S dot = 0;
    for (int c = 0; c < C; ++c) dot += g[c] * w[c] * x[c];
    const S k = dot * r * r * r / S(C);
    for (int c = 0; c < C; ++c) {
      dx[c] += w[c] * g[c] * r - x[c] * k;
      dw[c] += g[c] * x[c] * r;
    }
  }
}

// ---- LayerNorm: out = w * (x - mean) * rstd + b, rstd = (var + eps)^(-1/2), var = mean((x - mean)^2)
// (the biased variance, as torch.nn.LayerNorm). mean and rstd (R) are saved for the backward.
template <class S>
void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* w, const S* b, int R, int C, S eps) {
  for (int t = 0; t < R; ++t) {
    const S* x = inp + std::int64_t(t) * C;
    S m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= S(C);
    S var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const S r = S(1) / std::sqrt(var / S(C) + eps);
    mean[t] = m, rstd[t] = r;
    S* o = out + std::int64_t(t) * C;
    for (int c = 0; c < C; ++c) o[c] = w[c] * (x[c] - m) * r + b[c];
  }
}
// With xhat_c = (x_c - mean) r and gw_c = g_c w_c (d mean/dx_j = 1/C, dr/dx_j = -r^3 (x_j - mean)/C):
//   dx_j = r (gw_j - mean_c(gw_c) - xhat_j mean_c(gw_c xhat_c)) ;  dw_c += g_c xhat_c ;  db_c += g_c
template <class S>
void layernorm_backward(S* dinp, S* dw, S* db, const S* dout, const S* inp, const S* w, const S* mean, const S* rstd,
                        int R, int C) {
  for (int t = 0; t < R; ++t) {
    const S* x = inp + std::int64_t(t) * C;
    const S* g = dout + std::int64_t(t) * C;
    S* dx = dinp + std::int64_t(t) * C;
    const S m = mean[t], r = rstd[t];
    S sg = 0, sgx = 0;
    for (int c = 0; c < C; ++c) {
      const S xh = (x[c] - m) * r;
      sg += g[c] * w[c];
      sgx += g[c] * w[c] * xh;
    }
    sg /= S(C), sgx /= S(C);
    for (int c = 0; c < C; ++c) {
      const S xh = (x[c] - m) * r;
      dx[c] += r * (g[c] * w[c] - sg - xh * sgx);
      dw[c] += g[c] * xh;
      db[c] += g[c];
    }
  }
}

// ---- linear without bias: out (R, OC) = inp (R, C) @ w^T, w (OC, C) ------------------------------
template <class S>
void matmul_forward(S* out, const S* inp, const S* w, int R, int C, int OC) {
  MapR<S>(out, R, OC).noalias() = CMapR<S>(inp, R, C) * CMapR<S>(w, OC, C).transpose();
}
// dinp (R, C) += dout @ w ; dw (OC, C) += dout^T @ inp
template <class S>
void matmul_backward(S* dinp, S* dw, const S* dout, const S* inp, const S* w, int R, int C, int OC) {
  CMapR<S> g(dout, R, OC);
  MapR<S>(dinp, R, C).noalias() += g * CMapR<S>(w, OC, C);
  MapR<S>(dw, OC, C).noalias() += g.transpose() * CMapR<S>(inp, R, C);
}

// ---- causal multi-head self-attention (no biases) ------------------------------------------------
// One sequence. q (Tq, NH*HS) are the queries of its last Tq positions, k, v (Tk, NH*HS) the keys and
// values of all its Tk positions (Tq <= Tk), head h in columns [h HS, (h+1) HS): query row i is
// position Tk - Tq + i and sees keys 0..Tk - Tq + i. Training runs Tq = Tk = T (att (NH, T, T), zero
// above the diagonal); decoding with a key/value cache runs the new row(s) against every cached key.
// att (NH, Tq, Tk) post-softmax, zero on masked keys; out (Tq, NH*HS) = per head att_h @ v_h. Scores
// are q.k times `scale`: 1/sqrt(HS) (attention_scale(HS, true), the overload without it) or 1 (T5),
// plus bias when given (FIRE's relative-position bias, below; read at j <= past + i only): entry (h, i, j)
// at bias[(h bias_rows + i) bias_cols + j], i.e. the top-left (Tq, Tk) corner of an (NH, bias_rows,
// bias_cols) array (0: Tq, Tk). FIRE's bias depends on the token indices alone, so every sequence of a
// varlen batch reads its block from the corner of the one bias of the batch's longest sequence.
template <class S>
S attention_scale(int HS, bool inv_sqrt_dhead) {
  return inv_sqrt_dhead ? S(1) / std::sqrt(S(HS)) : S(1);
}
// x rounded to the nearest bf16 number (8 significant bits, ties to even; subnormals 2^-133 apart;
// overflow to infinity), as an S: bitwise core's float_to_bf16 for a float, the exact rounding for a
// double (so that learn's bf16 attention in double is the exact arithmetic with the same rounding points).
template <class S>
S round_to_bf16(S x) {
  if (!(std::abs(x) <= std::numeric_limits<S>::max()) || x == S(0)) return x;  // 0, inf, NaN
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e): bf16 spacing 2^(e-8)
  const int qe = std::max(e - 8, -133);
  const S r = std::ldexp(std::nearbyint(std::ldexp(x, -qe)), qe);  // exact scalings; nearbyint: ties to even
  return std::abs(r) >= S(0x1p128) ? std::copysign(std::numeric_limits<S>::infinity(), x) : r;
}
// One head's rows of the bf16 forward (attention_forward with bf16 = true): P holds the raw scores on
// entry and the normalized weights on exit; O's head columns receive (sum_j bf16(w_j) v_j) / l. bh: the
// head's bias rows (bias_cols apart) or null.
template <class S>
void attention_rows_bf16(MapR<S>& O, MapR<S>& P, const CMapR<S>& Vv, int h, int HS, int past, S scale, const S* bh,
                         int bias_cols) {
  const S c2 = S(double(scale) * 1.4426950408889634074);  // log2(e) folded into the scale
  const S l2e = S(1.4426950408889634074);                  // the bias's factor to base 2
  const int Tq = int(P.rows()), Tk = int(P.cols());
  Eigen::Matrix<S, 1, Eigen::Dynamic> w(Tk);
  for (int i = 0; i < Tq; ++i) {
    const int last = past + i;
    S mz = -std::numeric_limits<S>::infinity();
    for (int j = 0; j <= last; ++j) {
      const S z = P(i, j) * c2;
      P(i, j) = bh ? z + bh[std::int64_t(i) * bias_cols + j] * l2e : z;
      mz = std::max(mz, P(i, j));
    }
    const S M = std::ceil(mz);
    S l = 0;
    for (int j = 0; j <= last; ++j) {
      const S e = std::exp2(P(i, j) - M);
      P(i, j) = e;
      l += e;
      w(j) = round_to_bf16(e);
    }
    O.row(i).segment(h * HS, HS) = (w.head(last + 1) * Vv.block(0, h * HS, last + 1, HS)) / l;
    for (int j = 0; j <= last; ++j) P(i, j) /= l;
    for (int j = last + 1; j < Tk; ++j) P(i, j) = 0;
  }
}
//
// bf16 = true: the rounding points of bf16 training (the CPU twin of the tensor-core flash kernel,
// kernels/src/flash_tc.cuh, and the rounding points of FlashAttention-2, which PyTorch's fused attention
// runs under autocast): the scores go to base 2, z = s c2 with c2 = scale log2(e) rounded to S; each row's
// weights w_j = 2^(z_j - M), M = ceil(max_j z_j) an integer, are rounded to bf16 before they multiply v,
// and divided by the sum l of the unrounded weights: out_i = (sum_j bf16(w_j) v_j) / l. Because M is an
// integer, bf16(w_j) 2^M does not depend on which integer the kernel's online max held when it rounded
// (rounding commutes with scaling by powers of two), so the kernel rounds the same numbers. att holds the
// normalized weights w_j / l unrounded (the backward rounds them where it multiplies by them). A bias b
// (FIRE's, fp32) enters in base 2 too: z = fl(s c2) + fl(b fl(log2 e)), each product rounded on its own
// and then their sum (the kernels do the same operations).
template <class S>
void attention_forward(S* out, S* att, const S* q, const S* k, const S* v, int Tq, int Tk, int NH, int HS, S scale,
                       const S* bias = nullptr, int bias_rows = 0, int bias_cols = 0, bool bf16 = false) {
  const int D = NH * HS, past = Tk - Tq;
  if (bias_rows == 0) bias_rows = Tq, bias_cols = Tk;
  CMapR<S> Q(q, Tq, D), K(k, Tk, D), Vv(v, Tk, D);
  MapR<S> O(out, Tq, D);
  for (int h = 0; h < NH; ++h) {
    MapR<S> P(att + std::int64_t(h) * Tq * Tk, Tq, Tk);
    P.noalias() = Q.middleCols(h * HS, HS) * K.middleCols(h * HS, HS).transpose();
    const S* bh = bias ? bias + std::int64_t(h) * bias_rows * bias_cols : nullptr;
    if (bf16) {
      attention_rows_bf16(O, P, Vv, h, HS, past, scale, bh, bias_cols);
      continue;
    }
    for (int i = 0; i < Tq; ++i) {
      const int last = past + i;
      S mx = -std::numeric_limits<S>::infinity();
      for (int j = 0; j <= last; ++j) {
        P(i, j) = P(i, j) * scale + (bh ? bh[std::int64_t(i) * bias_cols + j] : S(0));
        mx = std::max(mx, P(i, j));
      }
      S sum = 0;
      for (int j = 0; j <= last; ++j) {
        const S e = std::exp(P(i, j) - mx);
        P(i, j) = e;
        sum += e;
      }
      const S inv = S(1) / sum;
      for (int j = 0; j <= last; ++j) P(i, j) *= inv;
      for (int j = last + 1; j < Tk; ++j) P(i, j) = 0;
    }
    O.middleCols(h * HS, HS).noalias() = P * Vv.middleCols(h * HS, HS);
  }
}
// Reverse of the forward with Tq = Tk = T (training), per head, with P = att_h and S = scaled scores
// plus bias:
//   out_h = P v_h                 -> dP = dout_h v_h^T ; dv_h += P^T dout_h
//   P = softmax_row(S) (causal)   -> dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij') ; dbias_h += dS (if given)
//   S = scale q_h k_h^T + bias_h  -> dq_h += scale dS k_h ; dk_h += scale dS^T q_h
// scratch: (T, T) workspace; dbias is accumulated on the top-left (T, T) corner of an (NH, bias_T,
// bias_T) array (0: T), below the diagonal (the forward's bias layout).
// out_bf16 set: the bf16 rounding points (FlashAttention-2's; the twin of kernels/src/flash_tc.cuh):
// dv_h += bf16(P)^T dout_h; the row term is D_i = dout_i . out_i from the forward's output as rounded to
// bf16 (out_bf16, (T, NH HS)), not sum_j P dP; dS = bf16(P (dP - D)) unscaled, then dq_h += scale (dS k_h),
// dk_h += scale (dS^T q_h); dbias_h += P (dP - D) unrounded (the bias is fp32 and no product reads its
// gradient; the kernel holds the same fp32 value before it rounds dS).
// ent_w != 0 (fp32/double; train.attn_entropy): plus the gradient of ent_w sum_{i: ent_rows[i] >= 0} H_i per
// head, H_i = -sum_j P_ij ln P_ij: dH_i/dP_ij = -(ln P_ij + 1), and the constant -1 drops out of dS (the row's
// weights sum to 1), so dP_ij -= ent_w ln P_ij before dS (nothing where P_ij = 0: a masked or underflowed
// key, whose dS is P_ij (...) = 0 either way).
// dp_add (NH, T, T; fp32/double): added to dP = dout_h v_h^T before everything else (rel_value's term,
// coupled_rel_value_backward).
template <class S>
void attention_backward(S* dq, S* dk, S* dv, S* scratch, const S* dout, const S* att, const S* q, const S* k,
                        const S* v, int T, int NH, int HS, S scale, S* dbias = nullptr, int bias_T = 0,
                        const S* out_bf16 = nullptr, S ent_w = S(0), const std::int32_t* ent_rows = nullptr,
                        const S* dp_add = nullptr) {
  const int D = NH * HS;
  if (bias_T == 0) bias_T = T;
  CMapR<S> Q(q, T, D), K(k, T, D), Vv(v, T, D), G(dout, T, D);
  MapR<S> dQ(dq, T, D), dK(dk, T, D), dV(dv, T, D);
  MapR<S> dP(scratch, T, T);
  if (out_bf16 && dp_add) throw std::logic_error("attention_backward: dp_add (rel_value) is fp32 only");
  if (out_bf16) {
    CMapR<S> O(out_bf16, T, D);
    MatR<S> Pr(T, T);
    for (int h = 0; h < NH; ++h) {
      CMapR<S> P(att + std::int64_t(h) * T * T, T, T);
      Pr = P.unaryExpr([](S x) { return round_to_bf16(x); });
      dV.middleCols(h * HS, HS).noalias() += Pr.transpose() * G.middleCols(h * HS, HS);
      dP.noalias() = G.middleCols(h * HS, HS) * Vv.middleCols(h * HS, HS).transpose();
      for (int i = 0; i < T; ++i) {
        S Di = 0;
        for (int c = 0; c < HS; ++c) Di += G(i, h * HS + c) * O(i, h * HS + c);
        S* dbi = dbias ? dbias + (std::int64_t(h) * bias_T + i) * bias_T : nullptr;
        for (int j = 0; j <= i; ++j) {
          const S x = P(i, j) * (dP(i, j) - Di);
          if (dbi) dbi[j] += x;
          dP(i, j) = round_to_bf16(x);
        }
        for (int j = i + 1; j < T; ++j) dP(i, j) = 0;
      }
      dQ.middleCols(h * HS, HS).noalias() += scale * (dP * K.middleCols(h * HS, HS));
      dK.middleCols(h * HS, HS).noalias() += scale * (dP.transpose() * Q.middleCols(h * HS, HS));
    }
    return;
  }
  for (int h = 0; h < NH; ++h) {
    CMapR<S> P(att + std::int64_t(h) * T * T, T, T);
    dV.middleCols(h * HS, HS).noalias() += P.transpose() * G.middleCols(h * HS, HS);
    dP.noalias() = G.middleCols(h * HS, HS) * Vv.middleCols(h * HS, HS).transpose();
    if (dp_add) dP += CMapR<S>(dp_add + std::int64_t(h) * T * T, T, T);
    S* db = dbias ? dbias + std::int64_t(h) * bias_T * bias_T : nullptr;
    for (int i = 0; i < T; ++i) {
      if (ent_w != S(0) && ent_rows[i] >= 0)
        for (int j = 0; j <= i; ++j)
          if (P(i, j) > S(0)) dP(i, j) -= ent_w * std::log(P(i, j));
      S dot = 0;
      for (int j = 0; j <= i; ++j) dot += P(i, j) * dP(i, j);
      for (int j = 0; j <= i; ++j) {
        const S diff = dP(i, j) - dot;
        if (db) db[std::int64_t(i) * bias_T + j] += P(i, j) * diff;
        dP(i, j) = scale * P(i, j) * diff;  // in this order: the trainer's numbers stay bit for bit
      }
      for (int j = i + 1; j < T; ++j) dP(i, j) = 0;
    }
    dQ.middleCols(h * HS, HS).noalias() += dP * K.middleCols(h * HS, HS);
    dK.middleCols(h * HS, HS).noalias() += dP.transpose() * Q.middleCols(h * HS, HS);
  }
}

// The 1/sqrt(HS) forms (this project's default scale).
template <class S>
void attention_forward(S* out, S* att, const S* q, const S* k, const S* v, int Tq, int Tk, int NH, int HS) {
  attention_forward(out, att, q, k, v, Tq, Tk, NH, HS, attention_scale<S>(HS, true));
}
template <class S>
void attention_backward(S* dq, S* dk, S* dv, S* scratch, const S* dout, const S* att, const S* q, const S* k,
                        const S* v, int T, int NH, int HS) {
  attention_backward(dq, dk, dv, scratch, dout, att, q, k, v, T, NH, HS, attention_scale<S>(HS, true));
}

// ---- coupled_rel: the coupling's position IDs as a relative score bias ------------------------------
// One sequence, one layer: bias (NH, T, Tk), row i = the query at position past + i, column j = the key
// at position j <= past + i (columns after the query are left 0: the causal mask drops them):
//   bias[h, i, j] = sum over levels lv of g[h, lv, d + W]   where d = id_lv(key) - id_lv(query), |d| <= W
// and nothing for a level where either ID is 0 (BOS, unused slots) or |d| > W. g is the layer's (NH, L,
// nb) gains, nb = 2W + 1, or 2W + 2 with far: the last gain for every |d| > W. ids[lv][t] is the ID of query row t; with past > 0 (decoding one sequence against its
// cache), ids[lv][-past .. -1] are the cached keys' IDs (the caller passes pointers into the whole
// sequence's IDs). The bias is a function of ID differences alone: a pair of IDs never seen in training
// gets what every pair at its difference gets, and every difference beyond W gets 0 (far: one gain).
inline int coupled_rel_bucket(std::int32_t query_id, std::int32_t key_id, int W, bool far) {
  if (query_id <= 0 || key_id <= 0) return -1;
  const std::int64_t d = std::int64_t(key_id) - query_id;
  return d < -W || d > W ? (far ? 2 * W + 1 : -1) : int(d + W);
}
// rel_far_norm: the far gain of query row i and level lv is g[h, lv, 2W + 1] - ln N, N = the number of keys
// j <= past + i that are far from it on that level (both IDs > 0, |d| > W): the far keys of a level share one
// weight exp(g) between them, so their total attention mass no longer grows with their number. The log in
// double, rounded to S once; the term added as (g - ln N) by every twin (cpu-fast's rel_bias_row).
inline constexpr int kMaxRelLevels = 3;  // levels a relative bias may read (model.hpp's kMaxPosLevels)
inline constexpr int kMaxRelBuckets = 2 * 64 + 2;  // buckets per level: ModelConfig::validate's rel_window <= 64
inline int coupled_rel_far_count(std::int32_t query_id, const std::int32_t* key_ids, int n, int W) {
  int c = 0;
  for (int j = 0; j < n; ++j) c += coupled_rel_bucket(query_id, key_ids[j], W, true) == 2 * W + 1;
  return c;
}
template <class S>
S coupled_rel_far_shift(int far_count) {
  return far_count > 1 ? S(std::log(double(far_count))) : S(0);
}
// rel_far_mask: key j is not attended by query i when they are far apart on some level (both IDs > 0,
// |d| > W): its bias is -inf, so its softmax weight is exactly 0 (exp(-inf) = 0; the query itself and
// BOS are never masked, so every row keeps a finite maximum).
inline bool coupled_rel_masked(const std::int32_t* const* ids, int L, std::int64_t i, std::int64_t j, int W) {
  for (int lv = 0; lv < L; ++lv)
    if (coupled_rel_bucket(ids[lv][i], ids[lv][j], W, true) == 2 * W + 1) return true;
  return false;
}
template <class S>
void coupled_rel_bias(S* bias, const S* g, const std::int32_t* const* ids, int L, int T, int past, int NH, int W,
                      bool far, bool far_norm = false, bool far_mask = false) {
  const int Tk = past + T, nb = 2 * W + 1 + (far ? 1 : 0);
  std::fill(bias, bias + std::int64_t(NH) * T * Tk, S(0));
  for (int i = 0; i < T; ++i) {
    S shift[kMaxRelLevels] = {};
    if (far && far_norm)
      for (int lv = 0; lv < L; ++lv)
        shift[lv] = coupled_rel_far_shift<S>(coupled_rel_far_count(ids[lv][i], ids[lv] - past, past + i + 1, W));
    for (int j = 0; j <= past + i; ++j)
      for (int lv = 0; lv < L; ++lv) {
        const int b = coupled_rel_bucket(ids[lv][i], ids[lv][j - past], W, far);
        if (b < 0) continue;
        for (int h = 0; h < NH; ++h) {
          const S gv = g[(h * L + lv) * nb + b];
          bias[(std::int64_t(h) * T + i) * Tk + j] += b == 2 * W + 1 ? S(gv - shift[lv]) : gv;
        }
      }
    if (far_mask) {
      const std::int32_t* rows[kMaxRelLevels] = {};
      for (int lv = 0; lv < L; ++lv) rows[lv] = ids[lv] - past;  // indexed by key position, query at past + i
      for (int j = 0; j <= past + i; ++j)
        if (coupled_rel_masked(rows, L, past + i, j, W))
          for (int h = 0; h < NH; ++h) bias[(std::int64_t(h) * T + i) * Tk + j] = -std::numeric_limits<S>::infinity();
    }
  }
}
// The backward is the same with and without rel_far_norm: the shift is a constant of the IDs.
// d of the above (past = 0, training): dg[h, lv, b] += sum over (i, j <= i) in bucket b of dbias[h, i, j].
template <class S>
void coupled_rel_bias_backward(S* dg, const S* dbias, const std::int32_t* const* ids, int L, int T, int NH, int W,
                               bool far) {
  const int nb = 2 * W + 1 + (far ? 1 : 0);
  for (int i = 0; i < T; ++i)
    for (int j = 0; j <= i; ++j)
      for (int lv = 0; lv < L; ++lv) {
        const int b = coupled_rel_bucket(ids[lv][i], ids[lv][j], W, far);
        if (b < 0) continue;
        for (int h = 0; h < NH; ++h) dg[(h * L + lv) * nb + b] += dbias[(std::int64_t(h) * T + i) * T + j];
      }
}

// ---- rel_value: a learned value per relative position (model.rel_value) ---------------------------
// Shaw et al. 2018 ("Self-Attention with Relative Position Representations", Eq. 3) on the coupling's ID
// differences: what key j gives query i also carries r[h, lv, b] for each level lv with a bucket b =
// coupled_rel_bucket(id_lv(i), id_lv(j)) >= 0 (the bias's buckets), so
//   out[i, h] = sum_j P[h, i, j] (v[j, h] + sum_lv r[h, lv, b_lv(i, j)])
// and a key's presence at a relative position reaches the query whatever its token. r is the layer's (NH,
// L, nb, HS). Computed through each row's bucket masses M[lv, b] = sum over its keys j in bucket b of
// P[h, i, j] (j ascending; masked keys have P = 0): out[i, h] += M[lv, b] r[h, lv, b] for lv, then b
// ascending, added to the P v already in out (cpu-fast's kernel does the same operations). One sequence:
// att (NH, T, Tk) its weights, ids as coupled_rel_bias's (past > 0: the cached keys at ids[lv][-past ..]).
template <class S>
void coupled_rel_value(S* out, const S* att, const S* r, const std::int32_t* const* ids, int L, int T, int past, int NH,
                       int HS, int W, bool far) {
  const int Tk = past + T, nb = 2 * W + 1 + (far ? 1 : 0), D = NH * HS;
  S M[kMaxRelLevels][kMaxRelBuckets];
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < T; ++i) {
      const S* P = att + (std::int64_t(h) * T + i) * Tk;
      for (int lv = 0; lv < L; ++lv) std::fill(M[lv], M[lv] + nb, S(0));
      for (int j = 0; j <= past + i; ++j)
        for (int lv = 0; lv < L; ++lv) {
          const int b = coupled_rel_bucket(ids[lv][i], ids[lv][j - past], W, far);
          if (b >= 0) M[lv][b] += P[j];
        }
      S* o = out + std::int64_t(i) * D + h * HS;
      for (int lv = 0; lv < L; ++lv)
        for (int b = 0; b < nb; ++b) {
          const S* rv = r + ((std::int64_t(h) * L + lv) * nb + b) * HS;
          for (int c = 0; c < HS; ++c) o[c] += M[lv][b] * rv[c];
        }
    }
}
// Its backward (past = 0, training): dr[h, lv, b] += M[lv, b] dout[i, h] per row, and dP (NH, T, T), written:
// dP[h, i, j] = sum over lv of e[lv, b_lv(i, j)], e[lv, b] = dout[i, h] . r[h, lv, b] (0 above the diagonal),
// the term attention_backward adds to its dout v^T (its dp_add).
template <class S>
void coupled_rel_value_backward(S* dr, S* dP, const S* dout, const S* att, const S* r, const std::int32_t* const* ids,
                                int L, int T, int NH, int HS, int W, bool far) {
  const int nb = 2 * W + 1 + (far ? 1 : 0), D = NH * HS;
  S M[kMaxRelLevels][kMaxRelBuckets], e[kMaxRelLevels][kMaxRelBuckets];
  std::fill(dP, dP + std::int64_t(NH) * T * T, S(0));
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < T; ++i) {
      const S* P = att + (std::int64_t(h) * T + i) * T;
      const S* g = dout + std::int64_t(i) * D + h * HS;
      S* dpi = dP + (std::int64_t(h) * T + i) * T;
      for (int lv = 0; lv < L; ++lv)
        for (int b = 0; b < nb; ++b) {
          const S* rv = r + ((std::int64_t(h) * L + lv) * nb + b) * HS;
          S x = 0;
          for (int c = 0; c < HS; ++c) x += g[c] * rv[c];
          e[lv][b] = x, M[lv][b] = 0;
        }
      for (int j = 0; j <= i; ++j)
        for (int lv = 0; lv < L; ++lv) {
          const int b = coupled_rel_bucket(ids[lv][i], ids[lv][j], W, far);
          if (b < 0) continue;
          M[lv][b] += P[j];
          dpi[j] += e[lv][b];
        }
      for (int lv = 0; lv < L; ++lv)
        for (int b = 0; b < nb; ++b) {
          S* d = dr + ((std::int64_t(h) * L + lv) * nb + b) * HS;
          for (int c = 0; c < HS; ++c) d[c] += M[lv][b] * g[c];
        }
    }
}

// ---- RoPE (Su et al. 2021, "RoFormer", Eq. 34): q and k rotated by their token index --------------
// Row t of one sequence's rows x (T, NH*HS) is position p = past + t (its index within the sequence:
// in a varlen batch each sequence is rotated from its own first row, never by its row in the batch). In
// every head, the pair (x_2k, x_2k+1), k < HS/2, turns by the angle p theta_k, theta_k = base^(-2k/HS):
//   x'_2k = x_2k cos - x_2k+1 sin ;  x'_2k+1 = x_2k sin + x_2k+1 cos
// so q'.k' depends on the two positions through their difference only. Interleaved pairs and the whole
// head rotated, base 10000: the authors' "rotary_new" (position-coupling, positional_embeddings.py:
// FixedRotaryPositionalEmbedding, apply_rotary_pos_emb_new with rotate_every_two; rotary_dim = d_head,
// rotary_base = 10000 in their parity and addition scripts). Angles, cos and sin in double, then S.
// HS must be even (ModelConfig::validate).
template <class S>
void rope_tables(std::vector<S>& cs, std::vector<S>& sn, int past, int T, int HS, double base) {
  const int K = HS / 2;
  cs.resize(std::size_t(T) * std::size_t(K)), sn.resize(std::size_t(T) * std::size_t(K));
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < K; ++k) {
      const double a = double(past + t) * std::pow(base, -2.0 * double(k) / double(HS));
      cs[std::size_t(t) * std::size_t(K) + std::size_t(k)] = S(std::cos(a));
      sn[std::size_t(t) * std::size_t(K) + std::size_t(k)] = S(std::sin(a));
    }
}
// In place on one sequence's rows x (T, NH*HS), row t by the tables' row t (the tables hold at least T
// rows); sign +1 rotates (forward), -1 rotates back (the backward: the rotation is orthogonal, so
// d x = R^T d x' = R(-angle) d x'). Each output is two products rounded on their own and their sum (no
// fused multiply-add): the CUDA kernel (kernels/src/rope_rows.cuh) does the same operations.
template <class S>
void rope_rotate(S* x, const std::vector<S>& cs, const std::vector<S>& sn, int T, int NH, int HS, int sign) {
  const int K = HS / 2;
  for (int t = 0; t < T; ++t) {
    const S* c = cs.data() + std::size_t(t) * std::size_t(K);
    const S* s = sn.data() + std::size_t(t) * std::size_t(K);
    S* row = x + std::int64_t(t) * NH * HS;
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < K; ++k) {
        S* v = row + h * HS + 2 * k;
        const S a = v[0], b2 = v[1], sk = S(sign) * s[k];
        v[0] = a * c[k] - b2 * sk;
        v[1] = a * sk + b2 * c[k];
      }
  }
}

// ---- FIRE (Li et al. 2024, "Functional Interpolation for Relative Positions Improves Long Context
// Transformers", Eq. 5 and Sec. 3.3) as the paper-000 authors' code has it -------------------------
// An attention bias per head, added to every layer's scores (the authors compute it in the first layer
// and pass it on, HuggingFace T5's convention for position biases: custom_t5_decoder_only.py, class FIRE
// in positional_embeddings.py):
//   b_h(i, j) = f(u(i, j))_h ,  u(i, j) = psi(i - j) / (psi(n_i) + eps) ,  psi(x) = log(|c| x + 1)
//   n_i = max(i, L) (threshold max: the FIRE paper's progressive interpolation) or min(i, L) (threshold
//   min: the authors' code, `rel_distance_max.clamp_max_(L_sqrt^2)`, whose comment says max{L, i})
//   L = L_sqrt^2, c and L_sqrt learned (init 0.1 and 16), eps = 1e-6
//   f(u) = W3 relu(W2 relu(W1 u)): Linear(1, H) - ReLU - Linear(H, H) - ReLU - Linear(H, NH), no biases
// for query position i and key j <= i (token indices, BOS 0). u depends on (n_i, i - j) only: rows whose
// n_i is L share their values, so f runs once per distinct pair (FirePairs) and the bias reads them.
// At i = L exactly the gradient goes to i's side (L gets none), as torch's clamp_max.
// u (P) of every pair for c; log1p(|c| x) is psi.
template <class S>
void fire_distances(S* u, const FirePairs& fp, S c) {
  const S ac = std::abs(c);
  for (std::int64_t p = 0; p < fp.pairs(); ++p) {
    const S a = std::log1p(ac * S(fp.dist[std::size_t(p)]));
    const S b = std::log1p(ac * S(fp.norm[std::size_t(fp.group[std::size_t(p)])])) + S(kFireEps);
    u[p] = a / b;
  }
}
// The MLP on the P pairs: h1 = relu(u W1^T) (P, H), h2 = relu(h1 W2^T) (P, H), out = h2 W3^T (P, NH).
// W1 (H, 1), W2 (H, H), W3 (NH, H).
template <class S>
void fire_mlp_forward(S* out, S* h1, S* h2, const S* u, const S* w1, const S* w2, const S* w3, std::int64_t P, int H,
                      int NH) {
  MapR<S> H1(h1, P, H), H2(h2, P, H);
  H1.noalias() = CMapR<S>(u, P, 1) * CMapR<S>(w1, H, 1).transpose();
  H1 = H1.cwiseMax(S(0));
  H2.noalias() = H1 * CMapR<S>(w2, H, H).transpose();
  H2 = H2.cwiseMax(S(0));
  MapR<S>(out, P, NH).noalias() = H2 * CMapR<S>(w3, NH, H).transpose();
}
// Reverse (relu' read from the saved outputs: h > 0); accumulates dW1..dW3 and writes du (P).
// scratch: (P, 2 H).
template <class S>
void fire_mlp_backward(S* du, S* dw1, S* dw2, S* dw3, S* scratch, const S* dout, const S* h1, const S* h2, const S* u,
                       const S* w1, const S* w2, const S* w3, std::int64_t P, int H, int NH) {
  CMapR<S> G(dout, P, NH), H1(h1, P, H), H2(h2, P, H);
  MapR<S> dH2(scratch, P, H), dH1(scratch + P * H, P, H);
  MapR<S>(dw3, NH, H).noalias() += G.transpose() * H2;
  dH2.noalias() = G * CMapR<S>(w3, NH, H);
  dH2 = dH2.cwiseProduct((H2.array() > S(0)).template cast<S>().matrix());
  MapR<S>(dw2, H, H).noalias() += dH2.transpose() * H1;
  dH1.noalias() = dH2 * CMapR<S>(w2, H, H);
  dH1 = dH1.cwiseProduct((H1.array() > S(0)).template cast<S>().matrix());
  MapR<S>(dw1, H, 1).noalias() += dH1.transpose() * CMapR<S>(u, P, 1);
  MapR<S>(du, P, 1).noalias() = dH1 * CMapR<S>(w1, H, 1);
}
// d u -> d c and d L_sqrt (accumulated). With a = psi(d), b = psi(n) + eps, u = a / b:
//   du/dc = sgn(c) (d / (|c| d + 1) / b - a n / ((|c| n + 1) b^2))
//   du/dL_sqrt = -a |c| / ((|c| n + 1) b^2) 2 L_sqrt   where n = L (on_L), else 0
template <class S>
void fire_distances_backward(S* dc, S* dLs, const S* du, const FirePairs& fp, S c, S L_sqrt) {
  const S ac = std::abs(c), sg = c > 0 ? S(1) : c < 0 ? S(-1) : S(0);
  S gc = 0, gl = 0;
  for (std::int64_t p = 0; p < fp.pairs(); ++p) {
    const std::size_t g = std::size_t(fp.group[std::size_t(p)]);
    const S d = S(fp.dist[std::size_t(p)]), n = S(fp.norm[g]);
    const S a = std::log1p(ac * d), b = std::log1p(ac * n) + S(kFireEps);
    gc += du[p] * sg * (d / (ac * d + 1) / b - a * n / ((ac * n + 1) * b * b));
    if (fp.on_L[g]) gl += du[p] * (-a * ac / ((ac * n + 1) * b * b)) * 2 * L_sqrt;
  }
  *dc += gc, *dLs += gl;
}
// bias (NH, T, Tk) from the pairs' outputs (P, NH): row t, key j <= past + t reads pair base[t] + past + t
// - j; keys above the diagonal get 0 (attention never reads them). And its reverse: d out (P, NH) of d bias
// (NH, T, T) (training: past 0), the masked part ignored.
template <class S>
void fire_bias_scatter(S* bias, const S* out, const FirePairs& fp, int past, int T, int Tk, int NH) {
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t) {
      S* row = bias + (std::int64_t(h) * T + t) * Tk;
      const std::int64_t i = std::int64_t(past) + t, b = fp.base[std::size_t(t)];
      for (std::int64_t j = 0; j < Tk; ++j) row[j] = j <= i ? out[(b + i - j) * NH + h] : S(0);
    }
}
template <class S>
void fire_bias_gather(S* dout, const S* dbias, const FirePairs& fp, int T, int NH) {
  std::fill(dout, dout + fp.pairs() * NH, S(0));
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t) {
      const S* row = dbias + (std::int64_t(h) * T + t) * T;
      const std::int64_t b = fp.base[std::size_t(t)];
      for (std::int64_t j = 0; j <= t; ++j) dout[(b + t - j) * NH + h] += row[j];
    }
}

// ---- GEGLU: inp (R, 2F) = [a | b] (gate, up), out (R, F) = gelu(a) * b ---------------------------
// gelu is the tanh approximation (HF "gelu_new", what T5's gated-gelu uses).
template <class S>
inline S gelu_tanh(S x, S* dgelu) {
  const S c = S(0.7978845608028654);  // sqrt(2/pi)
  const S u = c * (x + S(0.044715) * x * x * x);
  const S th = std::tanh(u);
  if (dgelu) *dgelu = S(0.5) * (S(1) + th) + S(0.5) * x * (S(1) - th * th) * c * (S(1) + S(3 * 0.044715) * x * x);
  return S(0.5) * x * (S(1) + th);
}
template <class S>
void geglu_forward(S* out, const S* inp, int R, int F) {
  for (int t = 0; t < R; ++t) {
    const S* a = inp + std::int64_t(t) * 2 * F;
    const S* b = a + F;
    S* o = out + std::int64_t(t) * F;
    for (int f = 0; f < F; ++f) o[f] = gelu_tanh<S>(a[f], nullptr) * b[f];
  }
}
// da = g * b * gelu'(a) ; db = g * gelu(a)
template <class S>
void geglu_backward(S* dinp, const S* dout, const S* inp, int R, int F) {
  for (int t = 0; t < R; ++t) {
    const S* a = inp + std::int64_t(t) * 2 * F;
    const S* b = a + F;
    const S* g = dout + std::int64_t(t) * F;
    S* da = dinp + std::int64_t(t) * 2 * F;
    S* db = da + F;
    for (int f = 0; f < F; ++f) {
      S d;
      const S ga = gelu_tanh<S>(a[f], &d);
      da[f] += g[f] * b[f] * d;
      db[f] += g[f] * ga;
    }
  }
}

// ---- residual: out = a + b ---------------------------------------------------------------------------
template <class S>
void residual_forward(S* out, const S* a, const S* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// ---- scale: out = s * inp (the tied readout's d_model^-1/2); backward dinp += s * dout ---------------
template <class S>
void scale_forward(S* out, const S* inp, S s, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = s * inp[i];
}
template <class S>
void scale_backward(S* dinp, const S* dout, S s, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dinp[i] += s * dout[i];
}

// ---- softmax cross-entropy on the positions with target >= 0 --------------------------------------
// probs (R, V) softmax of logits; losses (R) = -log probs[target] (0 where target < 0). Returns the sum.
template <class S>
S crossentropy_forward(S* losses, S* probs, const S* logits, const std::int32_t* targets, int R, int V) {
  S total = 0;
  for (int t = 0; t < R; ++t) {
    const S* z = logits + std::int64_t(t) * V;
    S* p = probs + std::int64_t(t) * V;
    S mx = z[0];
    for (int i = 1; i < V; ++i) mx = std::max(mx, z[i]);
    S sum = 0;
    for (int i = 0; i < V; ++i) sum += (p[i] = std::exp(z[i] - mx));
    for (int i = 0; i < V; ++i) p[i] /= sum;
    losses[t] = targets[t] >= 0 ? -(z[targets[t]] - mx - std::log(sum)) : S(0);
    total += losses[t];
  }
  return total;
}
// d(scale * sum of losses)/dlogits = scale (probs - onehot(target)) on counted rows, 0 elsewhere.
template <class S>
void crossentropy_backward(S* dlogits, const S* probs, const std::int32_t* targets, S scale, int R, int V) {
  for (int t = 0; t < R; ++t) {
    S* d = dlogits + std::int64_t(t) * V;
    if (targets[t] < 0) {
      for (int i = 0; i < V; ++i) d[i] = 0;
      continue;
    }
    const S* p = probs + std::int64_t(t) * V;
    for (int i = 0; i < V; ++i) d[i] = scale * p[i];
    d[targets[t]] -= scale;
  }
}

}  // namespace manyadd::learn
