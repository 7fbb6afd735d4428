// CPU training throughput of the learned transformer (learn/): one optimizer step of the CPU
// target configuration (1 layer, 4 heads, d_model 64, SA(5, 5), batch 64), with 1 and 2 threads,
// reported as tokens/s (every input token of every sequence counts), plus one sequence's
// forward+backward and the teacher-forced evaluation forward.
#include <benchmark/benchmark.h>

#include "manyadd/learn/data.hpp"
#include "manyadd/learn/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;

namespace {
ModelConfig target_model() {
  ModelConfig c;  // defaults: 1 layer, 4 heads, d_model 64, d_head 16, d_ff 256
  c.max_pos1 = 20;
  c.max_pos2 = 20;
  return c;
}
}  // namespace

static void BM_TrainStep(benchmark::State& st) {
  TrainConfig tc;
  tc.train_n = 5;
  tc.train_m = 5;
  tc.train_size = 20000;
  tc.batch = 64;
  tc.threads = int(st.range(0));
  tc.steps = 1'000'000;
  Trainer tr(target_model(), tc);
  std::int64_t tokens = 0;
  for (auto _ : st) tokens += tr.step().tokens;
  st.counters["tokens/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsRate);
  st.counters["seqs/s"] = benchmark::Counter(double(st.iterations() * tc.batch), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TrainStep)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5.0);

// One TA(5, 5) sequence (N = 77 tokens), forward + backward, single thread.
static void BM_ForwardBackwardTA55(benchmark::State& st) {
  const ModelConfig c = target_model();
  const Layout lay = Layout::make(c);
  const auto P = init_params<float>(c, lay, 1);
  std::vector<float> G(P.size(), 0.f);
  Rng rng(3);
  const Example ex = make_example(sample_TA(rng, 5, 5), c, 1, 1);
  const ModelView<float> m{c, lay, P.data()};
  const BatchView x = batch_of(ex);
  Acts<float> a;
  GradScratch<float> g;
  for (auto _ : st) {
    benchmark::DoNotOptimize(model_forward(a, m, x));
    model_backward(G.data(), g, a, m, x, 1.f);
  }
  st.counters["tokens/s"] = benchmark::Counter(double(st.iterations() * ex.T()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ForwardBackwardTA55)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
