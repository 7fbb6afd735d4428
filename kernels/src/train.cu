// CUDA kernels of learned-model training on varlen packed batches (R real rows, the sequences at their
// row offsets): embedding, RMSNorm, LayerNorm, scale, GEGLU, residual, causal attention per sequence
// (flash style: online softmax forward saving the row log-sum-exp, recomputing backward; its row
// arithmetic is attention_rows.cuh; the embedding's, up to three position levels, through each table
// row's readers in backward, embedding_rows.cuh), softmax cross-entropy on response rows, fixed-order reductions,
// AdamW, and the bf16 casts. fp32 throughout, with bf16 variants (templates on the I/O type: bf16
// inputs widened exactly, fp32 math, bf16 outputs rounded once to nearest even). The matrix products
// are cuBLAS calls in blas.cpp. See train.hpp for the contracts; each kernel's CPU twin is in
// learn/layers.hpp or learn/batch.hpp. The bf16 variants, the attention kernels of attention_rows.cuh,
// LayerNorm, scale, the device-side clipping and the embedding's third position level have NOT RUN ON A
// GPU YET (compiled for sm_90; the attention rows and the embedding replayed on the CPU).
//
// Determinism: no atomics anywhere. Every thread/warp owns its outputs and sums its terms in a fixed
// order; reductions across threads use a fixed grid and a fixed tree, so two runs on the same device
// give bitwise the same results (cuBLAS is run-to-run reproducible on one architecture and SM count:
// see blas.hpp).
#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attention_rows.cuh"
#include "cuda_check.cuh"
#include "embedding_rows.cuh"
#include "manyadd/kernels/train.hpp"

namespace manyadd::kernels::train {
namespace {

int blocks_for(std::int64_t n, int threads) { return int((n + threads - 1) / threads); }

// ---- bf16 <-> float: widening is exact (the bf16 bits are the top half of the float); rounding is to
// nearest, ties to even (cvt.rn.bf16.f32), the rounding of core's float_to_bf16.
__device__ inline float to_f(float x) { return x; }
__device__ inline float to_f(bf16 x) { return __uint_as_float(unsigned(x.bits) << 16); }
template <class T>
__device__ inline T from_f(float x);
template <>
__device__ inline float from_f<float>(float x) {
  return x;
}
template <>
__device__ inline bf16 from_f<bf16>(float x) {
  return bf16{__bfloat16_as_ushort(__float2bfloat16_rn(x))};
}

__global__ void to_bf16_kernel(bf16* out, const float* in, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = from_f<bf16>(in[i]);
}
__global__ void to_f32_kernel(float* out, const bf16* in, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = to_f(in[i]);
}

// Butterfly sum over a warp: every lane ends with the same value (same tree, commutative adds).
__device__ inline float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The same butterfly for the max (exact, so every lane ends with the row max).
__device__ inline float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// ---- embedding: the arithmetic is embedding_rows.cuh -------------------------------------------------
namespace ER = embedding_rows;

__global__ void embedding_forward_kernel(float* out, const std::uint8_t* tok, ER::Levels<const float> p,
                                         const float* wte, int R, int C) {
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)R * C) return;
  out[idx] = ER::forward_entry(tok, wte, p, idx / C, int(idx % C), C);
}

// grid (V + sum of the levels' rows, ceil(C / 128)): block row r owns table row r, thread owns a channel.
__global__ void embedding_backward_kernel(float* dwte, ER::Levels<float> p, ER::Readers rd, const float* dout, int C,
                                          int V) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  ER::backward_entry(dwte, p, rd, dout, blockIdx.x, c, C, V);
}

// ---- RMSNorm: one warp per row -------------------------------------------------------------------------
constexpr int kNormChunk = 256;  // rows per partial sum of dw (RMSNorm) and of dw, db (LayerNorm)

template <class OUT>
__global__ void rmsnorm_forward_kernel(OUT* out, float* rstd, const float* inp, const float* w, int R, int C,
                                       float eps) {
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= R) return;
  const float* x = inp + row * C;
  float ss = 0.f;
  for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
  ss = warp_sum(ss);
  const float r = 1.f / sqrtf(ss / float(C) + eps);
  if (lane == 0) rstd[row] = r;
  OUT* o = out + row * C;
  for (int c = lane; c < C; c += 32) o[c] = from_f<OUT>(w[c] * x[c] * r);
}

