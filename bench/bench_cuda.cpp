// cuda_forward (float32 attention on the device + host FFN) at N ~ 2^14 .. 2^21 (n = m shapes, TA
// instance, offsets 1, 1). Reports the device time of the attention pass (manual time), tokens/s and
// the achieved score FLOP/s: 4 heads x 2 D FLOPs per causal score, response rows only (the engine
// computes rows '=' .. N-1, the ones whose predictions matter). Exits 0 with a message without a device.
#include <benchmark/benchmark.h>

#include <iostream>

#include "manyadd/cuda_engine.hpp"

namespace {
using namespace manyadd;

void BM_cuda_forward(benchmark::State& state) {
  const int log2N = int(state.range(0));
  const bool f64 = state.range(1) != 0;
  int n = 1;
  while (Shape::make(n + 1, n + 1).N() <= (std::int64_t(1) << log2N)) ++n;  // largest n = m with N <= 2^log2N
  const Shape shape = Shape::make(n, n);
  const Dims dims = dims_ours(shape);
  const ConstructedModel M = build_model(dims.P1, dims.P2, default_lambda(shape.N()));
  Rng rng(1);
  const auto seq = build_sequence(sample_TA(rng, n, n), shape);
  const std::int64_t N = shape.N(), first = shape.eq_index();
  int D = 0;
  for (const auto& h : M.heads) D = std::max<int>(D, int(h.Q.rows()));
  double kernel = 0;
  for (auto _ : state) {
    const auto R = cuda_forward(M, seq, shape, 1, 1, f64, false);
    kernel += R.kernel_seconds;
    state.SetIterationTime(R.kernel_seconds);
    benchmark::DoNotOptimize(R.pred.data());
  }
  const double rows = double(N - first), scores = 4.0 * (double(N) * (N + 1) / 2 - double(first) * (first + 1) / 2);
  state.counters["N"] = double(N);
  state.counters["n=m"] = n;
  state.counters["D"] = D;
  state.counters["tokens/s"] = benchmark::Counter(rows * double(state.iterations()) / kernel);
  state.counters["scoreFLOP/s"] = benchmark::Counter(2.0 * D * scores * double(state.iterations()) / kernel);
}
BENCHMARK(BM_cuda_forward)
    ->ArgsProduct({{14, 15, 16, 17, 18, 19, 20, 21}, {0}})
    ->Args({14, 1})
    ->Args({17, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (!cuda_available(&why)) {
    std::cout << "bench_cuda: skipped, no CUDA device: " << why << "\n";
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
