// The CUDA kernels of learned-model training (kernels/src/train.cu), as plain C++ launchers on device
// pointers (no CUDA headers here, so learn's CUDA device and the kernel tests are plain C++). Memory:
// device.hpp; matrix products: blas.hpp.
// Each launcher's CPU twin is the function of the same name in learn/layers.hpp (or batch.hpp);
// tests/test_cuda_train_kernels.cpp checks every one against its twin on random inputs.
// Every launcher runs on the default stream and throws std::runtime_error on a CUDA error.
// No kernel uses atomics: every reduction has a fixed order, so results are run-to-run identical.
// Shape legend: R rows (the real tokens of a packed batch), C width, V vocabulary, NH heads, HS d_head, D = NH HS, F d_ff.
//
// Mixed precision (bf16 overloads): a bf16 buffer holds values rounded to nearest even (bf16.hpp); every
// kernel widens its bf16 inputs to float exactly, computes in fp32 and rounds only where it writes a
// bf16 output. The fp32 and bf16 versions of a kernel are one template (the same operations in the same
// order), so the fp32 path is the bf16 path without the roundings.
#pragma once

#include <cstddef>
#include <cstdint>

#include "manyadd/kernels/bf16.hpp"
#include "manyadd/kernels/score_bias.hpp"

namespace manyadd::kernels::train {

// Position levels the embedding kernels read: up to three tables (learn's pos_mode coupled3).
constexpr int kMaxPosLevels = 3;

// out (R, C) = wte[tok] + sum_{lv < L} wpe[lv][pos[lv]], L in [0, kMaxPosLevels]; pos and wpe are host
// arrays of L device pointers (the CPU twin's signature). The arithmetic: kernels/src/embedding_rows.cuh.
void embedding_forward(float* out, const std::uint8_t* tok, const std::int32_t* const* pos, int L, const float* wte,
                       const float* const* wpe, int R, int C);
// dwte (V, C), dwpe[lv] (rows[lv], C) += scatter of dout (R, C), through the readers of each table row:
// readers and starts are host arrays of 1 + L device pointers, table k = 0 the token table, 1 + lv level
// lv; readers[k] (R) the rows of dout grouped by the table row they read (increasing within a group),
// starts[k] (table rows + 1) where each group starts (learn::PackedBatch::readers, reader_starts). One
// thread per (table row, channel) sums its group's rows in row order, then adds that sum to the entry:
// bitwise the CPU twin's (which adds row by row into the entry) when the gradients start at zero, as in
// training.
void embedding_backward(float* dwte, float* const* dwpe, const float* dout, const std::int32_t* const* readers,
                        const std::int32_t* const* starts, int L, int C, int V, const int* rows);

// out (n) = in rounded to bf16 (to nearest, ties to even: core's float_to_bf16, NaN aside), e.g. the
// bf16 copies of the fp32 master weights; and the exact widening back.
void convert(bf16* out, const float* in, std::int64_t n);
void convert(float* out, const bf16* in, std::int64_t n);

// RMSNorm over an fp32 input (the residual stream) with fp32 statistics: out, rstd (R). The bf16 out is
// the fp32 result rounded once (the input of the next GEMM). backward accumulates into the fp32 dinp
// and dw; dout fp32 or bf16 (widened exactly). scratch: >= rmsnorm_scratch_floats(R, C).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int R, int C, float eps);
void rmsnorm_forward(bf16* out, float* rstd, const float* inp, const float* w, int R, int C, float eps);
std::size_t rmsnorm_scratch_floats(int R, int C);
void rmsnorm_backward(float* dinp, float* dw, float* scratch, const float* dout, const float* inp, const float* w,
                      const float* rstd, int R, int C);
void rmsnorm_backward(float* dinp, float* dw, float* scratch, const bf16* dout, const float* inp, const float* w,
                      const float* rstd, int R, int C);

// LayerNorm (the T5 recipe's final norm) over an fp32 input with fp32 statistics: out = w (x - mean)
// rstd + b, mean and rstd (R) saved (biased variance, as torch.nn.LayerNorm). One warp per row: mean, then
// the variance about it (two passes, as the CPU twin). backward accumulates into dinp, dw, db (fp32);
// scratch: >= layernorm_scratch_floats(R, C).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int R,
                       int C, float eps);
std::size_t layernorm_scratch_floats(int R, int C);
void layernorm_backward(float* dinp, float* dw, float* db, float* scratch, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int R, int C);

// out = s inp (n): the tied readout's input scale d_model^-1/2; fp32 out, or bf16 out (the fp32 product
// rounded once: the GEMM input). backward: dinp += s dout (fp32).
void scale_forward(float* out, const float* inp, float s, std::int64_t n);
void scale_forward(bf16* out, const float* inp, float s, std::int64_t n);
void scale_backward(float* dinp, const float* dout, float s, std::int64_t n);