// dx_j += w_j g_j r - x_j r^3 / C sum_c g_c w_c x_c   (rmsnorm_backward in layers.hpp)
template <class G>
__global__ void rmsnorm_backward_dx_kernel(float* dinp, const G* dout, const float* inp, const float* w,
                                           const float* rstd, int R, int C) {
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= R) return;
  const float* x = inp + row * C;
  const G* g = dout + row * C;
  float* dx = dinp + row * C;
  const float r = rstd[row];
  float dot = 0.f;
  for (int c = lane; c < C; c += 32) dot += to_f(g[c]) * w[c] * x[c];
  dot = warp_sum(dot);
  const float k = dot * r * r * r / float(C);
  for (int c = lane; c < C; c += 32) dx[c] += w[c] * to_f(g[c]) * r - x[c] * k;
}

// grid (ceil(R / kNormChunk), ceil(C / 128)): partial[chunk, c] = sum over the chunk's rows of g x r
template <class G>
__global__ void rmsnorm_backward_dw_partial(float* partial, const G* dout, const float* inp, const float* rstd,
                                            int R, int C) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const long long lo = (long long)blockIdx.x * kNormChunk;
  const long long hi = min((long long)R, lo + kNormChunk);
  float acc = 0.f;
  for (long long t = lo; t < hi; ++t) acc += to_f(dout[t * C + c]) * inp[t * C + c] * rstd[t];
  partial[(long long)blockIdx.x * C + c] = acc;
}
__global__ void rmsnorm_backward_dw_final(float* dw, const float* partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int k = 0; k < chunks; ++k) acc += partial[(long long)k * C + c];
  dw[c] += acc;
}

// ---- LayerNorm: one warp per row (layernorm_forward/backward in layers.hpp) ----------------------------
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                         const float* b, int R, int C, float eps) {
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= R) return;
  const float* x = inp + row * C;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / float(C);
  float v = 0.f;
  for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
  const float r = 1.f / sqrtf(warp_sum(v) / float(C) + eps);
  if (lane == 0) mean[row] = m, rstd[row] = r;
  float* o = out + row * C;
  for (int c = lane; c < C; c += 32) o[c] = w[c] * (x[c] - m) * r + b[c];
}
// dx_j += r (g_j w_j - mean_c(g_c w_c) - xhat_j mean_c(g_c w_c xhat_c))
__global__ void layernorm_backward_dx_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                             const float* mean, const float* rstd, int R, int C) {
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= R) return;
  const float* x = inp + row * C;
  const float* g = dout + row * C;
  float* dx = dinp + row * C;
  const float m = mean[row], r = rstd[row];
  float sg = 0.f, sgx = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float xh = (x[c] - m) * r;
    sg += g[c] * w[c];
    sgx += g[c] * w[c] * xh;
  }
  sg = warp_sum(sg) / float(C);
  sgx = warp_sum(sgx) / float(C);
  for (int c = lane; c < C; c += 32) {
    const float xh = (x[c] - m) * r;
    dx[c] += r * (g[c] * w[c] - sg - xh * sgx);
  }
}

// grid (ceil(R / kNormChunk), ceil(C / 128)): partial[chunk, c] = the chunk's sum of g xhat, partial[chunks
// + chunk, c] = its sum of g.
__global__ void layernorm_backward_dwdb_partial(float* partial, const float* dout, const float* inp,
                                                const float* mean, const float* rstd, int R, int C) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const long long lo = (long long)blockIdx.x * kNormChunk;
  const long long hi = min((long long)R, lo + kNormChunk);
  float aw = 0.f, ab = 0.f;
  for (long long t = lo; t < hi; ++t) {
    const float g = dout[t * C + c];
    aw += g * ((inp[t * C + c] - mean[t]) * rstd[t]);
    ab += g;
  }
  partial[(long long)blockIdx.x * C + c] = aw;
  partial[((long long)gridDim.x + blockIdx.x) * C + c] = ab;
}
__global__ void layernorm_backward_dwdb_final(float* dw, float* db, const float* partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float aw = 0.f, ab = 0.f;
  for (int k = 0; k < chunks; ++k) aw += partial[(long long)k * C + c], ab += partial[((long long)chunks + k) * C + c];
  dw[c] += aw;
  db[c] += ab;
}

// ---- element-wise ----------------------------------------------------------------------------------------
// The product is rounded on its own (no contraction), as the CPU's s * x.
template <class OUT>
__global__ void scale_forward_kernel(OUT* out, const float* inp, float s, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = from_f<OUT>(__fmul_rn(s, inp[i]));
}
__global__ void scale_backward_kernel(float* dinp, const float* dout, float s, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] = __fadd_rn(dinp[i], __fmul_rn(s, dout[i]));
}
template <class B>
__global__ void residual_kernel(float* out, const float* a, const B* b, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + to_f(b[i]);
}

