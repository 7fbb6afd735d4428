// CUDA training throughput of the learned transformer at the paper's recipe: optimizer steps (host
// sampling + packing, asynchronous upload, forward, backward, norm, AdamW; the statistics read back once
// per 10 steps, as run_training does once per log line) in fp32 and in bf16, as tokens/s (every real
// input token of every sequence counts: the rows the device computes, batches being varlen; the PyTorch
// twin counts the same tokens of its padded batches), for the authors' architecture (T5 options,
// learn/configs/paper) at batch 400 on SA(10, 10) (bf16 steps run attention on the fused tensor-core kernels,
// kernels/flash_tc.hpp; fp32 steps on the CUDA-core flash kernels):
//   1L4H d_model 256 (Figure 12), 1L4H d_model 1024 and 2L2H d_model 1024 (d_head 512) (Figure 10).
// Also the achieved fraction of the FLOP floor: 6 x parameters x tokens/s divided by the bf16 tensor-core
// rate measured here with a large cuBLAS GEMM (8192^3, bf16 in, fp32 accumulate and out) -- the time
// the step's matrix products would take at that rate if they were all it did (the counter floor_frac;
// the same rate for both precisions, so fp32 shows how far SGEMM is from tensor cores).
//
//   bench_cuda_train [--run DIR] [Google Benchmark flags, e.g. --benchmark_out=FILE --benchmark_out_format=json]
// --run DIR: instead of the three shapes, the model and train settings of a `train` output directory,
// from its checkpoint on: the batches of steps k+1, k+2, ... of that run, which `dump_batches --run DIR
// --from k+1` writes for bench/torch_twin.py (the same batches, the same weights). The JSON file is what
// `torch_twin.py bench --ours FILE` reads to print the ratio ours / PyTorch.
// Without a CUDA device it prints why and exits 0 (skipped).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "manyadd/core/files.hpp"
#include "manyadd/kernels/device.hpp"
#include "manyadd/learn/devices/cuda_device.hpp"
#include "manyadd/learn/runs/train.hpp"
#if MANYADD_WITH_CUDA
#include "manyadd/kernels/blas.hpp"
#endif

using namespace manyadd;
using namespace manyadd::learn;

namespace {

struct TrainShape {
  std::string name;
  ModelConfig mc;
  TrainConfig tc;
  std::string run;  // a run directory to start from (its checkpoint), or empty: fresh initialization
};

// The paper's recipe (learn/configs/paper/*.json): T5 options, Table 2's train settings.
TrainShape paper_shape(const std::string& name, int layers, int heads, int d_model, int d_ff) {
  TrainShape s;
  s.name = name;
  ModelConfig& c = s.mc;
  c.n_layers = layers, c.n_heads = heads, c.d_model = d_model, c.d_head = d_model / heads, c.d_ff = d_ff;
  c.max_pos1 = c.max_pos2 = 40;
  c.attn_scale = AttnScale::none, c.init = InitScheme::t5, c.tie_readout = true, c.final_norm = NormKind::layer;
  TrainConfig& t = s.tc;
  t.train_n = t.train_m = 10, t.train_size = 500'000, t.steps = 50'000, t.batch = 400, t.lr = 3e-5;
  t.warmup_from_zero = true, t.eval_every = 0;
  return s;
}

TrainShape run_shape(const std::string& dir) {
  const nlohmann::json cfg = read_json_file(dir + "/config.json");
  TrainShape s;
  s.name = dir;
  from_json(cfg.at("model"), s.mc);
  from_json(cfg.at("train"), s.tc);
  s.run = dir;
  return s;
}

double g_bf16_flops = 0;  // measured tensor-core rate, FLOP/s

#if MANYADD_WITH_CUDA
// 2 n^3 FLOP per product, bf16 operands, fp32 accumulation and output, the best of 3 timings of 10.
double measure_bf16_gemm_rate(int n) {
  kernels::Blas blas;
  kernels::DeviceBuffer<kernels::bf16> a(std::size_t(n) * n), b(std::size_t(n) * n);
  kernels::DeviceBuffer<float> c(std::size_t(n) * n);
  // Values of either sign and a spread of magnitudes (all-zero operands draw less power and would run
  // at higher clocks than training does): bf16 bits of exponent 120..127 and random mantissas.
  std::vector<kernels::bf16> h(std::size_t(n) * n);
  std::uint32_t x = 12345;
  for (auto& v : h) {
    x = x * 1664525u + 1013904223u;
    v.bits = std::uint16_t(((x >> 16) & 0x807fu) | ((120u + ((x >> 8) & 7u)) << 7));
  }
  a.upload(h.data(), h.size()), b.upload(h.data(), h.size());
  blas.linear_forward(c.get(), a.get(), b.get(), n, n, n);  // warm-up: heuristics, clocks
  kernels::DeviceTimer timer;
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    timer.start();
    for (int i = 0; i < 10; ++i) blas.linear_forward(c.get(), a.get(), b.get(), n, n, n);
    best = std::min(best, timer.stop_seconds() / 10);
  }
  return 2.0 * double(n) * n * n / best;
}
#endif