// out = a + b (n), fp32 out and a (the residual stream), b fp32 or bf16.
void residual_forward(float* out, const float* a, const float* b, std::int64_t n);
void residual_forward(float* out, const float* a, const bf16* b, std::int64_t n);
// out (R, F) = gelu_tanh(inp[:, :F]) * inp[:, F:]  (fp32 math; bf16 in -> bf16 out).
void geglu_forward(float* out, const float* inp, int R, int F);
void geglu_forward(bf16* out, const bf16* inp, int R, int F);
// fp32: ACCUMULATES into dinp (R, 2F). bf16: WRITES dinp (a bf16 sum would round twice), from an fp32
// or a bf16 dout (R, F), in fp32 math.
void geglu_backward(float* dinp, const float* dout, const float* inp, int R, int F);
void geglu_backward(bf16* dinp, const float* dout, const bf16* inp, int R, int F);
void geglu_backward(bf16* dinp, const bf16* dout, const bf16* inp, int R, int F);

// Causal attention over B sequences of different lengths packed without padding (varlen, as
// FlashAttention's cu_seqlens): offsets (B + 1, device memory) with offsets[0] = 0, offsets[B] = R and
// every sequence >= 1 row; sequence b is rows [offsets[b], offsets[b + 1]) and attends only to its own
// rows, causally. Flash style (no T x T matrix; one warp per (sequence, head, row), online softmax;
// kernels/src/attention_rows.cuh): q, k, v, out (R, D) fp32 or bf16 (all the same type), fp32 math;
// lse (NH R) fp32, sequence b's (NH, T_b) block from NH offsets[b]: the log-sum-exp of each query row's
// scaled scores, saved for backward. Scores are scale q.k: 1 / sqrt(HS) or 1 (T5: unscaled), plus sb's
// bias when it has one (FIRE's: score_bias.hpp; s scale + b, learn's fp32 attention with a bias).
// 1 <= HS <= 512. A uniform batch (B sequences of T rows) is offsets b T.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const std::int32_t* offsets, int B, int R, int NH, int HS, float scale,
                       const ScoreBias& sb = {});
void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const std::int32_t* offsets,
                       int B, int R, int NH, int HS, float scale, const ScoreBias& sb = {});
// Writes (not accumulates) dq, dk, dv (R, D), of the I/O type (bf16: they feed the q/k/v GEMMs), from
// dout and the forward's lse; the probabilities are recomputed. scratch: NH R floats (lse's layout),
// filled with the row terms dsum_i = sum_j P_ij dP_ij (computed from P and dP, so the forward output is
// not needed). sb: the forward's bias; with dslots, the bias's gradient written to them (score_bias.hpp).
void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout, const float* lse,
                        const float* q, const float* k, const float* v, const std::int32_t* offsets, int B, int R,
                        int NH, int HS, float scale, const ScoreBias& sb = {});
void attention_backward(bf16* dq, bf16* dk, bf16* dv, float* scratch, const bf16* dout, const float* lse,
                        const bf16* q, const bf16* k, const bf16* v, const std::int32_t* offsets, int B, int R, int NH,
                        int HS, float scale, const ScoreBias& sb = {});

// The row kernels of the tensor-core attention (attention_gemm.hpp), on (B, NH, T, Tp) score matrices
// (Tp >= T the row stride): P_ij = exp(scale S_ij - lse_i) (j <= i; 0 for i < j < T) rounded to bf16, and
// lse_i, from the unscaled fp32 scores S; dS_ij = scale P_ij (dP_ij - sum_j' P_ij' dP_ij') rounded to bf16
// (0 above the diagonal), with P recomputed in fp32 from S and lse. One warp per row, fixed order.
void attention_softmax_rows(bf16* P, float* lse, const float* S, int B, int T, int NH, int Tp, float scale);
void attention_dscore_rows(bf16* dS, const float* S, const float* lse, const float* dP, int B, int T, int NH, int Tp,
                           float scale);

// RoPE (learn::rope_tables / rope_rotate, Su et al. 2021, Eq. 34) on varlen rows (offsets as the
// attention's: B + 1 of them in device memory): every head's pair (2k, 2k+1) of row r of sequence b is
// turned by the angle of its index t = r - offsets[b] within the sequence. cs, sn: device tables (>= the
// longest sequence's rows, HS / 2 each) from learn::rope_tables<float> (angles, cos and sin in double,
// then float). forward: out (R, NH HS) = the rotation of the fp32 q or k in (a GEMM's fp32 output);
// backward: dx = the inverse rotation (the transpose: -angle) of the fp32 gradient dy. Out fp32, or bf16
// (the fp32 result rounded once: PackedCpuDevice rounds q, k and dq, dk after the rotation); out may be
// in (in place). Each output is two products rounded on their own and their sum (no fused multiply-add;
// kernels/src/rope_rows.cuh), so it is bitwise the CPU twin's. HS even.
void rope_forward(float* out, const float* in, const float* cs, const float* sn, const std::int32_t* offsets, int B,
                  int R, int NH, int HS);