__device__ inline float gelu_tanh(float x, float* dgelu) {
  const float c = 0.7978845608028654f;  // sqrt(2/pi)
  const float u = c * (x + 0.044715f * x * x * x);
  const float th = tanhf(u);
  if (dgelu) *dgelu = 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * c * (1.f + float(3 * 0.044715) * x * x);
  return 0.5f * x * (1.f + th);
}
template <class T>
__global__ void geglu_forward_kernel(T* out, const T* inp, int R, int F) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)R * F) return;
  const long long t = i / F, f = i % F;
  const T* a = inp + t * 2 * F;
  out[i] = from_f<T>(gelu_tanh(to_f(a[f]), nullptr) * to_f(a[F + f]));
}
// T = float: accumulates into dinp; T = bf16: writes dinp (rounded once).
template <class T, class G>
__global__ void geglu_backward_kernel(T* dinp, const G* dout, const T* inp, int R, int F) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)R * F) return;
  const long long t = i / F, f = i % F;
  const T* a = inp + t * 2 * F;
  T* da = dinp + t * 2 * F;
  const float g = to_f(dout[i]), b = to_f(a[F + f]);
  float d;
  const float ga = gelu_tanh(to_f(a[f]), &d);
  if constexpr (std::is_same_v<T, float>) {
    da[f] += g * b * d;
    da[F + f] += g * ga;
  } else {
    da[f] = from_f<T>(g * b * d);
    da[F + f] = from_f<T>(g * ga);
  }
}

// ---- attention: one warp per (sequence, head, row); the row arithmetic is attention_rows.cuh --------
namespace AR = attention_rows;

// Lane ln's NPL contiguous dims of a row (x points at dim ln NPL), as 16-byte loads (or one smaller
// load when the chunk is smaller): x must be aligned to min(16, NPL sizeof(element)). bf16 pairs sit in
// a 32-bit word low half first (little-endian).
__device__ inline float bf16_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ inline float bf16_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }
template <int NPL>
__device__ inline void load_chunk(float (&a)[NPL], const float* x) {
  if constexpr (NPL == 1) {
    a[0] = x[0];
  } else if constexpr (NPL == 2) {
    const float2 u = *reinterpret_cast<const float2*>(x);
    a[0] = u.x, a[1] = u.y;
  } else {
#pragma unroll
    for (int c = 0; c < NPL / 4; ++c) {
      const float4 u = reinterpret_cast<const float4*>(x)[c];
      a[4 * c] = u.x, a[4 * c + 1] = u.y, a[4 * c + 2] = u.z, a[4 * c + 3] = u.w;
    }
  }
}
template <int NPL>
__device__ inline void load_chunk(float (&a)[NPL], const bf16* x) {
  if constexpr (NPL == 1) {
    a[0] = to_f(x[0]);
  } else if constexpr (NPL == 2) {
    const unsigned u = *reinterpret_cast<const unsigned*>(x);
    a[0] = bf16_lo(u), a[1] = bf16_hi(u);
  } else if constexpr (NPL == 4) {
    const uint2 u = *reinterpret_cast<const uint2*>(x);
    a[0] = bf16_lo(u.x), a[1] = bf16_hi(u.x), a[2] = bf16_lo(u.y), a[3] = bf16_hi(u.y);
  } else {
#pragma unroll
    for (int c = 0; c < NPL / 8; ++c) {
      const uint4 u = reinterpret_cast<const uint4*>(x)[c];
      float* o = a + 8 * c;
      o[0] = bf16_lo(u.x), o[1] = bf16_hi(u.x), o[2] = bf16_lo(u.y), o[3] = bf16_hi(u.y);
      o[4] = bf16_lo(u.z), o[5] = bf16_hi(u.z), o[6] = bf16_lo(u.w), o[7] = bf16_hi(u.w);
    }
  }
}

