// Every CUDA training kernel (kernels/src/train.cu, blas.cpp, attention_gemm.cpp) against its CPU twin
// in learn/layers.hpp or learn/batch.hpp, on random inputs. Suites named *Gpu need a device and skip
// (with the reason) without one. The other suites run everywhere: host replays of the attention
// kernels (kernels/src/attention_rows.cuh executed lane by lane on the CPU; the tensor-core path's
// steps, kernels/src/attention_gemm_steps.hpp, with a reference GEMM of cuBLAS's conventions) against
// the reference, and controls showing that the bf16 tolerances below accept an fp32 CPU evaluation of
// each kernel and reject wrong results.
//
// fp32 kernels (the suites before "bf16"): errors relative to the largest entry of the CPU result
// (max |gpu - cpu| / max |cpu|), the scale at which fp32 rounding acts; each test says why.
//
// bf16 kernels: the CPU twin is the layers.hpp function evaluated in double on the very values the
// kernel reads (bf16 inputs are exact bf16 values, so the twin and the kernel start from the same
// numbers) -- "ref" below. Why the tolerances are what they are:
//  * A product of two bf16 numbers is exact in fp32 (8 + 8 significant bits <= 24), so a GEMM or a dot
//    product over bf16 inputs differs from the exact one only by its fp32 accumulation: at most
//    (K + 2) u sum |terms| for K terms summed in any order, u the unit roundoff. u = 2^-24 for
//    round-to-nearest fp32 arithmetic (our kernels); u = 2^-23 for tensor-core GEMMs, whose
//    accumulation is not documented as round-to-nearest (published measurements of earlier generations
//    found truncation).
//  * Element-wise math (exp, tanh, sqrt, division) adds the stated ulps of the CUDA functions; each
//    kernel's bound below is the first-order sum of its roundings, derived from its operations, and is
//    doubled (margin for second-order terms and for a rounding the count missed). Worst-case bounds
//    are far above typical errors (~ sqrt(K) u), but far below what a bug gives (wrong index, transpose,
//    scale, mask: O(1) relative, or 1e-3 for a 0.1% scale error; the controls show such failures).
//  * A bf16 output is the kernel's fp32 value y rounded once: |out - ref| <= tol + half a bf16 ulp of
//    |ref| + tol (every element). And out != bf16(ref) (a "flip") only where y and ref straddle a
//    rounding boundary, with probability ~ |y - ref| / ulp. Flips are counted over the "conditioned"
//    elements, whose bound is below a quarter of a bf16 ulp: there typical fp32 errors (~ sqrt(K) u of
//    sum |terms|, ~1e-6 relative) give ~1e-6 / 4e-3: expect < 1%, test < 2% over the test's conditioned
//    elements. Elsewhere the fp32 value itself is uncertain at the bf16 scale (cancellation: gelu(x) at
//    x < -3, an attention output or gradient far smaller than its terms) and flips are expected; the
//    per-element bound is the check there. A rounding bug (truncation, a double rounding through a
//    narrower type) flips ~half of the conditioned elements.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

// The kernels' gradient-slot stores (score_bias.hpp's MANYADD_SLOT_STORE), counted per slot while a
// replay runs with a bias: every slot must be stored exactly once (a second store of the same value
// would pass every value check, and would be a race on the device). skip: the index of a slot whose
// store is dropped (the control of a missing slot: it must stay NaN and fail the check).
namespace slot_stores {
inline float* base = nullptr;  // null: not counting
inline std::vector<int> counts;
inline long long outside = 0, skip = -1;
inline void store(float* p, float x) {
  if (base) {
    const long long i = p - base;
    if (i == skip) return;
    if (i < 0 || i >= (long long)counts.size()) ++outside;
    else ++counts[std::size_t(i)];
  }
  *p = x;
}
// Starts counting the stores into slots (n of them).
inline void start(float* slots, std::size_t n) { base = slots, counts.assign(n, 0), outside = 0; }
// Stops; returns how many slots were not stored exactly once, plus the stores outside them.
inline std::size_t stop() {
  base = nullptr;
  std::size_t bad = std::size_t(outside);
  for (int c : counts) bad += c != 1;
  return bad;
}
}  // namespace slot_stores
#define MANYADD_SLOT_STORE(p, x) ::slot_stores::store((p), (x))

#include "attention_rows.cuh"  // kernels/src: the attention kernels' row arithmetic, replayed below
#include "cuda_train_test_util.hpp"
#include "attention_gemm_steps.hpp"  // kernels/src: the tensor-core attention's steps, replayed below
#include "embedding_rows.cuh"  // kernels/src: the embedding kernels' arithmetic, replayed below
#include "flash_tc.cuh"  // kernels/src: the tensor-core flash attention's arithmetic, replayed below
#include "rope_rows.cuh"  // kernels/src: the RoPE kernels' arithmetic, replayed below
#include "fire_rows.cuh"  // kernels/src: FIRE's kernels' arithmetic, replayed below
#include "manyadd/core/safetensors.hpp"
#include "manyadd/kernels/attention_gemm.hpp"
#include "manyadd/kernels/bf16.hpp"
#include "manyadd/kernels/blas.hpp"
#include "manyadd/kernels/device.hpp"
#include "manyadd/kernels/flash_tc.hpp"
#include "manyadd/kernels/train.hpp"
#include "manyadd/learn/devices/batch.hpp"
#include "manyadd/learn/decoder/layers.hpp"
#include "manyadd/learn/runs/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;
namespace K = manyadd::kernels::train;
namespace AR = manyadd::kernels::attention_rows;
namespace AG = manyadd::kernels::attention_gemm_steps;
namespace ER = manyadd::kernels::embedding_rows;
namespace FTC = manyadd::kernels::flash_tc;
namespace RR = manyadd::kernels::rope_rows;
namespace FR = manyadd::kernels::fire_rows;
using kernels::bf16;

namespace {

template <class T>
struct Dev {  // device copy of a host vector
  kernels::DeviceBuffer<T> buf;
  T* p = nullptr;
  std::size_t n = 0;
  explicit Dev(const std::vector<T>& h) : buf(h.size()), p(buf.get()), n(h.size()) { buf.upload(h.data(), n); }
  explicit Dev(std::size_t count) : buf(count), p(buf.get()), n(count) { buf.zero(); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    buf.download(h.data(), n);
    return h;
  }
};
std::vector<float> randn(std::size_t n, std::uint32_t seed, float sd = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
double rel_err(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  double m = 0, e = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    m = std::max(m, double(std::abs(cpu[i])));
    e = std::max(e, double(std::abs(gpu[i] - cpu[i])));
  }
  return m > 0 ? e / m : e;
}

// ---- embedding: one random case with L position levels, and its CPU twin's results ----------------------
struct EmbeddingCase {
  int L, R = 900, C = 96, V = 14, rows[K::kMaxPosLevels] = {21, 11, 17};
  std::vector<std::uint8_t> tok;
  std::vector<std::int32_t> ids[K::kMaxPosLevels];
  std::vector<float> wte, wpe[K::kMaxPosLevels], dout;
  std::vector<float> out, dwte, dwpe[K::kMaxPosLevels];  // the twin's (layers.hpp), gradients from zero
  // the backward's readers of each table row (k = 0 tokens, 1 + lv level lv), grouped as pack_batch does
  std::vector<std::int32_t> readers[1 + K::kMaxPosLevels], starts[1 + K::kMaxPosLevels];
  explicit EmbeddingCase(int levels) : L(levels) {
    std::mt19937 g(1 + std::uint32_t(L));
    tok.resize(std::size_t(R));
    for (auto& v : ids) v.resize(std::size_t(R));
    for (int t = 0; t < R; ++t) {
      tok[std::size_t(t)] = std::uint8_t(g() % std::uint32_t(V));
      for (int lv = 0; lv < K::kMaxPosLevels; ++lv) ids[lv][std::size_t(t)] = std::int32_t(g() % std::uint32_t(rows[lv]));
    }
    wte = randn(std::size_t(V) * C, 2), dout = randn(std::size_t(R) * C, 5);
    for (int lv = 0; lv < K::kMaxPosLevels; ++lv) {
      wpe[lv] = randn(std::size_t(rows[lv]) * C, 3 + std::uint32_t(lv) * 10);
      dwpe[lv].assign(wpe[lv].size(), 0.f);
    }
    out.resize(std::size_t(R) * C), dwte.assign(wte.size(), 0.f);
    const std::int32_t* pos[K::kMaxPosLevels];
    const float* w[K::kMaxPosLevels];
    float* dw[K::kMaxPosLevels];
    for (int lv = 0; lv < K::kMaxPosLevels; ++lv) pos[lv] = ids[lv].data(), w[lv] = wpe[lv].data(), dw[lv] = dwpe[lv].data();
    embedding_forward(out.data(), tok.data(), pos, L, wte.data(), w, R, C);
    embedding_backward(dwte.data(), dw, dout.data(), tok.data(), pos, L, R, C);
    group_rows(tok.data(), R, V, readers[0], starts[0]);
    for (int lv = 0; lv < K::kMaxPosLevels; ++lv) group_rows(ids[lv].data(), R, rows[lv], readers[1 + lv], starts[1 + lv]);
  }
};

// ---- bf16 on the host (core's rounding) ----------------------------------------------------------------
float rbf(float x) { return bf16_to_float(float_to_bf16(x)); }  // x rounded to the nearest bf16
std::vector<float> rounded(std::vector<float> v) {
  for (auto& x : v) x = rbf(x);
  return v;
}
std::vector<float> randn_bf16(std::size_t n, std::uint32_t seed, float sd = 1.f) { return rounded(randn(n, seed, sd)); }
float widen(float x) { return x; }
float widen(bf16 x) { return bf16_to_float(x.bits); }
template <class IO>
IO round_to(float x);
template <>
float round_to<float>(float x) {
  return x;
}
template <>
bf16 round_to<bf16>(float x) {
  return bf16{float_to_bf16(x)};
}
template <class IO>
std::vector<IO> to_io(const std::vector<float>& v) {
  std::vector<IO> o(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) o[i] = round_to<IO>(v[i]);
  return o;
}
template <class IO>
std::vector<float> to_float(const std::vector<IO>& v) {
  std::vector<float> o(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) o[i] = widen(v[i]);
  return o;
}
std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<double> slice(const std::vector<float>& v, std::size_t at, std::size_t n) {
  return {v.begin() + long(at), v.begin() + long(at + n)};
}
// v with its largest-magnitude element moved away from zero by 2 bf16 ulps (the controls' wrong result).
void move_2ulp(std::vector<float>& v) {
  std::size_t m = 0;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (std::abs(v[i]) > std::abs(v[m])) m = i;
  v[m] = bf16_to_float(std::uint16_t(float_to_bf16(v[m]) + 2));
}
std::vector<double> absd(const std::vector<float>& v) {
  std::vector<double> o(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) o[i] = std::abs(double(v[i]));
  return o;
}

constexpr double kU = 0x1p-24;    // fp32 unit roundoff, round to nearest
constexpr double kUTc = 0x1p-23;  // tensor-core accumulation (see the top of the file)
constexpr double kUBf = 0x1p-8;   // a rounding to bf16, relative: half an ulp, 2^-8 of a value in [1, 2)

// Half the spacing of bf16 numbers at magnitude x (normal range; the subnormal spacing below it).
double bf16_half_ulp(double x) {
  if (x < 0x1p-126) return 0x1p-134;
  int e = 0;
  std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1): the leading bit is 2^(e-1), the bf16 ulp 2^(e-8)
  return std::ldexp(1.0, e - 9);
}

// Element checks of one test: |got - ref| <= tol (+ half a bf16 ulp for bf16 outputs); flips of the
// bf16 outputs counted, and separately over the conditioned ones (tol <= a quarter ulp).
struct Check {
  std::size_t n = 0, bad = 0, n16 = 0, flips = 0, n16c = 0, flipsc = 0;
  double worst = 0;  // max (|got - ref| - the half ulp allowance) / tol: how much of the bound was used
  std::string first_bad, worst_at;
  void add(const char* what, std::size_t i, double got, double ref, double tol, bool bf16_out) {
    ++n;
    double half_ulp = 0;
    if (bf16_out) {
      const bool flip = float(got) != rbf(float(ref));
      ++n16, flips += flip;
      if (tol <= 0.5 * bf16_half_ulp(std::abs(ref))) ++n16c, flipsc += flip;
      half_ulp = bf16_half_ulp(std::abs(ref) + tol);
    }
    const double allowed = tol + half_ulp;
    if (tol > 0 && (std::abs(got - ref) - half_ulp) / tol > worst) {
      worst = (std::abs(got - ref) - half_ulp) / tol;
      worst_at = std::string(what) + "[" + std::to_string(i) + "]";
    }
    if (!(std::abs(got - ref) <= allowed) && bad++ == 0)  // NaN fails too
      first_bad = std::string(what) + "[" + std::to_string(i) + "]: got " + std::to_string(got) + ", ref " +
                  std::to_string(ref) + ", allowed " + std::to_string(allowed);
  }
  void all(const char* what, const std::vector<float>& got, const std::vector<double>& ref,
           const std::vector<double>& tol, bool bf16_out) {
    ASSERT_EQ(got.size(), ref.size());
    ASSERT_EQ(got.size(), tol.size());
    for (std::size_t i = 0; i < got.size(); ++i) add(what, i, got[i], ref[i], tol[i], bf16_out);
  }
  // Every element within its bound, and < 2% flips over the test's conditioned bf16 outputs.
  void expect_ok(const char* test) const {
    EXPECT_EQ(bad, 0u) << test << ": " << bad << " of " << n << " elements out of bounds; first: " << first_bad;
    EXPECT_LE(double(flipsc), 0.02 * double(n16c)) << test << ": " << flipsc << " flips of " << n16c << " conditioned";
    std::cout << "[ bounds   ] " << test << ": " << n << " elements, largest (|error| - bf16 half ulp) / bound "
              << worst << " (" << worst_at << "); bf16 flips: " << flips << " of " << n16 << ", " << flipsc
              << " of the " << n16c << " conditioned\n";
  }
};

// ---- GEMMs (blas.hpp, bf16 operands) ------------------------------------------------------------------------
struct GemmIn {
  int R, C, OC;
  std::vector<float> x, w, g;        // bf16 values: inp (R, C), W (OC, C), dout (R, OC)
  std::vector<float> out0, dx0, dw0;  // fp32 values the accumulating products add to
};
GemmIn gemm_inputs(int R, int C, int OC, std::uint32_t seed) {
  return {R, C, OC,
          randn_bf16(std::size_t(R) * C, seed),
          randn_bf16(std::size_t(OC) * C, seed + 1, 0.05f),
          randn_bf16(std::size_t(R) * OC, seed + 2),
          randn(std::size_t(R) * OC, seed + 3),
          randn(std::size_t(R) * C, seed + 4),
          randn(std::size_t(OC) * C, seed + 5)};
}
struct GemmOut {
  std::vector<float> fwd, fwd_acc, fwd16, dx_acc, dx16, dw;
};
// The fp32 CPU twin: layers.hpp in float on the same values, outputs rounded where the kernel writes bf16.
GemmOut gemm_cpu_fp32(const GemmIn& in) {
  const int R = in.R, C = in.C, OC = in.OC;
  GemmOut o;
  o.fwd.resize(std::size_t(R) * OC);
  matmul_forward(o.fwd.data(), in.x.data(), in.w.data(), R, C, OC);
  o.fwd_acc = o.fwd;
  for (std::size_t i = 0; i < o.fwd.size(); ++i) o.fwd_acc[i] += in.out0[i];
  o.fwd16 = rounded(o.fwd);
  std::vector<float> dx(std::size_t(R) * C, 0.f), dw(std::size_t(OC) * C, 0.f);
  matmul_backward(dx.data(), dw.data(), in.g.data(), in.x.data(), in.w.data(), R, C, OC);
  o.dx16 = rounded(dx);
  o.dx_acc = dx;
  for (std::size_t i = 0; i < dx.size(); ++i) o.dx_acc[i] += in.dx0[i];
  o.dw = dw;
  for (std::size_t i = 0; i < dw.size(); ++i) o.dw[i] += in.dw0[i];
  return o;
}
// ref = the products in double; tol = (K + 2) 2^-23 (sum |terms| + |addend|), K the inner dimension.
void check_gemm(const GemmIn& in, const GemmOut& o, Check& ck) {
  const int R = in.R, C = in.C, OC = in.OC;
  const auto x = to_double(in.x), w = to_double(in.w), g = to_double(in.g);
  const auto ax = absd(in.x), aw = absd(in.w), ag = absd(in.g);
  std::vector<double> ref(std::size_t(R) * OC), mag(ref.size()), tol(ref.size()), r2(ref.size()), t2(ref.size());
  matmul_forward(ref.data(), x.data(), w.data(), R, C, OC);
  matmul_forward(mag.data(), ax.data(), aw.data(), R, C, OC);
  for (std::size_t i = 0; i < ref.size(); ++i) tol[i] = 2 * (C + 2) * kUTc * mag[i];
  ck.all("forward fp32", o.fwd, ref, tol, false);
  ck.all("forward bf16", o.fwd16, ref, tol, true);
  for (std::size_t i = 0; i < ref.size(); ++i)
    r2[i] = ref[i] + in.out0[i], t2[i] = 2 * (C + 3) * kUTc * (mag[i] + std::abs(in.out0[i]));
  ck.all("forward fp32 accumulate", o.fwd_acc, r2, t2, false);

  std::vector<double> dx(std::size_t(R) * C, 0.0), dxm(dx.size(), 0.0), dw(std::size_t(OC) * C, 0.0),
      dwm(dw.size(), 0.0);
  matmul_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), R, C, OC);
  matmul_backward(dxm.data(), dwm.data(), ag.data(), ax.data(), aw.data(), R, C, OC);
  std::vector<double> tdx(dx.size()), rdx(dx.size()), tdxa(dx.size());
  for (std::size_t i = 0; i < dx.size(); ++i) {
    tdx[i] = 2 * (OC + 2) * kUTc * dxm[i];
    rdx[i] = dx[i] + in.dx0[i];
    tdxa[i] = 2 * (OC + 3) * kUTc * (dxm[i] + std::abs(in.dx0[i]));
  }
  ck.all("backward input bf16", o.dx16, dx, tdx, true);
  ck.all("backward input fp32 accumulate", o.dx_acc, rdx, tdxa, false);
  std::vector<double> rdw(dw.size()), tdw(dw.size());
  for (std::size_t i = 0; i < dw.size(); ++i)
    rdw[i] = dw[i] + in.dw0[i], tdw[i] = 2 * (R + 3) * kUTc * (dwm[i] + std::abs(in.dw0[i]));
  ck.all("backward weight fp32 accumulate", o.dw, rdw, tdw, false);
}

