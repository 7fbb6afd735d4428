// CPU training throughput of the learned transformer (learn/): one optimizer step of the CPU
// target configuration (1 layer, 4 heads, d_model 64, SA(5, 5), batch 64), with 1 and 2 threads,
// reported as tokens/s (every input token of every sequence counts), plus one sequence's
// forward+backward, and the packed pipeline (PackedCpuDevice's forward+backward, the CPU twin of the
// CUDA device) on the paper's batches, padded to their longest sequence (the layout before varlen
// packing) against varlen (the real tokens only).
// The fast CPU device against the reference (bench/results/cpu-train/README.md): BM_TrainRecipe, one
// step of the committed recipes (learn/configs/paper/fig12-d64.json, batch 400; models/cpu-sa1010-1l4h-
// d64/config.json, batch 64) on CpuDevice and on the fast device, fp32 and bf16, 1 and 2 threads, with
// the fast device's time in its oneDNN products, their rate and its fraction of the measured peak;
// BM_GemmPeak, oneDNN's products on large square matrices on every thread at once: that peak.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <vector>

#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/learn/devices/cpu_gemm.hpp"
#include "manyadd/core/safetensors.hpp"
#include "manyadd/learn/devices/batch.hpp"
#include "manyadd/learn/devices/cpu_fast.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/train.hpp"

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

// oneDNN's products (learn/include/manyadd/learn/devices/cpu_gemm.hpp, as the fast device calls them) of 1024 x 1024 matrices, one
// on each of `threads` threads at once, fp32 or bf16: the machine's measured peak.
struct GemmPeak {
  static constexpr int n = 1024, reps = 4;  // per thread and run
  bool bf16;
  int threads;
  std::vector<std::vector<float>> A, C;
  std::vector<std::vector<std::uint16_t>> A16;
  GemmPeak(bool b, int t)
      : bf16(b), threads(t), A(std::size_t(t), std::vector<float>(std::size_t(n) * n, 0.5f)), C(A),
        A16(std::size_t(t), std::vector<std::uint16_t>(std::size_t(n) * n, float_to_bf16(0.5f))) {}
  double flops() const { return 2.0 * n * double(n) * n * reps * threads; }  // per run()
  void run() {
    auto one = [&](int t) {
      const void* a = bf16 ? static_cast<const void*>(A16[std::size_t(t)].data()) : A[std::size_t(t)].data();
      for (int r = 0; r < reps; ++r)
        cpu_gemm::gemm(false, true, n, n, n, a, n, a, n, 0.f, C[std::size_t(t)].data(), n,
                       bf16 ? cpu_gemm::Elem::bf16 : cpu_gemm::Elem::f32);
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(one, t);
    one(0);
    for (auto& th : pool) th.join();
  }
  // GFLOP/s per thread over about a second (the best of three thirds), measured once per process.
  static double per_thread(bool bf16, int threads) {
    static std::map<std::pair<bool, int>, double> done;
    auto it = done.find({bf16, threads});
    if (it != done.end()) return it->second;
    GemmPeak g(bf16, threads);
    g.run();
    double best = 0;
    for (int k = 0; k < 3; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      int runs = 0;
      do g.run(), ++runs;
      while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(300));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, g.flops() * runs / s * 1e-9 / threads);
    }
    return done[{bf16, threads}] = best;
  }
};

static void BM_GemmPeak(benchmark::State& st) {
  GemmPeak g(st.range(0) != 0, int(st.range(1)));
  g.run();
  for (auto _ : st) g.run();
  const double flops = g.flops() * double(st.iterations());
  st.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsRate);
  st.counters["GFLOPs_per_thread"] = benchmark::Counter(flops * 1e-9 / g.threads, benchmark::Counter::kIsRate);
  st.SetLabel(fmt::format("oneDNN {} {} ({})", g.bf16 ? "bf16" : "fp32", g.threads, cpu_gemm::isa_name()));
}
BENCHMARK(BM_GemmPeak)->ArgNames({"bf16", "threads"})->ArgsProduct({{0, 1}, {1, 2}})->UseRealTime()->MinTime(2.0);

// range(0): recipe (0 fig12-d64, 1 the committed 1L4H d64 model's); range(1): device (0 cpu, 1 cpu-fast);
// range(2): precision (0 fp32, 1 bf16); range(3): threads. A 20,000-problem training set (the sampler's
// shapes are those of the recipes' 500,000; building it is not timed), one untimed step first.
// Counters: tokens/s (real tokens, as the progress line); on cpu-fast: gemm_share, the threads' time in
// oneDNN products over threads x wall time; gemm_GFLOPs, their multiply-adds over that time per thread;
// gemm_peak_frac, that over the measured peak per thread at the same thread count and precision
// (GemmPeak, measured in this process before the step); step_peak_frac, the products' multiply-adds over
// the whole step's wall time against the threads' peak (a lower bound of the step's share of the peak:
// attention, norms and GEGLU are not counted).
static void BM_TrainRecipe(benchmark::State& st) {
  const char* files[] = {"learn/configs/paper/fig12-d64.json", "models/cpu-sa1010-1l4h-d64/config.json"};
  std::ifstream f(std::string(MANYADD_SOURCE_DIR) + "/" + files[st.range(0)]);
  const auto j = nlohmann::json::parse(f);
  ModelConfig mc;
  TrainConfig tc;
  from_json(j.at("model"), mc);
  from_json(j.at("train"), tc);
  tc.train_size = 20000, tc.steps = 50000;
  tc.precision = st.range(2) ? "bf16" : "fp32";
  tc.threads = int(st.range(3));
  const bool fast = st.range(1) != 0;
  const double peak = fast ? GemmPeak::per_thread(st.range(2) != 0, tc.threads) : 0;
  Trainer tr(mc, tc);
  if (fast) tr.attach_device(make_cpu_fast_device(mc, tc.threads, tc.precision_value()));
  tr.step();
  cpu_gemm::count(fast);
  cpu_gemm::take_stats();
  std::int64_t tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : st) tokens += tr.step().tokens;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const cpu_gemm::Stats g = cpu_gemm::take_stats();
  cpu_gemm::count(false);
  st.counters["tokens/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsRate);
  if (fast) {
    const double rate = g.seconds > 0 ? g.flops / g.seconds * 1e-9 : 0;
    st.counters["gemm_share"] = g.seconds / (wall * tc.threads);
    st.counters["gemm_GFLOPs"] = rate;
    st.counters["gemm_peak_frac"] = rate / peak;
    st.counters["step_peak_frac"] = g.flops / wall * 1e-9 / (peak * tc.threads);
    st.counters["peak_GFLOPs"] = peak;
  }
  st.SetLabel(fmt::format("{} {} {} threads {}", st.range(0) ? "1L4H-d64-b64" : "fig12-d64-b400", fast ? "cpu-fast" : "cpu",
                          tc.precision, tc.threads));
}
BENCHMARK(BM_TrainRecipe)
    ->ArgNames({"recipe", "fast", "bf16", "threads"})
    ->ArgsProduct({{0, 1}, {0, 1}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(3.0);

BENCHMARK_MAIN();
