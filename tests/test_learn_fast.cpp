// The fast CPU device (learn/include/manyadd/learn/devices/cpu_fast.hpp) against the reference: its kernels
// (fused attention, GEGLU, exp, bf16 rounding; both builds, x86-64 and AVX-512 where the CPU has it)
// against layers.hpp, its whole forward/backward against PackedCpuDevice (fp32 and bf16, every position
// mode it runs and every architecture option), twenty steps, frozen position codes, determinism and
// resume, its predictions against the reference's, a sequence of 21,000 tokens evaluated under an
// address-space limit no T x T buffer fits in, a 500-step loss curve against the reference's own spread,
// a micro run trained through it, and the CLIs.
//
// Notation: u32 = 2^-24 (fp32's unit roundoff), u = 2^-8 (bf16's); gamma_n ~ n u32 bounds the error of an
// fp32 sum of n terms in any order relative to the sum of their magnitudes (Higham, Accuracy and
// Stability, 3.1), first order.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "learn_fixtures.hpp"
#include "manyadd/learn/devices/cpu_fast_kernels.hpp"
#include "manyadd/learn/devices/cpu_gemm.hpp"
#include "manyadd/core/safetensors.hpp"
#include "manyadd/learn/devices/batch.hpp"
#include "manyadd/learn/devices/cpu_fast.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/grid/grid_layers.hpp"
#include "manyadd/learn/decoder/layers.hpp"
#include "manyadd/learn/tasks/task.hpp"
#include "manyadd/learn/runs/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;
using manyadd::testing::run_cmd;

namespace {
constexpr double kU32 = 0x1p-24;
constexpr double kU = 1.0 / 256;

// The kernel builds this machine runs.
std::vector<const cpu_fast::Kernels*> builds() {
  std::vector<const cpu_fast::Kernels*> k = {&cpu_fast::generic_kernels()};
  if (cpu_fast::avx512_kernels()) k.push_back(cpu_fast::avx512_kernels());
  return k;
}
double ulps(double got, double want) { return std::abs(got - want) / (std::abs(want) * kU32 * 2); }

// test_learn_batch's small model with heads of 16 (the AVX-512 kernels' widths); d_head 8 runs the
// kernels' scalar loops (the micro model below).
ModelConfig small_model(PosMode mode, int layers) { return fixtures::small_model(mode, layers, 16); }
PackedBatch mixed_batch(const ModelConfig& c, int count, std::uint64_t seed) {
  return pack_batch(fixtures::mixed_examples(c, count, seed), c);
}
// The variants every device test runs: each position mode the device runs, 1 and 2 layers; the authors'
// options; input injection over 3 layers; frozen and hypercube position codes.
struct Variant {
  std::string name;
  ModelConfig c;
};
std::vector<Variant> variants() {
  std::vector<Variant> v;
  for (PosMode m : kPosModes) {
    // fire: refused by name (FastDevice.RefusesFireByName); coupled_rel: fp32 only (fp32_variants)
    if (m == PosMode::fire || m == PosMode::coupled_rel) continue;
    for (int layers = 1; layers <= 2; ++layers)
      v.push_back({std::string(pos_mode_name(m)) + " L" + std::to_string(layers), small_model(m, layers)});
  }
  ModelConfig a = small_model(PosMode::coupled, 2);
  a.attn_scale = AttnScale::none, a.init = InitScheme::t5, a.tie_readout = true, a.final_norm = NormKind::layer;
  v.push_back({"authors' options", a});
  ModelConfig inj = small_model(PosMode::rope, 3);
  inj.input_injection = true;
  v.push_back({"rope, input injection L3", inj});
  ModelConfig codes = small_model(PosMode::coupled, 1);
  codes.pos_codes[0] = PosCode::hypercube, codes.pos_codes[1] = PosCode::frozen;
  v.push_back({"hypercube, frozen codes", codes});
  return v;
}
// The fp32 tests' variants: the above and coupled_rel (1 and 2 layers; window 1 with the far gain, or
// shared, or masked; grads()
// draws its gains N(0, 1); the IDs of mixed_examples reach differences beyond the window on both levels).
std::vector<Variant> fp32_variants() {
  std::vector<Variant> v = variants();
  for (int layers = 1; layers <= 2; ++layers) {
    ModelConfig c = small_model(PosMode::coupled_rel, layers);
    v.push_back({"coupled_rel L" + std::to_string(layers), c});
    c.rel_window = 1, c.rel_far = true;
    v.push_back({"coupled_rel far W1 L" + std::to_string(layers), c});
    c.rel_far_norm = true;
    v.push_back({"coupled_rel far/count W1 L" + std::to_string(layers), c});
    c.rel_far = false, c.rel_far_norm = false, c.rel_far_mask = true;
    v.push_back({"coupled_rel far masked W1 L" + std::to_string(layers), c});
    c.attn_scale = AttnScale::positional;
    v.push_back({"coupled_rel positional, far masked W1 L" + std::to_string(layers), c});
    c.rel_value = true;
    v.push_back({"coupled_rel positional, far masked, relative values W1 L" + std::to_string(layers), c});
    c.attn_scale = AttnScale::inv_sqrt_dhead, c.rel_far_mask = false, c.rel_far = true, c.rel_window = 2;
    v.push_back({"coupled_rel far W2, relative values L" + std::to_string(layers), c});
  }
  return v;
}
// A small chunk size, so that a batch is many chunks over two threads (the default is 256 rows).
CpuFastOptions small_chunks() {
  CpuFastOptions o;
  o.chunk_rows = 40;
  return o;
}
// Every device arrangement the tests compare: kernel builds, bf16 bit patterns or floats.
struct Arrangement {
  std::string name;
  CpuFastOptions o;
};
std::vector<Arrangement> arrangements() {
  std::vector<Arrangement> a;
  CpuFastOptions o = small_chunks();
  a.push_back({"default", o});
  o.generic_kernels = true;
  a.push_back({"x86-64 kernels", o});
  o.generic_kernels = false, o.bf16_as_floats = true;
  a.push_back({"bf16 values in floats", o});
  return a;
}
}  // namespace

// ---- kernels ---------------------------------------------------------------------------------------

// cpu_gemm runs each call on its calling thread alone (cpu_gemm.hpp), whatever OpenMP setting that thread
// has: a call from a thread set to 2 OpenMP threads (a worker's default on this 2-core machine) starts no
// OpenMP team, counted in /proc/self/task (an OpenMP team's threads stay there, idle, while its first
// thread lives). Fails where oneDNN's matmul keeps the thread count it saw when it was made, as it
// did before the setting was made first: each worker then ran its products on two spinning threads.
// The product itself is checked too: the entries of A and B are small integers, so every sum is exact.
TEST(FastKernels, GemmRunsOnTheCallingThreadAlone) {
  if (!cpu_gemm::unavailable().empty()) GTEST_SKIP() << cpu_gemm::unavailable();
  auto set_omp = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  ASSERT_NE(set_omp, nullptr) << "oneDNN loaded without an OpenMP runtime in the process";
  auto tasks = [] {
    int n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
    return n;
  };
  const int n = 192;
  std::vector<float> A(std::size_t(n) * n), B(A.size()), C(A.size(), -1.f);
  for (int i = 0; i < n * n; ++i) A[std::size_t(i)] = float(i % 7 - 3), B[std::size_t(i)] = float(i % 5 - 2);
  for (const float beta : {0.f, 1.f}) {
    for (const bool ta : {false, true}) {
      std::fill(C.begin(), C.end(), beta == 0.f ? -1.f : 5.f);
      int before = 0, after = 0;
      std::thread([&] {
        set_omp(2);
        before = tasks();
        cpu_gemm::gemm(ta, false, n, n, n, A.data(), n, B.data(), n, beta, C.data(), n, cpu_gemm::Elem::f32);
        after = tasks();
      }).join();
      // <=: a thread an earlier test started may still be exiting; a pool the product started stays
      EXPECT_LE(after, before) << "threads started by one product (ta " << ta << ", beta " << beta << ")";
      for (const int i : {0, 1, n - 1}) {
        for (const int j : {0, n / 2, n - 1}) {
          double want = beta == 0.f ? 0 : 5;
          for (int k = 0; k < n; ++k)
            want += double(ta ? A[std::size_t(k) * n + i] : A[std::size_t(i) * n + k]) * double(B[std::size_t(k) * n + j]);
          EXPECT_EQ(double(C[std::size_t(i) * n + j]), want) << i << "," << j;
        }
      }
    }
  }
}

// exp and exp2 (softmax, GELU): within 2 ulp of the correctly rounded value (the polynomials' own 1.6 ulp,
// measured in fp32 Horner when they were fitted, plus the final product with 2^n, exact, and the
// argument reduction: exact for exp2, Cody-Waite for exp), on 2^20 points of the ranges the kernels use;
// 0 below the normal range.
TEST(FastKernels, ExpAndExp2AreWithinTwoUlp) {
  std::vector<float> x, y(1 << 20), x2;
  for (int i = 0; i < (1 << 20); ++i) {
    x.push_back(float(-87.0 + 175.0 * i / (1 << 20)));
    x2.push_back(float(-125.9 + 252.8 * i / (1 << 20)));
  }
  for (auto* k : builds()) {
    SCOPED_TRACE(k->name);
    double worst = 0, worst2 = 0;
    k->exp(y.data(), x.data(), std::int64_t(x.size()));
    for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, ulps(y[i], std::exp(double(x[i]))));
    k->exp2(y.data(), x2.data(), std::int64_t(x2.size()));
    for (std::size_t i = 0; i < x2.size(); ++i) worst2 = std::max(worst2, ulps(y[i], std::exp2(double(x2[i]))));
    std::printf("[ %s ] exp within %.2f ulp, exp2 within %.2f ulp\n", k->name, worst, worst2);
    EXPECT_LE(worst, 2.0);
    EXPECT_LE(worst2, 2.0);
    const float lo[3] = {-200.f, -127.f, -std::numeric_limits<float>::infinity()};
    float out[3];
    k->exp2(out, lo, 3);
    for (float o : out) EXPECT_EQ(o, 0.f);
    k->exp(out, lo, 3);
    for (float o : out) EXPECT_EQ(o, 0.f);
  }
}

