// Causal attention with its products on tensor cores, for bf16 training: per (sequence, head) the
// scores S = q k^T (bf16 operands, fp32 accumulation and output, the full T x T block), a row kernel
// P = softmax(scale S) over keys j <= i (fp32; P rounded to bf16, lse fp32), out = P v (bf16 GEMM,
// fp32 accumulation). Backward: dv = P^T dout, dP = dout v^T (fp32), a row kernel dS = scale P (dP -
// dsum) with P recomputed in fp32 from S and lse (rounded to bf16), dq = dS k, dk = dS^T q.
// The alternative to the CUDA-core flash kernels of train.hpp (attention_forward/backward), which keep
// P in fp32 registers and need no T x T memory; this path keeps S (fp32) and P (bf16) per layer for the
// backward: (4 + 2) B NH T Tp bytes, Tp = T rounded up to a multiple of 8 (0.6 GB at B 400, NH 4, T 256),
// plus dP (fp32) and dS (bf16) scratch of the same shape. Precision differs from the flash kernels by
// the two bf16 roundings (P before P v and P^T dout, dS before dS k and dS^T q: <= 2^-8 relative each,
// the unit roundoff of an 8-significant-bit format),
// the rounding points of PyTorch autocast's matmul-softmax-matmul attention.
// The steps (every GEMM's arguments) are src/attention_gemm_steps.hpp, replayed on the CPU by the tests.
// Plain C++ header; only builds with CUDA define it.
#pragma once

#include <cstddef>

#include "manyadd/kernels/bf16.hpp"
#include "manyadd/kernels/blas.hpp"

namespace manyadd::kernels {

// Elements of each of S, P, dP, dS: B NH T Tp.
std::size_t attention_gemm_scores_size(int B, int T, int NH);

// q, k, v, out (B T, NH HS) bf16; lse (B, NH, T) fp32; S (fp32) and P (bf16): attention_gemm_scores_size,
// written here and read by the backward. HS a multiple of 8 (16-byte aligned head blocks).
void attention_gemm_forward(Blas& blas, bf16* out, float* lse, float* S, bf16* P, const bf16* q, const bf16* k,
                            const bf16* v, int B, int T, int NH, int HS, float scale);
// Writes dq, dk, dv (B T, NH HS) bf16 from dout and the forward's lse, S, P; dP (fp32) and dS (bf16) are
// scratch of attention_gemm_scores_size elements.
void attention_gemm_backward(Blas& blas, bf16* dq, bf16* dk, bf16* dv, float* dP, bf16* dS, const bf16* dout,
                             const float* lse, const float* S, const bf16* P, const bf16* q, const bf16* k,
                             const bf16* v, int B, int T, int NH, int HS, float scale);

}  // namespace manyadd::kernels
