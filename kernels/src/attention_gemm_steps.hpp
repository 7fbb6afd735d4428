// The tensor-core attention (attention_gemm.hpp) as a sequence of steps over an "engine" E, written once
// for the device (src/attention_gemm.cpp: cuBLAS strided-batched GEMMs and the row kernels of train.cu)
// and for the host replay in tests/test_cuda_train_kernels.cpp (a column-major reference GEMM with
// cuBLAS's argument conventions, and attention_rows.cuh's row functions): every GEMM's transposes,
// leading dimensions, strides and offsets below are exercised on the CPU. Plain C++.
//
// E provides
//   e.gemm(ta, tb, m, n, k, A, lda, sA, B, ldb, sB, C, ldc, sC, batch)   (Blas::gemm_batched: column-major,
//        C_b = op(A_b) op(B_b), X_b = X + b sX, bf16 A and B, C fp32 or bf16, written)
//   e.softmax_rows(P, lse, S, B, T, NH, Tp, scale)          (train::attention_softmax_rows)
//   e.dscore_rows(dS, S, lse, dP, B, T, NH, Tp, scale)      (train::attention_dscore_rows)
//
// Layouts: q, k, v, out, dout and the gradients (B T, D) row-major, D = NH HS, head h in columns
// [h HS, h HS + HS): the (sequence b, head h) block is a (T, HS) matrix with row stride D at offset
// b T D + h HS, i.e. column-major (HS, T) with leading dimension D. S, P, dP, dS (B, NH, T, Tp)
// row-major, Tp = T rounded up to a multiple of 8 (tensor-core friendly leading dimension): block
// (b, h) is (T, T) with row stride Tp at offset (b NH + h) T Tp, i.e. column-major its transpose.
// One strided-batched call per head (batch b, stride T D resp. NH T Tp).
#pragma once

#include "manyadd/kernels/bf16.hpp"

namespace manyadd::kernels::attention_gemm_steps {

constexpr int padded_T(int T) { return (T + 7) / 8 * 8; }

// S = q k^T (per block: S_ij = q_i.k_j; column-major S^T = k q^T: A = k, op T; B = q, op N); then the
// softmax rows write P (bf16) and lse; out = P v (column-major out^T (HS, T) = v^T P^T: A = v, op N,
// B = P read column-major (its transpose), op N).
template <class E>
void forward(E& e, bf16* out, float* lse, float* S, bf16* P, const bf16* q, const bf16* k, const bf16* v, int B, int T,
             int NH, int HS, float scale) {
  const int D = NH * HS, Tp = padded_T(T);
  const long long sX = (long long)T * D, sS = (long long)NH * T * Tp;
  for (int h = 0; h < NH; ++h) {
    const long long xo = (long long)h * HS, so = (long long)h * T * Tp;
    e.gemm(true, false, T, T, HS, k + xo, D, sX, q + xo, D, sX, S + so, Tp, sS, B);
  }
  e.softmax_rows(P, lse, S, B, T, NH, Tp, scale);
  for (int h = 0; h < NH; ++h) {
    const long long xo = (long long)h * HS, so = (long long)h * T * Tp;
    e.gemm(false, false, HS, T, T, v + xo, D, sX, P + so, Tp, sS, out + xo, D, sX, B);
  }
}

// dv = P^T dout (column-major dv^T = dout^T P: A = dout, op N; B = P^T read column-major, op T);
// dP = dout v^T (column-major dP^T = v dout^T: A = v, op T; B = dout, op N), fp32;
// the dscore rows: dS = scale P (dP - dsum) (bf16);
// dq = dS k (column-major dq^T = k^T dS^T: A = k, op N; B = dS, op N);
// dk = dS^T q (column-major dk^T = q^T dS: A = q, op N; B = dS, op T).
template <class E>
void backward(E& e, bf16* dq, bf16* dk, bf16* dv, float* dP, bf16* dS, const bf16* dout, const float* lse,
              const float* S, const bf16* P, const bf16* q, const bf16* k, const bf16* v, int B, int T, int NH, int HS,
              float scale) {
  const int D = NH * HS, Tp = padded_T(T);
  const long long sX = (long long)T * D, sS = (long long)NH * T * Tp;
  for (int h = 0; h < NH; ++h) {
    const long long xo = (long long)h * HS, so = (long long)h * T * Tp;
    e.gemm(false, true, HS, T, T, dout + xo, D, sX, P + so, Tp, sS, dv + xo, D, sX, B);
    e.gemm(true, false, T, T, HS, v + xo, D, sX, dout + xo, D, sX, dP + so, Tp, sS, B);
  }
  e.dscore_rows(dS, S, lse, dP, B, T, NH, Tp, scale);
  for (int h = 0; h < NH; ++h) {
    const long long xo = (long long)h * HS, so = (long long)h * T * Tp;
    e.gemm(false, false, HS, T, T, k + xo, D, sX, dS + so, Tp, sS, dq + xo, D, sX, B);
    e.gemm(false, true, HS, T, T, q + xo, D, sX, dS + so, Tp, sS, dk + xo, D, sX, B);
  }
}

}  // namespace manyadd::kernels::attention_gemm_steps