// ---- RMSNorm (fp32 input and statistics; bf16 out; dout fp32 or bf16) -----------------------------------
struct NormIn {
  int R, C;
  float eps;
  std::vector<float> x, w, g, dx0;  // g: dout (bf16 values when the kernel reads bf16)
};
NormIn norm_inputs(int R, int C, std::uint32_t seed, bool g_bf16) {
  NormIn in{R, C, 1e-6f, randn(std::size_t(R) * C, seed), randn(C, seed + 1, 0.2f), randn(std::size_t(R) * C, seed + 2),
            randn(std::size_t(R) * C, seed + 3)};
  for (auto& v : in.w) v += 1.f;  // norm weights near 1, as trained
  if (g_bf16) in.g = rounded(in.g);
  return in;
}
struct NormOut {
  std::vector<float> out16, rstd, dx, dw;
};
NormOut norm_cpu_fp32(const NormIn& in) {
  NormOut o{std::vector<float>(in.x.size()), std::vector<float>(std::size_t(in.R)), in.dx0,
            std::vector<float>(std::size_t(in.C), 0.f)};
  rmsnorm_forward(o.out16.data(), o.rstd.data(), in.x.data(), in.w.data(), in.R, in.C, in.eps);
  o.out16 = rounded(o.out16);
  rmsnorm_backward(o.dx.data(), o.dw.data(), in.g.data(), in.x.data(), in.w.data(), o.rstd.data(), in.R, in.C);
  return o;
}
// Per row, the kernel's r = 1 / sqrt(sum x^2 / C + eps): the sum of C squares (one rounding each) in
// any order errs by <= (C + 5) u relative; / C, + eps, sqrt, 1/x add 4 roundings, the sqrt halves the
// relative error before it: rel(r) <= rho = (C / 2 + 6) u. out = w x r: 2 more roundings.
// dx = dinp0 + w g r - x k, k = dot r^3 / C, dot = sum g w x (2 product roundings + the sum: (C + 7) u
// sum |g w x|): |dk| <= |k| (3 rho + 4u) + r^3 / C (C + 7) u sum|g w x|, and 4 roundings for the
// products, the difference and the sum. dw = sum over the R rows of g x r (2 roundings + rel(r) per
// term, the chunked sum (R + 2) u sum |terms|), + dw0.
void check_norm(const NormIn& in, const NormOut& o, bool g_is_bf16, Check& ck) {
  const int R = in.R, C = in.C;
  const auto x = to_double(in.x), w = to_double(in.w), g = to_double(in.g);
  std::vector<double> out(x.size()), r(R), dx = to_double(in.dx0), dw(C, 0.0);
  rmsnorm_forward(out.data(), r.data(), x.data(), w.data(), R, C, double(in.eps));
  rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), r.data(), R, C);
  const double rho = (C / 2.0 + 6) * kU;
  std::vector<double> tout(x.size()), tr(R), tdx(x.size()), tdw(C), sdw(C, 0.0);
  for (int t = 0; t < R; ++t) {
    const std::size_t o0 = std::size_t(t) * C;
    const double rt = r[std::size_t(t)];
    tr[std::size_t(t)] = 2 * rho * rt;
    double dot = 0, adot = 0;
    for (int c = 0; c < C; ++c) dot += g[o0 + c] * w[c] * x[o0 + c], adot += std::abs(g[o0 + c] * w[c] * x[o0 + c]);
    const double k = dot * rt * rt * rt / C;
    const double dk = std::abs(k) * (3 * rho + 4 * kU) + rt * rt * rt / C * (C + 7) * kU * adot;
    for (int c = 0; c < C; ++c) {
      const std::size_t i = o0 + c;
      tout[i] = 2 * (rho + 2 * kU) * std::abs(out[i]);
      const double wgr = std::abs(w[c] * g[i] * rt), xk = std::abs(x[i] * k);
      tdx[i] = 2 * (wgr * (rho + 3 * kU) + std::abs(x[i]) * dk + 2 * kU * (wgr + xk) + kU * std::abs(dx[i]));
      sdw[std::size_t(c)] += std::abs(g[i] * x[i] * rt);
    }
  }
  for (int c = 0; c < C; ++c)
    tdw[std::size_t(c)] = 2 * (sdw[std::size_t(c)] * (rho + (R + 4) * kU) + kU * std::abs(dw[std::size_t(c)]));
  ck.all("rmsnorm out bf16", o.out16, out, tout, true);
  ck.all("rmsnorm rstd", o.rstd, r, tr, false);
  ck.all(g_is_bf16 ? "rmsnorm dinp (bf16 dout)" : "rmsnorm dinp (fp32 dout)", o.dx, dx, tdx, false);
  ck.all("rmsnorm dw", o.dw, dw, tdw, false);
}

// ---- GEGLU (bf16 h -> bf16 g; backward bf16 dh from fp32 or bf16 dg) ----------------------------------
struct GegluIn {
  int R, F;
  std::vector<float> h, dg;  // h (R, 2F) bf16 values; dg (R, F) (bf16 values when the kernel reads bf16)
};
GegluIn geglu_inputs(int R, int F, std::uint32_t seed, bool dg_bf16) {
  GegluIn in{R, F, randn_bf16(std::size_t(R) * 2 * F, seed, 2.f), randn(std::size_t(R) * F, seed + 1)};
  if (dg_bf16) in.dg = rounded(in.dg);
  return in;
}
struct GegluOut {
  std::vector<float> g16, dh16;
};
GegluOut geglu_cpu_fp32(const GegluIn& in) {
  GegluOut o{std::vector<float>(std::size_t(in.R) * in.F), std::vector<float>(in.h.size(), 0.f)};
  geglu_forward(o.g16.data(), in.h.data(), in.R, in.F);
  geglu_backward(o.dh16.data(), in.dg.data(), in.h.data(), in.R, in.F);
  o.g16 = rounded(o.g16), o.dh16 = rounded(o.dh16);
  return o;
}
// x the gate, y the up value, c = sqrt(2/pi), t = c (x + 0.044715 x^3) (|error| <= 6u c (|x| + 0.044715
// |x|^3): 5 roundings and the constants' own), th = tanhf(t) (CUDA: 2 ulp <= 4u |th|), so
// |dth| <= (1 - th^2) dt + 4u |th|; gelu = 0.5 x (1 + th): |dgelu| <= 0.5 |x| (dth + u |1 + th|) + 2u |gelu|;
// g = gelu y: + u |g|. Backward: d = gelu'(x) = 0.5 (1 + th) + m (1 - th^2), m = 0.5 x c (1 + 3 0.044715 x^2);
// 1 - th^2 errs by <= 2 dth + 3u, the product chain by 8u: |dd| <= 0.5 (dth + u) + |m| (2 dth + 3u + 8u (1 -
// th^2)) + 2u |d|; dx = dg y d: |dg y| |dd| + 2u |dx|; dy = dg gelu: |dg| |dgelu| + u |dy|.
void check_geglu(const GegluIn& in, const GegluOut& o, Check& ck) {
  const int R = in.R, F = in.F;
  const auto h = to_double(in.h), dgv = to_double(in.dg);
  std::vector<double> g(std::size_t(R) * F), dh(h.size(), 0.0);
  geglu_forward(g.data(), h.data(), R, F);
  geglu_backward(dh.data(), dgv.data(), h.data(), R, F);
  std::vector<double> tg(g.size()), tdh(h.size());
  const double c = 0.7978845608028654, k3 = 0.044715;
  for (int t = 0; t < R; ++t)
    for (int f = 0; f < F; ++f) {
      const std::size_t i = std::size_t(t) * F + f, ia = std::size_t(t) * 2 * F + f, ib = ia + F;
      const double x = h[ia], y = h[ib], dg = dgv[i];
      const double th = std::tanh(c * (x + k3 * x * x * x));
      const double dt = 6 * kU * c * (std::abs(x) + k3 * std::abs(x * x * x));
      const double dth = (1 - th * th) * dt + 4 * kU * std::abs(th);
      const double gelu = 0.5 * x * (1 + th);
      const double dgelu = 0.5 * std::abs(x) * (dth + kU * std::abs(1 + th)) + 2 * kU * std::abs(gelu);
      tg[i] = 2 * (std::abs(y) * dgelu + kU * std::abs(g[i]));
      const double m = std::abs(0.5 * x * c * (1 + 3 * k3 * x * x));
      const double d = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * c * (1 + 3 * k3 * x * x);
      const double dd = 0.5 * (dth + kU) + m * (2 * dth + 3 * kU + 8 * kU * (1 - th * th)) + 2 * kU * std::abs(d);
      tdh[ia] = 2 * (std::abs(dg * y) * dd + 2 * kU * std::abs(dh[ia]));
      tdh[ib] = 2 * (std::abs(dg) * dgelu + kU * std::abs(dh[ib]));
    }
  ck.all("geglu g bf16", o.g16, g, tg, true);
  ck.all("geglu dh bf16", o.dh16, dh, tdh, true);
}

// ---- attention (attention_rows.cuh: forward, pass 1 dq + dsum, pass 2 dk + dv) ---------------------------
// B sequences of lengths len(b) packed without padding (the kernels' varlen layout, train.hpp): sequence b
// in rows [off[b], off[b + 1]); T the longest. A uniform batch is lengths all T.
struct AttIn {
  int B, T, NH, HS;
  float scale;
  std::vector<float> q, k, v, dout;  // (R, NH HS); bf16 values for bf16 I/O
  std::vector<std::int32_t> off;     // (B + 1)
  std::vector<float> bias;           // empty, or a score bias table (NH, tri(T)) (score_bias.hpp: FIRE's)
  int R() const { return off.back(); }
  int len(int b) const { return off[std::size_t(b) + 1] - off[std::size_t(b)]; }
  long long pairs() const { return (long long)T * (T + 1) / 2; }
  // the bias of (h, i, j <= i) of every sequence, and where the kernels write its gradient: slot
  // NH soff[b] + h tri(T_b) + tri(i) + i - j (score_bias.hpp)
  double b(int h, int i, int j) const { return bias[std::size_t(h * pairs() + (long long)i * (i + 1) / 2 + i - j)]; }
  std::vector<long long> soff() const {
    std::vector<long long> o(1, 0);
    for (int s = 0; s < B; ++s) o.push_back(o.back() + (long long)len(s) * (len(s) + 1) / 2);
    return o;
  }
  std::size_t slot(int s, int h, int i, int j) const {
    return std::size_t((long long)NH * soff()[std::size_t(s)] + (long long)h * len(s) * (len(s) + 1) / 2 +
                       (long long)i * (i + 1) / 2 + i - j);
  }
};
// A bias table of N(0, sd^2) fp32 values for in (FIRE's bias is O(1): an MLP of a bounded input).
AttIn with_bias(AttIn in, std::uint32_t seed, float sd = 1.f) {
  in.bias = randn(std::size_t(in.NH * in.pairs()), seed, sd);
  return in;
}
// The control's bias bug: each row's pairs reversed, i.e. the kernel reads b(i, j) where it should read
// b(i, i - j) (a table indexed by the key instead of the distance).
AttIn reversed_bias(AttIn in) {
  for (int h = 0; h < in.NH; ++h)
    for (int i = 0; i < in.T; ++i) {
      float* row = in.bias.data() + h * in.pairs() + (long long)i * (i + 1) / 2;
      std::reverse(row, row + i + 1);
    }
  return in;
}
// Scores scale q.k with standard deviation `spread` (q, k ~ N(0, sd^2): var = scale^2 HS sd^4).
AttIn attention_inputs(const std::vector<int>& lengths, int NH, int HS, float scale, double spread, bool bf16_io,
                       std::uint32_t seed) {
  std::vector<std::int32_t> off(1, 0);
  for (int l : lengths) off.push_back(off.back() + l);
  const std::size_t n = std::size_t(off.back()) * NH * HS;
  const float sd = float(std::pow(spread * spread / (double(scale) * scale * HS), 0.25));
  AttIn in{int(lengths.size()), *std::max_element(lengths.begin(), lengths.end()), NH, HS, scale,
           randn(n, seed, sd), randn(n, seed + 1, sd), randn(n, seed + 2), randn(n, seed + 3), off, {}};
  if (bf16_io) in.q = rounded(in.q), in.k = rounded(in.k), in.v = rounded(in.v), in.dout = rounded(in.dout);
  return in;
}
AttIn attention_inputs(int B, int T, int NH, int HS, float scale, double spread, bool bf16_io, std::uint32_t seed) {
  return attention_inputs(std::vector<int>(std::size_t(B), T), NH, HS, scale, spread, bf16_io, seed);
}
struct AttOut {
  std::vector<float> out, lse, dq, dk, dv;
  std::vector<float> dbias;  // with a bias: the gradient's slots (AttIn::slot)
  std::size_t slots_not_once = 0;  // replays with a bias: slots not stored exactly once (slot_stores)
};

// The host executor of attention_rows.cuh: one thread plays the 32 lanes.
struct HostWarp {
  static constexpr int kLanes = 32;
  int lane(int l) const { return l; }
  // The butterfly of warp_sum (train.cu): lane L adds lane L ^ o's value, o = 16 .. 1. After the five
  // rounds every lane holds the same value (a + b = b + a in IEEE); checked, since the replay returns one.
  float sum(const float (&part)[32]) const {
    std::array<float, 32> x;
    std::copy(part, part + 32, x.begin());
    for (int o = 16; o > 0; o >>= 1) {
      std::array<float, 32> y;
      for (int L = 0; L < 32; ++L) y[std::size_t(L)] = x[std::size_t(L)] + x[std::size_t(L ^ o)];
      x = y;
    }
    for (float s : x)
      if (std::memcmp(&s, &x[0], sizeof s) != 0) throw std::logic_error("warp sum differs between lanes");
    return x[0];
  }
  float max(const float (&part)[32]) const {  // the same butterfly with max (exact)
    std::array<float, 32> x;
    std::copy(part, part + 32, x.begin());
    for (int o = 16; o > 0; o >>= 1) {
      std::array<float, 32> y;
      for (int L = 0; L < 32; ++L) y[std::size_t(L)] = std::max(x[std::size_t(L)], x[std::size_t(L ^ o)]);
      x = y;
    }
    return x[0];
  }
  template <class IO>
  IO narrow(float x) const {
    return round_to<IO>(x);
  }
  template <int NPL, class IO>
  void load(float (&a)[NPL], const IO* row, int ln, int HS) const {
    for (int e = 0; e < NPL; ++e) {
      const int c = ln * NPL + e;
      a[e] = c < HS ? widen(row[c]) : 0.f;
    }
  }
  template <int NPL, class IO>
  void store(IO* row, const float (&a)[NPL], int ln, int HS) const {
    for (int e = 0; e < NPL; ++e) {
      const int c = ln * NPL + e;
      if (c < HS) row[c] = round_to<IO>(a[e]);
    }
  }
  float exp(float x) const { return std::exp(x); }
  float log(float x) const { return std::log(x); }
};

// The launchers' work on the host: every warp (row) of each kernel, pass 1 before pass 2.
template <int NPL, class IO>
void replay_rows(const AttIn& in, std::vector<IO>& out, std::vector<float>& lse, std::vector<IO>& dq,
                 std::vector<IO>& dk, std::vector<IO>& dv, const AR::Bias& bs) {
  const auto q = to_io<IO>(in.q), k = to_io<IO>(in.k), v = to_io<IO>(in.v), dout = to_io<IO>(in.dout);
  std::vector<float> dsum(lse.size());
  const long long rows = (long long)in.NH * in.R();
  auto row = [&](long long w) { return AR::row_of(w, in.off.data(), in.B, in.NH, in.HS); };
  for (long long w = 0; w < rows; ++w)
    AR::forward_warp<NPL>(HostWarp{}, out.data(), lse.data(), q.data(), k.data(), v.data(), row(w), in.NH, in.HS,
                          in.scale, bs);
  for (long long w = 0; w < rows; ++w)
    AR::dq_warp<NPL>(HostWarp{}, dq.data(), dsum.data(), dout.data(), lse.data(), q.data(), k.data(), v.data(), row(w),
                     in.NH, in.HS, in.scale, bs);
  for (long long w = 0; w < rows; ++w)
    AR::dkv_warp<NPL>(HostWarp{}, dk.data(), dv.data(), dout.data(), lse.data(), dsum.data(), q.data(), k.data(),
                      v.data(), row(w), in.NH, in.HS, in.scale, bs);
}
// With a bias (in.bias), the gradient's slots start as NaN: a slot the kernels do not write fails the check.
template <class IO>
AttOut attention_replay(const AttIn& in) {
  const std::size_t n = in.q.size(), nl = std::size_t(in.NH) * std::size_t(in.R());
  std::vector<IO> out(n), dq(n), dk(n), dv(n);
  std::vector<float> lse(nl), slots;
  const auto soff = in.soff();
  AR::Bias bs;
  if (!in.bias.empty()) {
    slots.assign(std::size_t(in.NH * soff.back()), NAN);
    bs = {in.bias.data(), in.pairs(), slots.data(), soff.data()};
    slot_stores::start(slots.data(), slots.size());
  }
  switch (AR::dims_per_lane(in.HS)) {
    case 1: replay_rows<1>(in, out, lse, dq, dk, dv, bs); break;
    case 2: replay_rows<2>(in, out, lse, dq, dk, dv, bs); break;
    case 4: replay_rows<4>(in, out, lse, dq, dk, dv, bs); break;
    case 8: replay_rows<8>(in, out, lse, dq, dk, dv, bs); break;
    default: replay_rows<16>(in, out, lse, dq, dk, dv, bs); break;
  }
  const std::size_t not_once = slots.empty() ? 0 : slot_stores::stop();
  return {to_float(out), lse, to_float(dq), to_float(dk), to_float(dv), slots, not_once};
}

// The tensor-core path on the host: attention_gemm_steps.hpp with a reference GEMM of cuBLAS's
// column-major conventions (fp32 accumulation in k order, exact bf16 products) and the row functions of
// attention_rows.cuh played by HostWarp.
struct HostEngine {
  bool flip_first_transpose = false;  // the controls' layout bug: the first GEMM reads A the other way
  int calls = 0;
  template <class C>
  void gemm(bool ta, bool tb, int m, int n, int k, const bf16* A, int lda, long long sA, const bf16* B, int ldb,
            long long sB, C* out, int ldc, long long sC, int batch) {
    if (flip_first_transpose && calls == 0) ta = !ta;
    ++calls;
    for (int b = 0; b < batch; ++b) {
      const bf16* Ab = A + b * sA;
      const bf16* Bb = B + b * sB;
      for (int r = 0; r < m; ++r)
        for (int c = 0; c < n; ++c) {
          float acc = 0.f;
          for (int t = 0; t < k; ++t) {
            const float a = widen(ta ? Ab[t + (long long)r * lda] : Ab[r + (long long)t * lda]);
            const float bb = widen(tb ? Bb[c + (long long)t * ldb] : Bb[t + (long long)c * ldb]);
            acc = std::fma(a, bb, acc);
          }
          out[b * sC + r + (long long)c * ldc] = round_to<C>(acc);
        }
    }
  }
  void softmax_rows(bf16* P, float* lse, const float* S, int B, int T, int NH, int Tp, float scale) {
    for (long long w = 0; w < (long long)B * NH * T; ++w) AR::softmax_warp(HostWarp{}, P, lse, S, T, Tp, scale, w);
  }
  void dscore_rows(bf16* dS, const float* S, const float* lse, const float* dP, int B, int T, int NH, int Tp,
                   float scale) {
    for (long long w = 0; w < (long long)B * NH * T; ++w)
      AR::dscore_warp(HostWarp{}, dS, S, lse, dP, T, Tp, scale, w);
  }
};
AttOut attention_gemm_replay(const AttIn& in, bool flip_first_transpose = false) {
  if (in.R() != in.B * in.T) throw std::logic_error("the tensor-core path takes uniform batches only");
  const std::size_t n = in.q.size(), nl = std::size_t(in.B) * in.NH * in.T,
                    ns = nl * std::size_t(AG::padded_T(in.T));
  const auto q = to_io<bf16>(in.q), v = to_io<bf16>(in.v), g = to_io<bf16>(in.dout);
  auto k = to_io<bf16>(in.k);
  // The control's first GEMM reads k (its A) the other way: element r + t D of the last sequence's block,
  // up to T + HS D past its start, beyond the buffer when HS > T. Zeros there keep the misread defined
  // (it read past the end before: undefined values, sometimes NaN).
  if (flip_first_transpose) k.resize(k.size() + std::size_t(in.HS) * std::size_t(in.NH * in.HS) + std::size_t(in.T), bf16{0});
  std::vector<bf16> out(n), dq(n), dk(n), dv(n), P(ns), dS(ns);
  std::vector<float> lse(nl), S(ns), dP(ns);
  HostEngine e{flip_first_transpose};
  AG::forward(e, out.data(), lse.data(), S.data(), P.data(), q.data(), k.data(), v.data(), in.B, in.T, in.NH, in.HS,
              in.scale);
  AG::backward(e, dq.data(), dk.data(), dv.data(), dP.data(), dS.data(), g.data(), lse.data(), S.data(), P.data(),
               q.data(), k.data(), v.data(), in.B, in.T, in.NH, in.HS, in.scale);
  return {to_float(out), lse, to_float(dq), to_float(dk), to_float(dv), {}};
}

