// The CUDA kernels of learned-model training (kernels/src/train.cu), as plain C++ launchers on device
// pointers (no CUDA headers here, so learn's CUDA device and the kernel tests are plain C++). Memory:
// device.hpp; matrix products: blas.hpp.
// Each launcher's CPU twin is the function of the same name in learn/layers.hpp (or batch.hpp);
// tests/test_cuda_train_kernels.cpp checks every one against its twin on random inputs.
// Every launcher runs on the default stream and throws std::runtime_error on a CUDA error.
// No kernel uses atomics: every reduction has a fixed order, so results are run-to-run identical.
// Shape legend: R rows (B T), C width, V vocabulary, NH heads, HS d_head, D = NH HS, F d_ff.
#pragma once

#include <cstddef>
#include <cstdint>

namespace manyadd::kernels::train {

// out (R, C) = wte[tok] + sum_{lv < L} wpe_lv[pos_lv]
void embedding_forward(float* out, const std::uint8_t* tok, const std::int32_t* pos0, const std::int32_t* pos1, int L,
                       const float* wte, const float* wpe0, const float* wpe1, int R, int C);
// dwte (V, C), dwpe_lv (rows_lv, C) += scatter of dout (R, C). One thread per (table row, channel) sums
// the rows that read it in row order, then adds that sum to the entry: bitwise the CPU twin's
// (which adds row by row into the entry) when the gradients start at zero, as in training.
void embedding_backward(float* dwte, float* dwpe0, float* dwpe1, const float* dout, const std::uint8_t* tok,
                        const std::int32_t* pos0, const std::int32_t* pos1, int L, int R, int C, int V, int rows0,
                        int rows1);

// RMSNorm. out, rstd (R); backward accumulates into dinp and dw. scratch: >= rmsnorm_scratch_floats(R, C).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int R, int C, float eps);
std::size_t rmsnorm_scratch_floats(int R, int C);
void rmsnorm_backward(float* dinp, float* dw, float* scratch, const float* dout, const float* inp, const float* w,
                      const float* rstd, int R, int C);

// out = a + b (n)
void residual_forward(float* out, const float* a, const float* b, std::int64_t n);
// out (R, F) = gelu_tanh(inp[:, :F]) * inp[:, F:]; backward accumulates into dinp (R, 2F).
void geglu_forward(float* out, const float* inp, int R, int F);
void geglu_backward(float* dinp, const float* dout, const float* inp, int R, int F);

// Causal attention over B sequences of T padded rows, flash style (no T x T matrix): q, k, v, out (R, D);
// lse (B, NH, T) log-sum-exp of each query row's scaled scores, saved for backward. HS <= 128.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int B, int T, int NH,
                       int HS);
// Writes (not accumulates) dq, dk, dv (R, D) from dout. scratch: (B, NH, T) floats (row dots).
void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v, int B, int T, int NH, int HS);

// Cross-entropy on rows with target >= 0: probs (R, V), losses (R) (0 elsewhere).
void crossentropy_forward(float* losses, float* probs, const float* logits, const std::int32_t* targets, int R, int V);
// dlogits (R, V) = scale (probs - onehot(target)) on counted rows, 0 elsewhere (written, not accumulated).
void crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets, float scale, int R, int V);

// sum_i x_i (sum_sq = false) or sum_i x_i^2 (true) in double, in a fixed order (fixed grid, tree in
// shared memory, then the block partials in order). scratch: >= reduce_scratch_doubles() doubles.
std::size_t reduce_scratch_doubles();
double reduce_sum(const float* x, std::int64_t n, bool sum_sq, double* scratch);

// AdamW element-wise, the same float operations as learn::adamw_update (explicit _rn intrinsics: no
// FMA contraction), so the update is bitwise the CPU's for the same inputs.
void adamw_update(float* p, float* m, float* v, const float* g, std::int64_t n, double clip, float b1, float b2,
                  float eps, float step_size, float inv_sqrt_bc2, float wd);

}  // namespace manyadd::kernels::train
