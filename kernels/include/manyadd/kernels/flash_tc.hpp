// Fused causal attention on tensor cores for bf16 training (FlashAttention-2 style; kernels/src/flash_tc.cu,
// the arithmetic in kernels/src/flash_tc.cuh): varlen batches as the flash kernels of train.hpp (sequence b
// = rows [offsets[b], offsets[b + 1]), every sequence >= 1 row, each row attending to its own sequence's
// earlier rows), q, k, v, out, dout (R, NH HS) bf16, 1 <= HS <= 512 (the kernel instance for the next
// power of two from 16, padding columns zero), scale 1 (T5) or 1/sqrt(HS). mma.sync m16n8k16 with fp32
// accumulation; softmax in fp32 on exp2 with the scale folded in; the rounding points of learn's bf16
// attention (layers.hpp): the weights rounded to bf16 before they multiply v, dS before it multiplies k
// or q. No atomics: three kernels that own their outputs (run to run identical). Plain C++ header; only
// builds with CUDA define it. See kernels/README.md ("Flash attention on tensor cores").
#pragma once

#include <cstdint>

#include "manyadd/kernels/bf16.hpp"
#include "manyadd/kernels/score_bias.hpp"

namespace manyadd::kernels::flash {

// out (R, NH HS) rounded to bf16 (it feeds the output projection); lse2 (NH R, sequence b's (NH, T_b)
// block from NH offsets[b]): the BASE-2 log-sum-exp of each query row's scores in base 2,
// lse2_i = log2 sum_j 2^(scale log2(e) q_i.k_j) (= lse_i / ln 2), saved for the backward. sb: a score
// bias (FIRE's, score_bias.hpp), added in base 2: z = fl(scale log2(e) q.k) + fl(b fl(log2 e)).
void attention_forward(bf16* out, float* lse2, const bf16* q, const bf16* k, const bf16* v,
                       const std::int32_t* offsets, int B, int R, int NH, int HS, float scale,
                       const ScoreBias& sb = {});
// Writes (not accumulates) dq, dk, dv (R, NH HS) bf16 from dout, the forward's out and lse2; dsum (NH R,
// lse2's layout) receives D_i = dout_i . out_i (the first kernel writes it, the second reads it). sb: the
// forward's bias; with dslots, the dq kernel writes the bias's gradient P (dP - D) (fp32) to them.
void attention_backward(bf16* dq, bf16* dk, bf16* dv, float* dsum, const bf16* dout, const bf16* out,
                        const float* lse2, const bf16* q, const bf16* k, const bf16* v, const std::int32_t* offsets,
                        int B, int R, int NH, int HS, float scale, const ScoreBias& sb = {});
// The same with dq and dk written in fp32: the values the bf16 form rounds (bitwise: bf16 of these is
// its output). RoPE's backward turns dq and dk back by the inverse rotation before their one rounding,
// as learn's PackedCpuDevice does.
void attention_backward(float* dq, float* dk, bf16* dv, float* dsum, const bf16* dout, const bf16* out,
                        const float* lse2, const bf16* q, const bf16* k, const bf16* v, const std::int32_t* offsets,
                        int B, int R, int NH, int HS, float scale, const ScoreBias& sb = {});

}  // namespace manyadd::kernels::flash