// The device's warp policy for attention_rows.cuh: this thread is lane `ln`. vec (warp-uniform, set by
// the launcher): HS = 32 NPL and every row pointer 16-byte aligned, so each lane's chunk is whole and
// aligned and loads as load_chunk; otherwise element by element, 0 beyond HS.
struct DeviceWarp {
  static constexpr int kLanes = 1;
  int ln;
  bool vec;
  __device__ int lane(int) const { return ln; }
  __device__ float sum(const float (&part)[1]) const { return warp_sum(part[0]); }
  __device__ float max(const float (&part)[1]) const { return warp_max(part[0]); }
  template <class IO>
  __device__ IO narrow(float x) const {
    return from_f<IO>(x);
  }
  template <int NPL, class IO>
  __device__ void load(float (&a)[NPL], const IO* row, int l, int HS) const {
    if (vec) {
      load_chunk<NPL>(a, row + l * NPL);
      return;
    }
#pragma unroll
    for (int e = 0; e < NPL; ++e) {
      const int c = l * NPL + e;
      a[e] = c < HS ? to_f(row[c]) : 0.f;
    }
  }
  template <int NPL, class IO>
  __device__ void store(IO* row, const float (&a)[NPL], int l, int HS) const {
#pragma unroll
    for (int e = 0; e < NPL; ++e) {
      const int c = l * NPL + e;
      if (c < HS) row[c] = from_f<IO>(a[e]);
    }
  }
  __device__ float exp(float x) const { return expf(x); }
  __device__ float log(float x) const { return logf(x); }
};

constexpr int kAttThreads = 128;  // 4 warps (rows) per block: consecutive rows of one (sequence, head)

// Each warp index w < B NH T (flash kernels: NH R) is one row (whole warps return together: warp_sum
// needs all 32 lanes).
__device__ inline long long warp_index() { return ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32; }

// The tensor-core path's row kernels: one warp per (sequence, head, row) of the (B, NH, T, Tp) scores.
template <class IO>
__global__ void attention_softmax_kernel(IO* P, float* lse, const float* S, long long rows, int T, int Tp, float scale) {
  const long long w = warp_index();
  if (w >= rows) return;
  AR::softmax_warp(DeviceWarp{int(threadIdx.x % 32), false}, P, lse, S, T, Tp, scale, w);
}
template <class IO>
__global__ void attention_dscore_kernel(IO* dS, const float* S, const float* lse, const float* dP, long long rows, int T,
                                        int Tp, float scale) {
  const long long w = warp_index();
  if (w >= rows) return;
  AR::dscore_warp(DeviceWarp{int(threadIdx.x % 32), false}, dS, S, lse, dP, T, Tp, scale, w);
}

// The flash kernels on varlen rows: warp w < NH R finds its sequence, head and row (AR::row_of).
template <int NPL, class IO>
__global__ void attention_forward_kernel(IO* out, float* lse, const IO* q, const IO* k, const IO* v,
                                         const std::int32_t* offsets, int B, int R, int NH, int HS, float scale,
                                         bool vec, AR::Bias bs) {
  const long long w = warp_index();
  if (w >= (long long)NH * R) return;
  AR::forward_warp<NPL>(DeviceWarp{int(threadIdx.x % 32), vec}, out, lse, q, k, v, AR::row_of(w, offsets, B, NH, HS),
                        NH, HS, scale, bs);
}
template <int NPL, class IO>
__global__ void attention_dq_kernel(IO* dq, float* dsum, const IO* dout, const float* lse, const IO* q, const IO* k,
                                    const IO* v, const std::int32_t* offsets, int B, int R, int NH, int HS, float scale,
                                    bool vec, AR::Bias bs) {
  const long long w = warp_index();
  if (w >= (long long)NH * R) return;
  AR::dq_warp<NPL>(DeviceWarp{int(threadIdx.x % 32), vec}, dq, dsum, dout, lse, q, k, v,
                   AR::row_of(w, offsets, B, NH, HS), NH, HS, scale, bs);
}
template <int NPL, class IO>
__global__ void attention_dkv_kernel(IO* dk, IO* dv, const IO* dout, const float* lse, const float* dsum, const IO* q,
                                     const IO* k, const IO* v, const std::int32_t* offsets, int B, int R, int NH,
                                     int HS, float scale, bool vec, AR::Bias bs) {
  const long long w = warp_index();
  if (w >= (long long)NH * R) return;
  AR::dkv_warp<NPL>(DeviceWarp{int(threadIdx.x % 32), vec}, dk, dv, dout, lse, dsum, q, k, v,
                    AR::row_of(w, offsets, B, NH, HS), NH, HS, scale, bs);
}

// ---- cross-entropy: one thread per row ----------------------------------------------------------------
__global__ void crossentropy_forward_kernel(float* losses, float* probs, const float* logits,
                                            const std::int32_t* targets, int R, int V) {
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= R) return;
  const float* z = logits + t * V;
  float* p = probs + t * V;
  float mx = z[0];
  for (int i = 1; i < V; ++i) mx = fmaxf(mx, z[i]);
  float sum = 0.f;
  for (int i = 0; i < V; ++i) sum += (p[i] = expf(z[i] - mx));
  for (int i = 0; i < V; ++i) p[i] /= sum;
  const int tg = targets[t];
  losses[t] = tg >= 0 ? -(z[tg] - mx - logf(sum)) : 0.f;
}
__global__ void crossentropy_backward_kernel(float* dlogits, const float* probs, const std::int32_t* targets,
                                             float scale, int R, int V) {
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= R) return;
  float* d = dlogits + t * V;
  const int tg = targets[t];
  for (int i = 0; i < V; ++i) d[i] = tg >= 0 ? scale * probs[t * V + i] : 0.f;
  if (tg >= 0) d[tg] -= scale;
}