// Reference: layers.hpp attention_forward/backward in double per sequence. Its scores are q.k / sqrt(HS),
// so it gets q' = q (scale sqrt(HS)) and dq = dq' (scale sqrt(HS)) (double: exact to ~1e-16).
// Bounds (first order, u = 2^-24, per (sequence, head); i a query row, j <= i a key row). Flash: the
// CUDA-core kernels (attention_rows.cuh forward/dq/dkv), dot products in fp32 (us = u); Gemm: the
// tensor-core path (attention_gemm_steps.hpp), products on tensor cores (us = 2^-23), P and dS rounded
// to bf16 (ub = 2^-8 relative) before they multiply.
//  es_ij = (HS + 5) us scale sum_d |q_id k_jd| + u |s_ij|: the score's error (the dot or GEMM, the scale).
//  Forward (Flash): each weight exp(s_j - mx) errs by es_j (its score; mx's own error cancels in acc / l),
//    exp's 4u, u |s_j - mx| (the subtraction), and the roundings of the <= T rescales and T fmas, the
//    same for l: eps_i = max_j es_ij + (range_i + 2T + 5) u, range_i = max_j s_ij - min_j s_ij;
//    |dout_ic| <= 2 eps_i sum_j P_ij |v_jc|.
//  lse_i (both; the Gemm softmax rows round less): dlse_i <= eps_i + u (|lse_i| + 2 log(T + 1) + 1).
//  P_ij = exp(s_ij - lse_i) (recomputed; Gemm: the softmax rows) errs relatively by
//    ep_i = max_j es_ij + dlse_i + (5 + range_i + log(T + 1)) u; dP_ij = dout_i.v_j by
//    edp_ij = (HS + 5) us sum_d |dout_id v_jd|; dsum_i = sum_j P dP by
//    dD_i = sum_j P_ij (|dP_ij| (ep_i + (T + 2) u) + edp_ij).
//  Flash: dq_ic = scale (a - dsum b): scale [sum_j P_ij |k_jc| ((|dP_ij| + |D_i|)(ep_i + (T + 2) u) + edp_ij)
//                                             + dD_i sum_j P_ij |k_jc|] + 2u |dq_ic|
//         dk_jc = scale sum_{i >= j} P_ij |q_ic| (|dP_ij - D_i| (ep_i + (T + 2) u) + edp_ij + dD_i) + u |dk_jc|
//         dv_jc = sum_{i >= j} P_ij |dout_ic| (ep_i + (T + 2) u)
//  Gemm:  out_ic: sum_j P_ij |v_jc| (ep_i + ub + (T + 2) us); dv_jc: sum_{i >= j} P_ij |dout_ic| (ep_i + ub + (T + 2) us)
//         dS_ij errs by g_ij = scale P_ij (|dP_ij - D_i| (ep_i + ub + 3u + (T + 2) us) + edp_ij + dD_i), the
//         GEMM's accumulation included: dq_ic: sum_j g_ij |k_jc|; dk_jc: sum_{i >= j} g_ij |q_ic|.
//  With a bias (Flash; in.bias): s_ij = scale q.k + b_ij, one more rounding: es_ij += u |s_ij|; the
//    bias's gradient x_ij = P_ij (dP_ij - D_i) (pass 2's g): P_ij (|dP_ij - D_i| (ep_i + (T + 2) u) +
//    edp_ij + dD_i) + 2u |x_ij| (its subtraction and product).
//  Each doubled.
enum class AttPath { Flash, Gemm };
void check_attention(const AttIn& in, const AttOut& o, bool bf16_out, Check& ck, AttPath path = AttPath::Flash) {
  const int B = in.B, NH = in.NH, HS = in.HS, D = NH * HS;
  const bool gemm = path == AttPath::Gemm;
  const double sc = in.scale, pre = sc * std::sqrt(double(HS)), u = kU, us = gemm ? kUTc : kU;
  const std::size_t n = in.q.size();
  std::vector<double> out(n), dq(n, 0.0), dk(n, 0.0), dv(n, 0.0), lse(std::size_t(NH) * std::size_t(in.R()));
  std::vector<double> tout(n, 0.0), tdq(n, 0.0), tdk(n, 0.0), tdv(n, 0.0), tlse(lse.size());
  std::vector<double> att(std::size_t(NH) * in.T * in.T), scratch(std::size_t(in.T) * in.T);
  const bool biased = !in.bias.empty();
  const std::size_t nslots = biased ? std::size_t(NH * in.soff().back()) : 0;
  std::vector<double> dbias(nslots), tdbias(nslots);
  for (int b = 0; b < B; ++b) {  // sequence b: its own rows, its own length
    const int T = in.len(b);
    const double TT = T;
    const std::size_t o0 = std::size_t(in.off[std::size_t(b)]) * D, TD = std::size_t(T) * D,
                      l0 = std::size_t(NH) * std::size_t(in.off[std::size_t(b)]);
    auto qs = slice(in.q, o0, TD);
    for (auto& x : qs) x *= pre;
    const auto ks = slice(in.k, o0, TD), vs = slice(in.v, o0, TD), gs = slice(in.dout, o0, TD);
    // the bias as learn's attention takes it: (NH, T, T), zero above the diagonal; its gradient likewise
    std::vector<double> bd(biased ? std::size_t(NH) * T * T : 0, 0.0), dbd(bd.size(), 0.0);
    for (int h = 0; h < (biased ? NH : 0); ++h)
      for (int i = 0; i < T; ++i)
        for (int j = 0; j <= i; ++j) bd[(std::size_t(h) * T + i) * T + j] = in.b(h, i, j);
    const double rs = attention_scale<double>(HS, true);  // q pre-scaled: rs q' . k = scale q . k
    attention_forward(out.data() + o0, att.data(), qs.data(), ks.data(), vs.data(), T, T, NH, HS, rs,
                      biased ? bd.data() : nullptr);
    attention_backward(dq.data() + o0, dk.data() + o0, dv.data() + o0, scratch.data(), gs.data(), att.data(),
                       qs.data(), ks.data(), vs.data(), T, NH, HS, rs, biased ? dbd.data() : nullptr);
    for (std::size_t i = o0; i < o0 + TD; ++i) dq[i] *= pre;
    for (int h = 0; h < NH; ++h) {
      const double* P = att.data() + std::size_t(h) * T * T;
      auto at = [&](int i, int c) { return o0 + std::size_t(i) * D + std::size_t(h) * HS + std::size_t(c); };
      auto Q = [&](int i, int c) { return double(in.q[at(i, c)]); };
      auto Kk = [&](int j, int c) { return double(in.k[at(j, c)]); };
      auto Vv = [&](int j, int c) { return double(in.v[at(j, c)]); };
      auto G = [&](int i, int c) { return double(in.dout[at(i, c)]); };
      auto ij = [&](int i, int j) { return std::size_t(i) * T + std::size_t(j); };
      std::vector<double> ep(T), eps(T), Dd(T), dD(T), dP(std::size_t(T) * T), edp(std::size_t(T) * T);
      for (int i = 0; i < T; ++i) {
        double esmax = 0, smax = -INFINITY, smin = INFINITY;
        std::vector<double> s(std::size_t(i) + 1);
        for (int j = 0; j <= i; ++j) {
          double dot = 0, adot = 0, g = 0, ag = 0;
          for (int c = 0; c < HS; ++c) {
            dot += Q(i, c) * Kk(j, c), adot += std::abs(Q(i, c) * Kk(j, c));
            g += G(i, c) * Vv(j, c), ag += std::abs(G(i, c) * Vv(j, c));
          }
          const double sj = sc * dot + (biased ? in.b(h, i, j) : 0.0);
          s[std::size_t(j)] = sj;
          esmax = std::max(esmax, (HS + 5) * us * sc * adot + u * std::abs(sc * dot) + (biased ? u * std::abs(sj) : 0.0));
          smax = std::max(smax, sj), smin = std::min(smin, sj);
          dP[ij(i, j)] = g, edp[ij(i, j)] = (HS + 5) * us * ag;
        }
        double l = 0;
        for (int j = 0; j <= i; ++j) l += std::exp(s[std::size_t(j)] - smax);
        const double L = smax + std::log(l), range = smax - smin;
        eps[std::size_t(i)] = esmax + (range + 2 * TT + 5) * u;
        const double dlse = eps[std::size_t(i)] + u * (std::abs(L) + 2 * std::log(TT + 1) + 1);
        lse[l0 + std::size_t(h) * T + i] = L;
        tlse[l0 + std::size_t(h) * T + i] = 2 * dlse;
        ep[std::size_t(i)] = esmax + dlse + (5 + range + std::log(TT + 1)) * u;
        double Di = 0, dDi = 0;
        for (int j = 0; j <= i; ++j) {
          Di += P[ij(i, j)] * dP[ij(i, j)];
          dDi += P[ij(i, j)] * (std::abs(dP[ij(i, j)]) * (ep[std::size_t(i)] + (TT + 2) * u) + edp[ij(i, j)]);
        }
        Dd[std::size_t(i)] = Di, dD[std::size_t(i)] = dDi;
      }
      // g_ij: the Gemm path's error of dS_ij (0 where j > i)
      auto gerr = [&](int i, int j) {
        return sc * P[ij(i, j)] *
               (std::abs(dP[ij(i, j)] - Dd[std::size_t(i)]) * (ep[std::size_t(i)] + kUBf + 3 * u + (TT + 2) * us) +
                edp[ij(i, j)] + dD[std::size_t(i)]);
      };
      for (int i = 0; i < T; ++i)
        for (int c = 0; c < HS; ++c) {
          const double e2 = ep[std::size_t(i)] + (TT + 2) * u;
          double pv = 0, pk = 0, t = 0;
          for (int j = 0; j <= i; ++j) {
            const double p = P[ij(i, j)];
            pv += p * std::abs(Vv(j, c));
            pk += p * std::abs(Kk(j, c));
            t += gemm ? gerr(i, j) * std::abs(Kk(j, c))
                      : p * std::abs(Kk(j, c)) * ((std::abs(dP[ij(i, j)]) + std::abs(Dd[std::size_t(i)])) * e2 + edp[ij(i, j)]);
          }
          if (gemm) {
            tout[at(i, c)] = 2 * pv * (ep[std::size_t(i)] + kUBf + (TT + 2) * us);
            tdq[at(i, c)] = 2 * t;
          } else {
            tout[at(i, c)] = 2 * 2 * eps[std::size_t(i)] * pv;
            tdq[at(i, c)] = 2 * (sc * (t + dD[std::size_t(i)] * pk) + 2 * u * std::abs(dq[at(i, c)]));
          }
        }
      for (int j = 0; j < T; ++j)
        for (int c = 0; c < HS; ++c) {
          double tk = 0, tv = 0;
          for (int i = j; i < T; ++i) {
            const double p = P[ij(i, j)];
            if (gemm) {
              tk += gerr(i, j) * std::abs(Q(i, c));
              tv += p * std::abs(G(i, c)) * (ep[std::size_t(i)] + kUBf + (TT + 2) * us);
            } else {
              const double e2 = ep[std::size_t(i)] + (TT + 2) * u;
              tk += p * std::abs(Q(i, c)) * (std::abs(dP[ij(i, j)] - Dd[std::size_t(i)]) * e2 + edp[ij(i, j)] + dD[std::size_t(i)]);
              tv += p * std::abs(G(i, c)) * e2;
            }
          }
          tdk[at(j, c)] = gemm ? 2 * tk : 2 * (sc * tk + u * std::abs(dk[at(j, c)]));
          tdv[at(j, c)] = 2 * tv;
        }
      for (int i = 0; i < (biased ? T : 0); ++i)
        for (int j = 0; j <= i; ++j) {
          const double x = dbd[(std::size_t(h) * T + i) * T + j], p = P[ij(i, j)];
          const double e2 = ep[std::size_t(i)] + (TT + 2) * u;
          dbias[in.slot(b, h, i, j)] = x;
          tdbias[in.slot(b, h, i, j)] =
              2 * (p * (std::abs(dP[ij(i, j)] - Dd[std::size_t(i)]) * e2 + edp[ij(i, j)] + dD[std::size_t(i)]) +
                   2 * u * std::abs(x));
        }
    }
  }
  if (biased) ck.all("attention dbias", o.dbias, dbias, tdbias, false);
  ck.all("attention out", o.out, out, tout, bf16_out);
  ck.all("attention lse", o.lse, lse, tlse, false);
  ck.all("attention dq", o.dq, dq, tdq, bf16_out);
  ck.all("attention dk", o.dk, dk, tdk, bf16_out);
  ck.all("attention dv", o.dv, dv, tdv, bf16_out);
}

// ---- the tensor-core flash attention (flash_tc.cuh: forward, dq by query blocks, dk/dv by key blocks) -------
// The host executors of flash_tc.cuh: one thread plays every warp of a CTA and every lane of a warp. The
// warp policy emulates the PTX instructions from their documented fragment layouts (PTX ISA, "Matrix
// fragments for mma.m16n8k16" and "ldmatrix"): an A register holds two bf16 of row g (+ 8) and columns
// 2t, 2t + 1 (+ 8), lower column in the low half (g = lane / 4, t = lane % 4); a B register rows (k) 2t,
// 2t + 1 (+ 8) of column g; C/D rows g (+ 8), columns 2t, 2t + 1; ldmatrix .x4: lanes 8m .. 8m + 7 give the
// row addresses of matrix m, lane T receives its row T / 4, elements 2 (T % 4) and + 1 (.trans: rows
// 2 (T % 4) and + 1 of column T / 4). The MMA's nominal value is the exact sum rounded once (the device's
// internal order is not documented; the bounds of check_flash cover any order). The copies are done at
// once (the device's cp.async only later): a phase that read a tile after the fill of the next block was
// issued would read the next block here and fail the checks.
struct FlashHostWarp {
  static constexpr int kLanes = 32;
  bool trans_fault = false;  // the control's layout bug: ldmatrix .trans reads without transposing
  int lane(int l) const { return l; }
  template <int H>
  void mma(float (&d)[32][4], const FTC::u32 (&a)[32][4], const FTC::u32 (&b)[32][4]) const {
    float A[16][16], Bm[16][8], Cm[16][8];
    auto lo = [](FTC::u32 x) { return bf16_to_float(std::uint16_t(x & 0xffffu)); };
    auto hi = [](FTC::u32 x) { return bf16_to_float(std::uint16_t(x >> 16)); };
    for (int T = 0; T < 32; ++T) {
      const int g = T / 4, t = T % 4;
      for (int q = 0; q < 4; ++q) {  // a_q: rows g + 8 (q % 2), columns 2t + 8 (q / 2)
        A[g + 8 * (q % 2)][2 * t + 8 * (q / 2)] = lo(a[T][q]);
        A[g + 8 * (q % 2)][2 * t + 8 * (q / 2) + 1] = hi(a[T][q]);
      }
      for (int q = 0; q < 2; ++q) {  // b_q: rows 2t + 8 q, + 1 of column g
        Bm[2 * t + 8 * q][g] = lo(b[T][2 * H + q]);
        Bm[2 * t + 8 * q + 1][g] = hi(b[T][2 * H + q]);
      }
      for (int q = 0; q < 4; ++q) Cm[g + 8 * (q / 2)][2 * t + q % 2] = d[T][q];
    }
    for (int T = 0; T < 32; ++T) {
      const int g = T / 4, t = T % 4;
      for (int q = 0; q < 4; ++q) {
        const int r = g + 8 * (q / 2), c = 2 * t + q % 2;
        double s = Cm[r][c];
        for (int k = 0; k < 16; ++k) s += double(A[r][k]) * double(Bm[k][c]);
        d[T][q] = float(s);
      }
    }
  }
  void ldsm_x4(FTC::u32 (&r)[32][4], const FTC::u16* const (&p)[32]) const {
    for (int T = 0; T < 32; ++T)
      for (int m = 0; m < 4; ++m) {
        const FTC::u16* row = p[8 * m + T / 4];
        r[T][m] = FTC::u32(row[2 * (T % 4)]) | FTC::u32(row[2 * (T % 4) + 1]) << 16;
      }
  }
  void ldsm_x4_t(FTC::u32 (&r)[32][4], const FTC::u16* const (&p)[32]) const {
    if (trans_fault) return ldsm_x4(r, p);
    for (int T = 0; T < 32; ++T)
      for (int m = 0; m < 4; ++m)
        r[T][m] = FTC::u32(p[8 * m + 2 * (T % 4)][T / 4]) | FTC::u32(p[8 * m + 2 * (T % 4) + 1][T / 4]) << 16;
  }
  template <class Op>
  static void quad(float (&x)[32], Op op) {
    for (int o : {1, 2}) {
      float y[32];
      for (int L = 0; L < 32; ++L) y[L] = op(x[L], x[L ^ o]);
      std::copy(y, y + 32, x);
    }
  }
  void quad_max(float (&x)[32]) const { quad(x, [](float a, float b) { return FTC::max_f(a, b); }); }
  void quad_sum(float (&x)[32]) const { quad(x, [](float a, float b) { return a + b; }); }
  float warp_sum(const float (&part)[32]) const { return HostWarp{}.sum(part); }
  float exp2(float x) const { return std::exp2(x); }
  float log2(float x) const { return std::log2(x); }
  FTC::u32 pack(float lo, float hi) const { return FTC::u32(float_to_bf16(lo)) | FTC::u32(float_to_bf16(hi)) << 16; }
  void st32(FTC::u16* p, FTC::u32 v) const { p[0] = FTC::u16(v & 0xffffu), p[1] = FTC::u16(v >> 16); }
};
struct FlashHostCta {
  using W = FlashHostWarp;
  int warps, threads;
  bool trans_fault;
  template <int WARPS>
  static constexpr int slots() {
    return WARPS;
  }
  int warp_begin() const { return 0; }
  int warp_end() const { return warps; }
  int slot(int w) const { return w; }
  int thread_begin() const { return 0; }
  int thread_end() const { return threads; }
  W warp(int) const { return W{trans_fault}; }
  void sync() const {}
  void copy16(FTC::u16* dst, const FTC::u16* src, bool valid) const {
    if (valid) std::memcpy(dst, src, 16);
    else std::memset(dst, 0, 16);
  }
  void commit() const {}
  template <int N>
  void wait() const {}
};