void train_steps(benchmark::State& st, const TrainShape& shape, Precision prec) {
  ModelConfig mc = shape.mc;
  TrainConfig tc = shape.tc;
  tc.precision = precision_name(prec);
  Trainer tr(mc, tc);
  if (!shape.run.empty()) tr.load_checkpoint(shape.run, /*allow_precision_change=*/true);
  tr.attach_device(make_cuda_device(mc, prec));
  for (int s = 0; s < 3; ++s) tr.step();  // warm-up: allocations, cuBLAS heuristics
  const double params = double(tr.layout().total);
  std::int64_t tokens = 0;
  for (auto _ : st) {  // one iteration: 10 steps and their statistics, one host synchronization
    for (int s = 0; s < 10; ++s) tokens += tr.step_async().tokens;
    benchmark::DoNotOptimize(tr.finish_steps());
  }
  st.counters["tokens/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsRate);
  st.counters["floor_frac"] = benchmark::Counter(6.0 * params * double(tokens) / g_bf16_flops, benchmark::Counter::kIsRate);
  st.counters["params"] = params;
  st.counters["bf16_gemm_tflops"] = g_bf16_flops * 1e-12;
  st.SetLabel(shape.name + " " + tc.precision + " first step " + std::to_string(tr.steps_done() + 1));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::vector<TrainShape> shapes;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--run") == 0 && i + 1 < argc) {
      shapes.push_back(run_shape(argv[++i]));
      continue;
    }
    std::fprintf(stderr, "bench_cuda_train: unknown argument '%s' (--run DIR, or Google Benchmark's flags)\n", argv[i]);
    return 2;
  }
  std::string why;
  if (!cuda_training_available(&why)) {
    std::printf("bench_cuda_train: skipped (no CUDA device: %s)\n", why.c_str());
    return 0;
  }
#if MANYADD_WITH_CUDA
  g_bf16_flops = measure_bf16_gemm_rate(8192);
  std::printf("bench_cuda_train: bf16 tensor-core GEMM rate (cuBLAS, 8192^3, fp32 accumulation) %.1f TFLOP/s\n",
              g_bf16_flops * 1e-12);
#endif
  if (shapes.empty())
    shapes = {paper_shape("1L4H_d256", 1, 4, 256, 1024), paper_shape("1L4H_d1024", 1, 4, 1024, 2048),
              paper_shape("2L2H_d1024", 2, 2, 1024, 2048)};
  for (const TrainShape& s : shapes)
    for (Precision p : {Precision::fp32, Precision::bf16}) {
      const std::string name = "cuda_train/" + s.name + "/" + precision_name(p);
      benchmark::RegisterBenchmark(name.c_str(), [s, p](benchmark::State& st) { train_steps(st, s, p); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MinTime(5.0);
    }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