// ---- fixed-order reduction in double ------------------------------------------------------------------
constexpr int kRedBlocks = 256, kRedThreads = 256;
__global__ void reduce_partial_kernel(double* partial, const float* x, long long n, bool sq) {
  __shared__ double sh[kRedThreads];
  double acc = 0;
  for (long long i = (long long)blockIdx.x * kRedThreads + threadIdx.x; i < n; i += (long long)kRedBlocks * kRedThreads) {
    const double v = x[i];
    acc += sq ? v * v : v;
  }
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kRedThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}
__global__ void reduce_final_kernel(double* partial, double* out) {
  double acc = 0;
  for (int b = 0; b < kRedBlocks; ++b) acc += partial[b];
  *out = acc;
}

// ---- AdamW ---------------------------------------------------------------------------------------------
// clip: the factor itself (sumsq null) or computed from *sumsq as learn::adam_scalars does.
__global__ void adamw_kernel(float* p, float* m, float* v, const float* grad, long long n, double clip,
                             const double* sumsq, double grad_clip, float b1, float b2, float eps, float step_size,
                             float inv_sqrt_bc2, float wd) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (sumsq) {
    const double norm = __dsqrt_rn(*sumsq);
    clip = (grad_clip > 0 && norm > grad_clip) ? __ddiv_rn(grad_clip, norm) : 1.0;
  }
  const float g = float(double(grad[i]) * clip);
  const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(__fsub_rn(1.f, b1), g));
  const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.f, b2), g), g));
  m[i] = mi;
  v[i] = vi;
  const float den = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), inv_sqrt_bc2), eps);
  const float upd = __fadd_rn(__fdiv_rn(__fmul_rn(step_size, mi), den), __fmul_rn(wd, p[i]));
  p[i] = __fsub_rn(p[i], upd);
}

}  // namespace

namespace {
void check_levels(int L) {
  if (L < 0 || L > kMaxPosLevels)
    throw std::runtime_error("cuda embedding: position levels must be in [0, " + std::to_string(kMaxPosLevels) +
                             "] (got " + std::to_string(L) + ")");
}
}  // namespace

void embedding_forward(float* out, const std::uint8_t* tok, const std::int32_t* const* pos, int L, const float* wte,
                       const float* const* wpe, int R, int C) {
  check_levels(L);
  ER::Levels<const float> p;
  p.n = L;
  for (int lv = 0; lv < L; ++lv) p.ids[lv] = pos[lv], p.table[lv] = wpe[lv];
  const long long n = (long long)R * C;
  embedding_forward_kernel<<<blocks_for(n, 256), 256>>>(out, tok, p, wte, R, C);
  LAUNCH_CHECK();
}
void embedding_backward(float* dwte, float* const* dwpe, const float* dout, const std::int32_t* const* readers,
                        const std::int32_t* const* starts, int L, int C, int V, const int* rows) {
  check_levels(L);
  ER::Levels<float> p;
  ER::Readers rd;
  p.n = L;
  for (int lv = 0; lv < L; ++lv) p.table[lv] = dwpe[lv], p.rows[lv] = rows[lv];
  for (int k = 0; k <= L; ++k) rd.rows[k] = readers[k], rd.starts[k] = starts[k];
  embedding_backward_kernel<<<dim3(ER::backward_rows(V, p), blocks_for(C, 128)), 128>>>(dwte, p, rd, dout, C, V);
  LAUNCH_CHECK();
}

void convert(bf16* out, const float* in, std::int64_t n) {
  if (n <= 0) return;
  to_bf16_kernel<<<blocks_for(n, 256), 256>>>(out, in, n);
  LAUNCH_CHECK();
}
void convert(float* out, const bf16* in, std::int64_t n) {
  if (n <= 0) return;
  to_f32_kernel<<<blocks_for(n, 256), 256>>>(out, in, n);
  LAUNCH_CHECK();
}