// What a flash replay differs in (the controls).
struct FlashFault {
  bool transposed_read = false;  // every ldmatrix .trans reads untransposed
  bool dqdk_fp32 = false;        // not a fault: dq and dk written in fp32 (Params::dq32, dk32; RoPE's form)
};
// The three kernels of flash_tc.cu on the host, over their whole grids (every CTA, every head), on the
// kernel's bf16 inputs: shared memory starts as bf16 NaNs in every CTA, so a read of a slot no fill or
// phase wrote poisons the results.
template <int HSP>
AttOut flash_replay_at(const AttIn& in, FlashFault fault) {
  using G = FTC::Cfg<HSP>;
  const std::size_t n = in.q.size(), nl = std::size_t(in.NH) * std::size_t(in.R());
  auto bits = [](const std::vector<float>& v) {
    std::vector<FTC::u16> o(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) o[i] = float_to_bf16(v[i]);
    return o;
  };
  const auto q = bits(in.q), k = bits(in.k), v = bits(in.v), g = bits(in.dout);
  std::vector<FTC::u16> out(n), dq(n), dk(n), dv(n);
  std::vector<float> lse(nl), dsum(nl), dq32(n, NAN), dk32(n, NAN), slots;
  const auto soff = in.soff();
  FTC::Params p;
  if (!in.bias.empty()) {  // the gradient's slots start as NaN: one the dq kernel does not write fails
    slots.assign(std::size_t(in.NH * soff.back()), NAN);
    p.bias = in.bias.data(), p.bias_stride = in.pairs(), p.dslots = slots.data(), p.soff = soff.data();
    slot_stores::start(slots.data(), slots.size());
  }
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = out.data(), p.dout = g.data();
  p.out = out.data(), p.dq = dq.data(), p.dk = dk.data(), p.dv = dv.data(), p.lse = lse.data(), p.dsum = dsum.data();
  if (fault.dqdk_fp32) p.dq = p.dk = nullptr, p.dq32 = dq32.data(), p.dk32 = dk32.data();
  p.off = in.off.data(), p.B = in.B, p.R = in.R(), p.NH = in.NH, p.HS = in.HS;
  p.scale = in.scale, p.c2 = FTC::scale_log2e(in.scale);
  p.vec = in.HS % 8 == 0;  // host vectors: 16-byte chunks whenever whole (the device adds its alignment test)
  const std::size_t smem_bytes = std::size_t(std::max({G::fwd_smem, G::dq_smem, G::dkv_smem}));
  std::vector<FTC::u16> smem(smem_bytes / 2 + 8);
  FlashHostCta cta{G::WARPS, G::THREADS, fault.transposed_read};
  const int grid = FTC::grid_blocks(in.B, in.R(), G::BR);
  auto each_cta = [&](auto&& body) {
    for (int h = 0; h < in.NH; ++h)
      for (int x = 0; x < grid; ++x) {
        std::fill(smem.begin(), smem.end(), FTC::u16(0x7fc0));  // bf16 NaN
        body(reinterpret_cast<char*>(smem.data()), x, h);
      }
  };
  auto run = [&](auto variant) {  // the kernels' compile-time variant of these parameters
    constexpr int V = decltype(variant)::value;
    each_cta([&](char* s, int x, int h) { FTC::forward_cta<HSP, V & FTC::kBias>(cta, s, p, x, h); });
    each_cta([&](char* s, int x, int h) { FTC::dq_cta<HSP, V>(cta, s, p, x, h); });
    each_cta([&](char* s, int x, int h) { FTC::dkv_cta<HSP, V>(cta, s, p, x, h); });
  };
  switch (FTC::variant(p)) {
    case 0: run(std::integral_constant<int, 0>{}); break;
    case FTC::kBias: run(std::integral_constant<int, FTC::kBias>{}); break;
    case FTC::kF32Grad: run(std::integral_constant<int, FTC::kF32Grad>{}); break;
    default: run(std::integral_constant<int, FTC::kBias | FTC::kF32Grad>{}); break;
  }
  auto widen_all = [](const std::vector<FTC::u16>& b) {
    std::vector<float> o(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) o[i] = bf16_to_float(b[i]);
    return o;
  };
  const std::size_t not_once = slots.empty() ? 0 : slot_stores::stop();
  if (fault.dqdk_fp32) return {widen_all(out), lse, dq32, dk32, widen_all(dv), slots, not_once};
  return {widen_all(out), lse, widen_all(dq), widen_all(dk), widen_all(dv), slots, not_once};
}
AttOut flash_replay(const AttIn& in, FlashFault fault = {}) {
  switch (FTC::padded_head(in.HS)) {
    case 16: return flash_replay_at<16>(in, fault);
    case 32: return flash_replay_at<32>(in, fault);
    case 64: return flash_replay_at<64>(in, fault);
    case 128: return flash_replay_at<128>(in, fault);
    case 256: return flash_replay_at<256>(in, fault);
    default: return flash_replay_at<512>(in, fault);
  }
}

// The flash kernels against learn's bf16 attention (layers.hpp attention_forward/backward with the bf16
// rounding points) evaluated in double on the kernel's inputs; lse in base 2 (lse2 = lse / ln 2).
// Bounds (first order, per (sequence, head); i a query row, j <= i a key row; u = 2^-24, us = 2^-23 for
// the MMA's accumulation, HSP the kernel's padded head, KT = T + 64 >= the keys (or queries) an output's
// MMA chain runs over, zeros included; every bound doubled):
//  s_ij = q_i.k_j: es = (HSP + 2) us sum_d |q k|; z = s c2 (c2 = scale log2 e; the kernel's fp32 c2 and
//    its product round once each): dz = c2 es + 2u |z|. M_i = ceil(max_j z_ij) (the reference's; the
//    kernel's may differ by one: rounding commutes with the power of two).
//  w_ij = 2^(z - M): relative dw = ln2 (dz + u (|z - M| + 1)) + 4u (exp2f: <= 2 ulp). The kernel's weight
//    rounds to the reference's bf16(w) unless a rounding boundary lies within the error: the difference is
//    at most fw = bf16(w + 2 dw w) - bf16(w - 2 dw w) (rounding is monotone): 0 for almost every weight,
//    one bf16 ulp where the boundary is that close. Likewise every rounded value below (flip intervals).
//  out_ic = sum_j bf16(w_ij) v_jc / l_i, l = sum_j w: |d out| <= (sum_j fw |v| + (KT + 2) us sum_j bf16(w) |v|)
//    / l + |out| (dl / l + u), dl = sum_j dw w + (T + 10) u l. lse2 = M + log2 l: dl / (l ln2) + 2u |log2 l|
//    + u |lse2|.
//  Backward: D_i = dout_i . out_i (out: the forward's bf16 output, the kernel's own, within its flip
//    interval eO of the reference's): dD = sum_c |dout| eO + (HS + 5) u sum_c |dout out|. P = 2^(z - lse2):
//    relative eP = ln2 (dz + dlse2 + u |z - lse2|) + 4u. dP = dout_i.v_j: edp = (HSP + 2) us sum |dout v|.
//    x = P (dP - D): rho = P (edp + dD + u |dP - D|) + |x| (eP + u); dS = bf16(x) within its flip interval
//    edS; bf16(P) within its interval eP^.
//  dq_ic = scale sum_j dS_ij k_jc: scale (sum_j edS |k| + (KT + 2) us sum_j |dS k|) + u |dq|; dk likewise
//  over i >= j with q; dv_jc = sum_i bf16(P_ij) dout_ic: sum_i eP^ |dout| + (KT + 2) us sum_i bf16(P) |dout|.
// With a bias (in.bias): z = s c2 + b log2 e, the kernel's fl(fl(s c2) + fl(b fl(log2 e))) adds 2u |b log2 e|
// + u |z| to dz; the bias's gradient x_ij = P (dP - D) (the dq kernel's fp32 value before dS's rounding)
// within 2 rho_ij (rho as above). reference_rounds = false: the same bounds against learn's fp32-semantics
// attention (no rounding of P or dS, D = sum_j P dP): the control that the bounds see a missing rounding
// point. dqdk_bf16 = false: dq and dk are the kernel's fp32 form (the same bounds, no bf16 rounding).
void check_flash(const AttIn& in, const AttOut& o, Check& ck, bool reference_rounds = true, bool dqdk_bf16 = true) {
  const int B = in.B, NH = in.NH, HS = in.HS, D = NH * HS, HSP = FTC::padded_head(HS);
  const double sc = in.scale, c2 = double(in.scale) * FTC::kLog2e, u = kU, us = kUTc, ln2 = std::log(2.0);
  const double tiny = 0x1p-100;
  auto r16 = [](double x) { return round_to_bf16(x); };
  auto flip = [&](double x, double rho) { return r16(x + 2 * rho) - r16(x - 2 * rho); };
  const std::size_t n = in.q.size();
  const bool biased = !in.bias.empty();
  const double l2e = double(FTC::kLog2eF);
  std::vector<double> out(n), dq(n, 0.0), dk(n, 0.0), dv(n, 0.0), lse(std::size_t(NH) * std::size_t(in.R()));
  std::vector<double> tout(n, 0.0), tdq(n, 0.0), tdk(n, 0.0), tdv(n, 0.0), tlse(lse.size());
  const std::size_t nslots = biased ? std::size_t(NH * in.soff().back()) : 0;
  std::vector<double> dbias(nslots), tdbias(nslots);
  for (int b = 0; b < B; ++b) {
    const int T = in.len(b);
    const double KT = T + 64;
    const std::size_t o0 = std::size_t(in.off[std::size_t(b)]) * D, TD = std::size_t(T) * D,
                      l0 = std::size_t(NH) * std::size_t(in.off[std::size_t(b)]);
    const auto qs = slice(in.q, o0, TD), ks = slice(in.k, o0, TD), vs = slice(in.v, o0, TD), gs = slice(in.dout, o0, TD);
    std::vector<double> att(std::size_t(NH) * T * T), scratch(std::size_t(T) * T), os(TD);
    std::vector<double> bd(biased ? std::size_t(NH) * T * T : 0, 0.0), dbd(bd.size(), 0.0);
    for (int h = 0; h < (biased ? NH : 0); ++h)
      for (int i = 0; i < T; ++i)
        for (int j = 0; j <= i; ++j) bd[(std::size_t(h) * T + i) * T + j] = in.b(h, i, j);
    attention_forward(os.data(), att.data(), qs.data(), ks.data(), vs.data(), T, T, NH, HS, sc,
                      biased ? bd.data() : nullptr, 0, 0, reference_rounds);
    std::vector<double> o16(os);
    for (auto& x : o16) x = r16(x);
    attention_backward(dq.data() + o0, dk.data() + o0, dv.data() + o0, scratch.data(), gs.data(), att.data(), qs.data(),
                       ks.data(), vs.data(), T, NH, HS, sc, biased ? dbd.data() : nullptr, 0,
                       reference_rounds ? o16.data() : nullptr);
    std::copy(os.begin(), os.end(), out.begin() + long(o0));
    for (int h = 0; h < NH; ++h) {
      auto at = [&](int i, int c) { return std::size_t(i) * D + std::size_t(h) * HS + std::size_t(c); };
      auto ij = [&](int i, int j) { return std::size_t(i) * T + std::size_t(j); };
      std::vector<double> z(std::size_t(T) * T, 0.0), dz(z.size(), 0.0), P(z.size(), 0.0), dS(z.size(), 0.0),
          edS(z.size(), 0.0), Ph(z.size(), 0.0), ePh(z.size(), 0.0);
      std::vector<double> L2(T), dL2(T), Dv(T), dD(T), w(T), fw(T);
      for (int i = 0; i < T; ++i) {  // forward
        double mz = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double s = 0, as = 0;
          for (int c = 0; c < HS; ++c) s += qs[at(i, c)] * ks[at(j, c)], as += std::abs(qs[at(i, c)] * ks[at(j, c)]);
          const double zb = biased ? in.b(h, i, j) * l2e : 0.0;
          z[ij(i, j)] = s * c2 + zb;
          dz[ij(i, j)] = c2 * (HSP + 2) * us * as + 2 * u * std::abs(s * c2) +
                         (biased ? 2 * u * std::abs(zb) + u * std::abs(s * c2 + zb) : 0.0);
          mz = std::max(mz, z[ij(i, j)]);
        }
        const double M = std::ceil(mz);
        double li = 0, dli = 0;
        for (int j = 0; j <= i; ++j) {
          const double wi = std::exp2(z[ij(i, j)] - M);
          const double rho = wi * (ln2 * (dz[ij(i, j)] + u * (std::abs(z[ij(i, j)] - M) + 1)) + 4 * u);
          w[std::size_t(j)] = wi, fw[std::size_t(j)] = flip(wi, rho);
          li += wi, dli += rho;
        }
        dli += (T + 10) * u * li;
        L2[std::size_t(i)] = M + std::log2(li);
        dL2[std::size_t(i)] = 2 * (dli / (li * ln2) + 2 * u * std::abs(std::log2(li)) + u * std::abs(L2[std::size_t(i)])) + tiny;
        lse[l0 + std::size_t(h) * T + std::size_t(i)] = L2[std::size_t(i)];
        tlse[l0 + std::size_t(h) * T + std::size_t(i)] = dL2[std::size_t(i)];
        for (int c = 0; c < HS; ++c) {
          double f = 0, a = 0;
          for (int j = 0; j <= i; ++j) f += fw[std::size_t(j)] * std::abs(vs[at(j, c)]), a += r16(w[std::size_t(j)]) * std::abs(vs[at(j, c)]);
          tout[o0 + at(i, c)] = 2 * ((f + (KT + 2) * us * a) / li + std::abs(os[at(i, c)]) * (dli / li + u)) + tiny;
        }
        for (int j = 0; j <= i; ++j) P[ij(i, j)] = w[std::size_t(j)] / li;
      }
      for (int i = 0; i < T; ++i) {  // the row terms D, from the reference's rounded output
        double Di = 0, dDi = 0;
        for (int c = 0; c < HS; ++c) {
          const double x = os[at(i, c)], eO = flip(x, 0.5 * tout[o0 + at(i, c)]);
          Di += gs[at(i, c)] * o16[at(i, c)];
          dDi += std::abs(gs[at(i, c)]) * eO + (HS + 5) * u * std::abs(gs[at(i, c)] * o16[at(i, c)]);
        }
        Dv[std::size_t(i)] = Di, dD[std::size_t(i)] = dDi;
      }
      for (int i = 0; i < T; ++i)
        for (int j = 0; j <= i; ++j) {
          double dp = 0, adp = 0;
          for (int c = 0; c < HS; ++c) dp += gs[at(i, c)] * vs[at(j, c)], adp += std::abs(gs[at(i, c)] * vs[at(j, c)]);
          const double p = P[ij(i, j)], zz = z[ij(i, j)];
          const double eP = ln2 * (dz[ij(i, j)] + dL2[std::size_t(i)] + u * std::abs(zz - L2[std::size_t(i)])) + 4 * u;
          const double x = p * (dp - Dv[std::size_t(i)]);
          const double rho = p * ((HSP + 2) * us * adp + dD[std::size_t(i)] + u * std::abs(dp - Dv[std::size_t(i)])) +
                             std::abs(x) * (eP + u);
          dS[ij(i, j)] = r16(x), edS[ij(i, j)] = flip(x, rho);
          Ph[ij(i, j)] = r16(p), ePh[ij(i, j)] = flip(p, p * eP);
          if (biased) {
            dbias[in.slot(b, h, i, j)] = dbd[(std::size_t(h) * T + i) * T + j];
            tdbias[in.slot(b, h, i, j)] = 2 * rho + tiny;
          }
        }
      for (int i = 0; i < T; ++i)
        for (int c = 0; c < HS; ++c) {
          double e = 0, a = 0;
          for (int j = 0; j <= i; ++j)
            e += edS[ij(i, j)] * std::abs(ks[at(j, c)]), a += std::abs(dS[ij(i, j)] * ks[at(j, c)]);
          tdq[o0 + at(i, c)] = 2 * (sc * (e + (KT + 2) * us * a) + u * std::abs(dq[o0 + at(i, c)])) + tiny;
        }
      for (int j = 0; j < T; ++j)
        for (int c = 0; c < HS; ++c) {
          double ek = 0, ak = 0, ev = 0, av = 0;
          for (int i = j; i < T; ++i) {
            ek += edS[ij(i, j)] * std::abs(qs[at(i, c)]), ak += std::abs(dS[ij(i, j)] * qs[at(i, c)]);
            ev += ePh[ij(i, j)] * std::abs(gs[at(i, c)]), av += Ph[ij(i, j)] * std::abs(gs[at(i, c)]);
          }
          tdk[o0 + at(j, c)] = 2 * (sc * (ek + (KT + 2) * us * ak) + u * std::abs(dk[o0 + at(j, c)])) + tiny;
          tdv[o0 + at(j, c)] = 2 * (ev + (KT + 2) * us * av) + tiny;
        }
    }
  }
  ck.all("flash out", o.out, out, tout, true);
  ck.all("flash lse2", o.lse, lse, tlse, false);
  ck.all("flash dq", o.dq, dq, tdq, dqdk_bf16);
  ck.all("flash dk", o.dk, dk, tdk, dqdk_bf16);
  ck.all("flash dv", o.dv, dv, tdv, true);
  if (biased) ck.all("flash dbias", o.dbias, dbias, tdbias, false);
}

