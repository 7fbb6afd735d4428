// The fused tensor-core attention on the device: the CTA and warp policies of flash_tc.cuh (mma.sync
// m16n8k16 bf16 -> fp32, ldmatrix, cp.async, quad shuffles), its three kernels (forward; backward dq by
// query blocks; backward dk, dv by key blocks) and their launchers (flash_tc.hpp). NOT RUN ON A GPU YET:
// compiled for sm_90; the same arithmetic is replayed on the CPU by tests/test_cuda_train_kernels.cpp.
#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "cuda_check.cuh"
#include "flash_tc.cuh"
#include "manyadd/kernels/flash_tc.hpp"

namespace manyadd::kernels::flash {
namespace {
namespace F = flash_tc;
using F::u16;
using F::u32;

// This thread as lane `ln` of its warp.
struct DevWarp {
  static constexpr int kLanes = 1;
  int ln;
  __device__ int lane(int) const { return ln; }
  template <int H>
  __device__ void mma(float (&d)[1][4], const u32 (&a)[1][4], const u32 (&b)[1][4]) const {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3])
        : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "r"(b[0][2 * H]), "r"(b[0][2 * H + 1]));
  }
  __device__ void ldsm_x4(u32 (&r)[1][4], const u16* const (&p)[1]) const {
    const u32 s = u32(__cvta_generic_to_shared(p[0]));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0][0]), "=r"(r[0][1]), "=r"(r[0][2]), "=r"(r[0][3])
                 : "r"(s));
  }
  __device__ void ldsm_x4_t(u32 (&r)[1][4], const u16* const (&p)[1]) const {
    const u32 s = u32(__cvta_generic_to_shared(p[0]));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0][0]), "=r"(r[0][1]), "=r"(r[0][2]), "=r"(r[0][3])
                 : "r"(s));
  }
  __device__ void quad_max(float (&x)[1]) const {
    x[0] = F::max_f(x[0], __shfl_xor_sync(0xffffffffu, x[0], 1));
    x[0] = F::max_f(x[0], __shfl_xor_sync(0xffffffffu, x[0], 2));
  }
  __device__ void quad_sum(float (&x)[1]) const {
    x[0] = __fadd_rn(x[0], __shfl_xor_sync(0xffffffffu, x[0], 1));
    x[0] = __fadd_rn(x[0], __shfl_xor_sync(0xffffffffu, x[0], 2));
  }
  __device__ float warp_sum(const float (&part)[1]) const {
    float x = part[0];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
  }
  __device__ float exp2(float x) const { return exp2f(x); }
  __device__ float log2(float x) const { return log2f(x); }
  __device__ u32 pack(float lo, float hi) const {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo, round to nearest even
    return *reinterpret_cast<const u32*>(&v);
  }
  __device__ void st32(u16* p, u32 v) const { *reinterpret_cast<u32*>(p) = v; }
};

