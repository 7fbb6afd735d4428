// CUDA kernels of learned-model training (fp32): embedding, RMSNorm, GEGLU, residual, causal attention
// (flash style: online softmax forward saving the row log-sum-exp, recomputing backward), softmax
// cross-entropy on response rows, fixed-order reductions and AdamW. The matrix products are cuBLAS
// calls in blas.cpp. See train.hpp for the contracts; each kernel's CPU twin is in
// learn/layers.hpp or learn/batch.hpp. NONE OF THIS HAS RUN ON A GPU YET (compiled for sm_90 only).
//
// Determinism: no atomics anywhere. Every thread/warp owns its outputs and sums its terms in a fixed
// order; reductions across threads use a fixed grid and a fixed tree, so two runs on the same device
// give bitwise the same results (cuBLAS is run-to-run reproducible on one architecture and SM count:
// see blas.hpp).
#include <stdexcept>
#include <string>

#include "cuda_check.cuh"
#include "manyadd/kernels/train.hpp"

namespace manyadd::kernels::train {
namespace {

int blocks_for(std::int64_t n, int threads) { return int((n + threads - 1) / threads); }

// Butterfly sum over a warp: every lane ends with the same value (same tree, commutative adds).
__device__ inline float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// ---- embedding ------------------------------------------------------------------------------------
__global__ void embedding_forward_kernel(float* out, const std::uint8_t* tok, const std::int32_t* pos0,
                                         const std::int32_t* pos1, int L, const float* wte, const float* wpe0,
                                         const float* wpe1, int R, int C) {
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)R * C) return;
  const long long t = idx / C;
  const int c = int(idx % C);
  float o = wte[(long long)tok[t] * C + c];  // same order of additions as the CPU twin
  if (L > 0) o += wpe0[(long long)pos0[t] * C + c];
  if (L > 1) o += wpe1[(long long)pos1[t] * C + c];
  out[idx] = o;
}

// grid (V + rows0 + rows1, ceil(C / 128)): block row r owns table row r, thread owns a channel.
__global__ void embedding_backward_kernel(float* dwte, float* dwpe0, float* dwpe1, const float* dout,
                                          const std::uint8_t* tok, const std::int32_t* pos0, const std::int32_t* pos1,
                                          int R, int C, int V, int rows0) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int row = blockIdx.x;
  float acc = 0.f;
  if (row < V) {
    for (int t = 0; t < R; ++t)
      if (tok[t] == row) acc += dout[(long long)t * C + c];
    dwte[(long long)row * C + c] += acc;
    return;
  }
  row -= V;
  const std::int32_t* idx = row < rows0 ? pos0 : pos1;
  float* dw = row < rows0 ? dwpe0 : dwpe1;
  if (row >= rows0) row -= rows0;
  for (int t = 0; t < R; ++t)
    if (idx[t] == row) acc += dout[(long long)t * C + c];
  dw[(long long)row * C + c] += acc;
}

// ---- RMSNorm: one warp per row -------------------------------------------------------------------------
__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* w, int R, int C,
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
  float* o = out + row * C;
  for (int c = lane; c < C; c += 32) o[c] = w[c] * x[c] * r;
}

// dx_j += w_j g_j r - x_j r^3 / C sum_c g_c w_c x_c   (rmsnorm_backward in layers.hpp)
__global__ void rmsnorm_backward_dx_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                           const float* rstd, int R, int C) {
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= R) return;
  const float* x = inp + row * C;
  const float* g = dout + row * C;
  float* dx = dinp + row * C;
  const float r = rstd[row];
  float dot = 0.f;
  for (int c = lane; c < C; c += 32) dot += g[c] * w[c] * x[c];
  dot = warp_sum(dot);
  const float k = dot * r * r * r / float(C);
  for (int c = lane; c < C; c += 32) dx[c] += w[c] * g[c] * r - x[c] * k;
}