// The bf16 rounding is core's float_to_bf16 bit for bit (ties to even, overflow to infinity, NaN quiet)
// on random bit patterns of every magnitude and on the special values, in both layouts.
TEST(FastKernels, Bf16RoundingIsCores) {
  std::mt19937 g(5);
  std::vector<float> xs = {0.f, -0.f, 1.f, 1.00390625f, 1.01171875f, 3.3895314e38f, 3.4028235e38f, 1e-40f,
                           INFINITY, -INFINITY, NAN};
  for (int i = 0; i < 200003; ++i) {  // an odd count: the kernels' vector tails too
    const std::uint32_t b = std::uint32_t(g());
    float x;
    std::memcpy(&x, &b, 4);
    xs.push_back(x);
  }
  for (auto* k : builds()) {
    SCOPED_TRACE(k->name);
    std::vector<float> r = xs;
    std::vector<std::uint16_t> h(xs.size());
    k->round_bf16(r.data(), std::int64_t(r.size()));
    k->to_bf16(h.data(), xs.data(), std::int64_t(xs.size()));
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const std::uint16_t want = float_to_bf16(xs[i]);
      ASSERT_EQ(h[i], want) << xs[i];
      const float wf = bf16_to_float(want);
      ASSERT_EQ(std::memcmp(&r[i], &wf, 4), 0) << xs[i];  // NaN included: the same quiet NaN
    }
  }
}

// GEGLU against the exact function (in double, as a sigmoid: 0.5 a (1 + tanh(u)) = a sigmoid(2u) exactly;
// layers.hpp's tanh form cancels for u << 0, losing every digit below u ~ -18 in double and -9 in fp32,
// where gelu < 1e-7 |a| and the reference device rounds it to 0: the kernels keep it). With
// s = 1 / (1 + e), e = exp(-2u), u = c (a + k a^3): u carries <= 3 u32 relative (three roundings), so e's
// argument is off by 6 |u| u32 absolute, i.e. e by (6 |u| + 2) u32 relative (+ the exp's 1 ulp); 1 + e and
// the division add 2 u32: s (and gelu = a s, one more) within (6 |u| + 8) u32 relative, out = gelu b within
// (6 |u| + 9) u32. The derivative s + 2 a s (1 - s) c (1 + 3k a^2) has about ten more roundings on terms no
// larger than |s| + |the second term|: within (12 |u| + 24) u32 of that magnitude. Doubled (first order).
// SiLU (the grid model's FFNs, grid_layers.hpp), both builds, against double: y = x s, s = 1 / (1 + e^-x).
// e^-x within 2 ulp (4 u32) of exact (-x is exact), then 1 + e and the division: s and y within 6 u32
// relative, bound 8 u32 |y|. The backward's d = s (1 + x (1 - s)): s's 6 u32, 1 - s absolute within 7 u32 s,
// times x: 7 u32 s |x|, the roundings of the product and sums: d within 16 u32 s (1 + |x|) absolute,
// times |dout|, plus the accumulation into dx's start value (u32 of the result). Where e^-x overflows fp32
// (x < -88.72) y is -0 and d 0, as in the float reference: the exact |y| < 3e-37 and |d| < 3e-37 |x|
// there, the absolute slack of both bounds.
TEST(FastKernels, SiluMatchesTheExactFunction) {
  const int n = 1000;
  std::mt19937 g(11);
  std::normal_distribution<float> N(0.f, 3.f);
  std::vector<float> x(n), dout(n), out(n), dx(n), start(n);
  for (auto& v : x) v = N(g);
  for (auto& v : dout) v = N(g);
  for (auto& v : start) v = N(g);
  const float edges[] = {-100.f, -88.9f, -88.5f, -87.5f, -20.f, -1e-3f, 0.f, 1e-3f, 20.f, 87.5f, 88.5f, 100.f};
  for (std::size_t i = 0; i < std::size(edges); ++i) x[i] = edges[i];
  for (auto* kn : builds()) {
    SCOPED_TRACE(kn->name);
    kn->silu_forward(out.data(), x.data(), n - 3);  // n - 3: the tail of a vector too
    dx = start;
    kn->silu_backward(dx.data(), dout.data(), x.data(), n - 3);
    double worst = 0;
    for (int i = 0; i < n - 3; ++i) {
      const double v = x[std::size_t(i)], s = 1 / (1 + std::exp(-v)), y = v * s, d = s * (1 + v * (1 - s));
      const double gg = dout[std::size_t(i)], want_dx = double(start[std::size_t(i)]) + gg * d;
      const double e_fwd = std::abs(out[std::size_t(i)] - y) / (8 * kU32 * std::abs(y) + 3e-37);
      const double e_bwd = std::abs(dx[std::size_t(i)] - want_dx) /
                           (16 * kU32 * std::abs(gg) * s * (1 + std::abs(v)) + kU32 * std::abs(want_dx) + 3e-37 * std::abs(gg * v));
      ASSERT_LE(e_fwd, 1.0) << "silu(" << v << ") = " << out[std::size_t(i)] << ", exact " << y;
      ASSERT_LE(e_bwd, 1.0) << "silu'(" << v << ")";
      worst = std::max({worst, e_fwd, e_bwd});
    }
    EXPECT_EQ(out[std::size_t(n - 3)], 0.f);  // untouched past n - 3 (out starts 0)
    EXPECT_EQ(dx[std::size_t(n - 1)], start[std::size_t(n - 1)]);
    std::printf("[ %s ] SiLU: worst error %.3f of its bound\n", kn->name, worst);
  }
}

// The grid model's dropout masks, both builds: the scalar splitmix64 stream of grid_layers.hpp bit for bit
// (its double loop), at lengths with whole vectors, tails and odd counts; nothing written past n.
TEST(FastKernels, DropoutMaskIsTheScalarStream) {
  for (auto* kn : builds()) {
    SCOPED_TRACE(kn->name);
    for (const std::int64_t n : {1, 3, 16, 17, 32, 47, 1000}) {
      std::vector<double> want(static_cast<std::size_t>(n));
      grid::DropoutStream rs(1234567 + std::uint64_t(n));
      grid::dropout_mask(want.data(), n, 0.25, rs);
      std::vector<float> got(std::size_t(n) + 5, -1.f);
      kn->dropout_mask(got.data(), n, 1234567 + std::uint64_t(n), std::uint64_t(0.25 * 4294967296.0), float(1 / 0.75));
      for (std::int64_t i = 0; i < n; ++i)
        ASSERT_EQ(double(got[std::size_t(i)]), double(float(want[std::size_t(i)]))) << n << ": " << i;
      for (std::size_t i = std::size_t(n); i < got.size(); ++i) EXPECT_EQ(got[i], -1.f) << "written past n";
    }
  }
}

TEST(FastKernels, GegluMatchesTheExactFunction) {
  const int R = 37, F = 48;
  std::mt19937 g(7);
  std::normal_distribution<float> N(0.f, 3.f);
  std::vector<float> h(R * 2 * F), dout(R * F), out(R * F), dh(R * 2 * F);
  for (auto& x : h) x = N(g);
  for (auto& x : dout) x = N(g);
  h[0] = -40.f, h[1] = 40.f, h[2] = 0.f, h[3] = -1e-3f, h[4] = -12.f;  // saturated and cancelling regions
  const double c = 0.7978845608028654, k = 0.044715;
  for (auto* kn : builds()) {
    SCOPED_TRACE(kn->name);
    kn->geglu_forward(out.data(), h.data(), R, F);
    kn->geglu_backward(dh.data(), dout.data(), h.data(), R, F);
    double worst = 0;
    for (int t = 0; t < R; ++t)
      for (int f = 0; f < F; ++f) {
        const double a = h[std::size_t(t * 2 * F + f)], b = h[std::size_t(t * 2 * F + F + f)], gg = dout[std::size_t(t * F + f)];
        const double u = c * (a + k * a * a * a), s = 1 / (1 + std::exp(-2 * u));
        const double second = 2 * a * s * (1 - s) * c * (1 + 3 * k * a * a);
        const double gelu = a * s, dgel = s + second, dmag = std::abs(s) + std::abs(second);
        const double want[3] = {gelu * b, gg * b * dgel, gg * gelu};
        const double bound[3] = {2 * (6 * std::abs(u) + 9) * kU32 * std::abs(gelu * b) + 1e-37,
                                 2 * (12 * std::abs(u) + 24) * kU32 * std::abs(gg * b) * dmag + 1e-37,
                                 2 * (6 * std::abs(u) + 9) * kU32 * std::abs(gg * gelu) + 1e-37};
        const double got[3] = {out[std::size_t(t * F + f)], dh[std::size_t(t * 2 * F + f)], dh[std::size_t(t * 2 * F + F + f)]};
        for (int i = 0; i < 3; ++i) {
          const double e = std::abs(got[i] - want[i]) / bound[i];
          ASSERT_LE(e, 1.0) << (i == 0 ? "gelu(a) b" : i == 1 ? "d gate" : "d up") << " at a = " << a << ", b = " << b;
          worst = std::max(worst, e);
        }
      }
    std::printf("[ %s ] GEGLU: worst error %.3f of its bound\n", kn->name, worst);
  }
}