#if MANYADD_WITH_CUDA
// ---- the device runs of the same checks -------------------------------------------------------------------
// in's bias table, its gradient slots (NaN to start: an unwritten slot fails) and their offsets on the device.
struct DevBias {
  bool on;
  long long stride;
  Dev<float> bias, slots;
  Dev<long long> soff;
  explicit DevBias(const AttIn& in)
      : on(!in.bias.empty()), stride(in.pairs()), bias(on ? in.bias : std::vector<float>(1)),
        slots(std::vector<float>(on ? std::size_t(in.NH * in.soff().back()) : 1, NAN)), soff(in.soff()) {}
  kernels::ScoreBias forward() const {
    return on ? kernels::ScoreBias{bias.p, stride, nullptr, nullptr} : kernels::ScoreBias{};
  }
  kernels::ScoreBias backward() const {
    return on ? kernels::ScoreBias{bias.p, stride, slots.p, soff.p} : kernels::ScoreBias{};
  }
  std::vector<float> slots_or_none() const { return on ? slots.get() : std::vector<float>{}; }
};
GemmOut gemm_gpu(kernels::Blas& blas, const GemmIn& in) {
  const int R = in.R, C = in.C, OC = in.OC;
  Dev<bf16> x(to_io<bf16>(in.x)), w(to_io<bf16>(in.w)), g(to_io<bf16>(in.g));
  Dev<float> fwd(std::size_t(R) * OC), acc(in.out0), dxa(in.dx0), dw(in.dw0);
  Dev<bf16> fwd16(std::size_t(R) * OC), dx16(std::size_t(R) * C);
  blas.linear_forward(fwd.p, x.p, w.p, R, C, OC);
  blas.linear_forward(acc.p, x.p, w.p, R, C, OC, true);
  blas.linear_forward(fwd16.p, x.p, w.p, R, C, OC);
  blas.linear_backward_input(dxa.p, g.p, w.p, R, C, OC, true);
  blas.linear_backward_input(dx16.p, g.p, w.p, R, C, OC);
  blas.linear_backward_weight(dw.p, g.p, x.p, R, C, OC);
  return {fwd.get(), acc.get(), to_float(fwd16.get()), dxa.get(), to_float(dx16.get()), dw.get()};
}
NormOut norm_gpu(const NormIn& in, bool g_bf16) {
  Dev<float> x(in.x), w(in.w), r(std::size_t(in.R)), dx(in.dx0), dw(std::size_t(in.C)),
      scr(K::rmsnorm_scratch_floats(in.R, in.C));
  Dev<bf16> out(in.x.size());
  K::rmsnorm_forward(out.p, r.p, x.p, w.p, in.R, in.C, in.eps);
  if (g_bf16) {
    Dev<bf16> g(to_io<bf16>(in.g));
    K::rmsnorm_backward(dx.p, dw.p, scr.p, g.p, x.p, w.p, r.p, in.R, in.C);
  } else {
    Dev<float> g(in.g);
    K::rmsnorm_backward(dx.p, dw.p, scr.p, g.p, x.p, w.p, r.p, in.R, in.C);
  }
  return {to_float(out.get()), r.get(), dx.get(), dw.get()};
}
GegluOut geglu_gpu(const GegluIn& in, bool dg_bf16) {
  Dev<bf16> h(to_io<bf16>(in.h)), g(std::size_t(in.R) * in.F), dh(in.h.size());
  K::geglu_forward(g.p, h.p, in.R, in.F);
  if (dg_bf16) {
    Dev<bf16> dg(to_io<bf16>(in.dg));
    K::geglu_backward(dh.p, dg.p, h.p, in.R, in.F);
  } else {
    Dev<float> dg(in.dg);
    K::geglu_backward(dh.p, dg.p, h.p, in.R, in.F);
  }
  return {to_float(g.get()), to_float(dh.get())};
}
// offset: elements before each row buffer's start (1 makes every row pointer misaligned: the launcher
// must take the element-by-element loads).
template <class IO>
AttOut attention_gpu(const AttIn& in, std::size_t offset = 0) {
  const std::size_t n = in.q.size(), nl = std::size_t(in.NH) * std::size_t(in.R());
  auto padded = [&](const std::vector<float>& v) {
    std::vector<IO> o(offset + v.size(), round_to<IO>(0.f));
    const auto io = to_io<IO>(v);
    std::copy(io.begin(), io.end(), o.begin() + long(offset));
    return o;
  };
  auto tail = [&](const Dev<IO>& d) {
    const auto h = d.get();
    return to_float(std::vector<IO>(h.begin() + long(offset), h.end()));
  };
  Dev<IO> q(padded(in.q)), k(padded(in.k)), v(padded(in.v)), g(padded(in.dout)), out(offset + n), dq(offset + n),
      dk(offset + n), dv(offset + n);
  Dev<float> lse(nl), scr(nl);
  Dev<std::int32_t> off(in.off);
  const std::size_t f = offset;
  DevBias db(in);
  K::attention_forward(out.p + f, lse.p, q.p + f, k.p + f, v.p + f, off.p, in.B, in.R(), in.NH, in.HS, in.scale,
                       db.forward());
  K::attention_backward(dq.p + f, dk.p + f, dv.p + f, scr.p, g.p + f, lse.p, q.p + f, k.p + f, v.p + f, off.p, in.B,
                        in.R(), in.NH, in.HS, in.scale, db.backward());
  return {tail(out), lse.get(), tail(dq), tail(dk), tail(dv), db.slots_or_none()};
}
AttOut attention_gemm_gpu(kernels::Blas& blas, const AttIn& in) {
  const std::size_t n = in.q.size(), nl = std::size_t(in.B) * in.NH * in.T,
                    ns = kernels::attention_gemm_scores_size(in.B, in.T, in.NH);
  Dev<bf16> q(to_io<bf16>(in.q)), k(to_io<bf16>(in.k)), v(to_io<bf16>(in.v)), g(to_io<bf16>(in.dout)), out(n), dq(n),
      dk(n), dv(n), P(ns), dS(ns);
  Dev<float> lse(nl), S(ns), dP(ns);
  kernels::attention_gemm_forward(blas, out.p, lse.p, S.p, P.p, q.p, k.p, v.p, in.B, in.T, in.NH, in.HS, in.scale);
  kernels::attention_gemm_backward(blas, dq.p, dk.p, dv.p, dP.p, dS.p, g.p, lse.p, S.p, P.p, q.p, k.p, v.p, in.B, in.T,
                                   in.NH, in.HS, in.scale);
  return {to_float(out.get()), lse.get(), to_float(dq.get()), to_float(dk.get()), to_float(dv.get()), {}};
}
// The tensor-core flash kernels (flash_tc.hpp); offset as attention_gpu's (1: misaligned rows, scalar fills);
// dqdk_fp32: the backward's fp32 dq, dk form.
AttOut flash_gpu(const AttIn& in, std::size_t offset = 0, bool dqdk_fp32 = false) {
  const std::size_t n = in.q.size(), nl = std::size_t(in.NH) * std::size_t(in.R()), f = offset;
  auto padded = [&](const std::vector<float>& v) {
    std::vector<bf16> o(offset + v.size(), bf16{0});
    const auto io = to_io<bf16>(v);
    std::copy(io.begin(), io.end(), o.begin() + long(offset));
    return o;
  };
  auto tail = [&](const Dev<bf16>& d) {
    const auto h = d.get();
    return to_float(std::vector<bf16>(h.begin() + long(offset), h.end()));
  };
  Dev<bf16> q(padded(in.q)), k(padded(in.k)), v(padded(in.v)), g(padded(in.dout)), out(f + n), dq(f + n), dk(f + n),
      dv(f + n);
  Dev<float> lse(nl), dsum(nl);
  Dev<std::int32_t> off(in.off);
  DevBias db(in);
  kernels::flash::attention_forward(out.p + f, lse.p, q.p + f, k.p + f, v.p + f, off.p, in.B, in.R(), in.NH, in.HS,
                                    in.scale, db.forward());
  if (dqdk_fp32) {
    Dev<float> dq32(n), dk32(n);
    kernels::flash::attention_backward(dq32.p, dk32.p, dv.p + f, dsum.p, g.p + f, out.p + f, lse.p, q.p + f, k.p + f,
                                       v.p + f, off.p, in.B, in.R(), in.NH, in.HS, in.scale, db.backward());
    return {tail(out), lse.get(), dq32.get(), dk32.get(), tail(dv), db.slots_or_none()};
  }
  kernels::flash::attention_backward(dq.p + f, dk.p + f, dv.p + f, dsum.p, g.p + f, out.p + f, lse.p, q.p + f, k.p + f,
                                     v.p + f, off.p, in.B, in.R(), in.NH, in.HS, in.scale, db.backward());
  return {tail(out), lse.get(), tail(dq), tail(dk), tail(dv), db.slots_or_none()};
}
#endif

// ---- RoPE: a varlen batch (sequences of different lengths, one of a single row), its tables and the CPU
// twin's rotations (learn::rope_rotate per sequence, from each sequence's first row) -------------------------
struct RopeCase {
  int NH, HS, B, R, T;
  std::vector<std::int32_t> offsets;
  std::vector<float> cs, sn, x;   // tables of positions 0..T-1 (learn::rope_tables<float>); x (R, NH HS)
  std::vector<float> fwd, bwd;    // the twin's rotation of x by +angle and by -angle (fp32)
  RopeCase(int heads, int head_dim, const std::vector<int>& lengths, std::uint32_t seed)
      : NH(heads), HS(head_dim), B(int(lengths.size())), R(0), T(0) {
    offsets.push_back(0);
    for (int len : lengths) R += len, T = std::max(T, len), offsets.push_back(R);
    rope_tables(cs, sn, 0, T, HS, kRopeBase);
    x = randn(std::size_t(R) * NH * HS, seed, 2.f);
    fwd = x, bwd = x;
    const std::int64_t D = std::int64_t(NH) * HS;
    for (int b = 0; b < B; ++b) {
      const int len = offsets[std::size_t(b) + 1] - offsets[std::size_t(b)];
      rope_rotate(fwd.data() + offsets[std::size_t(b)] * D, cs, sn, len, NH, HS, +1);
      rope_rotate(bwd.data() + offsets[std::size_t(b)] * D, cs, sn, len, NH, HS, -1);
    }
  }
  std::int64_t pairs() const { return std::int64_t(R) * NH * (HS / 2); }
};
std::vector<RopeCase> rope_cases() {
  std::vector<RopeCase> v;
  v.emplace_back(3, 8, std::vector<int>{5, 1, 17, 9, 30}, 41);
  v.emplace_back(1, 2, std::vector<int>{12, 3, 40}, 42);
  v.emplace_back(2, 64, std::vector<int>{64, 7, 130}, 43);  // angles up to 129 rad
  return v;
}

}  // namespace

#if MANYADD_WITH_CUDA
// ==== fp32 kernels ============================================================================================

// Same additions in the same order as the CPU: bitwise equal (tolerance 0), forward and backward, for
// every number of position levels (none; digits; coupled; coupled3's three tables).
TEST(CudaKernelsGpu, EmbeddingIsBitwiseTheCpu) {
  REQUIRE_DEVICE();
  for (int L = 0; L <= K::kMaxPosLevels; ++L) {
    SCOPED_TRACE("levels " + std::to_string(L));
    const EmbeddingCase e(L);
    Dev<std::uint8_t> dtok(e.tok);
    Dev<float> dwte(e.wte), ddout(e.dout), out(e.out.size()), gte(e.wte.size());
    std::vector<Dev<std::int32_t>> dids, drd, dst;
    std::vector<Dev<float>> dwpe, gpe;
    for (int lv = 0; lv < L; ++lv) dids.emplace_back(e.ids[lv]), dwpe.emplace_back(e.wpe[lv]), gpe.emplace_back(e.wpe[lv].size());
    for (int k = 0; k <= L; ++k) drd.emplace_back(e.readers[k]), dst.emplace_back(e.starts[k]);
    const std::int32_t* pos[K::kMaxPosLevels] = {};
    const std::int32_t* rd[1 + K::kMaxPosLevels] = {};
    const std::int32_t* st[1 + K::kMaxPosLevels] = {};
    const float* wpe[K::kMaxPosLevels] = {};
    float* dw[K::kMaxPosLevels] = {};
    for (int lv = 0; lv < L; ++lv) pos[lv] = dids[lv].p, wpe[lv] = dwpe[lv].p, dw[lv] = gpe[lv].p;
    for (int k = 0; k <= L; ++k) rd[k] = drd[std::size_t(k)].p, st[k] = dst[std::size_t(k)].p;
    K::embedding_forward(out.p, dtok.p, pos, L, dwte.p, wpe, e.R, e.C);
    K::embedding_backward(gte.p, dw, ddout.p, rd, st, L, e.C, e.V, e.rows);
    EXPECT_EQ(out.get(), e.out);
    EXPECT_EQ(gte.get(), e.dwte);
    for (int lv = 0; lv < L; ++lv) EXPECT_EQ(gpe[lv].get(), e.dwpe[lv]) << "level " << lv;
  }
  EXPECT_THROW(K::embedding_forward(nullptr, nullptr, nullptr, K::kMaxPosLevels + 1, nullptr, nullptr, 1, 1),
               std::runtime_error);
}

// RoPE on varlen rows: the kernels' products are rounded on their own (mul_rn, add/sub_rn) as the CPU's
// float expression, so the rotation is bitwise the twin's (tolerance 0) in both directions, in place and
// out of place, and the bf16 outputs are the twin's fp32 values rounded once (core's rounding: equal bits).
// Unlike every step test this catches a rotation by the wrong index: RoPE's scores depend on position
// differences alone, so a kernel rotating row r by r (the batch row) would pass a logit or gradient check.
TEST(CudaKernelsGpu, RopeIsBitwiseTheCpu) {
  REQUIRE_DEVICE();
  for (const RopeCase& rc : rope_cases()) {
    SCOPED_TRACE("NH " + std::to_string(rc.NH) + " HS " + std::to_string(rc.HS) + " R " + std::to_string(rc.R));
    Dev<float> x(rc.x), cs(rc.cs), sn(rc.sn), out(rc.x.size()), inplace(rc.x);
    Dev<std::int32_t> off(rc.offsets);
    Dev<bf16> out16(rc.x.size());
    K::rope_forward(out.p, x.p, cs.p, sn.p, off.p, rc.B, rc.R, rc.NH, rc.HS);
    EXPECT_EQ(out.get(), rc.fwd);
    K::rope_forward(inplace.p, inplace.p, cs.p, sn.p, off.p, rc.B, rc.R, rc.NH, rc.HS);
    EXPECT_EQ(inplace.get(), rc.fwd);
    K::rope_forward(out16.p, x.p, cs.p, sn.p, off.p, rc.B, rc.R, rc.NH, rc.HS);
    EXPECT_EQ(to_float(out16.get()), rounded(rc.fwd));
    K::rope_backward(out.p, x.p, cs.p, sn.p, off.p, rc.B, rc.R, rc.NH, rc.HS);
    EXPECT_EQ(out.get(), rc.bwd);
    K::rope_backward(out16.p, x.p, cs.p, sn.p, off.p, rc.B, rc.R, rc.NH, rc.HS);
    EXPECT_EQ(to_float(out16.get()), rounded(rc.bwd));
  }
  EXPECT_THROW(K::rope_forward(static_cast<float*>(nullptr), nullptr, nullptr, nullptr, nullptr, 1, 1, 1, 3),
               std::runtime_error);
}

// RMSNorm: the GPU sums x^2 and g w x in a warp-strided tree, the CPU sequentially; each sum errs by
// at most ~C eps relative (C = 256: 1.5e-5, usually far less), and the outputs inherit it: 3e-5
// relative to the largest entry. dw sums over R = 2000 rows in 256-row chunks vs sequentially:
// ~R eps worst case = 1.2e-4; observed errors of such sums are ~sqrt(R) eps, so 1e-4.
TEST(CudaKernelsGpu, RmsNormMatchesCpu) {
  REQUIRE_DEVICE();
  const int R = 2000, C = 256;
  const auto x = randn(std::size_t(R) * C, 6), w = randn(C, 7), g = randn(std::size_t(R) * C, 8);
  const auto dx0 = randn(std::size_t(R) * C, 9);  // backward accumulates into an existing dinp
  std::vector<float> out(x.size()), r(R), dx = dx0, dw(C, 0.f);
  rmsnorm_forward(out.data(), r.data(), x.data(), w.data(), R, C, 1e-6f);
  rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), r.data(), R, C);
  Dev<float> dX(x), dW(w), dG(g), dOut(out.size()), dR(R), dDx(dx0), dDw(C), scr(K::rmsnorm_scratch_floats(R, C));
  K::rmsnorm_forward(dOut.p, dR.p, dX.p, dW.p, R, C, 1e-6f);
  K::rmsnorm_backward(dDx.p, dDw.p, scr.p, dG.p, dX.p, dW.p, dR.p, R, C);
  EXPECT_LT(rel_err(dOut.get(), out), 3e-5);
  EXPECT_LT(rel_err(dR.get(), r), 3e-5);
  EXPECT_LT(rel_err(dDx.get(), dx), 3e-5);
  EXPECT_LT(rel_err(dDw.get(), dw), 1e-4);
}

// GEGLU and the residual: element-wise; the only difference is CUDA tanhf (<= 2 ulp) vs glibc's,
// i.e. a few 1e-7 relative: 2e-6 relative to the largest entry.
TEST(CudaKernelsGpu, GegluAndResidualMatchCpu) {
  REQUIRE_DEVICE();
  const int R = 700, F = 192;
  const auto h = randn(std::size_t(R) * 2 * F, 10, 2.f), dg = randn(std::size_t(R) * F, 11);
  std::vector<float> out(std::size_t(R) * F), dh(h.size(), 0.f);
  geglu_forward(out.data(), h.data(), R, F);
  geglu_backward(dh.data(), dg.data(), h.data(), R, F);
  Dev<float> dH(h), dG(dg), dOut(out.size()), dDh(h.size());
  K::geglu_forward(dOut.p, dH.p, R, F);
  K::geglu_backward(dDh.p, dG.p, dH.p, R, F);
  EXPECT_LT(rel_err(dOut.get(), out), 2e-6);
  EXPECT_LT(rel_err(dDh.get(), dh), 2e-6);
  std::vector<float> sum(out.size());
  residual_forward(sum.data(), out.data(), dg.data(), std::int64_t(out.size()));
  Dev<float> dSum(out.size());
  K::residual_forward(dSum.p, dOut.p, dG.p, std::int64_t(out.size()));
  EXPECT_LT(rel_err(dSum.get(), sum), 2e-6);
}

// Attention over varlen sequences (lengths 200, 37, 1, 120 packed without padding), fp32, scale
// 1 / sqrt(HS), against layers.hpp per sequence on its own rows: the GPU uses an online softmax (running
// max, rescaled sums) and warp-tree dot products, the CPU a two-pass softmax and Eigen products; both
// sum <= T = 200 terms per row, so the outputs differ by ~T eps ~ 1e-5 relative in the worst case; 1e-4
// relative to the largest entry. The backward subtracts nearly equal terms (dP - D) and sums T of them
// twice: 3e-4. A row attending across a sequence boundary, or a wrong sequence of a warp, gives O(1).
// Head widths 8, 64, 96, 128 (NPL 1, 2, 4, 4; the derived per-element bounds of Bf16AttentionMatchesCpu
// cover every width up to 512 in fp32 too).
TEST(CudaKernelsGpu, AttentionForwardBackwardMatchCpu) {
  REQUIRE_DEVICE();
  const std::vector<std::int32_t> off = {0, 200, 237, 238, 358};
  const int B = 4, R = off.back(), NH = 2;
  for (int HS : {8, 64, 96, 128}) {
    SCOPED_TRACE("d_head " + std::to_string(HS));
    const int D = NH * HS;
    const std::size_t n = std::size_t(R) * D;
    const auto q = randn(n, 12, 0.3f), k = randn(n, 13, 0.3f), v = randn(n, 14), dout = randn(n, 15);
    const float scale = 1.f / std::sqrt(float(HS));
    std::vector<float> out(n), att(std::size_t(NH) * 200 * 200), dq(n, 0.f), dk(n, 0.f), dv(n, 0.f),
        scratch(std::size_t(200) * 200);
    for (int b = 0; b < B; ++b) {
      const std::size_t o = std::size_t(off[std::size_t(b)]) * D;
      const int T = off[std::size_t(b) + 1] - off[std::size_t(b)];
      attention_forward(out.data() + o, att.data(), q.data() + o, k.data() + o, v.data() + o, T, T, NH, HS, scale);
      attention_backward(dq.data() + o, dk.data() + o, dv.data() + o, scratch.data(), dout.data() + o, att.data(),
                         q.data() + o, k.data() + o, v.data() + o, T, NH, HS, scale);
    }
    Dev<float> dQ(q), dK(k), dV(v), dDo(dout), dOut(n), lse(std::size_t(NH) * R), gq(n), gk(n), gv(n),
        scr(std::size_t(NH) * R);
    Dev<std::int32_t> dOff(off);
    K::attention_forward(dOut.p, lse.p, dQ.p, dK.p, dV.p, dOff.p, B, R, NH, HS, scale);
    K::attention_backward(gq.p, gk.p, gv.p, scr.p, dDo.p, lse.p, dQ.p, dK.p, dV.p, dOff.p, B, R, NH, HS, scale);
    EXPECT_LT(rel_err(dOut.get(), out), 1e-4);
    EXPECT_LT(rel_err(gq.get(), dq), 3e-4);
    EXPECT_LT(rel_err(gk.get(), dk), 3e-4);
    EXPECT_LT(rel_err(gv.get(), dv), 3e-4);
  }
}

// Cross-entropy: the same operations per row, expf/logf within 2 ulp of glibc's: 1e-6 relative.
TEST(CudaKernelsGpu, CrossEntropyMatchesCpu) {
  REQUIRE_DEVICE();
  const int R = 1000, V = 14;
  const auto z = randn(std::size_t(R) * V, 16, 3.f);
  std::vector<std::int32_t> tg(R);
  for (int t = 0; t < R; ++t) tg[t] = t % 3 == 0 ? -1 : t % V;
  std::vector<float> losses(R), probs(z.size()), dz(z.size());
  crossentropy_forward(losses.data(), probs.data(), z.data(), tg.data(), R, V);
  crossentropy_backward(dz.data(), probs.data(), tg.data(), 0.01f, R, V);
  Dev<float> dZ(z), dL(R), dP(z.size()), dDz(z.size());
  Dev<std::int32_t> dT(tg);
  K::crossentropy_forward(dL.p, dP.p, dZ.p, dT.p, R, V);
  K::crossentropy_backward(dDz.p, dP.p, dT.p, 0.01f, R, V);
  EXPECT_LT(rel_err(dL.get(), losses), 1e-6);
  EXPECT_LT(rel_err(dP.get(), probs), 1e-6);
  EXPECT_LT(rel_err(dDz.get(), dz), 1e-6);
}

// Reductions in double over fp32 inputs: exact products, n = 1e6 double additions in another order:
// relative error <= n 2^-53 ~ 1e-10.
TEST(CudaKernelsGpu, ReductionsMatchCpu) {
  REQUIRE_DEVICE();
  const auto x = randn(1'000'003, 17);
  double s = 0, ss = 0;
  for (float v : x) s += double(v), ss += double(v) * double(v);
  Dev<float> dX(x);
  Dev<double> scr(K::reduce_scratch_doubles());
  EXPECT_NEAR(K::reduce_sum(dX.p, std::int64_t(x.size()), false, scr.p), s, 1e-10 * ss);
  EXPECT_NEAR(K::reduce_sum(dX.p, std::int64_t(x.size()), true, scr.p), ss, 1e-10 * ss);
}