constexpr int kNormChunk = 256;  // rows per partial sum of dw
// grid (ceil(R / kNormChunk), ceil(C / 128)): partial[chunk, c] = sum over the chunk's rows of g x r
__global__ void rmsnorm_backward_dw_partial(float* partial, const float* dout, const float* inp, const float* rstd,
                                            int R, int C) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const long long lo = (long long)blockIdx.x * kNormChunk;
  const long long hi = min((long long)R, lo + kNormChunk);
  float acc = 0.f;
  for (long long t = lo; t < hi; ++t) acc += dout[t * C + c] * inp[t * C + c] * rstd[t];
  partial[(long long)blockIdx.x * C + c] = acc;
}
__global__ void rmsnorm_backward_dw_final(float* dw, const float* partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int k = 0; k < chunks; ++k) acc += partial[(long long)k * C + c];
  dw[c] += acc;
}

// ---- element-wise ----------------------------------------------------------------------------------------
__global__ void residual_kernel(float* out, const float* a, const float* b, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__device__ inline float gelu_tanh(float x, float* dgelu) {
  const float c = 0.7978845608028654f;  // sqrt(2/pi)
  const float u = c * (x + 0.044715f * x * x * x);
  const float th = tanhf(u);
  if (dgelu) *dgelu = 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * c * (1.f + float(3 * 0.044715) * x * x);
  return 0.5f * x * (1.f + th);
}
__global__ void geglu_forward_kernel(float* out, const float* inp, int R, int F) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)R * F) return;
  const long long t = i / F, f = i % F;
  const float* a = inp + t * 2 * F;
  out[i] = gelu_tanh(a[f], nullptr) * a[F + f];
}
__global__ void geglu_backward_kernel(float* dinp, const float* dout, const float* inp, int R, int F) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)R * F) return;
  const long long t = i / F, f = i % F;
  const float* a = inp + t * 2 * F;
  float* da = dinp + t * 2 * F;
  float d;
  const float ga = gelu_tanh(a[f], &d);
  da[f] += dout[i] * a[F + f] * d;
  da[F + f] += dout[i] * ga;
}

// ---- attention: one warp per (sequence, head, row); lane owns dims lane, lane + 32, ... (NPL of them) --
__device__ inline void warp_row(int T, int NH, int& b, int& h, int& i, bool& valid, int B) {
  const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  valid = w < (long long)B * NH * T;
  i = int(w % T);
  h = int((w / T) % NH);
  b = int(w / ((long long)T * NH));
}

template <int NPL>
__device__ inline float dot_row(const float (&a)[NPL], const float* x, int HS, int lane) {
  float part = 0.f;
#pragma unroll
  for (int e = 0; e < NPL; ++e) {
    const int c = lane + 32 * e;
    if (c < HS) part += a[e] * x[c];
  }
  return warp_sum(part);
}
template <int NPL>
__device__ inline void load_row(float (&a)[NPL], const float* x, int HS, int lane) {
#pragma unroll
  for (int e = 0; e < NPL; ++e) {
    const int c = lane + 32 * e;
    a[e] = c < HS ? x[c] : 0.f;
  }
}