// RMSNorm against layers.hpp's in double. Forward: sum x^2 within gamma_C of itself (positive terms), the
// mean, + eps, sqrt and the division add 4 u32: r within (C/2 + 4) u32 relative; out = (w x) r two more:
// (C/2 + 6) u32 of |w x r|. Backward: the dot sum_c g w x within (C + 2) u32 of sum |g w x|, k = dot r^3 / C
// within that plus (3 (C/2 + 4) + 4) u32 relative; dx += w g r - x k within (C/2 + 8) u32 |w g r| +
// (k's) |x k| + 3 u32 of the sum; dw += g x r within (C/2 + 6) u32 |g x r| per row, summed in the same
// row order as the reference (+ R u32 of the accumulated magnitude). Doubled (first order).
TEST(FastKernels, RmsNormMatchesTheReference) {
  for (int C : {16, 37, 64}) {
    const int R = 23;
    std::mt19937 g{unsigned(C)};
    std::normal_distribution<float> N(0.f, 2.f);
    std::vector<float> x(R * C), w(C), dout(R * C);
    for (auto& v : x) v = N(g);
    for (auto& v : w) v = 1.f + 0.3f * N(g);
    for (auto& v : dout) v = N(g);
    std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), gd(dout.begin(), dout.end());
    std::vector<double> od(R * C), rd(R), dxd(R * C, 0.0), dwd(C, 0.0);
    rmsnorm_forward(od.data(), rd.data(), xd.data(), wd.data(), R, C, 1e-6);
    rmsnorm_backward(dxd.data(), dwd.data(), gd.data(), xd.data(), wd.data(), rd.data(), R, C);
    for (auto* kn : builds()) {
      SCOPED_TRACE(fmt::format("{} C {}", kn->name, C));
      std::vector<float> o(R * C), r(R), dx(R * C, 0.f), dw(C, 0.f);
      kn->rmsnorm_forward(o.data(), r.data(), x.data(), w.data(), R, C, 1e-6f);
      kn->rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), r.data(), R, C);
      double worst = 0;
      std::vector<double> dwmag(C, 0.0);
      for (int t = 0; t < R; ++t) {
        double dotmag = 0;
        for (int c = 0; c < C; ++c) dotmag += std::abs(gd[t * C + c] * wd[c] * xd[t * C + c]);
        const double rr = rd[t], kmag = dotmag * rr * rr * rr / C, krel = (C + 2 + 3 * (C / 2.0 + 4) + 4) * kU32;
        for (int c = 0; c < C; ++c) {
          const std::size_t i = std::size_t(t * C + c);
          const double bo = 2 * (C / 2.0 + 6) * kU32 * std::abs(wd[c] * xd[i] * rr) + 1e-30;
          const double bx = 2 * ((C / 2.0 + 8) * kU32 * std::abs(wd[c] * gd[i] * rr) + krel * std::abs(xd[i]) * kmag +
                                 3 * kU32 * (std::abs(wd[c] * gd[i] * rr) + std::abs(xd[i]) * kmag)) + 1e-30;
          worst = std::max({worst, std::abs(o[i] - od[i]) / bo, std::abs(dx[i] - dxd[i]) / bx});
          EXPECT_LE(std::abs(o[i] - od[i]), bo);
          EXPECT_LE(std::abs(dx[i] - dxd[i]), bx);
          dwmag[std::size_t(c)] += std::abs(gd[i] * xd[i] * rr);
        }
      }
      for (int c = 0; c < C; ++c) {
        const double b = 2 * (C / 2.0 + 6 + R) * kU32 * dwmag[std::size_t(c)] + 1e-30;
        EXPECT_LE(std::abs(dw[std::size_t(c)] - dwd[std::size_t(c)]), b);
        worst = std::max(worst, std::abs(dw[std::size_t(c)] - dwd[std::size_t(c)]) / b);
      }
      std::printf("[ %s, C %d ] RMSNorm: worst error %.3f of its bound\n", kn->name, C, worst);
    }
  }
}

