// The training kernels' rates on the device: (1) a large square GEMM through kernels::Blas (bf16
// operands, fp32 accumulation; bf16 and fp32 outputs; and fp32 SGEMM), whose TFLOP/s is the tensor-core
// rate against which the trainer's "fraction of the floor" (6 x parameters x tokens FLOP) is measured;
// (2) causal attention at the paper's training shape, T = 250 (SA(10, 10) sequences are <= 252 tokens),
// batch B = 400, for the (heads, d_head) of the paper's configurations, forward and backward: the
// CUDA-core flash kernels (train.hpp attention_forward/backward: bf16 and fp32 I/O) and the tensor-core
// path (attention_gemm.hpp: batched GEMMs + row kernels), and the fused tensor-core flash kernels
// (flash_tc.hpp: forward; dq, then dk/dv), also on a varlen batch. Device time by CUDA events (manual time).
// attnFLOP/s counts the same FLOPs for all, the CUDA-core flash kernels' executed ones: forward 4 HS per
// causal (query, key) pair, backward 16 HS (pass 1: q.k, dout.v, a and b; pass 2: k.q, v.dout, dk and dv),
// sum_b NH T_b (T_b + 1) / 2 pairs; compare the ms. The tensor-core flash benchmark also prints
// "peak%": its own MMA work per causal pair (forward 2 products, 4 HS FLOPs; backward 7 products, 14 HS:
// q k^T and dout v^T in both backward kernels, dS k, bf16(P)^T dout, dS^T q), i.e. the attention FLOPs
// it must execute, over the time, as a percentage of the H100/H200 dense bf16 tensor-core peak, 989
// TFLOP/s (the masked parts of diagonal tiles are not counted). Prints "skipped" and exits 0 without a
// device (or CUDA).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

#include "manyadd/kernels/device.hpp"
#if MANYADD_WITH_CUDA
#include "manyadd/kernels/attention_gemm.hpp"
#include "manyadd/kernels/blas.hpp"
#include "manyadd/kernels/flash_tc.hpp"
#include "manyadd/kernels/train.hpp"
#endif

namespace {
using namespace manyadd;

#if MANYADD_WITH_CUDA
using kernels::bf16;

// Deterministic values in [-0.5, 0.5) (the rates do not depend on them; no NaN or inf).
template <class T>
std::vector<T> values(std::size_t n, std::uint32_t seed) {
  std::vector<T> v(n);
  std::uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    const float f = float(s >> 8) * 0x1p-24f - 0.5f;
    if constexpr (std::is_same_v<T, float>) {
      x = f;
    } else {
      std::uint32_t b;
      std::memcpy(&b, &f, 4);
      x = bf16{std::uint16_t(b >> 16)};  // truncation is fine for timing data
    }
  }
  return v;
}
template <class T>
kernels::DeviceBuffer<T> device_values(std::size_t n, std::uint32_t seed) {
  kernels::DeviceBuffer<T> d(n);
  const auto h = values<T>(n, seed);
  d.upload(h.data(), n);
  return d;
}

// range(0) N (square N x N x N), range(1) output: 0 bf16, 1 fp32 (both bf16 operands), 2 fp32 SGEMM.
void BM_Gemm(benchmark::State& st) {
  const int N = int(st.range(0)), kind = int(st.range(1));
  const std::size_t n = std::size_t(N) * N;
  kernels::Blas blas;
  kernels::DeviceTimer timer;
  double flop = 0;
  if (kind == 2) {
    auto a = device_values<float>(n, 1), b = device_values<float>(n, 2);
    kernels::DeviceBuffer<float> c(n);
    blas.linear_forward(c, a, b, N, N, N);  // warm-up: heuristics, workspace
    for (auto _ : st) {
      timer.start();
      blas.linear_forward(c, a, b, N, N, N);
      st.SetIterationTime(timer.stop_seconds());
      flop += 2.0 * N * double(N) * N;
    }
  } else {
    auto a = device_values<bf16>(n, 1), b = device_values<bf16>(n, 2);
    kernels::DeviceBuffer<bf16> c16(n);
    kernels::DeviceBuffer<float> c32(n);
    auto run = [&] {
      if (kind == 0)
        blas.linear_forward(c16.get(), a.get(), b.get(), N, N, N);
      else
        blas.linear_forward(c32.get(), a.get(), b.get(), N, N, N);
    };
    run();
    for (auto _ : st) {
      timer.start();
      run();
      st.SetIterationTime(timer.stop_seconds());
      flop += 2.0 * N * double(N) * N;
    }
  }
  st.SetLabel(kind == 0 ? "bf16 x bf16 -> bf16 (fp32 accumulate)"
                        : kind == 1 ? "bf16 x bf16 -> fp32" : "fp32 SGEMM (no TF32)");
  st.counters["TFLOP/s"] = benchmark::Counter(flop * 1e-12, benchmark::Counter::kIsRate);
}

