// Matrix products of the learned model on the device (cuBLAS), on row-major plain buffers, in the
// shapes of learn's linear layers: a weight W of nn.Linear(C -> OC) is (OC, C) row-major.
// fp32 SGEMM in cuBLAS's default math mode (no TF32): run-to-run reproducible on one GPU model
// (cuBLAS guarantees bitwise-identical results for a toolkit version, architecture and SM count, one
// stream). Plain C++ header; only builds with CUDA define it (callers are compiled under
// MANYADD_WITH_CUDA).
#pragma once

namespace manyadd::kernels {

class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  // out (R, OC) = inp (R, C) W^T
  void linear_forward(float* out, const float* inp, const float* w, int R, int C, int OC);
  // dinp (R, C) += dout (R, OC) W ; dW (OC, C) += dout^T inp
  void linear_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int R, int C, int OC);

 private:
  void* handle_ = nullptr;
};

}  // namespace manyadd::kernels
