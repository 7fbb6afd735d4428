// cuBLAS behind kernels::Blas: see blas.hpp. Row-major (R, C) buffers are column-major (C, R) to
// cuBLAS, so out = inp W^T is out^T (OC, R) = W (OC, C) inp^T, i.e. gemm(T, N) on W's column-major view;
// dinp = dout W is dinp^T (C, R) = W^T dout^T, gemm(N, N); dW += dout^T inp is dW^T (C, OC) += inp^T dout,
// gemm(N, T). The bf16 products are the same three calls through cublasGemmEx; gemm_batched passes its
// column-major arguments through to cublasGemmStridedBatchedEx.
#include "manyadd/kernels/blas.hpp"

#include <cublas_v2.h>

#include <stdexcept>
#include <string>

namespace manyadd::kernels {
namespace {
void cublas_check(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS error ") + std::to_string(int(s)) + " in " + what + " (" + file + ":" +
                             std::to_string(line) + ")");
}
#define CUBLAS_CHECK(x) cublas_check((x), #x, __FILE__, __LINE__)
cublasHandle_t H(void* h) { return static_cast<cublasHandle_t>(h); }

// C (m, n) = alpha op(A) op(B) + beta C, column-major; A and B bf16, C fp32 or bf16, fp32 accumulation.
void gemm_bf16(void* h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, void* C, cudaDataType ct, int ldc) {
  const float one = 1.f;
  CUBLAS_CHECK(cublasGemmEx(H(h), ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C, ct, ldc,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
void gemm_batched_bf16(void* h, bool ta, bool tb, int m, int n, int k, const bf16* A, int lda, long long sA,
                       const bf16* B, int ldb, long long sB, void* C, cudaDataType ct, int ldc, long long sC, int batch) {
  const float one = 1.f, zero = 0.f;
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(H(h), ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                                          &one, A, CUDA_R_16BF, lda, sA, B, CUDA_R_16BF, ldb, sB, &zero, C, ct, ldc, sC,
                                          batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
}  // namespace

Blas::Blas() {
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(cublasCreate(&h));
  handle_ = h;
  // Default math: no TF32 for the fp32 SGEMMs. Reductions (split-K) in the fp32 accumulator type, never
  // in a bf16 output type.
  CUBLAS_CHECK(cublasSetMathMode(h, cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
}
Blas::~Blas() { cublasDestroy(H(handle_)); }

void Blas::linear_forward(float* out, const float* inp, const float* w, int R, int C, int OC) {
  const float one = 1.f, zero = 0.f;
  CUBLAS_CHECK(cublasSgemm(H(handle_), CUBLAS_OP_T, CUBLAS_OP_N, OC, R, C, &one, w, C, inp, C, &zero, out, OC));
}
void Blas::linear_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int R, int C,
                           int OC) {
  const float one = 1.f;
  CUBLAS_CHECK(cublasSgemm(H(handle_), CUBLAS_OP_N, CUBLAS_OP_N, C, R, OC, &one, w, C, dout, OC, &one, dinp, C));
  CUBLAS_CHECK(cublasSgemm(H(handle_), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, R, &one, inp, C, dout, OC, &one, dw, C));
}

void Blas::linear_forward(float* out, const bf16* inp, const bf16* w, int R, int C, int OC, bool accumulate) {
  gemm_bf16(handle_, CUBLAS_OP_T, CUBLAS_OP_N, OC, R, C, w, C, inp, C, accumulate ? 1.f : 0.f, out, CUDA_R_32F, OC);
}
void Blas::linear_forward(bf16* out, const bf16* inp, const bf16* w, int R, int C, int OC) {
  gemm_bf16(handle_, CUBLAS_OP_T, CUBLAS_OP_N, OC, R, C, w, C, inp, C, 0.f, out, CUDA_R_16BF, OC);
}
void Blas::linear_backward_input(float* dinp, const bf16* dout, const bf16* w, int R, int C, int OC, bool accumulate) {
  gemm_bf16(handle_, CUBLAS_OP_N, CUBLAS_OP_N, C, R, OC, w, C, dout, OC, accumulate ? 1.f : 0.f, dinp, CUDA_R_32F, C);
}
void Blas::linear_backward_input(bf16* dinp, const bf16* dout, const bf16* w, int R, int C, int OC) {
  gemm_bf16(handle_, CUBLAS_OP_N, CUBLAS_OP_N, C, R, OC, w, C, dout, OC, 0.f, dinp, CUDA_R_16BF, C);
}
void Blas::gemm_batched(bool ta, bool tb, int m, int n, int k, const bf16* A, int lda, long long sA, const bf16* B,
                        int ldb, long long sB, float* C, int ldc, long long sC, int batch) {
  gemm_batched_bf16(handle_, ta, tb, m, n, k, A, lda, sA, B, ldb, sB, C, CUDA_R_32F, ldc, sC, batch);
}
void Blas::gemm_batched(bool ta, bool tb, int m, int n, int k, const bf16* A, int lda, long long sA, const bf16* B,
                        int ldb, long long sB, bf16* C, int ldc, long long sC, int batch) {
  gemm_batched_bf16(handle_, ta, tb, m, n, k, A, lda, sA, B, ldb, sB, C, CUDA_R_16BF, ldc, sC, batch);
}
void Blas::linear_backward_weight(float* dw, const bf16* dout, const bf16* inp, int R, int C, int OC) {
  gemm_bf16(handle_, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, R, inp, C, dout, OC, 1.f, dw, CUDA_R_32F, C);
}

}  // namespace manyadd::kernels
