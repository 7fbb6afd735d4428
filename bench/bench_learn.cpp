// CPU training throughput of the learned transformer (learn/): one optimizer step of the CPU
// target configuration (1 layer, 4 heads, d_model 64, SA(5, 5), batch 64), with 1 and 2 threads,
// reported as tokens/s (every input token of every sequence counts), plus one sequence's
// forward+backward, and the packed pipeline (PackedCpuDevice's forward+backward, the CPU twin of the
// CUDA device) on the paper's batches, padded to their longest sequence (the layout before varlen
// packing) against varlen (the real tokens only).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <vector>

#include "manyadd/learn/batch.hpp"
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

// model_forward + model_backward of one whole batch (what PackedCpuDevice computes per step), 1 thread,
// on the paper's Figure 12 d64 model (1L4H d_model 64, d_ff 256, the authors' T5 options, position IDs up
// to 40) and batches of SA(10, 10) (train_n = train_m = 10; a 20,000-problem set: the sampler's shapes are
// those of the 500,000-problem one). range(0): 0 = padded (B, T) layout, T the batch's longest sequence,
// padding rows after the real ones (token 0, IDs 0, target -1); 1 = varlen (batch.hpp). range(1): batch.
// The same 3 batches (steps 1-3 of one run) in both layouts. tokens/s counts real tokens only.
static void BM_PackedForwardBackward(benchmark::State& st) {
  const bool varlen = st.range(0) != 0;
  ModelConfig c = target_model();
  c.max_pos1 = c.max_pos2 = 40;
  c.attn_scale = AttnScale::none, c.init = InitScheme::t5, c.tie_readout = true, c.final_norm = NormKind::layer;
  TrainConfig tc;
  tc.train_n = tc.train_m = 10, tc.train_size = 20000, tc.batch = int(st.range(1)), tc.steps = 50000;
  Trainer tr(c, tc);
  struct Padded {
    std::vector<std::uint8_t> tok;
    std::vector<std::int32_t> pos[kMaxPosLevels], tgt;
  };
  std::vector<PackedBatch> pbs;
  std::vector<Padded> pads;
  std::vector<BatchView> views;
  std::int64_t real = 0, rows = 0;
  for (int t = 1; t <= 3; ++t) pbs.push_back(tr.packed_batch(t));
  pads.resize(pbs.size());
  for (std::size_t i = 0; i < pbs.size(); ++i) {
    const PackedBatch& pb = pbs[i];
    BatchView x = batch_of(pb);
    if (!varlen) {
      Padded& p = pads[i];
      p.tok = padded_rows<std::uint8_t>(pb, pb.tokens.data(), 1, 0);
      p.tgt = padded_rows<std::int32_t>(pb, pb.targets.data(), 1, -1);
      for (int lv = 0; lv < pos_levels(c.pos_mode); ++lv) p.pos[lv] = padded_rows<std::int32_t>(pb, pb.pos[lv].data(), 1, 0);
      x.offsets = nullptr, x.tokens = p.tok.data(), x.targets = p.tgt.data();
      for (int lv = 0; lv < pos_levels(c.pos_mode); ++lv) x.pos[lv] = p.pos[lv].data();
    }
    views.push_back(x);
  }
  const ModelView<float> m = tr.view();
  std::vector<float> G(std::size_t(tr.layout().total));
  Acts<float> a;
  GradScratch<float> g;
  std::size_t i = 0;
  for (auto _ : st) {
    const BatchView& x = views[i % views.size()];
    std::fill(G.begin(), G.end(), 0.f);
    benchmark::DoNotOptimize(model_forward(a, m, x));
    model_backward(G.data(), g, a, m, x, 1.f);
    real += pbs[i % views.size()].real_tokens, rows += x.rows();
    ++i;
  }
  st.counters["tokens/s"] = benchmark::Counter(double(real), benchmark::Counter::kIsRate);
  st.counters["rows/real"] = double(rows) / double(real);
  st.SetLabel(std::string(varlen ? "varlen" : "padded") + " batch " + std::to_string(tc.batch));
}
BENCHMARK(BM_PackedForwardBackward)
    ->ArgsProduct({{0, 1}, {400}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(3.0);

BENCHMARK_MAIN();
