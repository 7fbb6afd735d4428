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
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda_check.cuh"
#include "manyadd/kernels/constructed_attention.hpp"
#include "manyadd/kernels/device.hpp"
#include "mma_tf32.cuh"

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


// ---- The tensor-core kernel -------------------------------------------------------------------
// Shape legend: N tokens, D = q/k width (multiple of 8, <= kMaxD), KS = D / 8 MMA k-steps, 4 heads.
// 1. tc_prepare: one thread per token builds its q (base 2: log2 e folded in), k and v rows for the
//    4 heads from the token and its two IDs (tc::plan_row, the twin's code).
// 2. tc_attention: grid (row blocks, 4 heads), 8 warps of 16 query rows; the warp's q rows sit in
//    registers as tf32 hi/lo MMA fragments; each 64-key tile of k is split into tf32 hi/lo once, in
//    shared memory (row stride D + 4 floats: the fragment loads of a warp hit 32 distinct banks).
//    Scores per (16 x 8) block: 3 KS mma.sync m16n8k8 tf32 with fp32 accumulation, in the order of
//    tc::Part. Then per row: tile max over the 64 keys (quad shuffles; max is exact), and if it is
//    above the running max m, l and acc of every lane are rescaled by exp2f(m - m_tile) (once per
//    rise); p = exp2f(s - m), l += p, acc = fma(p, v, acc) per lane over its 16 keys in the order of
//    constructed_tc.hpp (none when the tile lies more than plan.skip below the running max:
//    tc::tile_skip_threshold); at the end the quad's partials are summed (l0 + l1) + (l2 + l3) and
//    out = acc / l. Every fp32 operation outside the MMA is an explicit _rn intrinsic, so nvcc cannot
//    contract it differently from the twin. Key tiles past a row (j0 > i) are skipped by the twin
//    and are exact no-ops here (max -inf: no rise; p = +0; l + 0 = l; fma(+0, v, acc) = acc).
// Precision: the MMA's internal order and rounding are not documented; the twin bounds them (cuda_engine.cpp).
// exp2f: <= 2 ulp (CUDA C++ Programming Guide, Mathematical Functions), exp2f(0) = 1 and
// exp2f(-inf) = +0 exactly (C99 special values, documented in the CUDA Math API).
namespace {

__global__ void tc_prepare(tc::PlanView P, const std::uint8_t* __restrict__ tokens, const std::int32_t* __restrict__ ids,
                           float* __restrict__ q, float* __restrict__ k, float* __restrict__ v, long long N) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N) return;
  const int tok = tokens[i];
  const std::int32_t id[2] = {ids[2 * i], ids[2 * i + 1]};
  const int D = P.D;
  for (int h = 0; h < 4; ++h) {
    for (int r = 0; r < D; ++r) {
      q[((long long)h * N + i) * D + r] = tc::plan_row(P, tok, id, h * D + r);
      k[((long long)h * N + i) * D + r] = tc::plan_row(P, tok, id, 4 * D + h * D + r);
    }
    v[(long long)h * N + i] = tc::plan_row(P, tok, id, 8 * D + h);
  }
}

// Per head, the far-tile skip thresholds of the plan (by value: 16 bytes of kernel parameters).
struct TileSkip {
  float t[4];
};