// range(0) NH, range(1) HS, range(2) 0 bf16 / 1 fp32, range(3) 0 forward / 1 backward; B = 400 sequences
// of T = 250 rows each (the flash kernels' varlen layout with equal lengths: the shape BM_AttentionGemm
// takes).
void BM_Attention(benchmark::State& st) {
  const int NH = int(st.range(0)), HS = int(st.range(1)), B = 400, T = 250, R = B * T;
  const bool fp32 = st.range(2) != 0, backward = st.range(3) != 0;
  const std::size_t n = std::size_t(B) * T * NH * HS, nl = std::size_t(B) * NH * T;
  const float scale = 1.f;  // the authors' unscaled T5 attention (the time does not depend on it)
  kernels::DeviceBuffer<float> lse(nl), dsum(nl);
  std::vector<std::int32_t> hoff(std::size_t(B) + 1);
  for (int b = 0; b <= B; ++b) hoff[std::size_t(b)] = b * T;
  kernels::DeviceBuffer<std::int32_t> off(hoff.size());
  off.upload(hoff.data(), hoff.size());
  kernels::DeviceTimer timer;
  auto time_it = [&](auto&& fwd, auto&& bwd) {
    fwd();  // lse for the backward; warm-up
    if (backward) bwd();
    for (auto _ : st) {
      timer.start();
      backward ? bwd() : fwd();
      st.SetIterationTime(timer.stop_seconds());
    }
  };
  if (fp32) {
    auto x = device_values<float>(n, 3);  // q = k = v = dout: the time does not depend on the values
    kernels::DeviceBuffer<float> out(n), dq(n), dk(n), dv(n);
    time_it([&] { kernels::train::attention_forward(out, lse, x, x, x, off, B, R, NH, HS, scale); },
            [&] { kernels::train::attention_backward(dq, dk, dv, dsum, x, lse, x, x, x, off, B, R, NH, HS, scale); });
  } else {
    auto x = device_values<bf16>(n, 3);
    kernels::DeviceBuffer<bf16> out(n), dq(n), dk(n), dv(n);
    time_it([&] { kernels::train::attention_forward(out.get(), lse, x.get(), x.get(), x.get(), off, B, R, NH, HS, scale); },
            [&] {
              kernels::train::attention_backward(dq.get(), dk.get(), dv.get(), dsum, x.get(), lse, x.get(), x.get(),
                                                 x.get(), off, B, R, NH, HS, scale);
            });
  }
  const double pairs = double(B) * NH * T * (T + 1) / 2;
  st.SetLabel(std::string(fp32 ? "flash fp32" : "flash bf16") + (backward ? " backward" : " forward") + " NH " +
              std::to_string(NH) + " HS " + std::to_string(HS));
  st.counters["attnFLOP/s"] = benchmark::Counter((backward ? 16.0 : 4.0) * HS * pairs * double(st.iterations()),
                                                 benchmark::Counter::kIsRate);
}

// The tensor-core path. range(0) NH, range(1) HS, range(2) 0 forward / 1 backward; B = 400, T = 250.
void BM_AttentionGemm(benchmark::State& st) {
  const int NH = int(st.range(0)), HS = int(st.range(1)), B = 400, T = 250;
  const bool backward = st.range(2) != 0;
  const std::size_t n = std::size_t(B) * T * NH * HS, nl = std::size_t(B) * NH * T,
                    ns = kernels::attention_gemm_scores_size(B, T, NH);
  const float scale = 1.f;
  kernels::Blas blas;
  kernels::DeviceTimer timer;
  auto x = device_values<bf16>(n, 3);
  kernels::DeviceBuffer<bf16> out(n), dq(n), dk(n), dv(n), P(ns), dS(ns);
  kernels::DeviceBuffer<float> lse(nl), S(ns), dP(ns);
  auto fwd = [&] { kernels::attention_gemm_forward(blas, out, lse, S, P, x, x, x, B, T, NH, HS, scale); };
  auto bwd = [&] { kernels::attention_gemm_backward(blas, dq, dk, dv, dP, dS, x, lse, S, P, x, x, x, B, T, NH, HS, scale); };
  fwd();
  if (backward) bwd();
  for (auto _ : st) {
    timer.start();
    backward ? bwd() : fwd();
    st.SetIterationTime(timer.stop_seconds());
  }
  const double pairs = double(B) * NH * T * (T + 1) / 2;
  st.SetLabel(std::string("tensor-core bf16") + (backward ? " backward" : " forward") + " NH " + std::to_string(NH) +
              " HS " + std::to_string(HS));
  st.counters["attnFLOP/s"] = benchmark::Counter((backward ? 16.0 : 4.0) * HS * pairs * double(st.iterations()),
                                                 benchmark::Counter::kIsRate);
}

