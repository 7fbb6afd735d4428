// CUDA training throughput of the learned transformer: one optimizer step (host sampling + packing,
// upload, forward, backward, norm, AdamW) of the three GPU model shapes (below) on SA(10, 10) with batch 400, as
// tokens/s (every real input token of every sequence counts; padding does not). Skips without a
// device. Compare with bench/torch_twin.py on the same machine, one run after the other.
#include <benchmark/benchmark.h>

#include <string>

#include "manyadd/learn/cuda_device.hpp"
#include "manyadd/learn/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;

// range(0) layers, range(1) heads, range(2) d_model (d_head = d_model / heads, d_ff = 4 d_model).
static void BM_CudaTrainStep(benchmark::State& st) {
  std::string why;
  if (!cuda_training_available(&why)) {
    st.SkipWithError(("no CUDA device: " + why).c_str());
    return;
  }
  ModelConfig mc;
  mc.n_layers = int(st.range(0));
  mc.n_heads = int(st.range(1));
  mc.d_model = int(st.range(2));
  mc.d_head = mc.d_model / mc.n_heads;
  mc.d_ff = 4 * mc.d_model;
  mc.max_pos1 = 40;
  mc.max_pos2 = 40;
  TrainConfig tc;
  tc.train_n = 10;
  tc.train_m = 10;
  tc.train_size = 20000;
  tc.batch = 400;
  tc.steps = 1'000'000;
  Trainer tr(mc, tc);
  tr.attach_device(make_cuda_device(mc));
  tr.step();  // warm-up: allocations, cuBLAS heuristics
  std::int64_t tokens = 0;
  for (auto _ : st) tokens += tr.step().tokens;  // step() returns after the device synchronized
  st.counters["tokens/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CudaTrainStep)
    ->Args({1, 4, 256})
    ->Args({1, 4, 512})
    ->Args({2, 2, 256})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(5.0);

BENCHMARK_MAIN();