template <int D>
__global__ void __launch_bounds__(32 * tc::kWarps) tc_attention(const float* __restrict__ q, const float* __restrict__ k,
                                                                 const float* __restrict__ v, float* __restrict__ out,
                                                                 long long N, long long first, int nblocks, TileSkip skip) {
  constexpr int KS = D / 8, LD = D + 4, BN = tc::kTileKeys, NT = 32 * tc::kWarps;
  __shared__ float khi[BN * LD], klo[BN * LD], vs[BN];
  const int h = blockIdx.y;
  const float skip_h = skip.t[h];
  const long long r0 = first + (long long)(nblocks - 1 - (int)blockIdx.x) * tc::kBlockRows;  // heaviest blocks first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const long long w0 = r0 + 16LL * warp;
  const long long row[2] = {w0 + g, w0 + g + 8};
  const float* qh = q + (long long)h * N * D;
  const float* kh = k + (long long)h * N * D;
  const float* vh = v + (long long)h * N;

  // A fragments (m16n8k8 tf32, row-major 16 x 8): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4).
  std::uint32_t ahi[KS][4], alo[KS][4];
#pragma unroll
  for (int ks = 0; ks < KS; ++ks)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const long long i = row[e & 1];
      const float x = i < N ? qh[i * D + ks * 8 + t + (e & 2 ? 4 : 0)] : 0.f;
      const tc::Split sp = tc::split_tf32(x);
      ahi[ks][e] = __float_as_uint(sp.hi);
      alo[ks][e] = __float_as_uint(sp.lo);
    }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, acc[2] = {0.f, 0.f};
  const long long last = min(N - 1, r0 + tc::kBlockRows - 1);
  for (long long j0 = 0; j0 <= last; j0 += BN) {
    for (int e = threadIdx.x; e < BN * D; e += NT) {
      const long long j = j0 + e / D;
      const tc::Split sp = tc::split_tf32(j < N ? kh[j0 * D + e] : 0.f);
      khi[(e / D) * LD + e % D] = sp.hi;
      klo[(e / D) * LD + e % D] = sp.lo;
    }
    if (threadIdx.x < BN) vs[threadIdx.x] = j0 + threadIdx.x < N ? vh[j0 + threadIdx.x] : 0.f;
    __syncthreads();
    if (w0 < N && j0 <= w0 + 15) {  // warp-uniform: some row of the warp sees the tile
      float s[8][4];
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        float c[4] = {0.f, 0.f, 0.f, 0.f};
        // B fragments (8 x 8, column = key): b0 (dim t, key g), b1 (dim t + 4, key g).
        const int kb = (nb * 8 + g) * LD + t;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
          tc::mma_tf32(c, alo[ks], __float_as_uint(khi[kb + ks * 8]), __float_as_uint(khi[kb + ks * 8 + 4]));
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
          tc::mma_tf32(c, ahi[ks], __float_as_uint(klo[kb + ks * 8]), __float_as_uint(klo[kb + ks * 8 + 4]));
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
          tc::mma_tf32(c, ahi[ks], __float_as_uint(khi[kb + ks * 8]), __float_as_uint(khi[kb + ks * 8 + 4]));
        // C fragment: c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1); causal mask.
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const long long j = j0 + nb * 8 + 2 * t + (e & 1);
          s[nb][e] = j > row[e >> 1] ? -INFINITY : c[e];
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mt = -INFINITY;
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) mt = fmaxf(mt, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        if (mt > m[r]) {  // a rise of the running max: rescale this lane's partial sums
          const float sc = exp2f(__fsub_rn(m[r], mt));
          l[r] = __fmul_rn(l[r], sc);
          acc[r] = __fmul_rn(acc[r], sc);
          m[r] = mt;
        }
        // the far-tile skip (constructed_tc.hpp): quad-uniform (m, mt are the quad's); a fully masked
        // tile (mt = -inf) is skipped too, exactly (its p would all be +0); NaN (rows past N) is not
        if (__fsub_rn(m[r], mt) > skip_h) continue;
        const float mu = m[r] == -INFINITY ? 0.f : m[r];  // rows past N only
#pragma unroll
        for (int nb = 0; nb < 8; ++nb)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float p = exp2f(__fsub_rn(s[nb][2 * r + e], mu));
            l[r] = __fadd_rn(l[r], p);
            acc[r] = __fmaf_rn(p, vs[nb * 8 + 2 * t + e], acc[r]);
          }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float L = __fadd_rn(l[r], __shfl_xor_sync(0xffffffffu, l[r], 1));
    float A = __fadd_rn(acc[r], __shfl_xor_sync(0xffffffffu, acc[r], 1));
    L = __fadd_rn(L, __shfl_xor_sync(0xffffffffu, L, 2));
    A = __fadd_rn(A, __shfl_xor_sync(0xffffffffu, A, 2));
    if (t == 0 && row[r] < N) out[(long long)h * (N - first) + (row[r] - first)] = __fdiv_rn(A, L);
  }
}

}  // namespace

