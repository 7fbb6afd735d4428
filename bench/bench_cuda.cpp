// cuda_forward's attention pass on the device at N ~ 2^14 .. 2^21 (n = m shapes, TA instance, offsets
// 1, 1), both kernels: tensor_core (3xTF32 MMA scores, the default) and simt (one row per thread; fp32
// and fp64). Reports the device time of the attention pass (manual time), the q/k/v preparation time
// (tensor core), tokens/s, score FLOP/s (4 heads x 2 D per causal score of a response row: the engine
// computes rows '=' .. N-1, the ones whose predictions matter) and, for the tensor-core kernel, the
// achieved fraction of two H100 SXM limits (datasheet / architecture numbers, not measured):
//   tc_frac   = tensor FLOP/s (3 products x 2 D per score) / 494.7e12 (dense TF32)
//   mufu_frac = exp2 per second (one per score) / (16 per SM per clock x 132 SMs x 1.98e9 Hz)
// --shape=N,M (before the benchmark flags) adds a row at that n, m (bench/sdpa_compare.py uses it to
// compare at the exported instance's N). Exits 0 with a message without a device.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "manyadd/cuda_engine.hpp"

namespace {
using namespace manyadd;

constexpr double kTf32Peak = 494.7e12, kMufuPeak = 16.0 * 132 * 1.98e9;

void run_shape(benchmark::State& state, int n, int m, CudaKernel kernel, bool f64) {
  const Shape shape = Shape::make(n, m);
  const Dims dims = dims_ours(shape);
  const ConstructedModel M = build_model(dims.P1, dims.P2, default_lambda(shape.N()));
  Rng rng(1);
  const auto seq = build_sequence(sample_TA(rng, n, m), shape);
  const std::int64_t N = shape.N(), first = shape.eq_index();
  const int D = qkv_plan(M).D;
  CudaOptions o;
  o.kernel = kernel;
  o.float64 = f64;
  double kernel_s = 0, prep = 0;
  for (auto _ : state) {
    const auto R = cuda_forward(M, seq, shape, 1, 1, o);
    kernel_s += R.kernel_seconds;
    prep += R.prep_seconds;
    state.SetIterationTime(R.kernel_seconds);
    benchmark::DoNotOptimize(R.pred.data());
  }
  const double it = double(state.iterations());
  const double rows = double(N - first), scores = 4.0 * (double(N) * double(N + 1) / 2 - double(first) * double(first + 1) / 2);
  state.counters["N"] = double(N);
  state.counters["n"] = n;
  state.counters["m"] = m;
  state.counters["D"] = D;
  state.counters["rows"] = rows;
  state.counters["scores"] = scores;
  state.counters["prep_s"] = prep / it;
  state.counters["tokens/s"] = benchmark::Counter(rows * it / kernel_s);
  state.counters["scoreFLOP/s"] = benchmark::Counter(2.0 * D * scores * it / kernel_s);
  if (kernel == CudaKernel::tensor_core) {
    state.counters["tc_frac"] = 3 * 2.0 * D * scores * it / kernel_s / kTf32Peak;
    state.counters["mufu_frac"] = scores * it / kernel_s / kMufuPeak;
  }
}

int largest_n(int log2N) {
  int n = 1;
  while (Shape::make(n + 1, n + 1).N() <= (std::int64_t(1) << log2N)) ++n;  // largest n = m with N <= 2^log2N
  return n;
}

// args: log2 N, kernel (0 tensor core, 1 simt), float64
void BM_cuda_forward(benchmark::State& state) {
  const int n = largest_n(int(state.range(0)));
  run_shape(state, n, n, state.range(1) ? CudaKernel::simt : CudaKernel::tensor_core, state.range(2) != 0);
}
BENCHMARK(BM_cuda_forward)
    ->ArgsProduct({{14, 15, 16, 17, 18, 19, 20, 21}, {0}, {0}})
    ->ArgsProduct({{14, 17, 19}, {1}, {0}})
    ->Args({14, 1, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (!cuda_available(&why)) {
    std::cout << "bench_cuda: skipped, no CUDA device: " << why << "\n";
    return 0;
  }
  for (int a = 1; a < argc; ++a)
    if (std::strncmp(argv[a], "--shape=", 8) == 0) {
      int n = 0, m = 0;
      if (std::sscanf(argv[a] + 8, "%d,%d", &n, &m) != 2 || n < 1 || m < 1 || n > 100000 || m > 100000) {
        std::cerr << "bench_cuda: --shape=N,M with 1 <= N, M <= 100000\n";
        return 2;
      }
      benchmark::RegisterBenchmark(("BM_cuda_shape/" + std::to_string(n) + "x" + std::to_string(m)).c_str(),
                                   [n, m](benchmark::State& s) { run_shape(s, n, m, CudaKernel::tensor_core, false); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
      for (int b = a; b + 1 < argc; ++b) argv[b] = argv[b + 1];
      --argc, --a;
    }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