namespace {
// One random attention problem: T rows, NH heads of HS, the queries `qrows`; q, k, v (T, D) and the
// fused (T, 3D) layout the kernels read.
struct AttnCase {
  int T, NH, HS;
  double scale;
  std::vector<std::int32_t> qrows;
  std::vector<float> q, k, v, qkv, dout;  // dout (T, D): zero at rows that are not queries
};
AttnCase attn_case(int T, int NH, int HS, double scale, int query_kind, std::uint64_t seed) {
  AttnCase a{T, NH, HS, scale, {}, {}, {}, {}, {}, {}};
  std::mt19937 g{unsigned(seed)};
  std::normal_distribution<float> N(0.f, 1.f);
  const int D = NH * HS;
  for (int t = 0; t < T; ++t)  // every row (0), the last third (1: a response), every other row (2)
    if (query_kind == 0 || (query_kind == 1 && t >= 2 * T / 3) || (query_kind == 2 && t % 2 == 1)) a.qrows.push_back(t);
  if (a.qrows.empty()) a.qrows.push_back(T - 1);
  for (auto* x : {&a.q, &a.k, &a.v, &a.dout}) x->resize(std::size_t(T * D));
  for (auto& x : a.q) x = 2.f * N(g);  // scores of a few units: peaked and flat rows both
  for (auto& x : a.k) x = N(g);
  for (auto& x : a.v) x = N(g);
  std::vector<char> is_q(std::size_t(T), 0);
  for (int r : a.qrows) is_q[std::size_t(r)] = 1;
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < D; ++c) a.dout[std::size_t(t * D + c)] = is_q[std::size_t(t)] ? N(g) : 0.f;
  a.qkv.resize(std::size_t(T * 3 * D));
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < D; ++c) {
      a.qkv[std::size_t(t * 3 * D + c)] = a.q[std::size_t(t * D + c)];
      a.qkv[std::size_t(t * 3 * D + D + c)] = a.k[std::size_t(t * D + c)];
      a.qkv[std::size_t(t * 3 * D + 2 * D + c)] = a.v[std::size_t(t * D + c)];
    }
  return a;
}
struct AttnOut {
  std::vector<double> out, dq, dk, dv;  // (T, D) each; out at the query rows
};
// The kernel's forward and backward.
AttnOut run_kernel(const cpu_fast::Kernels& kn, const AttnCase& c, bool bf16) {
  const int D = c.NH * c.HS, nq = int(c.qrows.size());
  cpu_fast::AttnArgs a;
  a.T = c.T, a.NH = c.NH, a.HS = c.HS, a.qkv = c.qkv.data(), a.ld = 3 * D, a.qrows = c.qrows.data(), a.nq = nq;
  a.scale = float(c.scale), a.bf16 = bf16;
  std::vector<float> out(std::size_t(nq * D)), stats(std::size_t(nq * c.NH * 2)), dqkv(std::size_t(c.T * 3 * D), 7.f),
      work(std::size_t(cpu_fast::attention_workspace(c.T, c.HS))), dout(std::size_t(nq * D));
  kn.attention_forward(a, out.data(), D, stats.data(), work.data());
  if (bf16) kn.round_bf16(out.data(), nq * D);  // the device's rounding point after attention
  for (int r = 0; r < nq; ++r)
    for (int cc = 0; cc < D; ++cc) dout[std::size_t(r * D + cc)] = c.dout[std::size_t(c.qrows[std::size_t(r)] * D + cc)];
  kn.attention_backward(a, dout.data(), D, out.data(), D, stats.data(), dqkv.data(), work.data());
  AttnOut o;
  o.out.assign(std::size_t(c.T * D), 0.0);
  for (int r = 0; r < nq; ++r)
    for (int cc = 0; cc < D; ++cc) o.out[std::size_t(c.qrows[std::size_t(r)] * D + cc)] = out[std::size_t(r * D + cc)];
  for (auto* x : {&o.dq, &o.dk, &o.dv}) x->resize(std::size_t(c.T * D));
  for (int t = 0; t < c.T; ++t)
    for (int cc = 0; cc < D; ++cc) {
      o.dq[std::size_t(t * D + cc)] = dqkv[std::size_t(t * 3 * D + cc)];
      o.dk[std::size_t(t * D + cc)] = dqkv[std::size_t(t * 3 * D + D + cc)];
      o.dv[std::size_t(t * D + cc)] = dqkv[std::size_t(t * 3 * D + 2 * D + cc)];
    }
  return o;
}
// layers.hpp's attention in S (double: the exact value of fp32 inputs; float: the reference device's),
// every row a query, dout zero at the other rows (so their dq is 0 and they add nothing to dk, dv); out
// kept at the query rows only (0 elsewhere, as run_kernel's).
template <class S>
AttnOut run_reference(const AttnCase& c, bool bf16, std::vector<S>* att_out = nullptr) {
  const int T = c.T, D = c.NH * c.HS;
  std::vector<S> q(c.q.begin(), c.q.end()), k(c.k.begin(), c.k.end()), v(c.v.begin(), c.v.end()),
      dout(c.dout.begin(), c.dout.end()), out(std::size_t(T * D)), att(std::size_t(c.NH * T * T)),
      dq(std::size_t(T * D), S(0)), dk(dq), dv(dq), scratch(std::size_t(T * T));
  attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), T, T, c.NH, c.HS, S(c.scale), static_cast<const S*>(nullptr), 0, 0, bf16);
  std::vector<S> out_r = out;
  if (bf16)
    for (auto& x : out_r) x = round_to_bf16(x);
  attention_backward(dq.data(), dk.data(), dv.data(), scratch.data(), dout.data(), att.data(), q.data(), k.data(),
                     v.data(), T, c.NH, c.HS, S(c.scale), static_cast<S*>(nullptr), 0,
                     bf16 ? out_r.data() : static_cast<const S*>(nullptr));
  if (att_out) *att_out = att;
  std::vector<char> is_q(std::size_t(T), 0);
  for (int r : c.qrows) is_q[std::size_t(r)] = 1;
  for (int t = 0; t < T; ++t)
    if (!is_q[std::size_t(t)]) std::fill(out.begin() + t * D, out.begin() + (t + 1) * D, S(0));
  AttnOut o;
  o.out.assign(out.begin(), out.end()), o.dq.assign(dq.begin(), dq.end()), o.dk.assign(dk.begin(), dk.end());
  o.dv.assign(dv.begin(), dv.end());
  return o;
}
// The first-order error bound of an fp32 evaluation of the attention in any summation order, per entry
// (doubled), from the exact P. For query row i (n = i + 1 keys), head h: the score s_ij = q_i . k_j
// within gamma_HS sum_c |q_ic k_jc|, x = scale s and x - max one rounding each: the argument of exp off by
// eps_i = max_j ((HS + 2) u32 A_ij + u32 |x_ij - m_i|), A_ij = |scale| sum_c |q_ic k_jc|; e = exp(.)
// within eps_i + 2 ulp relative; l = sum e within gamma_n more; P = e / l within
// rho_i = 2 eps_i + (n + 10) u32 relative. Then
//   out_ic = sum_j P_ij v_jc                 : (rho_i + n u32) sum_j P_ij |v_jc|
//   dP_ij = dout_i . v_j                      : dd_ij = HS u32 sum_c |dout_ic v_jc|
//   dot_i = sum_j P_ij dP_ij                  : ddot_i = sum_j P_ij (rho_i |dP_ij| + dd_ij) + n u32 sum_j P_ij |dP_ij|
//   dS_ij = scale P_ij (dP_ij - dot_i)        : dS_ij's error e_ij = |scale| P_ij (rho_i |dP_ij - dot_i| + dd_ij + ddot_i) + 3 u32 |dS_ij|
//   dq_ic = sum_j dS_ij k_jc                  : sum_j e_ij |k_jc| + n u32 sum_j |dS_ij k_jc|
//   dk_jc = sum_i dS_ij q_ic, dv_jc = sum_i P_ij dout_ic: likewise over the query rows i >= j.
AttnOut fp32_bound(const AttnCase& c, const std::vector<double>& att) {
  const int T = c.T, NH = c.NH, HS = c.HS, D = NH * HS;
  AttnOut b;
  for (auto* x : {&b.out, &b.dq, &b.dk, &b.dv}) x->assign(std::size_t(T * D), 1e-30);
  auto at = [&](const std::vector<float>& x, int t, int h, int cc) { return double(x[std::size_t(t * D + h * HS + cc)]); };
  for (int h = 0; h < NH; ++h) {
    std::vector<double> rho(T, 0.0), dP(std::size_t(T) * std::size_t(T), 0.0), dd(dP), dS(dP), eS(dP);
    for (int i = 0; i < T; ++i) {
      const double* P = att.data() + std::size_t((h * T + i) * T);
      double m = -1e300, eps = 0;
      std::vector<double> x(std::size_t(i + 1));
      for (int j = 0; j <= i; ++j) {
        double s = 0, A = 0;
        for (int cc = 0; cc < HS; ++cc) s += at(c.q, i, h, cc) * at(c.k, j, h, cc), A += std::abs(at(c.q, i, h, cc) * at(c.k, j, h, cc));
        x[std::size_t(j)] = c.scale * s, m = std::max(m, x[std::size_t(j)]);
        eps = std::max(eps, (HS + 2) * kU32 * std::abs(c.scale) * A);
      }
      double xm = 0;
      for (int j = 0; j <= i; ++j) xm = std::max(xm, std::abs(x[std::size_t(j)] - m));
      eps += kU32 * xm;
      rho[std::size_t(i)] = 2 * eps + (i + 1 + 10) * kU32;
      for (int cc = 0; cc < HS; ++cc) {
        double sv = 0;
        for (int j = 0; j <= i; ++j) sv += P[j] * std::abs(at(c.v, j, h, cc));
        b.out[std::size_t(i * D + h * HS + cc)] = 2 * (rho[std::size_t(i)] + (i + 1) * kU32) * sv + 1e-30;
      }
      double dot = 0, ddot = 0, pdp = 0;
      for (int j = 0; j <= i; ++j) {
        double s = 0, a = 0;
        for (int cc = 0; cc < HS; ++cc) s += at(c.dout, i, h, cc) * at(c.v, j, h, cc), a += std::abs(at(c.dout, i, h, cc) * at(c.v, j, h, cc));
        dP[std::size_t(i * T + j)] = s, dd[std::size_t(i * T + j)] = HS * kU32 * a;
        dot += P[j] * s, pdp += P[j] * std::abs(s);
        ddot += P[j] * (rho[std::size_t(i)] * std::abs(s) + HS * kU32 * a);
      }
      ddot += (i + 1) * kU32 * pdp;
      for (int j = 0; j <= i; ++j) {
        const double ds = c.scale * P[j] * (dP[std::size_t(i * T + j)] - dot);
        dS[std::size_t(i * T + j)] = ds;
        eS[std::size_t(i * T + j)] = std::abs(c.scale) * P[j] *
                                         (rho[std::size_t(i)] * std::abs(dP[std::size_t(i * T + j)] - dot) +
                                          dd[std::size_t(i * T + j)] + ddot) +
                                     3 * kU32 * std::abs(ds);
      }
    }
    for (int t = 0; t < T; ++t)
      for (int cc = 0; cc < HS; ++cc) {
        double eq = 0, mq = 0, ek = 0, mk = 0, ev = 0, mv = 0;
        for (int j = 0; j <= t; ++j)
          eq += eS[std::size_t(t * T + j)] * std::abs(at(c.k, j, h, cc)), mq += std::abs(dS[std::size_t(t * T + j)] * at(c.k, j, h, cc));
        for (int i = t; i < T; ++i) {
          const double P = att[std::size_t((h * T + i) * T + t)];
          ek += eS[std::size_t(i * T + t)] * std::abs(at(c.q, i, h, cc)), mk += std::abs(dS[std::size_t(i * T + t)] * at(c.q, i, h, cc));
          ev += rho[std::size_t(i)] * P * std::abs(at(c.dout, i, h, cc)), mv += P * std::abs(at(c.dout, i, h, cc));
        }
        const std::size_t o = std::size_t(t * D + h * HS + cc);
        b.dq[o] = 2 * (eq + (t + 1) * kU32 * mq) + 1e-30;
        b.dk[o] = 2 * (ek + (T - t) * kU32 * mk) + 1e-30;
        b.dv[o] = 2 * (ev + (T - t) * kU32 * mv) + 1e-30;
      }
  }
  return b;
}
double worst_ratio(const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& bound) {
  double w = 0;
  for (std::size_t i = 0; i < got.size(); ++i) w = std::max(w, std::abs(got[i] - want[i]) / bound[i]);
  return w;
}
double l2(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}
}  // namespace