// The fused tensor-core flash kernels. range(0) NH, range(1) HS, range(2) 0 forward / 1 backward, range(3)
// 0: B = 400 sequences of T = 250 (the shape of the benchmarks above), 1: varlen, 400 sequences of lengths
// 2 + (37 b mod 251) (2 .. 252, mean 127: SA(10, 10) batches of 400 hold 48,147 rows, mean 120, longest 252).
void BM_AttentionFlashTc(benchmark::State& st) {
  const int NH = int(st.range(0)), HS = int(st.range(1)), B = 400;
  const bool backward = st.range(2) != 0, varlen = st.range(3) != 0;
  std::vector<std::int32_t> hoff(1, 0);
  double pairs = 0;
  for (int b = 0; b < B; ++b) {
    const int T = varlen ? 2 + (37 * b) % 251 : 250;
    hoff.push_back(hoff.back() + T);
    pairs += double(NH) * T * (T + 1) / 2;
  }
  const int R = hoff.back();
  const std::size_t n = std::size_t(R) * NH * HS, nl = std::size_t(R) * NH;
  kernels::DeviceBuffer<std::int32_t> off(hoff.size());
  off.upload(hoff.data(), hoff.size());
  auto x = device_values<bf16>(n, 3);
  kernels::DeviceBuffer<bf16> out(n), dq(n), dk(n), dv(n);
  kernels::DeviceBuffer<float> lse(nl), dsum(nl);
  const float scale = 1.f;
  kernels::DeviceTimer timer;
  auto fwd = [&] { kernels::flash::attention_forward(out, lse, x, x, x, off, B, R, NH, HS, scale); };
  auto bwd = [&] { kernels::flash::attention_backward(dq, dk, dv, dsum, x, out, lse, x, x, x, off, B, R, NH, HS, scale); };
  fwd();  // lse and out for the backward; warm-up (and the shared-memory opt-in)
  if (backward) bwd();
  for (auto _ : st) {
    timer.start();
    backward ? bwd() : fwd();
    st.SetIterationTime(timer.stop_seconds());
  }
  const double it = double(st.iterations());
  st.SetLabel(std::string("tensor-core flash bf16") + (backward ? " backward" : " forward") + (varlen ? " varlen" : "") +
              " NH " + std::to_string(NH) + " HS " + std::to_string(HS));
  st.counters["attnFLOP/s"] = benchmark::Counter((backward ? 16.0 : 4.0) * HS * pairs * it, benchmark::Counter::kIsRate);
  // the MMA work per pair over the time, against 989 TFLOP/s, in percent (kIsRate divides by the time)
  st.counters["peak%"] =
      benchmark::Counter((backward ? 14.0 : 4.0) * HS * pairs * it * 100.0 / 989e12, benchmark::Counter::kIsRate);
}
#endif

}  // namespace

#if MANYADD_WITH_CUDA
BENCHMARK(BM_Gemm)->ArgsProduct({{4096, 8192}, {0, 1, 2}})->UseManualTime()->Unit(benchmark::kMillisecond);
// (NH, HS) of the paper's configurations: figure 12 (1L4H, d_model 64 .. 512: HS 16 .. 128), figure 1
// (8 x 128), figure 10 at d_model 1024 (4 x 256, 2 x 512).
BENCHMARK(BM_Attention)
    ->ArgsProduct({{4}, {16, 32, 64, 128}, {0}, {0, 1}})
    ->ArgsProduct({{8}, {128}, {0}, {0, 1}})
    ->ArgsProduct({{4}, {256}, {0, 1}, {0, 1}})
    ->ArgsProduct({{2}, {512}, {0, 1}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionGemm)
    ->ArgsProduct({{4}, {16, 32, 64, 128, 256}, {0, 1}})
    ->ArgsProduct({{8}, {128}, {0, 1}})
    ->ArgsProduct({{2}, {512}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
// The paper's (NH, HS) as above, uniform and varlen.
BENCHMARK(BM_AttentionFlashTc)
    ->ArgsProduct({{4}, {16, 32, 64, 128, 256}, {0, 1}, {0, 1}})
    ->ArgsProduct({{8}, {128}, {0, 1}, {0, 1}})
    ->ArgsProduct({{2}, {512}, {0, 1}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
#endif

int main(int argc, char** argv) {
  std::string why;
  if (!kernels::device_available(&why)) {
    std::cout << "bench_cuda_kernels: skipped, no CUDA device: " << why << "\n";
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
