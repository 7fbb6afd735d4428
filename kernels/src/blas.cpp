// cuBLAS behind kernels::Blas: see blas.hpp. Row-major (R, C) buffers are column-major (C, R) to
// cuBLAS, so out = inp W^T is out^T (OC, R) = W (OC, C) inp^T, i.e. gemm(T, N) on W's column-major view.
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
}  // namespace

Blas::Blas() {
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(cublasCreate(&h));
  handle_ = h;
  CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
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

}  // namespace manyadd::kernels
