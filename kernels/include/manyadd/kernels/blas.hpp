// Matrix products of the learned model on the device (cuBLAS), on row-major plain buffers, in the
// shapes of learn's linear layers: a weight W of nn.Linear(C -> OC) is (OC, C) row-major.
//
// fp32: SGEMM in cuBLAS's default math mode (no TF32).
// bf16 (mixed precision): cublasGemmEx with bf16 operands (CUDA_R_16BF), fp32 accumulation
// (CUBLAS_COMPUTE_32F, alpha and beta fp32) and an fp32 or bf16 output: tensor cores on sm_80+. A
// product of two bf16 numbers is exact in fp32 (8 + 8 significant bits), so the result is the exact
// sum of products up to fp32 accumulation; a bf16 output is the fp32 result rounded once (the handle
// sets CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, so a split-K reduction also stays in fp32).
// cublasGemmEx rather than cublasLt: the plain call needs no descriptors or workspace management,
// takes every operand/output combination used here, and cuBLAS picks the same tensor-core kernels
// through its cuBLASLt heuristics; cublasLt would pay only for fused epilogues, which none of these
// products needs.
// Reproducibility: cuBLAS results are bitwise identical run to run for a toolkit version,
// architecture and SM count on one stream (atomics mode stays off, its default).
// Plain C++ header; only builds with CUDA define it (callers are compiled under MANYADD_WITH_CUDA).
#pragma once

#include "manyadd/kernels/bf16.hpp"

namespace manyadd::kernels {

class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // ---- fp32 ----
  // out (R, OC) = inp (R, C) W^T
  void linear_forward(float* out, const float* inp, const float* w, int R, int C, int OC);
  // dinp (R, C) += dout (R, OC) W ; dW (OC, C) += dout^T inp
  void linear_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int R, int C, int OC);

  // ---- bf16 operands, fp32 accumulation ----
  // out (R, OC) = inp (R, C) W^T: fp32 out (written, or added to with accumulate) or bf16 out (written).
  void linear_forward(float* out, const bf16* inp, const bf16* w, int R, int C, int OC, bool accumulate = false);
  void linear_forward(bf16* out, const bf16* inp, const bf16* w, int R, int C, int OC);
  // dinp (R, C) = dout (R, OC) W: fp32 dinp (written, or added to with accumulate) or bf16 (written).
  void linear_backward_input(float* dinp, const bf16* dout, const bf16* w, int R, int C, int OC, bool accumulate);
  void linear_backward_input(bf16* dinp, const bf16* dout, const bf16* w, int R, int C, int OC);
  // dW (OC, C) += dout^T inp, into the fp32 gradient.
  void linear_backward_weight(float* dw, const bf16* dout, const bf16* inp, int R, int C, int OC);

  // ---- strided-batched, column-major (cuBLAS's own convention), for callers that lay out their own
  // operands (attention_gemm.hpp): for b < batch, C_b (m, n) = op(A_b) op(B_b) with op(X) = X^T when
  // the flag is set, X_b = X + b stride; A, B bf16, fp32 accumulation, C fp32 or bf16 (written).
  void gemm_batched(bool ta, bool tb, int m, int n, int k, const bf16* A, int lda, long long sA, const bf16* B, int ldb,
                    long long sB, float* C, int ldc, long long sC, int batch);
  void gemm_batched(bool ta, bool tb, int m, int n, int k, const bf16* A, int lda, long long sA, const bf16* B, int ldb,
                    long long sB, bf16* C, int ldc, long long sC, int batch);

 private:
  void* handle_ = nullptr;
};

}  // namespace manyadd::kernels
