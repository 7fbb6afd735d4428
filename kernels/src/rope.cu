// RoPE's kernels (train.hpp: rope_forward, rope_backward): every (row, head, pair) of a varlen (R, NH HS)
// buffer turned by its row's index within its sequence; the arithmetic is rope_rows.cuh (replayed on the
// host by tests/test_cuda_train_kernels.cpp), the CPU twin learn::rope_rotate. Element-wise: one thread
// per pair, fp32 in, fp32 or bf16 out (the fp32 result rounded once, to nearest even), in place allowed
// (a thread reads its pair before it writes it, and no other thread touches it). NOT RUN ON A GPU YET
// (compiled for sm_90; the arithmetic replayed on the CPU bit for bit).
#include <cuda_bf16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda_check.cuh"
#include "manyadd/kernels/train.hpp"
#include "rope_rows.cuh"

namespace manyadd::kernels::train {
namespace {

namespace RR = rope_rows;

__device__ inline void store(float* p, float x) { *p = x; }
__device__ inline void store(bf16* p, float x) { *p = bf16{__bfloat16_as_ushort(__float2bfloat16_rn(x))}; }

template <class OUT>
__global__ void rope_kernel(OUT* out, const float* in, const float* cs, const float* sn, const std::int32_t* offsets,
                            int B, int NH, int HS, int sign, long long n) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const RR::Pair p = RR::rotate_entry(in, cs, sn, offsets, B, NH, HS, sign, e);
  store(out + p.at, p.x0);
  store(out + p.at + 1, p.x1);
}

template <class OUT>
void rope_launch(OUT* out, const float* in, const float* cs, const float* sn, const std::int32_t* offsets, int B, int R,
                 int NH, int HS, int sign) {
  if (HS < 2 || HS % 2 != 0)
    throw std::runtime_error("cuda rope: d_head must be even and >= 2 (got " + std::to_string(HS) + ")");
  const long long n = (long long)R * NH * (HS / 2);
  if (n <= 0 || B <= 0) return;
  rope_kernel<<<int((n + 255) / 256), 256>>>(out, in, cs, sn, offsets, B, NH, HS, sign, n);
  LAUNCH_CHECK();
}

}  // namespace

void rope_forward(float* out, const float* in, const float* cs, const float* sn, const std::int32_t* offsets, int B,
                  int R, int NH, int HS) {
  rope_launch(out, in, cs, sn, offsets, B, R, NH, HS, +1);
}
void rope_forward(bf16* out, const float* in, const float* cs, const float* sn, const std::int32_t* offsets, int B,
                  int R, int NH, int HS) {
  rope_launch(out, in, cs, sn, offsets, B, R, NH, HS, +1);
}
void rope_backward(float* dx, const float* dy, const float* cs, const float* sn, const std::int32_t* offsets, int B,
                   int R, int NH, int HS) {
  rope_launch(dx, dy, cs, sn, offsets, B, R, NH, HS, -1);
}
void rope_backward(bf16* dx, const float* dy, const float* cs, const float* sn, const std::int32_t* offsets, int B,
                   int R, int NH, int HS) {
  rope_launch(dx, dy, cs, sn, offsets, B, R, NH, HS, -1);
}

}  // namespace manyadd::kernels::train
