// Causal real-softmax attention for the constructed model's 4 heads, flash-attention style: each
// thread owns one query row and streams over all keys j <= i in shared-memory tiles with an online
// softmax (running max mx, running sum l, running weighted value sum acc) — no N x N matrix.
//
// Shape legend: N tokens, D = query/key width (<= kMaxD, heads padded with zeros), 4 heads.
//
// Accumulation scheme and why float32 is enough (N = 2,011,005, lambda = 12):
// one thread sums one row's terms in key order, exactly the sequential order for which the
// certificate's floating-point bound (proofs-check/src/certificate.cpp, "Part 3") was derived:
// scores are D-term dot products (gamma_D + 4r relative, r = 2^-24), each weight is exp(s - mx).
// The online softmax differs from the dense engine in one way: when a new maximum appears, l and acc
// are rescaled by sc = exp(mx_old - mx_new). The error of exp itself is common to l and acc and
// cancels in out = acc / l; the two multiplications add one rounding each (r relative). In this
// model the BOS key (j = 0, processed first) scores lambda P, the top score, which the matched keys
// tie (docs/construction.md, Attention: BOS gets sqrt(lambda P) IS_BOS on the key side), so after
// j = 0 the running max rises only by score rounding (<= 2 eta), rarely, and each rise costs <= 2r
// in the ratio. Each addition to a
// positive running sum errs by at most min(r |sum|, |term|); this holds for any order of positive
// terms (and for pairwise combination), so the bound r * (number of additions) * sum, i.e.
// gamma_N ~ N r = 2e6 * 6e-8 = 0.12 relative for the sums z and acc, is what the certificate
// already charges (head_box). That is why its float32 margin (Part 3, name "float32") is the one to
// read for this engine: if it is positive for the shape, float32 here predicts correctly, up to the
// extra rescale factor, which is not yet in the certificate. NOT YET CHECKED ON A DEVICE.
#include <stdexcept>
#include <string>

#include "cuda_check.cuh"
#include "manyadd/kernels/constructed_attention.hpp"
#include "manyadd/kernels/device.hpp"

namespace manyadd::kernels {
namespace {

__device__ inline float exp_(float x) { return expf(x); }
__device__ inline double exp_(double x) { return exp(x); }

template <typename T>
struct Tile;  // keys per tile: float 128 (24 KiB of keys), double 64 (24 KiB)
template <>
struct Tile<float> { static constexpr int n = 128; };
template <>
struct Tile<double> { static constexpr int n = 64; };

// grid (ceil((N - first) / TILE), 4 heads), block TILE threads: thread t owns query row
// i = first + blockIdx.x * TILE + t of head blockIdx.y.
// D is a compile-time multiple of 8 (heads zero-padded on the host) so that the query row lives in
// registers and the dot product unrolls.
template <typename T, int D>
__global__ void attention_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                 T* __restrict__ out, long long N, long long first) {
  constexpr int TILE = Tile<T>::n;
  __shared__ T ks[TILE * D];  // (TILE, D) keys of the tile
  __shared__ T vs[TILE];          // (TILE) values
  const int h = blockIdx.y;
  const long long i = first + (long long)blockIdx.x * TILE + threadIdx.x;
  const T* qh = q + (long long)h * N * D;
  const T* kh = k + (long long)h * N * D;
  const T* vh = v + (long long)h * N;
  T qi[D];
#pragma unroll
  for (int c = 0; c < D; ++c) qi[c] = i < N ? qh[i * D + c] : T(0);
  const long long last = min(N - 1, first + (long long)(blockIdx.x + 1) * TILE - 1);  // block's last query
  T mx = -INFINITY, l = 0, acc = 0;
  for (long long j0 = 0; j0 <= last; j0 += TILE) {
    for (int t = threadIdx.x; t < TILE * D; t += TILE) {
      const long long j = j0 + t / D;
      ks[t] = j < N ? kh[j * D + t % D] : T(0);
    }
    vs[threadIdx.x] = j0 + threadIdx.x < N ? vh[j0 + threadIdx.x] : T(0);
    __syncthreads();
    if (i < N && j0 <= i) {
      const int jn = (int)min((long long)TILE, i - j0 + 1);
      for (int jj = 0; jj < jn; ++jj) {
        T s = 0;
#pragma unroll
        for (int c = 0; c < D; ++c) s += qi[c] * ks[jj * D + c];
        if (s > mx) {
          const T sc = exp_(mx - s);
          l *= sc;
          acc *= sc;
          mx = s;
        }
        const T p = exp_(s - mx);
        l += p;
        acc += p * vs[jj];
      }
    }
    __syncthreads();
  }
  if (i < N) out[(long long)h * (N - first) + (i - first)] = acc / l;
}

template <typename T>
double run(const T* q, const T* k, const T* v, T* out, int D, std::int64_t N, std::int64_t first) {
  if (D < 8 || D > kMaxD || D % 8) throw std::runtime_error("cuda attention: query/key width not a multiple of 8 in [8, 48]");
  const std::size_t nqk = std::size_t(4) * std::size_t(N) * std::size_t(D), nv = std::size_t(4) * std::size_t(N),
                    no = std::size_t(4) * std::size_t(N - first);
  DeviceBuffer<T> dq(nqk), dk(nqk), dv(nv), dout(no);
  dq.upload(q, nqk), dk.upload(k, nqk), dv.upload(v, nv);
  constexpr int TILE = Tile<T>::n;
  const dim3 grid(unsigned((N - first + TILE - 1) / TILE), 4);
  DeviceTimer timer;
  timer.start();
  const long long n = N, f = first;
  switch (D) {
    case 8: attention_kernel<T, 8><<<grid, TILE>>>(dq.get(), dk.get(), dv.get(), dout.get(), n, f); break;
    case 16: attention_kernel<T, 16><<<grid, TILE>>>(dq.get(), dk.get(), dv.get(), dout.get(), n, f); break;
    case 24: attention_kernel<T, 24><<<grid, TILE>>>(dq.get(), dk.get(), dv.get(), dout.get(), n, f); break;
    case 32: attention_kernel<T, 32><<<grid, TILE>>>(dq.get(), dk.get(), dv.get(), dout.get(), n, f); break;
    case 40: attention_kernel<T, 40><<<grid, TILE>>>(dq.get(), dk.get(), dv.get(), dout.get(), n, f); break;
    case 48: attention_kernel<T, 48><<<grid, TILE>>>(dq.get(), dk.get(), dv.get(), dout.get(), n, f); break;
    default: throw std::runtime_error("cuda attention: width not a multiple of 8 in [8, 48]");
  }
  LAUNCH_CHECK();
  const double seconds = timer.stop_seconds();
  dout.download(out, no);
  return seconds;
}

}  // namespace

double constructed_attention(const float* q, const float* k, const float* v, float* out, int D, std::int64_t N,
                             std::int64_t first) {
  return run(q, k, v, out, D, N, first);
}
double constructed_attention(const double* q, const double* k, const double* v, double* out, int D, std::int64_t N,
                             std::int64_t first) {
  return run(q, k, v, out, D, N, first);
}

}  // namespace manyadd::kernels