// Online softmax over keys 0..i (running max mx, sum l, weighted sum acc), keys in order.
template <int NPL>
__global__ void attention_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v, int B,
                                         int T, int NH, int HS, float scale) {
  int b, h, i;
  bool valid;
  warp_row(T, NH, b, h, i, valid, B);
  if (!valid) return;
  const int lane = threadIdx.x % 32, D = NH * HS;
  const long long base = (long long)b * T * D + (long long)h * HS;  // row 0 of this sequence and head
  float qv[NPL], acc[NPL];
  load_row(qv, q + base + (long long)i * D, HS, lane);
#pragma unroll
  for (int e = 0; e < NPL; ++e) acc[e] = 0.f;
  float mx = -INFINITY, l = 0.f;
  for (int j = 0; j <= i; ++j) {
    const float s = dot_row(qv, k + base + (long long)j * D, HS, lane) * scale;
    if (s > mx) {
      const float sc = expf(mx - s);  // 0 on the first key (mx = -inf)
      l *= sc;
#pragma unroll
      for (int e = 0; e < NPL; ++e) acc[e] *= sc;
      mx = s;
    }
    const float p = expf(s - mx);
    l += p;
    const float* vj = v + base + (long long)j * D;
#pragma unroll
    for (int e = 0; e < NPL; ++e) {
      const int c = lane + 32 * e;
      if (c < HS) acc[e] += p * vj[c];
    }
  }
  float* o = out + base + (long long)i * D;
#pragma unroll
  for (int e = 0; e < NPL; ++e) {
    const int c = lane + 32 * e;
    if (c < HS) o[c] = acc[e] / l;
  }
  if (lane == 0) lse[((long long)b * NH + h) * T + i] = mx + logf(l);
}

// Dsum (B, NH, T) = sum_c dout_i,c out_i,c per head: the row term of the softmax backward.
template <int NPL>
__global__ void attention_rowdot_kernel(float* dsum, const float* dout, const float* out, int B, int T, int NH, int HS) {
  int b, h, i;
  bool valid;
  warp_row(T, NH, b, h, i, valid, B);
  if (!valid) return;
  const int lane = threadIdx.x % 32, D = NH * HS;
  const long long r = (long long)b * T * D + (long long)h * HS + (long long)i * D;
  float dov[NPL];
  load_row(dov, dout + r, HS, lane);
  const float d = dot_row(dov, out + r, HS, lane);
  if (lane == 0) dsum[((long long)b * NH + h) * T + i] = d;
}

// dq_i = scale sum_{j <= i} P_ij (dP_ij - Dsum_i) k_j,  P_ij = exp(scale q_i.k_j - lse_i), dP_ij = dout_i.v_j
template <int NPL>
__global__ void attention_dq_kernel(float* dq, const float* dout, const float* dsum, const float* lse, const float* q,
                                    const float* k, const float* v, int B, int T, int NH, int HS, float scale) {
  int b, h, i;
  bool valid;
  warp_row(T, NH, b, h, i, valid, B);
  if (!valid) return;
  const int lane = threadIdx.x % 32, D = NH * HS;
  const long long base = (long long)b * T * D + (long long)h * HS;
  const long long ri = ((long long)b * NH + h) * T + i;
  float qv[NPL], dov[NPL], acc[NPL];
  load_row(qv, q + base + (long long)i * D, HS, lane);
  load_row(dov, dout + base + (long long)i * D, HS, lane);
#pragma unroll
  for (int e = 0; e < NPL; ++e) acc[e] = 0.f;
  const float L = lse[ri], Di = dsum[ri];
  for (int j = 0; j <= i; ++j) {
    const float* kj = k + base + (long long)j * D;
    const float p = expf(dot_row(qv, kj, HS, lane) * scale - L);
    const float ds = p * (dot_row(dov, v + base + (long long)j * D, HS, lane) - Di);
#pragma unroll
    for (int e = 0; e < NPL; ++e) {
      const int c = lane + 32 * e;
      if (c < HS) acc[e] += ds * kj[c];
    }
  }
  float* o = dq + base + (long long)i * D;
#pragma unroll
  for (int e = 0; e < NPL; ++e) {
    const int c = lane + 32 * e;
    if (c < HS) o[c] = scale * acc[e];
  }
}

