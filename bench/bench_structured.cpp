// Structured O(N) engine and certificate: tokens/s of one structured pass (limit mode) at growing N,
// the certificate's time per offset pair, and the dense engine at the same small N in the same run
// (the ratio is what to quote; absolute numbers depend on the machine).
#include <benchmark/benchmark.h>

#include "manyadd/certificate.hpp"
#include "manyadd/dense.hpp"
#include "manyadd/structured.hpp"

using namespace manyadd;

namespace {
struct Setup {
  Shape shape;
  ConstructedModel M;
  CompiledFFN F;
  std::vector<std::uint8_t> seq;
  explicit Setup(int nm)
      : shape(Shape::make(nm, nm)),
        M(build_model(dims_ours(shape).P1, dims_ours(shape).P2, default_lambda(shape.N()))),
        F(CompiledFFN::build(M)) {
    Rng rng(1);
    seq = build_sequence(sample_TA(rng, nm, nm), shape);
  }
};
}  // namespace

// n = m = arg: N = (2m+1)(l+1) ~ 2 n^2 (n = m = 1000: the headline's 2,011,005 tokens)
static void BM_StructuredPass(benchmark::State& st) {
  Setup s(int(st.range(0)));
  for (auto _ : st) {
    auto R = structured_forward(s.M, s.F, s.seq, s.shape, 1, 1);
    benchmark::DoNotOptimize(R.pred.data());
  }
  st.counters["N"] = double(s.shape.N());
  st.counters["tokens/s"] = benchmark::Counter(double(s.shape.N()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_StructuredPass)->Arg(70)->Arg(224)->Arg(707)->Arg(1000)->Unit(benchmark::kMillisecond);

static void BM_DensePassSameN(benchmark::State& st) {
  Setup s(int(st.range(0)));
  const auto X0 = embed(s.M, s.seq, position_ids(s.shape, 1, 1));
  for (auto _ : st) {
    auto R = dense_forward<double>(s.M, X0);
    benchmark::DoNotOptimize(R.pred.data());
  }
  st.counters["N"] = double(s.shape.N());
  st.counters["tokens/s"] = benchmark::Counter(double(s.shape.N()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DensePassSameN)->Arg(44)->Unit(benchmark::kMillisecond);
static void BM_StructuredPassSmall(benchmark::State& st) { BM_StructuredPass(st); }
BENCHMARK(BM_StructuredPassSmall)->Arg(44)->Unit(benchmark::kMillisecond);

// One offset pair of the certificate at n = m = arg, tables already built (as in --offsets all).
static void BM_CertificateRun(benchmark::State& st) {
  Setup s(int(st.range(0)));
  Certifier C(s.M, s.shape, CertOptions{true, false});
  for (auto _ : st) benchmark::DoNotOptimize(C.run(1, 1).proven);
  st.counters["N"] = double(s.shape.N());
}
BENCHMARK(BM_CertificateRun)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