// This thread's warp and itself; fills by cp.async (16 bytes, zeros where the source is not read).
struct DevCta {
  using W = DevWarp;
  template <int WARPS>
  __host__ __device__ static constexpr int slots() {
    return 1;
  }
  __device__ int warp_begin() const { return int(threadIdx.x / 32); }
  __device__ int warp_end() const { return int(threadIdx.x / 32) + 1; }
  __device__ int slot(int) const { return 0; }
  __device__ int thread_begin() const { return int(threadIdx.x); }
  __device__ int thread_end() const { return int(threadIdx.x) + 1; }
  __device__ W warp(int) const { return W{int(threadIdx.x % 32)}; }
  __device__ void sync() const { __syncthreads(); }
  __device__ void copy16(u16* dst, const u16* src, bool valid) const {
    const u32 s = u32(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
  }
  __device__ void commit() const { asm volatile("cp.async.commit_group;\n" ::); }
  template <int N>
  __device__ void wait() const {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
  }
};

template <int HSP, int V>
__global__ void __launch_bounds__(F::Cfg<HSP>::THREADS) forward_kernel(F::Params p) {
  extern __shared__ __align__(16) char smem[];
  DevCta cta;
  F::forward_cta<HSP, V>(cta, smem, p, int(blockIdx.x), int(blockIdx.y));
}
template <int HSP, int V>
__global__ void __launch_bounds__(F::Cfg<HSP>::THREADS) dq_kernel(F::Params p) {
  extern __shared__ __align__(16) char smem[];
  DevCta cta;
  F::dq_cta<HSP, V>(cta, smem, p, int(blockIdx.x), int(blockIdx.y));
}
template <int HSP, int V>
__global__ void __launch_bounds__(F::Cfg<HSP>::THREADS) dkv_kernel(F::Params p) {
  extern __shared__ __align__(16) char smem[];
  DevCta cta;
  F::dkv_cta<HSP, V>(cta, smem, p, int(blockIdx.x), int(blockIdx.y));
}

// A launch of kernel k with the shared memory it needs (above 48 KB a kernel must opt in, once).
template <class Kernel>
void launch(Kernel k, int smem, int threads, const F::Params& p, int BR) {
  CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(unsigned(F::grid_blocks(p.B, p.R, BR)), unsigned(p.NH));
  k<<<grid, threads, smem>>>(p);
  LAUNCH_CHECK();
}

int checked_head(int HS) {
  if (HS < 1 || HS > F::kMaxHeadDim)
    throw std::runtime_error("flash attention: d_head must be in [1, " + std::to_string(F::kMaxHeadDim) + "] (got " +
                             std::to_string(HS) + ")");
  return F::padded_head(HS);
}
bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
// 16-byte fills: whole 8-element chunks of a head, every row start 16-byte aligned.
bool vec_ok(int NH, int HS, std::initializer_list<const void*> ptrs) {
  if (HS % 8 != 0 || (NH * HS) % 8 != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

#define FLASH_DISPATCH_H(HSPV, CALL)               \
  switch (HSPV) {                                  \
    case 16: { constexpr int H_ = 16; CALL; break; }   \
    case 32: { constexpr int H_ = 32; CALL; break; }   \
    case 64: { constexpr int H_ = 64; CALL; break; }   \
    case 128: { constexpr int H_ = 128; CALL; break; } \
    case 256: { constexpr int H_ = 256; CALL; break; } \
    default: { constexpr int H_ = 512; CALL; break; }  \
  }
// Every (head size, variant) instance: V_ the compile-time variant (flash_tc.cuh: kBias | kF32Grad).
#define FLASH_DISPATCH(HSPV, VV, CALL)                                                  \
  switch (VV) {                                                                         \
    case 0: { constexpr int V_ = 0; FLASH_DISPATCH_H(HSPV, CALL); break; }                \
    case F::kBias: { constexpr int V_ = F::kBias; FLASH_DISPATCH_H(HSPV, CALL); break; }    \
    case F::kF32Grad: { constexpr int V_ = F::kF32Grad; FLASH_DISPATCH_H(HSPV, CALL); break; } \
    default: { constexpr int V_ = F::kBias | F::kF32Grad; FLASH_DISPATCH_H(HSPV, CALL); break; } \
  }
}  // namespace

void attention_forward(bf16* out, float* lse2, const bf16* q, const bf16* k, const bf16* v,
                       const std::int32_t* offsets, int B, int R, int NH, int HS, float scale, const ScoreBias& sb) {
  const int hsp = checked_head(HS);
  if (B <= 0 || R <= 0 || NH <= 0) return;
  F::Params p;
  p.q = reinterpret_cast<const u16*>(q), p.k = reinterpret_cast<const u16*>(k), p.v = reinterpret_cast<const u16*>(v);
  p.out = reinterpret_cast<u16*>(out), p.lse = lse2, p.off = offsets;
  p.B = B, p.R = R, p.NH = NH, p.HS = HS, p.scale = scale, p.c2 = F::scale_log2e(scale);
  p.bias = sb.bias, p.bias_stride = sb.stride;
  p.vec = vec_ok(NH, HS, {q, k, v});
  // (the forward has no kF32Grad instances: its variant is kBias or 0)
  if (p.bias)
    FLASH_DISPATCH_H(hsp, (launch(forward_kernel<H_, F::kBias>, F::Cfg<H_>::fwd_smem, F::Cfg<H_>::THREADS, p,
                                  F::Cfg<H_>::BR)))
  else
    FLASH_DISPATCH_H(hsp, (launch(forward_kernel<H_, 0>, F::Cfg<H_>::fwd_smem, F::Cfg<H_>::THREADS, p, F::Cfg<H_>::BR)))
}

namespace {
// dq, dk: bf16 (dq16, dk16) or fp32 (dq32, dk32), the other pair null.
void backward(u16* dq16, u16* dk16, float* dq32, float* dk32, bf16* dv, float* dsum, const bf16* dout, const bf16* out,
              const float* lse2, const bf16* q, const bf16* k, const bf16* v, const std::int32_t* offsets, int B, int R,
              int NH, int HS, float scale, const ScoreBias& sb) {
  const int hsp = checked_head(HS);
  if (B <= 0 || R <= 0 || NH <= 0) return;
  F::Params p;
  p.q = reinterpret_cast<const u16*>(q), p.k = reinterpret_cast<const u16*>(k), p.v = reinterpret_cast<const u16*>(v);
  p.o = reinterpret_cast<const u16*>(out), p.dout = reinterpret_cast<const u16*>(dout);
  p.dq = dq16, p.dk = dk16, p.dq32 = dq32, p.dk32 = dk32, p.dv = reinterpret_cast<u16*>(dv);
  p.lse = const_cast<float*>(lse2), p.dsum = dsum, p.off = offsets;  // the backward only reads lse
  p.bias = sb.bias, p.bias_stride = sb.stride, p.dslots = sb.dslots, p.soff = sb.soff;
  p.B = B, p.R = R, p.NH = NH, p.HS = HS, p.scale = scale, p.c2 = F::scale_log2e(scale);
  p.vec = vec_ok(NH, HS, {q, k, v, dout});
  // dq first: it writes D, which the dk/dv kernel reads (the default stream orders them).
  const int var = F::variant(p);
  FLASH_DISPATCH(hsp, var, (launch(dq_kernel<H_, V_>, F::Cfg<H_>::dq_smem, F::Cfg<H_>::THREADS, p, F::Cfg<H_>::BR)));
  FLASH_DISPATCH(hsp, var, (launch(dkv_kernel<H_, V_>, F::Cfg<H_>::dkv_smem, F::Cfg<H_>::THREADS, p, F::Cfg<H_>::BR)));
}
}  // namespace

void attention_backward(bf16* dq, bf16* dk, bf16* dv, float* dsum, const bf16* dout, const bf16* out,
                        const float* lse2, const bf16* q, const bf16* k, const bf16* v, const std::int32_t* offsets,
                        int B, int R, int NH, int HS, float scale, const ScoreBias& sb) {
  backward(reinterpret_cast<u16*>(dq), reinterpret_cast<u16*>(dk), nullptr, nullptr, dv, dsum, dout, out, lse2, q, k, v,
           offsets, B, R, NH, HS, scale, sb);
}
void attention_backward(float* dq, float* dk, bf16* dv, float* dsum, const bf16* dout, const bf16* out,
                        const float* lse2, const bf16* q, const bf16* k, const bf16* v, const std::int32_t* offsets,
                        int B, int R, int NH, int HS, float scale, const ScoreBias& sb) {
  backward(nullptr, nullptr, dq, dk, dv, dsum, dout, out, lse2, q, k, v, offsets, B, R, NH, HS, scale, sb);
}

}  // namespace manyadd::kernels::flash