void rope_forward(bf16* out, const float* in, const float* cs, const float* sn, const std::int32_t* offsets, int B,
                  int R, int NH, int HS);
void rope_backward(float* dx, const float* dy, const float* cs, const float* sn, const std::int32_t* offsets, int B,
                   int R, int NH, int HS);
void rope_backward(bf16* dx, const float* dy, const float* cs, const float* sn, const std::int32_t* offsets, int B,
                   int R, int NH, int HS);

// ---- FIRE (learn/layers.hpp fire_*, Li et al. 2024; kernels/README.md "FIRE on CUDA"; src/fire.cu, the
// arithmetic in src/fire_rows.cuh) --------------------------------------------------------------------------
// The bias table of score_bias.hpp for sequences up to T rows: one MLP row per pair (query index i,
// distance d <= i), pair tri(i) + d, fire_pairs(T) = T (T + 1) / 2 of them (the rows whose normalizer is L
// are not merged, as the CPU twin's FirePairs merge them: which rows they are depends on L_sqrt, a
// parameter on the device). T <= 46340. c, L_sqrt and w1 (H) are device pointers into the parameters.
long long fire_pairs(int T);
// u (P) = log1p(|c| d) / (log1p(|c| n_i) + 1e-6), n_i = L = L_sqrt^2 where the threshold binds (max: L > i;
// min: L < i) else i; h1 (P, H) = relu(u w1^T): the MLP's first layer (the twin's fire_distances and
// fire_mlp_forward's first product, bitwise but for log1pf).
void fire_mlp_input(float* u, float* h1, const float* w1, const float* c, const float* L_sqrt, int T, int H,
                    bool max_threshold);
// x = max(x, 0) in place; dx = 0 where y <= 0 (ReLU's backward from its output, as the twin's h > 0).
void relu_forward(float* x, std::int64_t n);
void relu_backward(float* dx, const float* y, std::int64_t n);
// Each pair's terms of d c and d L_sqrt from du (P) (fire_distances_backward's expression per pair):
// tc, tl (P); their sums (reduce_sum) are the scalars' gradients.
void fire_scalar_terms(float* tc, float* tl, const float* du, const float* c, const float* L_sqrt, int T,
                       bool max_threshold);
// g[0] += float(s[0]): a reduce_sum result added to a gradient entry on the device.
void add_double(float* g, const double* s);
// soff (B + 1): the bias gradient's slot offsets of score_bias.hpp (soff[b] = sum_{b' < b} tri(T_b')).
void fire_slot_offsets(long long* soff, const std::int32_t* offsets, int B);
// dbias (NH, fire_pairs(T)) += the slots of one layer's attention backward, each pair's in sequence order.
void fire_dbias_reduce(float* dbias, const float* slots, const long long* soff, const std::int32_t* offsets, int B,
                       int NH, int T);

// Cross-entropy on rows with target >= 0: probs (R, V), losses (R) (0 elsewhere). fp32 only (the
// logits are an fp32 GEMM output in the bf16 pipeline too).
void crossentropy_forward(float* losses, float* probs, const float* logits, const std::int32_t* targets, int R, int V);
// dlogits (R, V) = scale (probs - onehot(target)) on counted rows, 0 elsewhere (written, not accumulated).
void crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets, float scale, int R, int V);

// sum_i x_i (sum_sq = false) or sum_i x_i^2 (true) in double, in a fixed order (fixed grid, tree in
// shared memory, then the block partials in order). scratch: >= reduce_scratch_doubles() doubles.
std::size_t reduce_scratch_doubles();
double reduce_sum(const float* x, std::int64_t n, bool sum_sq, double* scratch);
// The same sum left on the device in *out (no host synchronization): the same kernels, so the value is
// bitwise reduce_sum's.
void reduce_sum(const float* x, std::int64_t n, bool sum_sq, double* scratch, double* out);

// AdamW element-wise, the same float operations as learn::adamw_update (explicit _rn intrinsics: no
// FMA contraction), so the update is bitwise the CPU's for the same inputs.
void adamw_update(float* p, float* m, float* v, const float* g, std::int64_t n, double clip, float b1, float b2,
                  float eps, float step_size, float inv_sqrt_bc2, float wd);
// The same update with the clipping factor computed on the device from the gradient's sum of squares
// *sumsq (reduce_sum's device result): norm = sqrt(*sumsq), clip = grad_clip / norm when grad_clip > 0 and
// norm > grad_clip, else 1 -- learn::adam_scalars' double arithmetic (IEEE sqrt and division, correctly
// rounded on both), so the update is bitwise the host-clipped one without reading the norm back.
void adamw_update(float* p, float* m, float* v, const float* g, std::int64_t n, const double* sumsq, double grad_clip,
                  float b1, float b2, float eps, float step_size, float inv_sqrt_bc2, float wd);

}  // namespace manyadd::kernels::train