namespace {
template <class OUT>
void rmsnorm_forward_impl(OUT* out, float* rstd, const float* inp, const float* w, int R, int C, float eps) {
  if (R <= 0) return;
  rmsnorm_forward_kernel<<<blocks_for((long long)R * 32, 256), 256>>>(out, rstd, inp, w, R, C, eps);
  LAUNCH_CHECK();
}
template <class G>
void rmsnorm_backward_impl(float* dinp, float* dw, float* scratch, const G* dout, const float* inp, const float* w,
                           const float* rstd, int R, int C) {
  if (R <= 0) return;
  rmsnorm_backward_dx_kernel<<<blocks_for((long long)R * 32, 256), 256>>>(dinp, dout, inp, w, rstd, R, C);
  LAUNCH_CHECK();
  const int chunks = (R + kNormChunk - 1) / kNormChunk;
  rmsnorm_backward_dw_partial<<<dim3(chunks, blocks_for(C, 128)), 128>>>(scratch, dout, inp, rstd, R, C);
  LAUNCH_CHECK();
  rmsnorm_backward_dw_final<<<blocks_for(C, 128), 128>>>(dw, scratch, chunks, C);
  LAUNCH_CHECK();
}
}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int R, int C, float eps) {
  rmsnorm_forward_impl(out, rstd, inp, w, R, C, eps);
}
void rmsnorm_forward(bf16* out, float* rstd, const float* inp, const float* w, int R, int C, float eps) {
  rmsnorm_forward_impl(out, rstd, inp, w, R, C, eps);
}
std::size_t rmsnorm_scratch_floats(int R, int C) {
  return std::size_t((R + kNormChunk - 1) / kNormChunk) * std::size_t(C);
}
void rmsnorm_backward(float* dinp, float* dw, float* scratch, const float* dout, const float* inp, const float* w,
                      const float* rstd, int R, int C) {
  rmsnorm_backward_impl(dinp, dw, scratch, dout, inp, w, rstd, R, C);
}
void rmsnorm_backward(float* dinp, float* dw, float* scratch, const bf16* dout, const float* inp, const float* w,
                      const float* rstd, int R, int C) {
  rmsnorm_backward_impl(dinp, dw, scratch, dout, inp, w, rstd, R, C);
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int R,
                       int C, float eps) {
  if (R <= 0) return;
  layernorm_forward_kernel<<<blocks_for((long long)R * 32, 256), 256>>>(out, mean, rstd, inp, w, b, R, C, eps);
  LAUNCH_CHECK();
}
std::size_t layernorm_scratch_floats(int R, int C) { return 2 * rmsnorm_scratch_floats(R, C); }
void layernorm_backward(float* dinp, float* dw, float* db, float* scratch, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int R, int C) {
  if (R <= 0) return;
  layernorm_backward_dx_kernel<<<blocks_for((long long)R * 32, 256), 256>>>(dinp, dout, inp, w, mean, rstd, R, C);
  LAUNCH_CHECK();
  const int chunks = (R + kNormChunk - 1) / kNormChunk;
  layernorm_backward_dwdb_partial<<<dim3(chunks, blocks_for(C, 128)), 128>>>(scratch, dout, inp, mean, rstd, R, C);
  LAUNCH_CHECK();
  layernorm_backward_dwdb_final<<<blocks_for(C, 128), 128>>>(dw, db, scratch, chunks, C);
  LAUNCH_CHECK();
}

void scale_forward(float* out, const float* inp, float s, std::int64_t n) {
  if (n <= 0) return;
  scale_forward_kernel<<<blocks_for(n, 256), 256>>>(out, inp, s, n);
  LAUNCH_CHECK();
}
void scale_forward(bf16* out, const float* inp, float s, std::int64_t n) {
  if (n <= 0) return;
  scale_forward_kernel<<<blocks_for(n, 256), 256>>>(out, inp, s, n);
  LAUNCH_CHECK();
}
void scale_backward(float* dinp, const float* dout, float s, std::int64_t n) {
  if (n <= 0) return;
  scale_backward_kernel<<<blocks_for(n, 256), 256>>>(dinp, dout, s, n);
  LAUNCH_CHECK();
}

void residual_forward(float* out, const float* a, const float* b, std::int64_t n) {
  if (n <= 0) return;
  residual_kernel<<<blocks_for(n, 256), 256>>>(out, a, b, n);
  LAUNCH_CHECK();
}
void residual_forward(float* out, const float* a, const bf16* b, std::int64_t n) {
  if (n <= 0) return;
  residual_kernel<<<blocks_for(n, 256), 256>>>(out, a, b, n);
  LAUNCH_CHECK();
}