// For key row j: dv_j = sum_{i >= j} P_ij dout_i ; dk_j = scale sum_{i >= j} P_ij (dP_ij - Dsum_i) q_i
template <int NPL>
__global__ void attention_dkv_kernel(float* dk, float* dv, const float* dout, const float* dsum, const float* lse,
                                     const float* q, const float* k, const float* v, int B, int T, int NH, int HS,
                                     float scale) {
  int b, h, j;
  bool valid;
  warp_row(T, NH, b, h, j, valid, B);
  if (!valid) return;
  const int lane = threadIdx.x % 32, D = NH * HS;
  const long long base = (long long)b * T * D + (long long)h * HS;
  const long long rbase = ((long long)b * NH + h) * T;
  float kv[NPL], vv[NPL], ak[NPL], av[NPL];
  load_row(kv, k + base + (long long)j * D, HS, lane);
  load_row(vv, v + base + (long long)j * D, HS, lane);
#pragma unroll
  for (int e = 0; e < NPL; ++e) ak[e] = av[e] = 0.f;
  for (int i = j; i < T; ++i) {
    const float* qi = q + base + (long long)i * D;
    const float* doi = dout + base + (long long)i * D;
    const float p = expf(dot_row(kv, qi, HS, lane) * scale - lse[rbase + i]);
    const float ds = p * (dot_row(vv, doi, HS, lane) - dsum[rbase + i]);
#pragma unroll
    for (int e = 0; e < NPL; ++e) {
      const int c = lane + 32 * e;
      if (c < HS) {
        av[e] += p * doi[c];
        ak[e] += ds * qi[c];
      }
    }
  }
#pragma unroll
  for (int e = 0; e < NPL; ++e) {
    const int c = lane + 32 * e;
    if (c < HS) {
      dk[base + (long long)j * D + c] = scale * ak[e];
      dv[base + (long long)j * D + c] = av[e];
    }
  }
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
__global__ void reduce_final_kernel(double* partial) {
  double acc = 0;
  for (int b = 0; b < kRedBlocks; ++b) acc += partial[b];
  partial[kRedBlocks] = acc;
}

// ---- AdamW ---------------------------------------------------------------------------------------------
__global__ void adamw_kernel(float* p, float* m, float* v, const float* grad, long long n, double clip, float b1,
                             float b2, float eps, float step_size, float inv_sqrt_bc2, float wd) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
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


void embedding_forward(float* out, const std::uint8_t* tok, const std::int32_t* pos0, const std::int32_t* pos1, int L,
                       const float* wte, const float* wpe0, const float* wpe1, int R, int C) {
  const long long n = (long long)R * C;
  embedding_forward_kernel<<<blocks_for(n, 256), 256>>>(out, tok, pos0, pos1, L, wte, wpe0, wpe1, R, C);
  LAUNCH_CHECK();
}
void embedding_backward(float* dwte, float* dwpe0, float* dwpe1, const float* dout, const std::uint8_t* tok,
                        const std::int32_t* pos0, const std::int32_t* pos1, int L, int R, int C, int V, int rows0,
                        int rows1) {
  const int rows = V + (L > 0 ? rows0 : 0) + (L > 1 ? rows1 : 0);
  embedding_backward_kernel<<<dim3(rows, blocks_for(C, 128)), 128>>>(dwte, dwpe0, dwpe1, dout, tok, pos0, pos1, R, C,
                                                                     V, L > 0 ? rows0 : 0);
  LAUNCH_CHECK();
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int R, int C, float eps) {
  rmsnorm_forward_kernel<<<blocks_for((long long)R * 32, 256), 256>>>(out, rstd, inp, w, R, C, eps);
  LAUNCH_CHECK();
}
std::size_t rmsnorm_scratch_floats(int R, int C) {
  return std::size_t((R + kNormChunk - 1) / kNormChunk) * std::size_t(C);
}
void rmsnorm_backward(float* dinp, float* dw, float* scratch, const float* dout, const float* inp, const float* w,
                      const float* rstd, int R, int C) {
  rmsnorm_backward_dx_kernel<<<blocks_for((long long)R * 32, 256), 256>>>(dinp, dout, inp, w, rstd, R, C);
  LAUNCH_CHECK();
  const int chunks = (R + kNormChunk - 1) / kNormChunk;
  rmsnorm_backward_dw_partial<<<dim3(chunks, blocks_for(C, 128)), 128>>>(scratch, dout, inp, rstd, R, C);
  LAUNCH_CHECK();
  rmsnorm_backward_dw_final<<<blocks_for(C, 128), 128>>>(dw, scratch, chunks, C);
  LAUNCH_CHECK();
}

void residual_forward(float* out, const float* a, const float* b, std::int64_t n) {
  residual_kernel<<<blocks_for(n, 256), 256>>>(out, a, b, n);
  LAUNCH_CHECK();
}
void geglu_forward(float* out, const float* inp, int R, int F) {
  geglu_forward_kernel<<<blocks_for((long long)R * F, 256), 256>>>(out, inp, R, F);
  LAUNCH_CHECK();
}
void geglu_backward(float* dinp, const float* dout, const float* inp, int R, int F) {
  geglu_backward_kernel<<<blocks_for((long long)R * F, 256), 256>>>(dinp, dout, inp, R, F);
  LAUNCH_CHECK();
}

namespace {
int lanes_per_head(int HS) {
  if (HS < 1 || HS > 128) throw std::runtime_error("cuda attention: d_head must be in [1, 128] (got " + std::to_string(HS) + ")");
  return (HS + 31) / 32;
}
}  // namespace

// One instantiation per NPL = ceil(HS / 32) in 1..4 (d_head up to 128).
#define ATT_DISPATCH(NPLV, CALL) \
  switch (NPLV) {                \
    case 1: { constexpr int N_ = 1; CALL; break; } \
    case 2: { constexpr int N_ = 2; CALL; break; } \
    case 3: { constexpr int N_ = 3; CALL; break; } \
    default: { constexpr int N_ = 4; CALL; break; } \
  }

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int B, int T, int NH,
                       int HS) {
  const int npl = lanes_per_head(HS);
  const float scale = 1.f / sqrtf(float(HS));
  const int grid = blocks_for((long long)B * NH * T * 32, 128);
  ATT_DISPATCH(npl, (attention_forward_kernel<N_><<<grid, 128>>>(out, lse, q, k, v, B, T, NH, HS, scale)));
  LAUNCH_CHECK();
}
void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v, int B, int T, int NH,
                        int HS) {
  const int npl = lanes_per_head(HS);
  const float scale = 1.f / sqrtf(float(HS));
  const int grid = blocks_for((long long)B * NH * T * 32, 128);
  ATT_DISPATCH(npl, (attention_rowdot_kernel<N_><<<grid, 128>>>(scratch, dout, out, B, T, NH, HS)));
  LAUNCH_CHECK();
  ATT_DISPATCH(npl, (attention_dq_kernel<N_><<<grid, 128>>>(dq, dout, scratch, lse, q, k, v, B, T, NH, HS, scale)));
  LAUNCH_CHECK();
  ATT_DISPATCH(npl, (attention_dkv_kernel<N_><<<grid, 128>>>(dk, dv, dout, scratch, lse, q, k, v, B, T, NH, HS, scale)));
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
double reduce_sum(const float* x, std::int64_t n, bool sum_sq, double* scratch) {
  reduce_partial_kernel<<<kRedBlocks, kRedThreads>>>(scratch, x, n, sum_sq);
  LAUNCH_CHECK();
  reduce_final_kernel<<<1, 1>>>(scratch);
  LAUNCH_CHECK();
  double r = 0;
  CUDA_CHECK(cudaMemcpy(&r, scratch + kRedBlocks, sizeof(double), cudaMemcpyDeviceToHost));
  return r;
}

void adamw_update(float* p, float* m, float* v, const float* g, std::int64_t n, double clip, float b1, float b2,
                  float eps, float step_size, float inv_sqrt_bc2, float wd) {
  adamw_kernel<<<blocks_for(n, 256), 256>>>(p, m, v, g, n, clip, b1, b2, eps, step_size, inv_sqrt_bc2, wd);
  LAUNCH_CHECK();
}

}  // namespace manyadd::kernels::train