// fp32: the fused kernels against layers.hpp's attention in double on the same fp32 inputs, every entry
// of the output and of dq, dk, dv within fp32_bound (its derivation above); the reference's own fp32
// evaluation (layers.hpp in float) within the same bound (the bound is one any fp32 order meets, not
// one tuned to the kernels). Lengths 1 to 150 (the vector tails and the 64-key tiles), heads of 8 (scalar
// loops), 16, 32 and 64, both score scales, the queries every row, a suffix (the last layer's live rows)
// or every other row. Control: a kernel that let a query see the next key would be off by O(1).
TEST(FastKernels, AttentionFp32WithinTheDerivedBound) {
  struct Shape {
    int T, NH, HS;
  };
  const Shape shapes[] = {{1, 2, 16}, {7, 2, 8}, {17, 3, 16}, {64, 2, 32}, {150, 2, 16}, {33, 1, 64}};
  double worst_fast = 0, worst_ref = 0;
  int cases = 0;
  for (const Shape& s : shapes)
    for (double scale : {0.25, 1.0})
      for (int kind = 0; kind < 3; ++kind) {
        const AttnCase c = attn_case(s.T, s.NH, s.HS, scale, kind, std::uint64_t(s.T * 7 + kind));
        std::vector<double> att;
        const AttnOut exact = run_reference<double>(c, false, &att);
        const AttnOut ref32 = run_reference<float>(c, false);
        const AttnOut b = fp32_bound(c, att);
        SCOPED_TRACE(fmt::format("T {} NH {} HS {} scale {} queries {}", s.T, s.NH, s.HS, scale, kind));
        for (auto* kn : builds()) {
          SCOPED_TRACE(kn->name);
          const AttnOut f = run_kernel(*kn, c, false);
          const double w = std::max({worst_ratio(f.out, exact.out, b.out), worst_ratio(f.dq, exact.dq, b.dq),
                                     worst_ratio(f.dk, exact.dk, b.dk), worst_ratio(f.dv, exact.dv, b.dv)});
          EXPECT_LE(w, 1.0);
          worst_fast = std::max(worst_fast, w);
        }
        if (kind == 0) {  // the reference computes every row
          const double w = std::max({worst_ratio(ref32.out, exact.out, b.out), worst_ratio(ref32.dq, exact.dq, b.dq),
                                     worst_ratio(ref32.dk, exact.dk, b.dk), worst_ratio(ref32.dv, exact.dv, b.dv)});
          EXPECT_LE(w, 1.0) << "the reference's own fp32 evaluation";
          worst_ref = std::max(worst_ref, w);
        }
        ++cases;
      }
  std::printf("[ fp32 attention, %d cases ] kernels' worst error %.3f of the bound, the reference's fp32 %.3f\n", cases,
              worst_fast, worst_ref);
  // control: attention that reads one key too many is far outside
  AttnCase c = attn_case(20, 2, 16, 0.25, 0, 3);
  std::vector<double> att;
  const AttnOut exact = run_reference<double>(c, false, &att);
  AttnCase shifted = c;
  shifted.qrows.clear();
  for (int t = 0; t + 1 < c.T; ++t) shifted.qrows.push_back(t + 1);  // query row t computed as row t + 1
  const AttnOut f = run_kernel(cpu_fast::generic_kernels(), shifted, false);
  double bad = 0;
  for (int t = 0; t + 1 < c.T; ++t)
    for (int cc = 0; cc < 32; ++cc)
      bad = std::max(bad, std::abs(f.out[std::size_t((t + 1) * 32 + cc)] - exact.out[std::size_t(t * 32 + cc)]) /
                              fp32_bound(c, att).out[std::size_t(t * 32 + cc)]);
  EXPECT_GT(bad, 1e3);
}

// bf16 (layers.hpp's rounding points: 2^(z - M) weights rounded before they multiply v, the output
// divided by the unrounded sum; bf16(P) on dout, dS = bf16(P (dP - D)) with D from the rounded output):
// against the reference's bf16 attention in double (the exact arithmetic with the same rounding points).
// The kernels differ from it by fp32 order (fp32_bound) and by flips: a value whose fp32 result lies
// within that order difference of a bf16 rounding boundary rounds to the neighbouring bf16 number, one
// ulp (<= 2u relative) away; each entry's terms pass at most two rounding points (the weight, or dS and
// the weight on dout), so |error| <= fp32_bound + 4u (the entry's sum of magnitudes). And the control that
// makes this a test of the rounding points rather than of magnitudes: over every entry the kernels are
// at most half as far from the bf16 reference (L2) as the bf16 reference is from the fp32 one, i.e. the
// flips are rare and a skipped or moved rounding point (a full rounding's difference) fails.
TEST(FastKernels, AttentionBf16HasTheReferencesRoundingPoints) {
  double worst = 0, worst_l2 = 0;
  for (int T : {5, 40, 150})
    for (int kind = 0; kind < 3; ++kind) {
      const AttnCase c = attn_case(T, 2, 16, 0.25, kind, std::uint64_t(100 + T + kind));
      std::vector<double> att;
      const AttnOut exact32 = run_reference<double>(c, false, &att);
      const AttnOut exact16 = run_reference<double>(c, true);
      AttnOut mag = fp32_bound(c, att);  // the order term; the magnitudes below
      SCOPED_TRACE(fmt::format("T {} queries {}", T, kind));
      for (auto* kn : builds()) {
        SCOPED_TRACE(kn->name);
        const AttnOut f = run_kernel(*kn, c, true);
        for (auto [got, want, b, name] : {std::tuple{&f.out, &exact16.out, &mag.out, "out"}, {&f.dq, &exact16.dq, &mag.dq, "dq"},
                                          {&f.dk, &exact16.dk, &mag.dk, "dk"}, {&f.dv, &exact16.dv, &mag.dv, "dv"}}) {
          // magnitudes: the bound of an fp32 evaluation is (rho + n u32) times them; 4u of them, rho >= 12 u32
          double w = 0, scale_mag = 0;
          for (std::size_t i = 0; i < got->size(); ++i) {
            const double m = (*b)[i] / (2 * 12 * kU32);  // an upper bound on the entry's sum of magnitudes
            scale_mag = std::max(scale_mag, m);
            w = std::max(w, std::abs((*got)[i] - (*want)[i]) / ((*b)[i] + 4 * kU * m));
          }
          EXPECT_LE(w, 1.0) << name;
          worst = std::max(worst, w);
          (void)scale_mag;
        }
        // only the rows that are queries count for out
        const double d16 = l2(f.out, exact16.out) + l2(f.dq, exact16.dq) + l2(f.dk, exact16.dk) + l2(f.dv, exact16.dv);
        const double dprec = l2(exact32.out, exact16.out) + l2(exact32.dq, exact16.dq) + l2(exact32.dk, exact16.dk) +
                             l2(exact32.dv, exact16.dv);
        EXPECT_LE(d16, 0.5 * dprec);
        worst_l2 = std::max(worst_l2, d16 / dprec);
      }
    }
  std::printf("[ bf16 attention ] worst entry %.3f of its bound; kernels vs bf16 reference %.3f of bf16 vs fp32 "
              "(bound 0.5)\n", worst, worst_l2);
}

// ---- the device against PackedCpuDevice --------------------------------------------------------------

