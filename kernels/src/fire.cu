// FIRE's kernels on the device (train.hpp, "FIRE"): the MLP's input per pair, ReLU and its backward, the
// per-pair terms of d c and d L_sqrt, the gradient slots' offsets and their reduction over the sequences.
// The arithmetic is fire_rows.cuh (replayed on the host by tests/test_cuda_train_kernels.cpp); the MLP's
// two other layers and its backward are cuBLAS SGEMMs (learn/src/devices/cuda_device.cpp). Element-wise, one
// thread per entry, no atomics. NOT RUN ON A GPU YET (compiled for sm_90; the arithmetic replayed on the CPU).
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda_check.cuh"
#include "fire_rows.cuh"
#include "manyadd/kernels/train.hpp"

namespace manyadd::kernels::train {
namespace {

namespace FR = fire_rows;

int blocks_of(long long n) { return int((n + 255) / 256); }

__global__ void fire_mlp_input_kernel(float* u, float* h1, const float* w1, const float* c, const float* L_sqrt,
                                      long long P, int H, bool max_threshold) {
  const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= P) return;
  const float Ls = *L_sqrt;
  FR::mlp_input_entry(u, h1, w1, p, H, *c, FR::mul_rn(Ls, Ls), max_threshold);
}
__global__ void relu_kernel(float* x, long long n) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < n && !(x[e] > 0.f)) x[e] = 0.f;
}
__global__ void relu_backward_kernel(float* dx, const float* y, long long n) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < n && !(y[e] > 0.f)) dx[e] = 0.f;
}
__global__ void fire_scalar_terms_kernel(float* tc, float* tl, const float* du, const float* c, const float* L_sqrt,
                                         long long P, bool max_threshold) {
  const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= P) return;
  const float Ls = *L_sqrt;
  FR::scalar_terms_entry(tc, tl, du, p, *c, Ls, FR::mul_rn(Ls, Ls), max_threshold);
}
__global__ void add_double_kernel(float* g, const double* s) { g[0] = FR::add_rn(g[0], float(s[0])); }
__global__ void fire_slot_offsets_kernel(long long* soff, const std::int32_t* offsets, int B) {
  FR::slot_offsets(soff, offsets, B);
}
__global__ void fire_dbias_reduce_kernel(float* dbias, const float* slots, const long long* soff,
                                         const std::int32_t* offsets, int B, int NH, long long P) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= NH * P) return;
  FR::dbias_reduce_entry(dbias, slots, soff, offsets, B, NH, P, e);
}

}  // namespace

long long fire_pairs(int T) { return FR::tri(T); }

void fire_mlp_input(float* u, float* h1, const float* w1, const float* c, const float* L_sqrt, int T, int H,
                    bool max_threshold) {
  const long long P = fire_pairs(T);
  if (P <= 0) return;
  fire_mlp_input_kernel<<<blocks_of(P), 256>>>(u, h1, w1, c, L_sqrt, P, H, max_threshold);
  LAUNCH_CHECK();
}
void relu_forward(float* x, std::int64_t n) {
  if (n <= 0) return;
  relu_kernel<<<blocks_of(n), 256>>>(x, n);
  LAUNCH_CHECK();
}
void relu_backward(float* dx, const float* y, std::int64_t n) {
  if (n <= 0) return;
  relu_backward_kernel<<<blocks_of(n), 256>>>(dx, y, n);
  LAUNCH_CHECK();
}
void fire_scalar_terms(float* tc, float* tl, const float* du, const float* c, const float* L_sqrt, int T,
                       bool max_threshold) {
  const long long P = fire_pairs(T);
  if (P <= 0) return;
  fire_scalar_terms_kernel<<<blocks_of(P), 256>>>(tc, tl, du, c, L_sqrt, P, max_threshold);
  LAUNCH_CHECK();
}
void add_double(float* g, const double* s) {
  add_double_kernel<<<1, 1>>>(g, s);
  LAUNCH_CHECK();
}
void fire_slot_offsets(long long* soff, const std::int32_t* offsets, int B) {
  fire_slot_offsets_kernel<<<1, 1>>>(soff, offsets, B);
  LAUNCH_CHECK();
}
void fire_dbias_reduce(float* dbias, const float* slots, const long long* soff, const std::int32_t* offsets, int B,
                       int NH, int T) {
  const long long P = fire_pairs(T);
  if (P <= 0 || NH <= 0 || B <= 0) return;
  fire_dbias_reduce_kernel<<<blocks_of(NH * P), 256>>>(dbias, slots, soff, offsets, B, NH, P);
  LAUNCH_CHECK();
}

}  // namespace manyadd::kernels::train
