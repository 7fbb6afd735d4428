// Speed of the dense O(N^2) engine, dense_forward<double> and <float>, on teacher-forced TA
// sequences of about 1k, 4k and 16k tokens. Only dense_forward is timed; building the model,
// sampling and embedding happen once per benchmark, outside the loop.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "manyadd/dense.hpp"
#include "manyadd/format.hpp"
#include "manyadd/model.hpp"

namespace {

using namespace manyadd;

// Shapes (n, m) with theorem padding l = n + 1 + floor(log10 m) and N = (2m + 1)(l + 1):
//   (30, 15): l = 32,  N = 31 * 33   = 1023
//   (62, 31): l = 64,  N = 63 * 65   = 4095
//   (126, 63): l = 128, N = 127 * 129 = 16383
// Square-ish (2m + 1 ~ l + 1) so neither the operand count nor the width dominates.
template <typename T>
void BM_dense_forward(benchmark::State& state) {
  const int n = int(state.range(0)), m = int(state.range(1));
  const Shape shape = Shape::make(n, m, Padding::theorem);
  const Dims dims = dims_ours(shape);
  const ConstructedModel model = build_model(dims.P1, dims.P2, default_lambda(shape.N()));
  Rng rng(20261121);  // fixed seed: the same problem on every run
  const Problem problem = sample_TA(rng, n, m);
  const std::vector<std::uint8_t> toks = build_sequence(problem, shape);
  const Eigen::MatrixXd X0 = embed(model, toks, position_ids(shape, 1, 1));

  std::vector<std::uint8_t> pred;
  for (auto _ : state) {
    auto R = dense_forward<T>(model, X0);
    benchmark::DoNotOptimize(R.logits.data());
    pred = std::move(R.pred);
  }

  // Whether the timed passes computed the right answer (response predictions = next tokens, then
  // EOS), so a fast but wrong engine cannot pass unnoticed in the results.
  const std::int64_t N = shape.N();
  bool exact = true;
  for (std::int64_t k = shape.eq_index(); k < N; ++k) {
    const std::uint8_t want = k + 1 < N ? toks[std::size_t(k + 1)] : std::uint8_t(kDollar);
    exact = exact && pred[std::size_t(k)] == want;
  }
  state.counters["N"] = double(N);
  state.counters["d"] = double(model.d());
  state.counters["response_exact"] = exact ? 1.0 : 0.0;
  state.counters["tokens_per_s"] =
      benchmark::Counter(double(N) * double(state.iterations()), benchmark::Counter::kIsRate);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "m"})->Args({30, 15})->Args({62, 31})->Args({126, 63});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_dense_forward, double)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_dense_forward, float)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
