// The tensor-core attention on the device: attention_gemm_steps.hpp's steps with cuBLAS strided-batched
// GEMMs (Blas::gemm_batched) and train.cu's row kernels. See attention_gemm.hpp.
#include "manyadd/kernels/attention_gemm.hpp"

#include <stdexcept>
#include <string>

#include "attention_gemm_steps.hpp"
#include "manyadd/kernels/train.hpp"

namespace manyadd::kernels {
namespace {
namespace steps = attention_gemm_steps;

struct DeviceEngine {
  Blas& blas;
  template <class C>
  void gemm(bool ta, bool tb, int m, int n, int k, const bf16* A, int lda, long long sA, const bf16* B, int ldb,
            long long sB, C* out, int ldc, long long sC, int batch) {
    blas.gemm_batched(ta, tb, m, n, k, A, lda, sA, B, ldb, sB, out, ldc, sC, batch);
  }
  void softmax_rows(bf16* P, float* lse, const float* S, int B, int T, int NH, int Tp, float scale) {
    train::attention_softmax_rows(P, lse, S, B, T, NH, Tp, scale);
  }
  void dscore_rows(bf16* dS, const float* S, const float* lse, const float* dP, int B, int T, int NH, int Tp,
                   float scale) {
    train::attention_dscore_rows(dS, S, lse, dP, B, T, NH, Tp, scale);
  }
};

bool empty_or_checked(int B, int T, int NH, int HS) {
  if (HS < 8 || HS % 8 != 0)
    throw std::runtime_error("tensor-core attention: d_head must be a positive multiple of 8 (got " +
                             std::to_string(HS) + ")");
  return (long long)B * T * NH == 0;
}
}  // namespace

std::size_t attention_gemm_scores_size(int B, int T, int NH) {
  return std::size_t(B) * std::size_t(NH) * std::size_t(T) * std::size_t(steps::padded_T(T));
}

void attention_gemm_forward(Blas& blas, bf16* out, float* lse, float* S, bf16* P, const bf16* q, const bf16* k,
                            const bf16* v, int B, int T, int NH, int HS, float scale) {
  if (empty_or_checked(B, T, NH, HS)) return;
  DeviceEngine e{blas};
  steps::forward(e, out, lse, S, P, q, k, v, B, T, NH, HS, scale);
}

void attention_gemm_backward(Blas& blas, bf16* dq, bf16* dk, bf16* dv, float* dP, bf16* dS, const bf16* dout,
                             const float* lse, const float* S, const bf16* P, const bf16* q, const bf16* k,
                             const bf16* v, int B, int T, int NH, int HS, float scale) {
  if (empty_or_checked(B, T, NH, HS)) return;
  DeviceEngine e{blas};
  steps::backward(e, dq, dk, dv, dP, dS, dout, lse, S, P, q, k, v, B, T, NH, HS, scale);
}

}  // namespace manyadd::kernels