// AdamW: the same correctly rounded float operations in the same order (no contraction): bitwise.
TEST(CudaKernelsGpu, AdamWIsBitwiseTheCpu) {
  REQUIRE_DEVICE();
  const std::size_t n = 100'000;
  auto p = randn(n, 18), m = randn(n, 19, 1e-3f), v = randn(n, 20, 1e-3f), g = randn(n, 21, 1e-2f);
  for (auto& x : v) x = x * x;
  TrainConfig tc;
  tc.weight_decay = 0.1;
  const AdamScalars s = adam_scalars(tc, 7, 3.0);  // clipping active (3 > 1)
  Dev<float> dp(p), dm(m), dv(v), dg(g);
  adamw_update(p.data(), m.data(), v.data(), g.data(), std::int64_t(n), s);
  K::adamw_update(dp.p, dm.p, dv.p, dg.p, std::int64_t(n), s.clip, s.b1, s.b2, s.eps, s.step_size, s.inv_sqrt_bc2, s.wd);
  EXPECT_EQ(dp.get(), p);
  EXPECT_EQ(dm.get(), m);
  EXPECT_EQ(dv.get(), v);
}

// LayerNorm (the final norm of the authors' model): as RMSNorm above, two warp-tree sums per row (mean,
// then the variance about it) against the CPU's sequential ones, errors ~C eps: 3e-5 relative to the
// largest entry; dw and db sum R = 2000 rows in 256-row chunks: 1e-4 (RmsNormMatchesCpu's argument). The
// inputs have a nonzero mean (offset 0.5), so a kernel that skipped the centering would fail.
TEST(CudaKernelsGpu, LayerNormMatchesCpu) {
  REQUIRE_DEVICE();
  const int R = 2000, C = 256;
  auto x = randn(std::size_t(R) * C, 40);
  for (auto& v : x) v += 0.5f;
  const auto w = randn(C, 41), b = randn(C, 42), g = randn(std::size_t(R) * C, 43), dx0 = randn(std::size_t(R) * C, 44);
  std::vector<float> out(x.size()), mean(R), r(R), dx = dx0, dw(C, 0.f), db(C, 0.f);
  layernorm_forward(out.data(), mean.data(), r.data(), x.data(), w.data(), b.data(), R, C, 1e-6f);
  layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), r.data(), R, C);
  Dev<float> dX(x), dW(w), dB(b), dG(g), dOut(out.size()), dM(R), dR(R), dDx(dx0), dDw(C), dDb(C),
      scr(K::layernorm_scratch_floats(R, C));
  K::layernorm_forward(dOut.p, dM.p, dR.p, dX.p, dW.p, dB.p, R, C, 1e-6f);
  K::layernorm_backward(dDx.p, dDw.p, dDb.p, scr.p, dG.p, dX.p, dW.p, dM.p, dR.p, R, C);
  EXPECT_LT(rel_err(dOut.get(), out), 3e-5);
  EXPECT_LT(rel_err(dM.get(), mean), 3e-5);
  EXPECT_LT(rel_err(dR.get(), r), 3e-5);
  EXPECT_LT(rel_err(dDx.get(), dx), 3e-5);
  EXPECT_LT(rel_err(dDw.get(), dw), 1e-4);
  EXPECT_LT(rel_err(dDb.get(), db), 1e-4);
}

// The tied readout's scale: one correctly rounded product (and one add in the backward) per element,
// as the CPU's: bitwise, in fp32 and with the bf16 output (the product rounded once more).
TEST(CudaKernelsGpu, ScaleIsBitwiseTheCpu) {
  REQUIRE_DEVICE();
  const std::size_t n = 100'003;
  const auto x = randn(n, 45, 3.f), d = randn(n, 46), d0 = randn(n, 47);
  const float s = 1.f / std::sqrt(128.f);  // not a power of two: the product rounds
  std::vector<float> y(n), dx = d0;
  scale_forward(y.data(), x.data(), s, std::int64_t(n));
  scale_backward(dx.data(), d.data(), s, std::int64_t(n));
  Dev<float> dX(x), dY(n), dD(d), dDx(d0);
  Dev<bf16> dY16(n);
  K::scale_forward(dY.p, dX.p, s, std::int64_t(n));
  K::scale_forward(dY16.p, dX.p, s, std::int64_t(n));
  K::scale_backward(dDx.p, dD.p, s, std::int64_t(n));
  EXPECT_EQ(dY.get(), y);
  EXPECT_EQ(to_float(dY16.get()), rounded(y));
  EXPECT_EQ(dDx.get(), dx);
}

// The step without host synchronization: the sum left on the device is the returned one, and AdamW
// with the clip factor computed on the device from it is bitwise AdamW with the host's factor
// (adam_scalars), with clipping active, inactive, and off (grad_clip 0).
TEST(CudaKernelsGpu, DeviceSideClipIsBitwiseTheHost) {
  REQUIRE_DEVICE();
  const std::size_t n = 100'000;
  const auto p0 = randn(n, 48), m0 = randn(n, 49, 1e-3f), g = randn(n, 51, 1e-2f);
  auto v0 = randn(n, 50, 1e-3f);
  for (auto& x : v0) x = x * x;
  Dev<float> dg(g);
  Dev<double> scr(K::reduce_scratch_doubles()), ss(1);
  const double host_ss = K::reduce_sum(dg.p, std::int64_t(n), true, scr.p);
  K::reduce_sum(dg.p, std::int64_t(n), true, scr.p, ss.p);
  ASSERT_EQ(ss.get()[0], host_ss);
  const double norm = std::sqrt(host_ss);
  for (double clip : {0.5 * norm, 2 * norm, 0.0}) {
    SCOPED_TRACE("grad_clip " + std::to_string(clip));
    TrainConfig tc;
    tc.grad_clip = clip;
    const AdamScalars s = adam_scalars(tc, 7, norm);
    Dev<float> ap(p0), am(m0), av(v0), bp(p0), bm(m0), bv(v0);
    K::adamw_update(ap.p, am.p, av.p, dg.p, std::int64_t(n), s.clip, s.b1, s.b2, s.eps, s.step_size, s.inv_sqrt_bc2,
                    s.wd);
    K::adamw_update(bp.p, bm.p, bv.p, dg.p, std::int64_t(n), ss.p, tc.grad_clip, s.b1, s.b2, s.eps, s.step_size,
                    s.inv_sqrt_bc2, s.wd);
    EXPECT_EQ(bp.get(), ap.get());
    EXPECT_EQ(bm.get(), am.get());
    EXPECT_EQ(bv.get(), av.get());
    EXPECT_EQ(s.clip == 1.0, clip == 0.0 || clip >= norm);
  }
}

// ==== bf16 kernels (tolerances: the top of the file and each check_* function) =======================

// Rounding is core's float_to_bf16 bit for bit (ties to even, subnormals, overflow to inf, -0; NaN
// stays NaN), widening is exact; residual fp32 + bf16 is one correctly rounded fp32 add, as the CPU's.
TEST(CudaKernelsGpu, Bf16ConvertAndResidualAreBitwiseTheCpu) {
  REQUIRE_DEVICE();
  auto x = randn(100'000, 30, 10.f);
  for (std::uint32_t b : {0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x3f807fffu, 0x00000001u, 0x00008000u, 0x00018000u,
                          0x007fffffu, 0x7f7fffffu, 0x7f7f7fffu, 0xff7fffffu, 0x80000000u, 0x7f800000u, 0xff800000u}) {
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);
  }
  x.push_back(std::nanf(""));
  Dev<float> dx(x), back(x.size());
  Dev<bf16> h(x.size());
  K::convert(h.p, dx.p, std::int64_t(x.size()));
  K::convert(back.p, h.p, std::int64_t(x.size()));
  const auto hb = h.get();
  const auto wb = back.get();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(bf16_to_float(hb[i].bits)));
      continue;
    }
    ASSERT_EQ(hb[i].bits, float_to_bf16(x[i])) << "element " << i << " = " << x[i];
    const float wide = bf16_to_float(hb[i].bits);
    ASSERT_EQ(std::memcmp(&wb[i], &wide, 4), 0) << "element " << i;
  }
  const auto a = randn(50'000, 31), b = randn_bf16(50'000, 32);
  std::vector<float> sum(a.size());
  residual_forward(sum.data(), a.data(), b.data(), std::int64_t(a.size()));
  Dev<float> da(a), ds(a.size());
  Dev<bf16> db(to_io<bf16>(b));
  K::residual_forward(ds.p, da.p, db.p, std::int64_t(a.size()));
  EXPECT_EQ(ds.get(), sum);
}

TEST(CudaKernelsGpu, Bf16GemmsMatchCpu) {
  REQUIRE_DEVICE();
  kernels::Blas blas;
  Check ck;
  // tensor-core aligned shapes, the d1024 FFN shape, and odd shapes (the 14-wide readout)
  for (auto [R, C, OC] : std::vector<std::array<int, 3>>{{1000, 1024, 512}, {256, 1024, 4096}, {333, 200, 14}, {77, 13, 29}}) {
    SCOPED_TRACE("R C OC " + std::to_string(R) + " " + std::to_string(C) + " " + std::to_string(OC));
    const auto in = gemm_inputs(R, C, OC, std::uint32_t(R + C + OC));
    check_gemm(in, gemm_gpu(blas, in), ck);
  }
  ck.expect_ok("bf16 GEMMs");
}

TEST(CudaKernelsGpu, Bf16RmsNormMatchesCpu) {
  REQUIRE_DEVICE();
  Check ck;
  for (int C : {256, 1024})
    for (bool gb : {false, true}) {
      const auto in = norm_inputs(2000, C, std::uint32_t(40 + C), gb);
      check_norm(in, norm_gpu(in, gb), gb, ck);
    }
  ck.expect_ok("bf16 RMSNorm");
}

TEST(CudaKernelsGpu, Bf16GegluMatchesCpu) {
  REQUIRE_DEVICE();
  Check ck;
  for (bool gb : {false, true}) {
    const auto in = geglu_inputs(700, 384, 50, gb);
    check_geglu(in, geglu_gpu(in, gb), ck);
  }
  ck.expect_ok("bf16 GEGLU");
}

// Attention, bf16 and fp32 I/O, every head width class (NPL 1 .. 16; the 16-byte loads at HS = 64 .. 512,
// element loads at 16, 96, 200), T in {1, 7, 33, 250}, B in {1, 3}, both scales (1: T5; 1/sqrt(HS)); and
// varlen batches (lengths 33, 1, 250, 7, 2 packed without padding: a row sees only its own sequence).
TEST(CudaKernelsGpu, Bf16AttentionMatchesCpu) {
  REQUIRE_DEVICE();
  Check ck16, ck32;
  std::uint32_t seed = 60;
  for (int HS : {16, 64, 96, 128, 200, 256, 512})
    for (int T : {1, 7, 33, 250})
      for (int B : {1, 3}) {
        const float scale = (seed % 2) ? 1.f : float(1 / std::sqrt(double(HS)));
        SCOPED_TRACE("HS " + std::to_string(HS) + " T " + std::to_string(T) + " B " + std::to_string(B) + " scale " +
                     std::to_string(scale));
        const auto in16 = attention_inputs(B, T, 2, HS, scale, 2.0, true, seed);
        check_attention(in16, attention_gpu<bf16>(in16), true, ck16);
        const auto in32 = attention_inputs(B, T, 2, HS, scale, 2.0, false, seed);
        check_attention(in32, attention_gpu<float>(in32), false, ck32);
        ++seed;
      }
  // sharp softmax (scores spread 8: many rescales), and misaligned rows (element loads at HS = 64)
  const auto sharp = attention_inputs(2, 250, 2, 128, 1.f, 8.0, true, 90);
  check_attention(sharp, attention_gpu<bf16>(sharp), true, ck16);
  const auto mis = attention_inputs(1, 33, 2, 64, 1.f, 2.0, true, 91);
  check_attention(mis, attention_gpu<bf16>(mis, 1), true, ck16);
  for (int HS : {16, 64, 200, 512}) {
    SCOPED_TRACE("varlen HS " + std::to_string(HS));
    const std::vector<int> lengths = {33, 1, 250, 7, 2};
    const auto v16 = attention_inputs(lengths, 4, HS, 1.f, 2.0, true, seed);
    check_attention(v16, attention_gpu<bf16>(v16), true, ck16);
    const auto v32 = attention_inputs(lengths, 4, HS, float(1 / std::sqrt(double(HS))), 2.0, false, seed++);
    check_attention(v32, attention_gpu<float>(v32), false, ck32);
  }
  ck16.expect_ok("bf16 attention");
  ck32.expect_ok("fp32 attention (derived bounds)");
}

// The tensor-core attention (attention_gemm.hpp): HS multiples of 8 up to 512, T in {1, 7, 33, 250}
// (T not a multiple of 8: padded score rows), B in {1, 3}, both scales; the Gemm bounds of check_attention.
TEST(CudaKernelsGpu, Bf16AttentionGemmMatchesCpu) {
  REQUIRE_DEVICE();
  kernels::Blas blas;
  Check ck;
  std::uint32_t seed = 300;
  for (int HS : {16, 64, 96, 128, 256, 512})
    for (int T : {1, 7, 33, 250})
      for (int B : {1, 3}) {
        const float scale = (seed % 2) ? 1.f : float(1 / std::sqrt(double(HS)));
        SCOPED_TRACE("HS " + std::to_string(HS) + " T " + std::to_string(T) + " B " + std::to_string(B));
        const auto in = attention_inputs(B, T, 2, HS, scale, 2.0, true, seed++);
        check_attention(in, attention_gemm_gpu(blas, in), true, ck, AttPath::Gemm);
      }
  const auto sharp = attention_inputs(2, 250, 4, 64, 1.f, 8.0, true, 390);
  check_attention(sharp, attention_gemm_gpu(blas, sharp), true, ck, AttPath::Gemm);
  ck.expect_ok("tensor-core attention");
}

// The tensor-core flash kernels (flash_tc.hpp) against learn's bf16 attention in double, within
// check_flash's derived bounds: every kernel instance (HS 16 .. 512, and 20, 96, 200: padded heads; 20
// not a multiple of 8: element fills), varlen batches of many lengths (1 .. 250, and 2013, the longest
// sequence of the evaluation grid, TA(30, 30)), both scales, a sharp softmax (score spread 8), misaligned
// rows. Then determinism: a second run is bitwise the first (no atomics), and how many outputs equal
// the host replay's bits (not required: the MMA's internal order and exp2f/log2f differ from the host's).
TEST(CudaKernelsGpu, FlashAttentionMatchesLearnsBf16Attention) {
  REQUIRE_DEVICE();
  Check ck;
  std::uint32_t seed = 700;
  const std::vector<int> lengths = {33, 1, 250, 7, 64, 65, 2, 129};
  for (int HS : {16, 20, 32, 64, 96, 128, 200, 256, 512}) {
    for (int NH : {1, 4}) {
      const float scale = (seed % 2) ? 1.f : float(1 / std::sqrt(double(HS)));
      SCOPED_TRACE("HS " + std::to_string(HS) + " NH " + std::to_string(NH) + " scale " + std::to_string(scale));
      const auto in = attention_inputs(lengths, NH, HS, scale, 2.0, true, seed++);
      check_flash(in, flash_gpu(in), ck);
    }
  }
  const auto sharp = attention_inputs(std::vector<int>{250, 17, 190}, 2, 64, 1.f, 8.0, true, 790);
  check_flash(sharp, flash_gpu(sharp), ck);
  const auto mis = attention_inputs(std::vector<int>{33, 100}, 2, 64, 1.f, 2.0, true, 791);
  check_flash(mis, flash_gpu(mis, 1), ck);
  for (int HS : {16, 64}) {
    SCOPED_TRACE("the evaluation grid's longest sequence, HS " + std::to_string(HS));
    const auto longest = attention_inputs(std::vector<int>{2013, 5}, 1, HS, 1.f, 2.0, true, 792 + std::uint32_t(HS));
    check_flash(longest, flash_gpu(longest), ck);
  }
  ck.expect_ok("tensor-core flash attention");

  {  // the fp32 dq, dk form: within the bounds as fp32 values, bf16 of them the bf16 form's outputs
    Check c32;
    for (int HS : {16, 64, 256}) {
      const auto in = attention_inputs(lengths, 2, HS, 1.f, 2.0, true, 810 + std::uint32_t(HS));
      const AttOut f = flash_gpu(in, 0, true), b = flash_gpu(in);
      check_flash(in, f, c32, true, false);
      for (std::size_t i = 0; i < f.dq.size(); ++i) {
        ASSERT_EQ(rbf(f.dq[i]), b.dq[i]) << i;
        ASSERT_EQ(rbf(f.dk[i]), b.dk[i]) << i;
      }
    }
    c32.expect_ok("tensor-core flash attention, fp32 dq and dk");
  }
  const auto in = attention_inputs(lengths, 4, 64, 1.f, 2.0, true, 800);
  const AttOut a = flash_gpu(in), b = flash_gpu(in), r = flash_replay(in);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
  std::size_t same = 0, all = 0;
  for (auto [x, y] : {std::pair{&a.out, &r.out}, {&a.dq, &r.dq}, {&a.dk, &r.dk}, {&a.dv, &r.dv}})
    for (std::size_t i = 0; i < x->size(); ++i) same += (*x)[i] == (*y)[i], ++all;
  std::cout << "[ flash    ] device outputs bitwise equal to the host replay's: " << same << " of " << all << "\n";
}

// FIRE's score bias on the device, within the bounds of the replay tests (check_attention, check_flash:
// the device differs from its replay only by expf/exp2f/logf and the MMA's order, which the bounds cover):
// the CUDA-core kernels in fp32 and bf16 I/O and the tensor-core kernels (every head-size instance; the
// fp32 dq, dk form), varlen batches with sequences shorter than the longest, a sharp bias; the slots start
// as NaN (an unwritten one fails). A second run is bitwise the first (slots included: no atomics).
TEST(CudaKernelsGpu, AttentionWithAScoreBiasMatchesTheReference) {
  REQUIRE_DEVICE();
  Check ck16, ck32, ckf, ckf32;
  std::uint32_t seed = 840;
  const std::vector<int> lengths = {7, 1, 33, 2, 12, 250};
  for (int HS : {16, 96, 512}) {
    SCOPED_TRACE("CUDA-core HS " + std::to_string(HS));
    const auto v16 = with_bias(attention_inputs(lengths, 3, HS, 1.f, 2.0, true, seed), seed + 50);
    check_attention(v16, attention_gpu<bf16>(v16), true, ck16);
    const auto v32 =
        with_bias(attention_inputs(lengths, 3, HS, float(1 / std::sqrt(double(HS))), 2.0, false, seed + 1), seed + 51);
    check_attention(v32, attention_gpu<float>(v32), false, ck32);
    seed += 2;
  }
  for (int HS : {16, 20, 32, 64, 96, 128, 200, 256, 512}) {
    const float scale = (seed % 2) ? 1.f : float(1 / std::sqrt(double(HS)));
    SCOPED_TRACE("tensor-core HS " + std::to_string(HS));
    const auto in = with_bias(attention_inputs(lengths, 2, HS, scale, 2.0, true, seed), seed + 100);
    check_flash(in, flash_gpu(in), ckf);
    check_flash(in, flash_gpu(in, 0, true), ckf32, true, false);
    ++seed;
  }
  const auto sharp = with_bias(attention_inputs(std::vector<int>{250, 17}, 2, 64, 1.f, 2.0, true, 860), 861, 4.f);
  check_flash(sharp, flash_gpu(sharp), ckf);
  check_attention(sharp, attention_gpu<bf16>(sharp), true, ck16);
  ck16.expect_ok("CUDA-core bf16 attention with a bias");
  ck32.expect_ok("CUDA-core fp32 attention with a bias");
  ckf.expect_ok("tensor-core flash attention with a bias");
  ckf32.expect_ok("tensor-core flash attention with a bias, fp32 dq and dk");
  const auto in = with_bias(attention_inputs(lengths, 4, 64, 1.f, 2.0, true, 870), 871);
  const AttOut a = flash_gpu(in), b = flash_gpu(in);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dbias, b.dbias);
  const AttOut c = attention_gpu<float>(in), d = attention_gpu<float>(in);
  EXPECT_EQ(c.out, d.out);
  EXPECT_EQ(c.dk, d.dk);
  EXPECT_EQ(c.dbias, d.dbias);
}