namespace {
// One batch's loss and gradient on the fast device and on PackedCpuDevice (and PackedCpuDevice in fp32,
// for bf16's control), from the same weights.
struct Grads {
  double loss_fast, loss_ref, loss_ref32;
  std::vector<float> fast, ref, ref32;
};
Grads grads(const ModelConfig& c, Precision prec, const CpuFastOptions& o, int threads, std::uint64_t seed,
            double attn_entropy = 0) {
  const Layout lay = Layout::make(c);
  auto P = init_params<float>(c, lay, seed);
  if (lay.rel_bias >= 0) {  // coupled_rel: gains N(0, 1), so that the bias decides the attention
    std::mt19937_64 g(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (std::int64_t i = 0; i < lay.find("rel_bias.weight").size; ++i) P[std::size_t(lay.rel_bias + i)] = nd(g);
    // rel_value: vectors N(0, 1) (they start at 0, where their term of d P would be compared at zero only)
    if (lay.rel_value >= 0)
      for (std::int64_t i = 0; i < lay.find("rel_value.weight").size; ++i) P[std::size_t(lay.rel_value + i)] = nd(g);
  }
  const PackedBatch pb = mixed_batch(c, 11, seed + 1);
  const std::vector<float> z(P.size(), 0.f);
  auto ref = make_packed_cpu_device(c, prec), ref32 = make_packed_cpu_device(c), fast = make_cpu_fast_device(c, threads, prec, o);
  for (auto* d : {ref.get(), ref32.get(), fast.get()}) d->set_state(P, z, z);
  if (attn_entropy != 0)
    for (auto* d : {ref.get(), ref32.get(), fast.get()}) d->set_attn_entropy(attn_entropy);
  Grads g;
  const float sc = 1.f / float(pb.counted_targets);
  g.loss_ref = ref->gradient(pb, sc, g.ref);
  g.loss_fast = fast->gradient(pb, sc, g.fast);
  g.loss_ref32 = ref32->gradient(pb, sc, g.ref32);
  return g;
}
}  // namespace

// fp32: one batch's loss and every gradient tensor against PackedCpuDevice, for every variant, kernel
// build and arrangement, threads 1 and 2. The two compute the same passes in other orders: GEMM
// blocking (oneDNN against Eigen, and a chunk's rows against the whole batch's), attention's vector
// sums, one fused q|k|v product, the residual as the output projections' accumulator, exp and gelu within
// 1 ulp and a few ulp; every gradient entry is a sum over up to R rows of products whose factors passed
// ~10 fp32 reductions of length <= max(d_model, d_ff, T) (each within gamma_len of its magnitudes), so
// entries agree to ~1e-6 of the tensor's largest in practice (random-walk errors) and 1e-4 is the bound
// the CUDA device's twin tests use (CudaTrainGpu.EveryGradientMatchesPackedCpuTwin: a wrong pass, mask,
// index or skipped row gives O(1)). The loss: a sum of R per-token losses, each within ~1e-6 relative:
// 1e-5 relative.
TEST(FastDevice, Fp32MatchesThePackedTwin) {
  double worst = 0, worst_loss = 0;
  std::string worst_at;
  for (const Variant& v : fp32_variants())
    for (const Arrangement& ar : arrangements()) {
      if (ar.o.bf16_as_floats) continue;  // the same as the default in fp32
      for (int threads : {1, 2}) {
        SCOPED_TRACE(v.name + ", " + ar.name + ", threads " + std::to_string(threads));
        const Grads g = grads(v.c, Precision::fp32, ar.o, threads, 3);
        EXPECT_NEAR(g.loss_fast, g.loss_ref, 1e-5 * g.loss_ref);
        worst_loss = std::max(worst_loss, std::abs(g.loss_fast - g.loss_ref) / g.loss_ref);
        const Layout lay = Layout::make(v.c);
        for (const auto& t : lay.tensors) {
          double m = 0, d = 0;
          for (std::int64_t i = t.offset; i < t.offset + t.size; ++i) {
            m = std::max(m, double(std::abs(g.ref[std::size_t(i)])));
            d = std::max(d, double(std::abs(g.ref[std::size_t(i)] - g.fast[std::size_t(i)])));
          }
          if (m == 0) {
            EXPECT_EQ(d, 0.0) << t.name;  // frozen tables: no gradient on either side
            continue;
          }
          EXPECT_LE(d, 1e-4 * m) << t.name;
          if (d / m > worst) worst = d / m, worst_at = v.name + " " + t.name;
        }
      }
    }
  std::printf("[ fp32 fast vs packed ] loss %.2e relative (bound 1e-5), worst gradient tensor %.2e of its largest "
              "entry (%s; bound 1e-4)\n", worst_loss, worst, worst_at.c_str());
}

// train.attn_entropy (fp32, one-layer models): the fast device's entropy term against PackedCpuDevice's,
// within Fp32MatchesThePackedTwin's bound (each kept pair adds w ln P_j, P_j within a few ulp on both sides:
// the same order of difference); and the term is live on both: lambda 0.5 moves some tensor of each variant
// by far more than that bound. Two layers and bf16 are refused by name.
TEST(FastDevice, AttentionEntropyMatchesThePackedTwin) {
  double worst = 0, least_moved = 1e9;
  for (const Variant& v : fp32_variants()) {
    if (v.c.n_layers != 1) continue;
    for (int threads : {1, 2}) {
      SCOPED_TRACE(v.name + ", threads " + std::to_string(threads));
      const Grads g = grads(v.c, Precision::fp32, small_chunks(), threads, 3, 0.5);
      const Grads g0 = grads(v.c, Precision::fp32, small_chunks(), threads, 3);
      const Layout lay = Layout::make(v.c);
      double moved = 0;
      for (const auto& t : lay.tensors) {
        double m = 0, d = 0, mv = 0;
        for (std::int64_t i = t.offset; i < t.offset + t.size; ++i) {
          m = std::max(m, double(std::abs(g.ref[std::size_t(i)])));
          d = std::max(d, double(std::abs(g.ref[std::size_t(i)] - g.fast[std::size_t(i)])));
          mv = std::max(mv, double(std::abs(g.fast[std::size_t(i)] - g0.fast[std::size_t(i)])));
        }
        if (m == 0) continue;
        EXPECT_LE(d, 1e-4 * m) << t.name;
        worst = std::max(worst, d / m), moved = std::max(moved, mv / m);
      }
      EXPECT_GT(moved, 1e-2);
      least_moved = std::min(least_moved, moved);
    }
  }
  ModelConfig two = small_model(PosMode::coupled_rel, 2);
  EXPECT_THROW(make_cpu_fast_device(two, 1)->set_attn_entropy(0.5), InputError);
  EXPECT_THROW(make_packed_cpu_device(two)->set_attn_entropy(0.5), InputError);
  EXPECT_THROW(make_cpu_fast_device(small_model(PosMode::coupled, 1), 1, Precision::bf16)->set_attn_entropy(0.5),
               InputError);
  EXPECT_NO_THROW(make_cpu_fast_device(two, 1)->set_attn_entropy(0));
  std::printf("[ attn_entropy fast vs packed ] worst gradient tensor %.2e of its largest entry (bound 1e-4); the term "
              "moves some tensor by >= %.2e of it (bound 1e-2)\n", worst, least_moved);
}

// bf16: against PackedCpuDevice in bf16, with the bounds of the CUDA device's bf16 twin test
// (test_cuda_train.cpp, CudaTrainGpu.Bf16GradientMatchesPackedCpuTwin: the same situation, two
// implementations of the same rounding points): products of bf16 numbers are exact in fp32 on both
// sides, so they differ by fp32 order (the fp32 bound above) and by flips, values whose fp32 results lie
// within that order difference of a bf16 rounding boundary and round to the neighbouring bf16 number
// (one ulp, <= 2u relative), < 1% of a rounding point's values. Then: loss within 2u relative; each
// tensor within test_learn_precision's bound on the whole bf16-vs-fp32 difference, 2 (P_f + P_b) u
// (P_f = 11 L + 2 forward and P_b = 1 + 6 L backward rounding points), plus the fp32 order term; and the
// control that makes it a test of the rounding points: over the whole gradient the fast device is at most
// half as far from its bf16 twin (L2) as bf16 is from fp32. A skipped or moved rounding point differs
// by a full rounding's effect and fails it. Every variant, with oneDNN's bf16 products and with the bf16
// values in floats (fp32 products), both kernel builds.
TEST(FastDevice, Bf16MatchesThePackedTwin) {
  double worst = 0, worst_whole = 0, worst_loss = 0;
  for (const Variant& v : variants())
    for (const Arrangement& ar : arrangements()) {
      SCOPED_TRACE(v.name + ", " + ar.name);
      const Grads g = grads(v.c, Precision::bf16, ar.o, 2, 5);
      EXPECT_NEAR(g.loss_fast, g.loss_ref, 2 * kU * g.loss_ref);
      worst_loss = std::max(worst_loss, std::abs(g.loss_fast - g.loss_ref) / g.loss_ref);
      const Layout lay = Layout::make(v.c);
      const int L = v.c.n_layers, Pf = 11 * L + 2, Pb = 1 + 6 * L;
      const double bound = 2 * (Pf + Pb) * kU;
      double dtwin = 0, dprec = 0;
      for (const auto& t : lay.tensors) {
        double d = 0, n = 0, m = 0;
        for (std::int64_t i = t.offset; i < t.offset + t.size; ++i) {
          const double r = g.ref[std::size_t(i)], f = g.fast[std::size_t(i)], r32 = g.ref32[std::size_t(i)];
          d += (f - r) * (f - r), n += r * r, m = std::max(m, std::abs(r));
          dprec += (r - r32) * (r - r32);
        }
        dtwin += d;
        if (n == 0) continue;
        const double rel = std::sqrt(d / n);
        worst = std::max(worst, rel);
        EXPECT_LE(rel, bound + 1e-4 * m / std::sqrt(n / double(t.size))) << t.name;
      }
      EXPECT_GT(dprec, 0.0);
      EXPECT_LE(std::sqrt(dtwin), 0.5 * std::sqrt(dprec)) << "not closer to its bf16 twin than bf16 is to fp32";
      worst_whole = std::max(worst_whole, std::sqrt(dtwin / dprec));
    }
  std::printf("[ bf16 fast vs packed ] loss %.2e relative (bound %.2e), worst gradient tensor %.2e relative L2, the whole "
              "gradient %.2f of the bf16-vs-fp32 difference (bound 0.5)\n", worst_loss, 2 * kU, worst, worst_whole);
}

// Twenty steps from the same initial state on the fast device and on PackedCpuDevice (the micro model,
// fp32). Losses: the per-step difference of summation order (~1e-7 relative at equal weights) carried
// along, not amplified: 1e-5 relative, as CpuDevice.TrainsLikeThePackedTwin (test_learn_batch). Weights:
// AdamW divides each entry's gradient by its own scale (sqrt(v) + eps, eps = 1e-8), so an entry whose
// gradient cancels to ~eps moves by lr g / (|g| + eps) and an fp32-order difference in it, however small
// against the tensor's largest entry, becomes a difference of lr times its relative size: measured on the
// hypercube variant, layers.0.ffn.wi.weight[2213] has gradient 1.75e-9 at step 1 (the tensor's largest
// 5e-4), where the double-precision gradient is matched within 2.8e-12 by the fast device and 4.4e-12 by
// PackedCpuDevice, and the weights end 3e-6 to 9e-6 apart after 20 steps (measured over this code's
// revisions; CpuDevice vs PackedCpuDevice: 1.1e-6). The bound is 1% of one update (0.01 lr = 1e-4,
// test_cuda_train's for one step): a wrong gradient moves the weights by O(lr) per step. And the frozen
// position table of a hypercube code bit for bit unchanged, the learned one moved.
TEST(FastDevice, TwentyStepsLikeThePackedTwin) {
  for (bool codes : {false, true}) {
    SCOPED_TRACE(codes ? "hypercube level 1, learned level 2" : "learned tables");
    ModelConfig mc = fixtures::micro_model();
    if (codes) mc.pos_codes[0] = PosCode::hypercube;
    TrainConfig tc = fixtures::micro_train(2000, 400);
    Trainer ref(mc, tc), fast(mc, tc);
    ref.attach_device(make_packed_cpu_device(mc));
    fast.attach_device(make_cpu_fast_device(mc, 2, Precision::fp32, small_chunks()));
    const std::vector<float> p0 = fast.params();
    double worst_loss = 0;
    for (int s = 0; s < 20; ++s) {
      const StepStats a = ref.step(), b = fast.step();
      EXPECT_EQ(a.tokens, b.tokens);
      EXPECT_NEAR(b.loss, a.loss, 1e-5 * a.loss) << "step " << s + 1;
      worst_loss = std::max(worst_loss, std::abs(b.loss - a.loss) / a.loss);
    }
    double worst = 0, moved = 0;
    for (std::size_t i = 0; i < p0.size(); ++i) {
      worst = std::max(worst, double(std::abs(ref.params()[i] - fast.params()[i])));
      moved = std::max(moved, double(std::abs(fast.params()[i] - p0[i])));
    }
    std::printf("[ fast vs packed, 20 steps%s ] loss %.2e relative (bound 1e-5), weights %.2e (bound 1e-4)\n", codes ? ", hypercube" : "",
                worst_loss, worst);
    EXPECT_LT(worst, 0.01 * tc.lr);
    EXPECT_GT(moved, 100 * 0.01 * tc.lr);
    const Layout& lay = fast.layout();
    const std::int64_t n1 = std::int64_t(mc.max_pos1 + 1) * mc.d_model, n2 = std::int64_t(mc.max_pos2 + 1) * mc.d_model;
    EXPECT_EQ(std::memcmp(fast.params().data() + lay.wpe[0], p0.data() + lay.wpe[0], std::size_t(n1) * 4) == 0, codes)
        << "pos_emb.0: frozen means bit for bit unchanged";
    EXPECT_NE(std::memcmp(fast.params().data() + lay.wpe[1], p0.data() + lay.wpe[1], std::size_t(n2) * 4), 0)
        << "pos_emb.1 is learned";
  }
}

// Deterministic for (batch, threads): two devices give the same bits over five steps, with 1 and with 2
// threads, in fp32 and bf16; and a run stopped and resumed equals the uninterrupted one byte for byte.
TEST(FastDevice, DeterministicAndResumeIsBitIdentical) {
  const ModelConfig mc = fixtures::micro_model();
  for (const char* prec : {"fp32", "bf16"})
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(prec) + " threads " + std::to_string(threads));
      TrainConfig tc = fixtures::micro_train(2000, 400);
      tc.precision = prec, tc.threads = threads;
      Trainer a(mc, tc), b(mc, tc);
      a.attach_device(make_cpu_fast_device(mc, threads, tc.precision_value(), small_chunks()));
      b.attach_device(make_cpu_fast_device(mc, threads, tc.precision_value(), small_chunks()));
      for (int s = 0; s < 5; ++s) {
        const StepStats x = a.step(), y = b.step();
        EXPECT_EQ(x.loss, y.loss);
        EXPECT_EQ(x.grad_norm, y.grad_norm);
      }
      EXPECT_EQ(std::memcmp(a.params().data(), b.params().data(), a.params().size() * 4), 0);
    }
  TrainConfig tc = fixtures::micro_train(1000, 30);
  tc.eval_every = 0, tc.checkpoint_every = 0;
  const std::string x = fixtures::scratch("fast-a"), y = fixtures::scratch("fast-b");
  auto dev = [&] { return make_cpu_fast_device(mc, tc.threads); };
  run_training(mc, tc, x, false, 0, quiet_progress(), dev());
  run_training(mc, tc, y, false, 13, quiet_progress(), dev());
  run_training(mc, tc, y, true, 0, quiet_progress(), dev());
  EXPECT_EQ(manyadd::testing::slurp(x + "/checkpoint.safetensors"), manyadd::testing::slurp(y + "/checkpoint.safetensors"));
  EXPECT_EQ(manyadd::testing::slurp(x + "/model.safetensors"), manyadd::testing::slurp(y + "/model.safetensors"));
}