namespace {
template <class T>
void geglu_forward_impl(T* out, const T* inp, int R, int F) {
  if ((long long)R * F <= 0) return;
  geglu_forward_kernel<<<blocks_for((long long)R * F, 256), 256>>>(out, inp, R, F);
  LAUNCH_CHECK();
}
template <class T, class G>
void geglu_backward_impl(T* dinp, const G* dout, const T* inp, int R, int F) {
  if ((long long)R * F <= 0) return;
  geglu_backward_kernel<<<blocks_for((long long)R * F, 256), 256>>>(dinp, dout, inp, R, F);
  LAUNCH_CHECK();
}
}  // namespace

void geglu_forward(float* out, const float* inp, int R, int F) { geglu_forward_impl(out, inp, R, F); }
void geglu_forward(bf16* out, const bf16* inp, int R, int F) { geglu_forward_impl(out, inp, R, F); }
void geglu_backward(float* dinp, const float* dout, const float* inp, int R, int F) {
  geglu_backward_impl(dinp, dout, inp, R, F);
}
void geglu_backward(bf16* dinp, const float* dout, const bf16* inp, int R, int F) {
  geglu_backward_impl(dinp, dout, inp, R, F);
}
void geglu_backward(bf16* dinp, const bf16* dout, const bf16* inp, int R, int F) {
  geglu_backward_impl(dinp, dout, inp, R, F);
}

namespace {
int dims_per_lane_checked(int HS) {
  if (HS < 1 || HS > AR::kMaxHeadDim)
    throw std::runtime_error("cuda attention: d_head must be in [1, " + std::to_string(AR::kMaxHeadDim) + "] (got " +
                             std::to_string(HS) + ")");
  return AR::dims_per_lane(HS);
}
bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
// Whole 16-byte-aligned lane chunks: every dim slot of every lane is a real dim (HS = 32 NPL) and the
// rows start aligned (offsets (off_b + i) D + h HS + ln NPL are multiples of NPL when HS = 32 NPL).
bool vector_loads(int HS, int npl, std::initializer_list<const void*> rows) {
  if (HS != 32 * npl) return false;
  for (const void* p : rows)
    if (!aligned16(p)) return false;
  return true;
}

// One instantiation per NPL in {1, 2, 4, 8, 16} (d_head up to 512).
#define ATT_DISPATCH(NPLV, CALL)                  \
  switch (NPLV) {                                 \
    case 1: { constexpr int N_ = 1; CALL; break; }  \
    case 2: { constexpr int N_ = 2; CALL; break; }  \
    case 4: { constexpr int N_ = 4; CALL; break; }  \
    case 8: { constexpr int N_ = 8; CALL; break; }  \
    default: { constexpr int N_ = 16; CALL; break; } \
  }

template <class IO>
void attention_forward_impl(IO* out, float* lse, const IO* q, const IO* k, const IO* v, const std::int32_t* offsets,
                            int B, int R, int NH, int HS, float scale, const ScoreBias& sb) {
  const int npl = dims_per_lane_checked(HS);
  const long long rows = (long long)NH * R;
  if (rows <= 0 || B <= 0) return;
  const bool vec = vector_loads(HS, npl, {q, k, v});
  const int grid = blocks_for(rows * 32, kAttThreads);
  ATT_DISPATCH(npl, (attention_forward_kernel<N_, IO><<<grid, kAttThreads>>>(out, lse, q, k, v, offsets, B, R, NH, HS,
                                                                              scale, vec, sb)));
  LAUNCH_CHECK();
}
// Pass 1 (dq and dsum per query row), then pass 2 (dk, dv per key row), which reads pass 1's dsum:
// the default stream orders them.
template <class IO>
void attention_backward_impl(IO* dq, IO* dk, IO* dv, float* dsum, const IO* dout, const float* lse, const IO* q,
                             const IO* k, const IO* v, const std::int32_t* offsets, int B, int R, int NH, int HS,
                             float scale, const ScoreBias& sb) {
  const int npl = dims_per_lane_checked(HS);
  const long long rows = (long long)NH * R;
  if (rows <= 0 || B <= 0) return;
  const bool vec = vector_loads(HS, npl, {dout, q, k, v});
  const int grid = blocks_for(rows * 32, kAttThreads);
  ATT_DISPATCH(npl, (attention_dq_kernel<N_, IO><<<grid, kAttThreads>>>(dq, dsum, dout, lse, q, k, v, offsets, B, R,
                                                                         NH, HS, scale, vec, sb)));
  LAUNCH_CHECK();
  ATT_DISPATCH(npl, (attention_dkv_kernel<N_, IO><<<grid, kAttThreads>>>(dk, dv, dout, lse, dsum, q, k, v, offsets, B,
                                                                          R, NH, HS, scale, vec, sb)));
  LAUNCH_CHECK();
}
}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const std::int32_t* offsets, int B, int R, int NH, int HS, float scale, const ScoreBias& sb) {
  attention_forward_impl(out, lse, q, k, v, offsets, B, R, NH, HS, scale, sb);
}
void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const std::int32_t* offsets,
                       int B, int R, int NH, int HS, float scale, const ScoreBias& sb) {
  attention_forward_impl(out, lse, q, k, v, offsets, B, R, NH, HS, scale, sb);
}
void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout, const float* lse,
                        const float* q, const float* k, const float* v, const std::int32_t* offsets, int B, int R,
                        int NH, int HS, float scale, const ScoreBias& sb) {
  attention_backward_impl(dq, dk, dv, scratch, dout, lse, q, k, v, offsets, B, R, NH, HS, scale, sb);
}
void attention_backward(bf16* dq, bf16* dk, bf16* dv, float* scratch, const bf16* dout, const float* lse,
                        const bf16* q, const bf16* k, const bf16* v, const std::int32_t* offsets, int B, int R, int NH,
                        int HS, float scale, const ScoreBias& sb) {
  attention_backward_impl(dq, dk, dv, scratch, dout, lse, q, k, v, offsets, B, R, NH, HS, scale, sb);
}