// FIRE's element-wise kernels (fire.cu) against their host replay (fire_rows.cuh, itself bitwise the CPU
// twin: CudaFireReplay): the slot offsets, the bias gradient's reduction over two layers' slots, ReLU and
// its backward are bitwise (the same fp32 operations); u, h1 and the d c / d L_sqrt terms differ by log1pf
// (CUDA: <= 1 ulp, i.e. 2^-23 relative, where glibc's is correctly rounded or nearly): u = a / b with a and
// b each from one log1pf (b then + eps, rounded) differs by <= ~(2 + 2 + 1) 2^-24 relative; h1 = relu(u w)
// inherits it; 2^-20 relative (x 3 margin). A term du (t1 - t2) can cancel, so its bound is relative to
// |du| (|t1| + |t2|): t1 and t2 each carry <= 3 log1pf errors and ~6 roundings, 2^-19 of that (margin 2).
TEST(CudaKernelsGpu, FireKernelsMatchTheReplay) {
  REQUIRE_DEVICE();
  const int T = 45, H = 7, NH = 3;
  const long long P = FR::tri(T);
  const auto w1 = randn(std::size_t(H), 921), du = randn(std::size_t(P), 922);
  for (bool max_thr : {true, false})
    for (float Ls : {4.5f, 16.f})
      for (float c : {0.1f, -0.37f}) {
        SCOPED_TRACE(std::string(max_thr ? "max" : "min") + " L_sqrt " + std::to_string(Ls) + " c " + std::to_string(c));
        const std::size_t nP = std::size_t(P), nPH = nP * std::size_t(H);
        std::vector<float> u(nP), h1(nPH), tc(nP), tl(nP);
        for (long long p = 0; p < P; ++p) {
          FR::mlp_input_entry(u.data(), h1.data(), w1.data(), p, H, c, FR::mul_rn(Ls, Ls), max_thr);
          FR::scalar_terms_entry(tc.data(), tl.data(), du.data(), p, c, Ls, FR::mul_rn(Ls, Ls), max_thr);
        }
        Dev<float> dw1(w1), ddu(du), dc(std::vector<float>{c}), dLs(std::vector<float>{Ls}), gu(nP), gh1(nPH), gtc(nP),
            gtl(nP);
        K::fire_mlp_input(gu.p, gh1.p, dw1.p, dc.p, dLs.p, T, H, max_thr);
        K::fire_scalar_terms(gtc.p, gtl.p, ddu.p, dc.p, dLs.p, T, max_thr);
        const auto du_ = gu.get(), dh1 = gh1.get(), dtc = gtc.get(), dtl = gtl.get();
        for (long long p = 0; p < P; ++p) {
          const std::size_t q = std::size_t(p);
          ASSERT_LE(std::abs(du_[q] - u[q]), 0x1p-20 * std::abs(u[q])) << "u " << p;
          for (int k = 0; k < H; ++k)
            ASSERT_LE(std::abs(dh1[q * H + std::size_t(k)] - h1[q * H + std::size_t(k)]),
                      0x1p-20 * std::abs(double(u[q]) * w1[std::size_t(k)]))
                << "h1 " << p;
          const int i = FR::pair_row(p);
          const FR::Norm nm = FR::norm_of(i, FR::mul_rn(Ls, Ls), max_thr);
          const double d = double(p - FR::tri(i)), n = nm.n, ac = std::abs(c);
          const double a = std::log1p(ac * d), b = std::log1p(ac * n) + 1e-6, den = (ac * n + 1) * b * b;
          const double mag = std::abs(du[q]) * (d / (ac * d + 1) / b + a * n / den);
          ASSERT_LE(std::abs(dtc[q] - tc[q]), 0x1p-19 * mag + 1e-30) << "d c term " << p;
          const double magl = std::abs(du[q]) * a * ac / den * 2 * Ls;
          ASSERT_LE(std::abs(dtl[q] - tl[q]), 0x1p-19 * magl + 1e-30) << "d L_sqrt term " << p;
        }
      }
  // ReLU and its backward, bitwise
  const auto x = randn(1000, 923), g = randn(1000, 924);
  Dev<float> dx(x), dg(g);
  K::relu_forward(dx.p, 1000);
  const auto y = dx.get();
  K::relu_backward(dg.p, dx.p, 1000);
  const auto gy = dg.get();
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i], x[i] > 0.f ? x[i] : 0.f) << i;
    ASSERT_EQ(gy[i], x[i] > 0.f ? g[i] : 0.f) << i;
  }
  // the slot offsets and the reduction of two layers' slots into a nonzero start, bitwise the replay
  const std::vector<std::int32_t> off = {0, 5, 6, 15, 18, 27, 73};
  const int B = 6, Tb = 46;
  const long long Pb = FR::tri(Tb);
  std::vector<long long> soff(std::size_t(B) + 1);
  FR::slot_offsets(soff.data(), off.data(), B);
  Dev<std::int32_t> doff(off);
  Dev<long long> dsoff(std::size_t(B) + 1);
  K::fire_slot_offsets(dsoff.p, doff.p, B);
  ASSERT_EQ(dsoff.get(), soff);
  auto db = randn(std::size_t(NH * Pb), 925);
  Dev<float> ddb(db);
  for (int layer = 0; layer < 2; ++layer) {
    const auto slots = randn(std::size_t(NH * soff[std::size_t(B)]), 926 + std::uint32_t(layer));
    for (long long e = 0; e < NH * Pb; ++e) FR::dbias_reduce_entry(db.data(), slots.data(), soff.data(), off.data(), B, NH, Pb, e);
    Dev<float> dslots(slots);
    K::fire_dbias_reduce(ddb.p, dslots.p, dsoff.p, doff.p, B, NH, Tb);
  }
  EXPECT_EQ(ddb.get(), db);
}
#endif  // MANYADD_WITH_CUDA

// ==== on the CPU: the attention kernels replayed, and the bounds' controls ===============================

// The embedding kernels' arithmetic (embedding_rows.cuh) executed thread by thread on the CPU: bitwise
// the CPU twin (the same fp32 additions in the same order) for 0 to 3 position levels, over the grid the
// launchers use (backward: one block row per table row, V + the levels' rows). Control: replaying only
// two of coupled3's three levels (a kernel that drops the third table) differs from the twin.
TEST(CudaEmbeddingReplay, IsBitwiseTheCpuTwinAtEveryLevelCount) {
  auto replay = [](const EmbeddingCase& e, int L, std::vector<float>& out, std::vector<float>& dwte,
                   std::vector<float> (&dwpe)[K::kMaxPosLevels]) {
    ER::Levels<const float> f;
    ER::Levels<float> b;
    ER::Readers rd;
    f.n = b.n = L;
    for (int lv = 0; lv < L; ++lv) {
      dwpe[lv].assign(e.wpe[lv].size(), 0.f);
      f.ids[lv] = b.ids[lv] = e.ids[lv].data(), f.rows[lv] = b.rows[lv] = e.rows[lv];
      f.table[lv] = e.wpe[lv].data(), b.table[lv] = dwpe[lv].data();
    }
    for (int k = 0; k <= L; ++k) rd.rows[k] = e.readers[k].data(), rd.starts[k] = e.starts[k].data();
    out.assign(std::size_t(e.R) * e.C, 0.f), dwte.assign(e.wte.size(), 0.f);
    for (long long i = 0; i < (long long)e.R * e.C; ++i)
      out[std::size_t(i)] = ER::forward_entry(e.tok.data(), e.wte.data(), f, i / e.C, int(i % e.C), e.C);
    const int grid = ER::backward_rows(e.V, b);
    for (int row = 0; row < grid; ++row)
      for (int c = 0; c < e.C; ++c)
        ER::backward_entry(dwte.data(), b, rd, e.dout.data(), row, c, e.C, e.V);
    return grid;
  };
  for (int L = 0; L <= K::kMaxPosLevels; ++L) {
    SCOPED_TRACE("levels " + std::to_string(L));
    const EmbeddingCase e(L);
    std::vector<float> out, dwte, dwpe[K::kMaxPosLevels];
    const int grid = replay(e, L, out, dwte, dwpe);
    int want = e.V;
    for (int lv = 0; lv < L; ++lv) want += e.rows[lv];
    EXPECT_EQ(grid, want);
    EXPECT_EQ(out, e.out);
    EXPECT_EQ(dwte, e.dwte);
    for (int lv = 0; lv < L; ++lv) EXPECT_EQ(dwpe[lv], e.dwpe[lv]) << "level " << lv;
    if (L == K::kMaxPosLevels) {  // control: the third level dropped
      std::vector<float> o2, t2, p2[K::kMaxPosLevels];
      replay(e, L - 1, o2, t2, p2);
      EXPECT_NE(o2, e.out);
      EXPECT_TRUE(std::any_of(e.dwpe[L - 1].begin(), e.dwpe[L - 1].end(), [](float x) { return x != 0.f; }));
    }
  }
}

// The RoPE kernels' arithmetic (rope_rows.cuh) executed thread by thread on the CPU over the launchers'
// grid (one thread per (row, head, pair)): bitwise the CPU twin (learn::rope_rotate per sequence) in both
// directions, fp32 and bf16 outputs (the fp32 value rounded once), every grid entry writing its own pair
// once. Controls: the same replay with the whole batch as one sequence (every row rotated by its batch
// row, the slip a varlen kernel can make) differs from the twin on every sequence after the first, and
// rotating back undoes the rotation (to a few fp32 roundings: 1e-5 of the values, a wrong sign or a
// transposed rotation gives O(1)).
TEST(CudaRopeReplay, IsBitwiseTheCpuTwin) {
  auto replay = [](const RopeCase& rc, const std::vector<float>& in, const std::vector<std::int32_t>& offsets, int sign,
                   std::vector<float>& out, std::vector<float>& out16, std::vector<int>& writes) {
    out.assign(in.size(), 0.f), out16.assign(in.size(), 0.f), writes.assign(in.size(), 0);
    const int B = int(offsets.size()) - 1;
    for (std::int64_t e = 0; e < rc.pairs(); ++e) {
      const RR::Pair p = RR::rotate_entry(in.data(), rc.cs.data(), rc.sn.data(), offsets.data(), B, rc.NH, rc.HS, sign, e);
      out[std::size_t(p.at)] = p.x0, out[std::size_t(p.at) + 1] = p.x1;
      out16[std::size_t(p.at)] = rbf(p.x0), out16[std::size_t(p.at) + 1] = rbf(p.x1);
      ++writes[std::size_t(p.at)], ++writes[std::size_t(p.at) + 1];
    }
  };
  for (const RopeCase& rc : rope_cases()) {
    SCOPED_TRACE("NH " + std::to_string(rc.NH) + " HS " + std::to_string(rc.HS) + " R " + std::to_string(rc.R));
    std::vector<float> out, out16, back, back16;
    std::vector<int> writes;
    replay(rc, rc.x, rc.offsets, +1, out, out16, writes);
    EXPECT_EQ(out, rc.fwd);
    EXPECT_EQ(out16, rounded(rc.fwd));
    EXPECT_TRUE(std::all_of(writes.begin(), writes.end(), [](int w) { return w == 1; }));
    replay(rc, rc.x, rc.offsets, -1, back, back16, writes);
    EXPECT_EQ(back, rc.bwd);
    EXPECT_EQ(back16, rounded(rc.bwd));
    replay(rc, rc.fwd, rc.offsets, -1, back, back16, writes);
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < back.size(); ++i)
      worst = std::max(worst, double(std::abs(back[i] - rc.x[i]))), scale = std::max(scale, double(std::abs(rc.x[i])));
    EXPECT_LE(worst, 1e-5 * scale);
    // control: rows rotated by their batch row
    const std::vector<std::int32_t> one{0, rc.R};
    std::vector<float> wrong, wrong16;
    replay(rc, rc.x, one, +1, wrong, wrong16, writes);
    const std::int64_t D = std::int64_t(rc.NH) * rc.HS;
    for (int b = 0; b < rc.B; ++b) {
      const auto lo = rc.fwd.begin() + rc.offsets[std::size_t(b)] * D, hi = rc.fwd.begin() + rc.offsets[std::size_t(b) + 1] * D;
      const bool same = std::equal(lo, hi, wrong.begin() + rc.offsets[std::size_t(b)] * D);
      EXPECT_EQ(same, b == 0) << "sequence " << b;
    }
  }
}

// The kernels' row arithmetic (attention_rows.cuh) executed by HostWarp lane by lane against the
// double reference, within the same derived bounds as the GPU test, for both I/O types, every dims-per-
// lane class and both scales. A small grid (the replay runs every kernel operation on one CPU core).
TEST(CudaAttentionReplay, MatchesTheReference) {
  Check ck16, ck32;
  std::uint32_t seed = 100;
  for (int HS : {16, 64, 96, 256, 512})
    for (auto [B, T] : std::vector<std::array<int, 2>>{{1, 1}, {3, 7}, {1, 33}}) {
      const float scale = (seed % 2) ? 1.f : float(1 / std::sqrt(double(HS)));
      SCOPED_TRACE("HS " + std::to_string(HS) + " T " + std::to_string(T) + " B " + std::to_string(B));
      const auto in16 = attention_inputs(B, T, 2, HS, scale, 2.0, true, seed);
      check_attention(in16, attention_replay<bf16>(in16), true, ck16);
      const auto in32 = attention_inputs(B, T, 2, HS, scale, 2.0, false, seed);
      check_attention(in32, attention_replay<float>(in32), false, ck32);
      ++seed;
    }
  const auto longer = attention_inputs(1, 250, 1, 64, 1.f, 8.0, true, 120);  // long rows, sharp softmax
  check_attention(longer, attention_replay<bf16>(longer), true, ck16);
  for (int HS : {16, 96, 512}) {  // varlen: sequences of different lengths packed without padding
    SCOPED_TRACE("varlen HS " + std::to_string(HS));
    const std::vector<int> lengths = {7, 1, 33, 2, 12};
    const auto v16 = attention_inputs(lengths, 3, HS, 1.f, 2.0, true, seed);
    check_attention(v16, attention_replay<bf16>(v16), true, ck16);
    const auto v32 = attention_inputs(lengths, 3, HS, float(1 / std::sqrt(double(HS))), 2.0, false, seed++);
    check_attention(v32, attention_replay<float>(v32), false, ck32);
  }
  ck16.expect_ok("replayed bf16 attention");
  ck32.expect_ok("replayed fp32 attention");
}

// The replay is sensitive: a 0.1% error in the scale, one output moved by 2 bf16 ulps, or rows that
// attend across a sequence boundary (two varlen sequences replayed as one) fail the bounds.
TEST(CudaAttentionReplay, BoundsRejectWrongResults) {
  const auto in = attention_inputs(1, 33, 2, 64, 1.f, 2.0, true, 130);
  AttIn off = in;
  off.scale *= 1.001f;
  Check wrong_scale;
  check_attention(in, attention_replay<bf16>(off), true, wrong_scale);
  EXPECT_GT(wrong_scale.bad, 0u);
  auto o = attention_replay<bf16>(in);
  move_2ulp(o.dk);
  Check moved;
  check_attention(in, o, true, moved);
  EXPECT_EQ(moved.bad, 1u);
  const auto two = attention_inputs(std::vector<int>{20, 13}, 2, 64, 1.f, 2.0, true, 131);
  AttIn merged = two;
  merged.off = {0, 33}, merged.B = 1, merged.T = 33;
  Check leaked;
  check_attention(two, attention_replay<bf16>(merged), true, leaked);
  EXPECT_GT(leaked.bad, 0u);
  Check right;
  check_attention(two, attention_replay<bf16>(two), true, right);
  EXPECT_EQ(right.bad, 0u);
}

// FIRE's score bias in the CUDA-core kernels (attention_rows.cuh; score_bias.hpp's table and slots): the
// replay against learn's attention with the bias (layers.hpp in double, the bias as (NH, T, T) per
// sequence), out, lse, dq, dk, dv and the bias's gradient slots (check_attention), varlen lengths (7, 1,
// 33, 2, 12: sequences shorter than the longest read a corner of the table), bf16 and fp32 I/O, both
// scales, HS {16, 96, 512}; a sharp bias (sd 4) on long rows. Every slot is stored exactly once
// (slot_stores). Controls: the kernel reading the table by key instead of distance (each row's pairs
// reversed) and a kernel that ignores the bias (a zero table) leave the bounds; a slot whose store is
// dropped stays NaN and fails the check; the right replay stays inside.
TEST(CudaAttentionReplay, WithAScoreBiasMatchesTheReferenceAndRejectsWrongBiases) {
  Check ck16, ck32;
  std::uint32_t seed = 140;
  const std::vector<int> lengths = {7, 1, 33, 2, 12};
  auto once = [](const AttOut& o) {
    EXPECT_EQ(o.slots_not_once, 0u) << "gradient slots not stored exactly once";
    return o;
  };
  for (int HS : {16, 96, 512}) {
    SCOPED_TRACE("HS " + std::to_string(HS));
    const auto v16 = with_bias(attention_inputs(lengths, 3, HS, 1.f, 2.0, true, seed), seed + 50);
    check_attention(v16, once(attention_replay<bf16>(v16)), true, ck16);
    const auto v32 =
        with_bias(attention_inputs(lengths, 3, HS, float(1 / std::sqrt(double(HS))), 2.0, false, seed + 1), seed + 51);
    check_attention(v32, once(attention_replay<float>(v32)), false, ck32);
    seed += 2;
  }
  const auto sharp = with_bias(attention_inputs(std::vector<int>{250, 17}, 2, 64, 1.f, 2.0, false, 150), 151, 4.f);
  check_attention(sharp, once(attention_replay<float>(sharp)), false, ck32);
  ck16.expect_ok("replayed bf16 attention with a bias");
  ck32.expect_ok("replayed fp32 attention with a bias");
  const auto in = with_bias(attention_inputs(lengths, 2, 64, 1.f, 2.0, false, 160), 161);
  AttIn zero = in;
  std::fill(zero.bias.begin(), zero.bias.end(), 0.f);
  Check right, reversed, ignored, missing;
  check_attention(in, once(attention_replay<float>(in)), false, right);
  EXPECT_EQ(right.bad, 0u) << right.first_bad;
  check_attention(in, attention_replay<float>(reversed_bias(in)), false, reversed);
  EXPECT_GT(reversed.bad, reversed.n / 4) << "a bias read by the key instead of the distance passes";
  check_attention(in, attention_replay<float>(zero), false, ignored);
  EXPECT_GT(ignored.bad, ignored.n / 4) << "an ignored bias passes";
  slot_stores::skip = in.slot(2, 1, 20, 3);  // sequence 2 (33 rows), head 1, (i, j) = (20, 3)
  const AttOut dropped = attention_replay<float>(in);
  slot_stores::skip = -1;
  EXPECT_EQ(dropped.slots_not_once, 1u);
  EXPECT_TRUE(std::isnan(dropped.dbias[in.slot(2, 1, 20, 3)]));
  check_attention(in, dropped, false, missing);
  EXPECT_EQ(missing.bad, 1u) << "a missing gradient slot passes";
  std::cout << "[ controls ] CUDA-core attention with a bias, out of bounds of " << right.n << ": the bias read by the "
            << "key " << reversed.bad << ", ignored " << ignored.bad << ", one slot not stored " << missing.bad
            << ", right " << right.bad << "\n";
}