TEST(FastDevice, RefusesFireByName) {  // and coupled_rel in bf16 (its bias has no bf16 rounding points here)
  for (PosMode m : {PosMode::fire, PosMode::coupled_rel}) {
    try {
      make_cpu_fast_device(small_model(m, 1), 2, Precision::bf16);
      FAIL() << pos_mode_name(m) << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("pos_mode " + std::string(pos_mode_name(m))), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(make_cpu_fast_device(small_model(PosMode::coupled_rel, 1), 2, Precision::fp32));
  EXPECT_THROW(make_cpu_fast_device(small_model(PosMode::coupled, 1), 0), InputError);
}

// ---- training and evaluating through the device -----------------------------------------------------

namespace {
// test_learn_train's micro run (SA(2, 3), d_model 32, heads of 8: the kernels' scalar loops; 4000 steps)
// trained on the fast device, in fp32 and bf16 (shared by the tests below).
struct Micro {
  ModelConfig mc = fixtures::micro_model();
  TrainConfig tc;
  Trainer tr;
  double first_loss = 0, last_loss = 0;
  explicit Micro(const char* precision) : tc(cfg(precision)), tr(mc, tc) {
    tr.attach_device(make_cpu_fast_device(mc, tc.threads, tc.precision_value()));
    const int window = 100;
    for (std::int64_t s = 1; s <= tc.steps; ++s) {
      const double l = tr.step().loss;
      if (s <= window) first_loss += l / window;
      if (s > tc.steps - window) last_loss += l / window;
    }
  }
  static TrainConfig cfg(const char* precision) {
    TrainConfig t = fixtures::micro_train(5000, 4000);
    t.precision = precision;
    return t;
  }
};
Micro& micro(const char* precision) {
  static Micro fp32("fp32"), bf16("bf16");
  return std::string(precision) == "bf16" ? bf16 : fp32;
}
}  // namespace

// The micro run trains through the fast path as through the reference: its loss falls below
// test_learn_train's bound (0.005: 100x above the reference run's ~5e-5, below the format-only plateau
// ~1.0 and a half-learned model's ~0.02; bf16 ends higher, ~3e-4 on the reference, under the same bound),
// and it answers the fixed 40 instances of MicroRunExactOnTinyFixedSet exactly, teacher-forced through
// the fast device's predictions and through the reference forward, and greedy (fp32; bf16: at least 38,
// test_learn_train's MicroRunInBf16LearnsLikeFp32 argument: whether a 4000-step bf16 run ends exact on
// every instance depends on its trajectory).
TEST(FastTrain, MicroRunLearns) {
  for (const char* prec : {"fp32", "bf16"}) {
    SCOPED_TRACE(prec);
    Micro& m = micro(prec);
    std::printf("[ micro run on cpu-fast, %s ] mean loss first 100 steps %.4f, last 100 steps %.5f\n", prec,
                m.first_loss, m.last_loss);
    EXPECT_EQ(m.tr.device().name(), "cpu-fast");
    EXPECT_GT(m.first_loss, 0.5);
    EXPECT_LT(m.last_loss, 0.005);
    Rng rng(2024);
    std::vector<Example> exs;
    for (int n = 1; n <= 2; ++n)
      for (int k = 2; k <= 3; ++k)
        for (int i = 0; i < 10; ++i) exs.push_back(make_example(sample_TA(rng, n, k), m.mc, 1, 1));
    const PackedBatch pb = pack_batch(exs, m.mc);
    auto dev = make_cpu_fast_device(m.mc, 2, m.tc.precision_value());
    const std::vector<float> z(m.tr.params().size(), 0.f);
    dev->set_state(m.tr.params(), z, z);
    std::vector<std::uint8_t> am;
    dev->predict(pb, am);
    Acts<float> a;
    const ModelView<float> v{m.mc, m.tr.layout(), m.tr.params().data(), m.tc.precision_value()};
    int fast = 0, ref = 0, greedy = 0;
    for (std::size_t i = 0; i < exs.size(); ++i) {
      fast += argmax_correct(am.data() + pb.offsets[i], exs[i]);
      ref += teacher_forced_correct(a, v, exs[i]);
      greedy += greedy_correct(v, exs[i]);
    }
    std::printf("[ micro run on cpu-fast, %s ] exact on %d (fast device), %d (reference forward), %d (greedy) of %zu\n",
                prec, fast, ref, greedy, exs.size());
    const int need = std::string(prec) == "bf16" ? int(exs.size()) - 2 : int(exs.size());
    EXPECT_GE(fast, need);
    EXPECT_GE(ref, need);
    EXPECT_GE(greedy, need);
  }
}

// The device's predictions are the reference's (CpuDevice, fp32 and bf16) on every row a verdict reads
// (target >= 0) of a grid's worth of instances of the trained micro model, except where the reference's
// two largest logits lie within the fp32 order difference of each other (1e-3 of the logit: far above
// the ~1e-6 relative at which the devices' logits agree, so only true near-ties are skipped; fewer than
// half of the rows may be skipped); the rows nobody reads (the prompt's, past the last layer's keys and
// values) are marked 255. And eval_cell through the device counts what it counts on the CPU.
TEST(FastTrain, PredictsAsTheReference) {
  for (const char* prec : {"fp32", "bf16"}) {
    SCOPED_TRACE(prec);
    Micro& m = micro(prec);
    const Precision p = m.tc.precision_value();
    Rng rng(77);
    std::vector<Example> exs;
    for (int n = 1; n <= 3; ++n)
      for (int k = 2; k <= 4; ++k)
        for (int i = 0; i < 8; ++i) exs.push_back(make_example(sample_TA(rng, n, k), m.mc, 1, 1));
    const PackedBatch pb = pack_batch(exs, m.mc);
    const std::vector<float> z(m.tr.params().size(), 0.f);
    auto fast = make_cpu_fast_device(m.mc, 2, p, small_chunks());
    fast->set_state(m.tr.params(), z, z);
    std::vector<std::uint8_t> am;
    fast->predict(pb, am);
    Acts<float> a;
    const ModelView<float> v{m.mc, m.tr.layout(), m.tr.params().data(), p};
    std::int64_t checked = 0, counted = 0, differ = 0;
    for (int b = 0; b < pb.B; ++b) {
      model_forward(a, v, sequence_of(pb, b));
      for (int t = 0; t < pb.length(b); ++t) {
        const std::int64_t row = pb.offsets[std::size_t(b)] + t;
        if (pb.targets[std::size_t(row)] < 0) {
          EXPECT_EQ(am[std::size_t(row)], 255);
          continue;
        }
        ++counted;
        std::vector<float> zz(a.logits.begin() + t * m.mc.vocab, a.logits.begin() + (t + 1) * m.mc.vocab);
        const auto best = std::max_element(zz.begin(), zz.end()) - zz.begin();
        std::partial_sort(zz.begin(), zz.begin() + 2, zz.end(), std::greater<float>());
        if (zz[0] - zz[1] < 1e-3f * std::max(1.f, std::abs(zz[0]))) continue;
        ++checked;
        differ += am[std::size_t(row)] != best;
      }
    }
    EXPECT_GT(checked, counted / 2);
    EXPECT_EQ(differ, 0) << "of " << checked << " rows";
    for (int n = 1; n <= 2; ++n)
      for (int k = 2; k <= 3; ++k) {
        const CellResult r1 = eval_cell(v, n, k, 50, 9, 2, EvalMode::teacher, fast.get());
        const CellResult r2 = eval_cell(v, n, k, 50, 9, 2, EvalMode::teacher);
        EXPECT_EQ(r1.exact, r2.exact) << "TA(" << n << ", " << k << ")";
      }
  }
}

// A 500-step run of the micro model on the fast device against the reference: its log rows (mean loss of
// each 50 steps) within the reference's own spread. Two fp32 runs of one configuration that differ only
// in summation order (CpuDevice with 1 and with 2 threads: another order of the gradient's sum;
// PackedCpuDevice: other GEMM blocking) start equal and drift apart as any two fp32 trajectories do; the
// fast device is one more such order, so the bound is what separates the reference from itself: at every
// row, |fast - reference| <= 3 max over rows of that spread (the drift is not monotone: a row's spread may
// be small while the trajectories are apart), plus the per-step bound at equal weights (1e-5 relative).
// bf16 the same against the reference in bf16 (CpuDevice and PackedCpuDevice in bf16).
TEST(FastTrain, LossCurveWithinTheReferencesOwnSpread) {
  for (const char* prec : {"fp32", "bf16"}) {
    SCOPED_TRACE(prec);
    const ModelConfig mc = fixtures::micro_model();
    TrainConfig tc = fixtures::micro_train(3000, 500);
    tc.precision = prec;
    const Precision p = tc.precision_value();
    auto curve = [&](std::shared_ptr<TrainDevice> dev) {
      Trainer tr(mc, tc);
      if (dev) tr.attach_device(std::move(dev));
      std::vector<double> rows;
      double sum = 0;
      for (int s = 1; s <= 500; ++s) {
        sum += tr.step().loss;
        if (s % 50 == 0) rows.push_back(sum / 50), sum = 0;
      }
      return rows;
    };
    const auto ref = curve(make_cpu_device(mc, 2, p)), ref1 = curve(make_cpu_device(mc, 1, p)),
               packed = curve(make_packed_cpu_device(mc, p)), fast = curve(make_cpu_fast_device(mc, 2, p));
    double spread = 0, worst = 0;
    for (std::size_t i = 0; i < ref.size(); ++i)
      spread = std::max({spread, std::abs(ref1[i] - ref[i]), std::abs(packed[i] - ref[i])});
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const double d = std::abs(fast[i] - ref[i]);
      EXPECT_LE(d, 3 * spread + 1e-5 * ref[i]) << "row " << (i + 1) * 50;
      worst = std::max(worst, d);
    }
    std::printf("[ %s, 500 steps ] log rows: reference %.4f -> %.5f; fast vs reference at most %.2e, the reference's own "
                "spread %.2e (bound 3x)\n", prec, ref.front(), ref.back(), worst, spread);
    EXPECT_GT(spread, 0.0) << "the reference's orders should differ";
    EXPECT_LT(ref.back(), 0.5 * ref.front()) << "the run should learn";
  }
}

// Evaluation of one TA(100, 100) instance (20,805 tokens with these offsets) of a model whose position
// tables cover it (max_pos 110), in a child process whose address space is limited to 1 GiB: the
// reference forward holds the attention of every head as a (T, T) matrix, 1.7 GB per head here, and
// cannot run there; the fast device streams the rows (per head a few vectors of T floats) and
// predicts every row a verdict reads. Its predictions equal those of the same instance's prefix rows
// evaluated as a shorter sequence (causality: row t sees rows 0..t only), a check that the long rows'
// attention was computed on its own keys.
TEST(FastTrain, EvaluatesTA100x100InBoundedMemory) {
  ModelConfig mc;
  mc.n_layers = 1, mc.n_heads = 2, mc.d_model = 32, mc.d_head = 16, mc.d_ff = 64;
  mc.max_pos1 = 110, mc.max_pos2 = 110;
  const Layout lay = Layout::make(mc);
  const auto P = init_params<float>(mc, lay, 3);
  Rng rng(5);
  const Example ex = make_example(sample_TA(rng, 100, 100), mc, 1, 1);
  ASSERT_GT(ex.T(), 20000);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit lim{std::uint64_t(1) << 30, std::uint64_t(1) << 30};
    setrlimit(RLIMIT_AS, &lim);
    int rc = 1;
    try {
      const std::vector<float> z(P.size(), 0.f);
      auto dev = make_cpu_fast_device(mc, 2);
      dev->set_state(P, z, z);
      const PackedBatch pb = pack_batch({ex}, mc);
      std::vector<std::uint8_t> am;
      dev->predict(pb, am);
      // the same instance cut after its first 3000 rows (targets past it dropped)
      Example cut = ex;
      cut.tokens.resize(3000), cut.targets.resize(3000);
      for (auto& p : cut.pos) p.resize(std::min<std::size_t>(p.size(), 3000));
      std::vector<std::uint8_t> am2;
      dev->predict(pack_batch({cut}, mc), am2);
      bool same = true, all = true;
      for (int t = 0; t < ex.T(); ++t) all = all && (ex.targets[std::size_t(t)] < 0 || am[std::size_t(t)] < mc.vocab);
      for (int t = 0; t < 3000; ++t) same = same && am[std::size_t(t)] == am2[std::size_t(t)];
      rc = same && all ? 0 : 3;
    } catch (const std::bad_alloc&) {
      rc = 4;
    } catch (...) {
      rc = 5;
    }
    _exit(rc);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "3: wrong predictions, 4: out of memory under 1 GiB, 5: another error";
}

// The CLIs: train and evaluate run on --device cpu-fast (the grid equal to --device cpu's on a trained
// micro model), and what the device does not run is refused with a message, exit 2, nothing written.
TEST(FastCli, TrainAndEvaluate) {
  const std::string out = fixtures::scratch("cli"), bad = fixtures::scratch("cli-fire");
  const std::string args = " --train-n 2 --train-m 3 --max-pos1 6 --max-pos2 6 --d-model 32 --d-head 8 --d-ff 64 "
                           "--steps 1500 --batch 16 --lr 1e-2 --train-size 3000 --eval-every 0 -q";
  const auto t = run_cmd(std::string(TRAIN_EXE) + " --out " + out + args + " --device cpu-fast");
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(manyadd::testing::slurp(out + "/config.json").find("\"step\": 1500"), std::string::npos);
  const std::string grid = " --model " + out + " --n-max 3 --m-max 4 --samples 40 -q";
  const auto e1 = run_cmd(std::string(EVALUATE_EXE) + grid + " --device cpu-fast --csv " + out + "/fast.csv --png " + out + "/fast.png");
  const auto e2 = run_cmd(std::string(EVALUATE_EXE) + grid + " --device cpu --csv " + out + "/cpu.csv --png " + out + "/cpu.png");
  ASSERT_EQ(e1.rc, 0) << e1.err;
  ASSERT_EQ(e2.rc, 0) << e2.err;
  EXPECT_EQ(manyadd::testing::slurp(out + "/fast.csv"), manyadd::testing::slurp(out + "/cpu.csv"));
  const auto f = run_cmd(std::string(TRAIN_EXE) + " --out " + bad + args + " --pos-mode fire --device cpu-fast");
  EXPECT_EQ(f.rc, 2);
  EXPECT_NE(f.err.find("does not run pos_mode fire"), std::string::npos) << f.err;
  EXPECT_FALSE(std::filesystem::exists(bad + "/config.json"));
  const auto g = run_cmd(std::string(EVALUATE_EXE) + grid + " --device cpu-fast --mode greedy --csv " + out + "/g.csv");
  EXPECT_EQ(g.rc, 2);
  EXPECT_NE(g.err.find("teacher-forced only"), std::string::npos) << g.err;
  const auto h = run_cmd(std::string(TRAIN_EXE) + " --out " + bad + args + " --device gpu");
  EXPECT_EQ(h.rc, 2);
  EXPECT_NE(h.err.find("cpu|cpu-fast|cuda"), std::string::npos) << h.err;
  // Without oneDNN (loaded at run time: here a file that does not exist) the device is refused by name,
  // and the reference device runs as before (the binaries do not depend on the library).
  const std::string no = "MANYADD_ONEDNN=/nonexistent/libdnnl.so.2 ";
  const auto n = run_cmd(no + TRAIN_EXE + " --out " + bad + args + " --device cpu-fast");
  EXPECT_EQ(n.rc, 2);
  EXPECT_NE(n.err.find("needs oneDNN"), std::string::npos) << n.err;
  EXPECT_FALSE(std::filesystem::exists(bad + "/config.json"));
  const auto r = run_cmd(no + EVALUATE_EXE + grid + " --csv " + out + "/no.csv --png " + out + "/no.png");
  EXPECT_EQ(r.rc, 0) << r.err;
}