void attention_softmax_rows(bf16* P, float* lse, const float* S, int B, int T, int NH, int Tp, float scale) {
  const long long rows = (long long)B * NH * T;
  if (rows <= 0) return;
  attention_softmax_kernel<<<blocks_for(rows * 32, kAttThreads), kAttThreads>>>(P, lse, S, rows, T, Tp, scale);
  LAUNCH_CHECK();
}
void attention_dscore_rows(bf16* dS, const float* S, const float* lse, const float* dP, int B, int T, int NH, int Tp,
                           float scale) {
  const long long rows = (long long)B * NH * T;
  if (rows <= 0) return;
  attention_dscore_kernel<<<blocks_for(rows * 32, kAttThreads), kAttThreads>>>(dS, S, lse, dP, rows, T, Tp, scale);
  LAUNCH_CHECK();
}

void crossentropy_forward(float* losses, float* probs, const float* logits, const std::int32_t* targets, int R, int V) {
  crossentropy_forward_kernel<<<blocks_for(R, 256), 256>>>(losses, probs, logits, targets, R, V);
  LAUNCH_CHECK();
}
void crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets, float scale, int R, int V) {
  crossentropy_backward_kernel<<<blocks_for(R, 256), 256>>>(dlogits, probs, targets, scale, R, V);
  LAUNCH_CHECK();
}

std::size_t reduce_scratch_doubles() { return kRedBlocks + 1; }
void reduce_sum(const float* x, std::int64_t n, bool sum_sq, double* scratch, double* out) {
  reduce_partial_kernel<<<kRedBlocks, kRedThreads>>>(scratch, x, n, sum_sq);
  LAUNCH_CHECK();
  reduce_final_kernel<<<1, 1>>>(scratch, out);
  LAUNCH_CHECK();
}
double reduce_sum(const float* x, std::int64_t n, bool sum_sq, double* scratch) {
  reduce_sum(x, n, sum_sq, scratch, scratch + kRedBlocks);
  double r = 0;
  CUDA_CHECK(cudaMemcpy(&r, scratch + kRedBlocks, sizeof(double), cudaMemcpyDeviceToHost));
  return r;
}

void adamw_update(float* p, float* m, float* v, const float* g, std::int64_t n, double clip, float b1, float b2,
                  float eps, float step_size, float inv_sqrt_bc2, float wd) {
  if (n <= 0) return;
  adamw_kernel<<<blocks_for(n, 256), 256>>>(p, m, v, g, n, clip, nullptr, 0.0, b1, b2, eps, step_size, inv_sqrt_bc2,
                                            wd);
  LAUNCH_CHECK();
}
void adamw_update(float* p, float* m, float* v, const float* g, std::int64_t n, const double* sumsq, double grad_clip,
                  float b1, float b2, float eps, float step_size, float inv_sqrt_bc2, float wd) {
  if (n <= 0) return;
  adamw_kernel<<<blocks_for(n, 256), 256>>>(p, m, v, g, n, 1.0, sumsq, grad_clip, b1, b2, eps, step_size, inv_sqrt_bc2,
                                            wd);
  LAUNCH_CHECK();
}

}  // namespace manyadd::kernels::train