// The tensor-core path's steps (every GEMM's transposes, leading dimensions, strides, offsets) and row
// functions on the host, against the reference within its bounds; a layout bug (one GEMM reading its A
// transposed) and a 5% scale error fail.
TEST(CudaAttentionGemmReplay, MatchesTheReferenceAndRejectsWrongResults) {
  Check ck;
  std::uint32_t seed = 400;
  for (int HS : {16, 64, 96, 256})
    for (auto [B, T] : std::vector<std::array<int, 2>>{{1, 1}, {3, 7}, {1, 33}}) {
      const float scale = (seed % 2) ? 1.f : float(1 / std::sqrt(double(HS)));
      SCOPED_TRACE("HS " + std::to_string(HS) + " T " + std::to_string(T) + " B " + std::to_string(B));
      const auto in = attention_inputs(B, T, 2, HS, scale, 2.0, true, seed++);
      check_attention(in, attention_gemm_replay(in), true, ck, AttPath::Gemm);
    }
  const auto longer = attention_inputs(2, 100, 2, 32, 1.f, 8.0, true, 420);
  check_attention(longer, attention_gemm_replay(longer), true, ck, AttPath::Gemm);
  ck.expect_ok("replayed tensor-core attention");

  const auto in = attention_inputs(2, 33, 2, 64, 1.f, 2.0, true, 430);
  Check flipped, wrong_scale;
  check_attention(in, attention_gemm_replay(in, true), true, flipped, AttPath::Gemm);
  EXPECT_GT(flipped.bad, flipped.n / 4);
  AttIn off = in;
  off.scale *= 1.05f;
  check_attention(in, attention_gemm_replay(off), true, wrong_scale, AttPath::Gemm);
  EXPECT_GT(wrong_scale.bad, 0u);
}

// The tensor-core flash kernels' arithmetic (flash_tc.cuh) executed on the host, every CTA, warp and lane,
// against learn's bf16 attention in double within check_flash's bounds: every kernel instance (HS 16 ..
// 512; 20 and 200: padded heads, 20 with element fills), varlen batches of many lengths (1, 2, 7, 33, 64,
// 65, 129, 250) in one batch, both scales, a sharp softmax (score spread 8), and the evaluation grid's
// longest sequence (TA(30, 30): 2013 tokens) at HS 16.
TEST(CudaFlashReplay, MatchesLearnsBf16Attention) {
  Check ck;
  std::uint32_t seed = 600;
  for (int HS : {16, 20, 32, 64, 128, 200, 256, 512}) {
    const float scale = (seed % 2) ? 1.f : float(1 / std::sqrt(double(HS)));
    SCOPED_TRACE("HS " + std::to_string(HS) + " scale " + std::to_string(scale));
    const std::vector<int> lengths =
        HS >= 256 ? std::vector<int>{33, 1, 70, 7} : std::vector<int>{33, 1, 250, 7, 64, 65, 2, 129};
    const auto in = attention_inputs(lengths, 2, HS, scale, 2.0, true, seed++);
    check_flash(in, flash_replay(in), ck);
  }
  const auto sharp = attention_inputs(std::vector<int>{250, 17}, 2, 64, 1.f, 8.0, true, 690);
  check_flash(sharp, flash_replay(sharp), ck);
  const auto longest = attention_inputs(std::vector<int>{2013}, 1, 16, 1.f, 2.0, true, 691);
  check_flash(longest, flash_replay(longest), ck);
  ck.expect_ok("replayed flash attention");
}

// FIRE's score bias in the tensor-core flash kernels (the kBias instances: z = fl(s c2) + fl(b fl(log2 e)),
// the dq kernel's fp32 P (dP - D) into the slots) against learn's bf16 attention with the bias in double
// (check_flash): every head-size instance, varlen lengths (shorter sequences than the longest; 250 and
// 129 span several query and key blocks), both scales, NH 2; a sharp bias (sd 4); the fp32 dq, dk form
// (kBias | kF32Grad). Every slot stored exactly once. Controls: the table read by key instead of
// distance, and an ignored bias (a zero table), leave the bounds; a slot whose store is dropped stays
// NaN and fails; the right replay stays inside.
TEST(CudaFlashReplay, WithAScoreBiasMatchesLearnsBf16AttentionAndRejectsWrongBiases) {
  Check ck, c32;
  std::uint32_t seed = 740;
  auto once = [](const AttOut& o) {
    EXPECT_EQ(o.slots_not_once, 0u) << "gradient slots not stored exactly once";
    return o;
  };
  for (int HS : {16, 20, 32, 64, 128, 256, 512}) {
    const float scale = (seed % 2) ? 1.f : float(1 / std::sqrt(double(HS)));
    SCOPED_TRACE("HS " + std::to_string(HS) + " scale " + std::to_string(scale));
    const std::vector<int> lengths =
        HS >= 256 ? std::vector<int>{33, 1, 70, 7} : std::vector<int>{33, 1, 250, 7, 64, 65, 2, 129};
    const auto in = with_bias(attention_inputs(lengths, 2, HS, scale, 2.0, true, seed), seed + 100);
    check_flash(in, once(flash_replay(in)), ck);
    ++seed;
  }
  const auto sharp = with_bias(attention_inputs(std::vector<int>{250, 17}, 2, 64, 1.f, 2.0, true, 760), 761, 4.f);
  check_flash(sharp, once(flash_replay(sharp)), ck);
  ck.expect_ok("replayed flash attention with a bias");
  {  // kBias | kF32Grad: the same slots, dq and dk the fp32 values the bf16 form rounds
    const auto in = with_bias(attention_inputs(std::vector<int>{33, 1, 70}, 2, 64, 1.f, 2.0, true, 765), 766);
    FlashFault f32;
    f32.dqdk_fp32 = true;
    const AttOut a = once(flash_replay(in, f32)), b = flash_replay(in);
    check_flash(in, a, c32, true, false);
    EXPECT_EQ(a.dbias, b.dbias);
    for (std::size_t i = 0; i < a.dq.size(); ++i) {
      ASSERT_EQ(rbf(a.dq[i]), b.dq[i]) << i;
      ASSERT_EQ(rbf(a.dk[i]), b.dk[i]) << i;
    }
    c32.expect_ok("replayed flash attention with a bias, fp32 dq and dk");
  }
  const auto in = with_bias(attention_inputs(std::vector<int>{20, 45}, 2, 64, 1.f, 2.0, true, 770), 771);
  AttIn zero = in;
  std::fill(zero.bias.begin(), zero.bias.end(), 0.f);
  Check right, reversed, ignored, missing;
  check_flash(in, once(flash_replay(in)), right);
  EXPECT_EQ(right.bad, 0u) << right.first_bad;
  check_flash(in, flash_replay(reversed_bias(in)), reversed);
  EXPECT_GT(reversed.bad, reversed.n / 4) << "a bias read by the key instead of the distance passes";
  check_flash(in, flash_replay(zero), ignored);
  EXPECT_GT(ignored.bad, ignored.n / 4) << "an ignored bias passes";
  slot_stores::skip = in.slot(1, 0, 40, 17);  // sequence 1 (45 rows: its second query block), head 0
  const AttOut dropped = flash_replay(in);
  slot_stores::skip = -1;
  EXPECT_EQ(dropped.slots_not_once, 1u);
  EXPECT_TRUE(std::isnan(dropped.dbias[in.slot(1, 0, 40, 17)]));
  check_flash(in, dropped, missing);
  EXPECT_EQ(missing.bad, 1u) << "a missing gradient slot passes";
  std::cout << "[ controls ] flash attention with a bias, out of bounds of " << right.n << ": the bias read by the key "
            << reversed.bad << ", ignored " << ignored.bad << ", one slot not stored " << missing.bad << ", right "
            << right.bad << "\n";
}

// FIRE's kernels (fire_rows.cuh) replayed on the host, bitwise the CPU twin (learn/layers.hpp), for both
// thresholds with L inside the sequence (rows on both sides of it; L = 16, an integer, puts row 16 on the
// threshold: it takes n = i and gives L no gradient, as torch's clamp_max) and c of both signs:
//  * u and h1 = relu(u W1^T) of every pair (i, d) against the twin's fire_distances / fire_mlp_forward
//    on its merged pairs (pair base[i] + d: the rows on L share theirs);
//  * each pair's terms of d c and d L_sqrt against fire_distances_backward on that pair alone;
//  * the bias gradient's reduction over sequences and layers against model.cpp's order (a dense (NH, T,
//    T) gradient, layer by layer, each layer's sequences in order), through slot_offsets' slots.
// The merging is exercised: rows on L and rows off it both occur for every case.
TEST(CudaFireReplay, IsBitwiseTheCpuTwin) {
  const int T = 40, H = 5, NH = 3;
  const auto w1 = randn(std::size_t(H), 901), w2 = randn(std::size_t(H * H), 902), w3 = randn(std::size_t(NH * H), 903);
  const long long P = FR::tri(T);
  const auto du = randn(std::size_t(P), 904);
  for (bool max_thr : {true, false})
    for (float Ls : {4.5f, 4.f})
      for (float c : {0.1f, -0.37f}) {
        SCOPED_TRACE(std::string(max_thr ? "max" : "min") + " L_sqrt " + std::to_string(Ls) + " c " + std::to_string(c));
        FirePairs fp;
        fire_pairs(fp, 0, T, double(Ls * Ls), max_thr);
        const std::int64_t Pt = fp.pairs();
        const std::size_t np = std::size_t(Pt), nh = np * std::size_t(H);
        std::vector<float> ut(np), h1t(nh), h2t(nh), outt(np * std::size_t(NH));
        fire_distances(ut.data(), fp, c);
        fire_mlp_forward(outt.data(), h1t.data(), h2t.data(), ut.data(), w1.data(), w2.data(), w3.data(), Pt, H, NH);
        const std::size_t nP = std::size_t(P);
        std::vector<float> u(nP), h1(nP * std::size_t(H)), tc(nP), tl(nP);
        for (long long p = 0; p < P; ++p) {
          FR::mlp_input_entry(u.data(), h1.data(), w1.data(), p, H, c, FR::mul_rn(Ls, Ls), max_thr);
          FR::scalar_terms_entry(tc.data(), tl.data(), du.data(), p, c, Ls, FR::mul_rn(Ls, Ls), max_thr);
        }
        int on_L = 0;
        for (int i = 0; i < T; ++i) {
          const std::size_t g = std::size_t(fp.group[std::size_t(fp.base[std::size_t(i)])]);
          on_L += fp.on_L[g];
          for (int d = 0; d <= i; ++d) {
            const std::size_t p = std::size_t(FR::tri(i) + d), pt = std::size_t(fp.base[std::size_t(i)] + d);
            ASSERT_EQ(u[p], ut[pt]) << "u(" << i << ", " << d << ")";
            for (int k = 0; k < H; ++k) ASSERT_EQ(h1[p * H + std::size_t(k)], h1t[pt * H + std::size_t(k)]) << i << " " << d;
            FirePairs one;
            one.base = {0}, one.dist = {d}, one.group = {0}, one.norm = {fp.norm[g]}, one.on_L = {fp.on_L[g]};
            float gc = 0.f, gl = 0.f;
            fire_distances_backward(&gc, &gl, du.data() + p, one, c, Ls);
            ASSERT_EQ(tc[p], gc) << "d c term (" << i << ", " << d << ")";
            ASSERT_EQ(tl[p], gl) << "d L_sqrt term (" << i << ", " << d << ")";
          }
        }
        EXPECT_GT(on_L, 1);
        EXPECT_LT(on_L, T - 1);
      }
  // The reduction: two layers' slots over a varlen batch, into a nonzero start.
  const std::vector<int> off = {0, 5, 6, 15, 18, 27};
  const int B = 5, Tb = 9;
  const long long Pb = FR::tri(Tb);
  std::vector<long long> soff(std::size_t(B) + 1);
  FR::slot_offsets(soff.data(), off.data(), B);
  const auto start = randn(std::size_t(NH * Pb), 905);
  std::vector<float> db = start;
  std::vector<float> densef(std::size_t(NH) * Tb * Tb, 0.f);
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < Tb; ++i)
      for (int j = 0; j <= i; ++j) densef[(std::size_t(h) * Tb + i) * Tb + j] = start[std::size_t(h * Pb + FR::tri(i) + i - j)];
  for (int layer = 0; layer < 2; ++layer) {
    const auto slots = randn(std::size_t(NH * soff[std::size_t(B)]), 906 + std::uint32_t(layer));
    for (long long e = 0; e < NH * Pb; ++e) FR::dbias_reduce_entry(db.data(), slots.data(), soff.data(), off.data(), B, NH, Pb, e);
    long long at = 0;  // model.cpp: each sequence's (NH, T_b, T_b) block added into the corner, in order
    for (int b = 0; b < B; ++b) {
      const int Tl = off[std::size_t(b) + 1] - off[std::size_t(b)];
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < Tl; ++i)
          for (int j = 0; j <= i; ++j) densef[(std::size_t(h) * Tb + i) * Tb + j] += slots[std::size_t(at + h * FR::tri(Tl) + FR::tri(i) + i - j)];
      at += NH * FR::tri(Tl);
    }
    ASSERT_EQ(at, NH * soff[std::size_t(B)]);
  }
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < Tb; ++i)
      for (int j = 0; j <= i; ++j)
        ASSERT_EQ(db[std::size_t(h * Pb + FR::tri(i) + i - j)], densef[(std::size_t(h) * Tb + i) * Tb + j]) << h << " " << i << " " << j;
}

// The fp32 dq, dk form (flash_tc.hpp's second attention_backward: RoPE's inverse rotation reads them
// before their one rounding): within check_flash's bounds as fp32 outputs (no bf16 half ulp allowed),
// and bitwise the values the bf16 form rounds: bf16(dq32) is the bf16 form's dq (the same fp32 product,
// then the one rounding), every other output identical. The bounds alone cannot tell an fp32 dq from a
// bf16 one (they hold the dS flips and sum |dS k|, wider than half a bf16 ulp of dq for all but ~0.1% of
// the elements: measured, 46 of 57,054 outputs leave them when the bf16 form's dq, dk are checked as fp32
// values), so the control is direct: few fp32 outputs are bf16 numbers (an fp32 value is one with
// probability ~2^-16; the exact zeros of each sequence's first row are: measured 1.2-2.2%).
TEST(CudaFlashReplay, Fp32DqDkAreTheValuesTheBf16FormRounds) {
  Check ck;
  std::uint32_t seed = 720;
  for (int HS : {16, 20, 64, 128, 256}) {
    SCOPED_TRACE("HS " + std::to_string(HS));
    const auto in = attention_inputs(std::vector<int>{33, 1, 70, 7}, 2, HS, seed % 2 ? 1.f : 1.f / std::sqrt(float(HS)),
                                     2.0, true, seed);
    ++seed;
    const AttOut f = flash_replay(in, {false, true}), b = flash_replay(in);
    check_flash(in, f, ck, true, false);
    EXPECT_EQ(f.out, b.out);
    EXPECT_EQ(f.lse, b.lse);
    EXPECT_EQ(f.dv, b.dv);
    std::size_t rounded_differ = 0, exact = 0;
    for (std::size_t i = 0; i < f.dq.size(); ++i) {
      rounded_differ += rbf(f.dq[i]) != b.dq[i], rounded_differ += rbf(f.dk[i]) != b.dk[i];
      exact += f.dq[i] == b.dq[i], exact += f.dk[i] == b.dk[i];
    }
    EXPECT_EQ(rounded_differ, 0u);
    EXPECT_LT(double(exact), 0.1 * double(2 * f.dq.size())) << "the fp32 form holds bf16 numbers: it was rounded";
    std::cout << "[ fp32 dq ] HS " << HS << ": " << exact << " of " << 2 * f.dq.size()
              << " fp32 dq, dk values are bf16 numbers\n";
  }
  ck.expect_ok("replayed flash attention, fp32 dq and dk");
}

// The bounds are tight enough to see every kind of error: rows attending across a sequence boundary (two
// sequences replayed as one), a transposed read (the ldmatrix .trans loads of the v/dout/q/k operands
// read untransposed), a 5% scale error, and a missing rounding point (the replay against learn's
// fp32-semantics attention, which rounds neither P nor dS).
TEST(CudaFlashReplay, BoundsRejectWrongResults) {
  const auto two = attention_inputs(std::vector<int>{20, 45}, 2, 64, 1.f, 2.0, true, 650);
  const AttOut right = flash_replay(two);
  Check ok;
  check_flash(two, right, ok);
  EXPECT_EQ(ok.bad, 0u) << ok.first_bad;
  AttIn merged = two;
  merged.off = {0, 65}, merged.B = 1, merged.T = 65;
  Check leaked, transposed, wrong_scale, unrounded;
  check_flash(two, flash_replay(merged), leaked);
  EXPECT_GT(leaked.bad, 0u);
  check_flash(two, flash_replay(two, {true}), transposed);
  EXPECT_GT(transposed.bad, transposed.n / 4);
  AttIn off = two;
  off.scale *= 1.05f;
  check_flash(two, flash_replay(off), wrong_scale);
  EXPECT_GT(wrong_scale.bad, 0u);
  check_flash(two, right, unrounded, false);
  EXPECT_GT(unrounded.bad, unrounded.n / 20) << "a missing rounding point should leave the bounds";
  EXPECT_GT(double(unrounded.flipsc), 0.02 * double(unrounded.n16c)) << "and flip the conditioned outputs";
  std::cout << "[ controls ] out of bounds: across a boundary " << leaked.bad << ", transposed read " << transposed.bad
            << ", 5% scale " << wrong_scale.bad << ", reference without the roundings " << unrounded.bad << " of "
            << ok.n << "; conditioned bf16 flips: right " << ok.flipsc << " of " << ok.n16c << ", without the roundings "
            << unrounded.flipsc << " of " << unrounded.n16c << "\n";
}

// The bounds of the GEMM, RMSNorm and GEGLU checks accept an fp32 CPU evaluation of the same products
// (layers.hpp in float, outputs rounded to bf16 where the kernel's are) -- they are not tighter than fp32
// arithmetic -- and reject a result with one element off by 2 bf16 ulps or a transposed weight.
TEST(CudaKernelBounds, AcceptTheFp32CpuTwinAndRejectWrongResults) {
  {
    Check ck;
    const auto in = gemm_inputs(120, 256, 40, 200);
    auto o = gemm_cpu_fp32(in);
    check_gemm(in, o, ck);
    ck.expect_ok("fp32 CPU GEMMs");
    move_2ulp(o.fwd16);
    Check moved;
    check_gemm(in, o, moved);
    EXPECT_EQ(moved.bad, 1u);
    const auto sq = gemm_inputs(120, 40, 40, 201);  // W^T in place of W: a layout bug
    GemmIn tw = sq;
    for (int a = 0; a < 40; ++a)
      for (int b = 0; b < 40; ++b) tw.w[std::size_t(a) * 40 + b] = sq.w[std::size_t(b) * 40 + a];
    Check transposed;
    check_gemm(sq, gemm_cpu_fp32(tw), transposed);
    EXPECT_GT(transposed.bad, 1000u);
  }
  {
    Check ck;
    for (bool gb : {false, true}) {
      const auto in = norm_inputs(300, 256, 210, gb);
      check_norm(in, norm_cpu_fp32(in), gb, ck);
    }
    ck.expect_ok("fp32 CPU RMSNorm");
    const auto in = norm_inputs(300, 256, 211, true);
    auto o = norm_cpu_fp32(in);
    move_2ulp(o.out16);
    Check moved;
    check_norm(in, o, true, moved);
    EXPECT_EQ(moved.bad, 1u);
  }
  {
    Check ck;
    for (bool gb : {false, true}) {
      const auto in = geglu_inputs(200, 384, 220, gb);
      check_geglu(in, geglu_cpu_fp32(in), ck);
    }
    ck.expect_ok("fp32 CPU GEGLU");
    const auto in = geglu_inputs(200, 384, 221, true);
    auto o = geglu_cpu_fp32(in);
    move_2ulp(o.dh16);
    Check moved;
    check_geglu(in, o, moved);
    EXPECT_EQ(moved.bad, 1u);
  }
}