TcTimes constructed_attention_tc(const QkvPlan& plan, const std::uint8_t* tokens, const std::int32_t* ids,
                                 std::int64_t N, std::int64_t first, float* out) {
  plan.check();
  if (N < 1 || first < 0 || first >= N || N > (std::int64_t(1) << 30))
    throw std::invalid_argument("cuda attention: need 0 <= first < N <= 2^30");
  for (std::int64_t i = 0; i < N; ++i)
    if (tokens[i] >= plan.vocab || ids[2 * i] < 0 || ids[2 * i + 1] < 0)
      throw std::invalid_argument("cuda attention: a token outside the vocabulary or a negative ID");
  const int D = plan.D;
  const std::size_t nqk = std::size_t(4) * std::size_t(N) * std::size_t(D), nv = std::size_t(4) * std::size_t(N),
                    no = std::size_t(4) * std::size_t(N - first);
  DeviceBuffer<double> demb(plan.emb.size()), dw(plan.nz_w.size() + 1);
  DeviceBuffer<tc::PlanCode> dcodes(plan.codes.size() + 1);
  DeviceBuffer<std::int32_t> dcol(plan.col_code.size()), dstart(plan.row_start.size()), dnz(plan.nz_col.size() + 1),
      dids(2 * std::size_t(N));
  DeviceBuffer<std::uint8_t> dtok{std::size_t(N)};
  demb.upload(plan.emb.data(), plan.emb.size());
  if (!plan.nz_w.empty()) dw.upload(plan.nz_w.data(), plan.nz_w.size()), dnz.upload(plan.nz_col.data(), plan.nz_col.size());
  if (!plan.codes.empty()) dcodes.upload(plan.codes.data(), plan.codes.size());
  dcol.upload(plan.col_code.data(), plan.col_code.size());
  dstart.upload(plan.row_start.data(), plan.row_start.size());
  dids.upload(ids, 2 * std::size_t(N));
  dtok.upload(tokens, std::size_t(N));
  tc::PlanView P{plan.d, D, plan.vocab, int(plan.codes.size()), demb.get(), dcodes.get(), dcol.get(), dstart.get(), dnz.get(), dw.get()};
  DeviceBuffer<float> dq(nqk), dk(nqk), dv(nv), dout(no);
  TcTimes T;
  DeviceTimer timer;
  timer.start();
  tc_prepare<<<unsigned((N + 255) / 256), 256>>>(P, dtok.get(), dids.get(), dq.get(), dk.get(), dv.get(), N);
  LAUNCH_CHECK();
  T.prep_seconds = timer.stop_seconds();
  const int nblocks = int((N - first + tc::kBlockRows - 1) / tc::kBlockRows);
  const dim3 grid(unsigned(nblocks), 4);
  const long long n = N, f = first;
  const TileSkip sk{{plan.skip[0], plan.skip[1], plan.skip[2], plan.skip[3]}};
  timer.start();
  switch (D) {
#define MANYADD_TC_CASE(W) \
  case W: tc_attention<W><<<grid, 32 * tc::kWarps>>>(dq.get(), dk.get(), dv.get(), dout.get(), n, f, nblocks, sk); break;
    MANYADD_TC_CASE(8)
    MANYADD_TC_CASE(16)
    MANYADD_TC_CASE(24)
    MANYADD_TC_CASE(32)
    MANYADD_TC_CASE(40)
    MANYADD_TC_CASE(48)
#undef MANYADD_TC_CASE
    default: throw std::invalid_argument("cuda attention: width not a multiple of 8 in [8, 48]");
  }
  LAUNCH_CHECK();
  T.attention_seconds = timer.stop_seconds();
  dout.download(out, no);
  return T;
}

}  // namespace manyadd::kernels
