// CUDA training device: the no-device path on every machine (library and CLIs exit 2 with the reason);
// on a GPU, whole steps against the packed CPU twin, determinism and resume. Without a device every
// GPU test is a skip with the reason, never a pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include "test_util.hpp"
#include "cuda_train_test_util.hpp"
#include "learn_fixtures.hpp"
#include "manyadd/learn/cuda_device.hpp"
#include "manyadd/learn/batch.hpp"
#include "manyadd/learn/eval.hpp"
#include "manyadd/learn/io.hpp"
#include "manyadd/learn/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;

namespace {

using fixtures::scratch;
using manyadd::testing::CmdResult;
using manyadd::testing::run_cmd;
ModelConfig model(int layers, int heads, int d_model) {
  ModelConfig c;
  c.n_layers = layers;
  c.n_heads = heads;
  c.d_model = d_model;
  c.d_head = d_model / heads;
  c.d_ff = 2 * d_model;
  c.max_pos1 = 8;
  c.max_pos2 = 8;
  return c;
}
TrainConfig train_cfg() {
  TrainConfig t;
  t.train_n = 3;
  t.train_m = 4;
  t.train_size = 4000;
  t.steps = 200;
  t.batch = 24;
  t.lr = 3e-3;
  t.eval_every = 0;
  t.checkpoint_every = 0;
  return t;
}
}  // namespace

TEST(CudaTrainNoDevice, LibraryRefusesWithTheReason) {
  std::string why;
  if (cuda_training_available(&why)) GTEST_SKIP() << "a CUDA device is present; the no-device path is not reachable";
  try {
    make_cuda_device(model(1, 4, 32));
    FAIL() << "make_cuda_device returned without a device";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("no CUDA device: ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(CudaTrainNoDevice, CliExitsTwoAndWritesNothing) {
  std::string why;
  if (cuda_training_available(&why)) GTEST_SKIP() << "a CUDA device is present; the no-device path is not reachable";
  const std::string out = scratch("cli");
  const std::string args = " --out " + out + " --train-n 2 --train-m 2 --max-pos1 6 --max-pos2 6 --steps 3 --batch 4 "
                           "--d-model 16 --d-head 4 --d-ff 32 --train-size 50";
  const CmdResult t = run_cmd(std::string(TRAIN_EXE) + args + " --device cuda");
  EXPECT_EQ(t.rc, 2);
  EXPECT_NE(t.err.find("no CUDA device: "), std::string::npos) << t.err;
  EXPECT_FALSE(std::filesystem::exists(out)) << "nothing may be written on a refused run";
  const CmdResult bad = run_cmd(std::string(TRAIN_EXE) + args + " --device tpu");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("--device 'tpu' unknown"), std::string::npos) << bad.err;
  // evaluate: a real (CPU-trained) model directory, then --device cuda.
  ASSERT_EQ(run_cmd(std::string(TRAIN_EXE) + args + " --eval-every 0").rc, 0);
  const CmdResult e = run_cmd(std::string(EVALUATE_EXE) + " --model " + out + " --n-max 2 --m-max 2 --samples 2 --device cuda");
  EXPECT_EQ(e.rc, 2);
  EXPECT_NE(e.err.find("no CUDA device: "), std::string::npos) << e.err;
  std::filesystem::remove_all(out);
}

// One step from the same state on the GPU and on the packed CPU twin. Same batch, same weights:
// loss and gradient norm differ only by fp32 summation order (cuBLAS GEMM blocking, warp-tree sums,
// expf/tanhf within 2 ulp): 1e-5 relative for the loss, 1e-4 for the norm (the argument of
// test_learn_batch's DevicePath test). Weights after the step: within 1% of a full step (lr 3e-3).
TEST(CudaTrainGpu, StepMatchesPackedCpuTwin) {
  REQUIRE_DEVICE();
  for (auto mc : {model(1, 4, 64), model(2, 2, 64), model(1, 4, 256)}) {
    SCOPED_TRACE("layers " + std::to_string(mc.n_layers) + " d_model " + std::to_string(mc.d_model));
    const TrainConfig tc = train_cfg();
    Trainer warm(mc, tc);
    for (int s = 0; s < 10; ++s) warm.step();  // nonzero moments, a state that tells batches apart
    const std::string dir = scratch("step");
    warm.save(dir);
    Trainer cpu(mc, tc), gpu(mc, tc);
    cpu.load_checkpoint(dir), gpu.load_checkpoint(dir);
    cpu.attach_device(make_packed_cpu_device(mc));
    gpu.attach_device(make_cuda_device(mc));
    const StepStats a = cpu.step(), b = gpu.step();
    EXPECT_NEAR(b.loss, a.loss, 1e-5 * a.loss);
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-4 * a.grad_norm);
    double worst = 0;
    for (std::size_t i = 0; i < cpu.params().size(); ++i)
      worst = std::max(worst, double(std::abs(cpu.params()[i] - gpu.params()[i])));
    EXPECT_LT(worst, 0.01 * tc.lr);
    std::filesystem::remove_all(dir);
  }
}

// Every gradient tensor of one batch against the packed CPU twin (fp32 both), for 1 and 2 layers and
// every head-width class the kernels instantiate. Each gradient entry is a sum over up to R = B T rows
// of products that themselves passed ~10 fp32 reductions of length <= max(d_model, d_ff, T); in
// different orders on the two sides: errors ~1e-6 of the tensor's largest entry are expected, 1e-4 is
// the bound (a wrong pass, mask or index gives O(1)).
TEST(CudaTrainGpu, EveryGradientMatchesPackedCpuTwin) {
  REQUIRE_DEVICE();
  for (auto mc : {model(1, 4, 32), model(2, 2, 128), model(1, 4, 384), model(1, 4, 512)}) {
    SCOPED_TRACE("layers " + std::to_string(mc.n_layers) + " d_model " + std::to_string(mc.d_model));
    const TrainConfig tc = train_cfg();
    Trainer tr(mc, tc);
    const PackedBatch pb = tr.packed_batch(1);
    const Layout lay = Layout::make(mc);
    auto cpu = make_packed_cpu_device(mc);
    auto gpu = make_cuda_device(mc);
    const std::vector<float> zeros(tr.params().size(), 0.f);
    cpu->set_state(tr.params(), zeros, zeros);
    gpu->set_state(tr.params(), zeros, zeros);
    std::vector<float> gc, gg;
    const float scale = 1.f / float(pb.counted_targets);
    const double lc = cpu->gradient(pb, scale, gc), lg = gpu->gradient(pb, scale, gg);
    EXPECT_NEAR(lg, lc, 1e-5 * lc);
    for (const auto& ts : lay.tensors) {
      double m = 0, e = 0;
      for (std::int64_t i = ts.offset; i < ts.offset + ts.size; ++i) {
        m = std::max(m, double(std::abs(gc[std::size_t(i)])));
        e = std::max(e, double(std::abs(gg[std::size_t(i)] - gc[std::size_t(i)])));
      }
      EXPECT_LE(e, 1e-4 * m) << ts.name << ": max |gpu - cpu| " << e << ", max |cpu| " << m;
    }
  }
}

// Batched teacher-forced evaluation on the GPU gives the CPU evaluation's counts. The model trained here
// for 300 steps scores 0 exact on every cell (measured on the CPU), so its counts alone would pass with
// any predictions; the committed trained model (models/cpu-sa1010-1l4h-d64, 100% teacher-forced on these
// cells on the CPU) makes the counts meaningful, and row by row the GPU's argmax must equal the packed
// CPU twin's on every row whose top-2 logit gap exceeds fp32 order noise (mixed lengths: padding).
TEST(CudaTrainGpu, EvaluationMatchesCpu) {
  REQUIRE_DEVICE();
  {
    const ModelConfig mc = model(1, 4, 64);
    TrainConfig tc = train_cfg();
    tc.steps = 300;
    Trainer tr(mc, tc);
    tr.attach_device(make_cuda_device(mc));
    for (int s = 0; s < 300; ++s) tr.step();
    const auto& P = tr.params();
    auto gpu = make_cuda_device(mc);
    const std::vector<float> zeros(P.size(), 0.f);
    gpu->set_state(P, zeros, zeros);
    const Layout lay = Layout::make(mc);
    for (auto [n, m] : {std::pair{2, 3}, std::pair{3, 4}, std::pair{4, 6}}) {
      const ModelView<float> model{mc, lay, P.data()};
      const auto c1 = eval_cell(model, n, m, 200, 5, 2, EvalMode::teacher);
      const auto c2 = eval_cell(model, n, m, 200, 5, 2, EvalMode::teacher, gpu.get());
      EXPECT_EQ(c1.fits, c2.fits);
      EXPECT_EQ(c1.exact, c2.exact) << n << "x" << m;
    }
  }
  const LoadedModel lm = load_model_dir(manyadd::testing::source_path("models/cpu-sa1010-1l4h-d64"));
  auto gpu = make_cuda_device(lm.cfg);
  auto cpu = make_packed_cpu_device(lm.cfg);
  const std::vector<float> zeros(lm.params.size(), 0.f);
  gpu->set_state(lm.params, zeros, zeros);
  cpu->set_state(lm.params, zeros, zeros);
  for (auto [n, m] : {std::pair{3, 3}, std::pair{10, 10}, std::pair{13, 13}}) {
    const auto c1 = eval_cell(lm.view(), n, m, 100, 9, 2, EvalMode::teacher);
    const auto c2 = eval_cell(lm.view(), n, m, 100, 9, 2, EvalMode::teacher, gpu.get());
    EXPECT_EQ(c1.exact, 100) << n << "x" << m << ": the committed model no longer scores 100% here";
    EXPECT_EQ(c2.exact, c1.exact) << n << "x" << m;
  }
  TrainConfig tc = train_cfg();
  tc.train_n = 10, tc.train_m = 10, tc.train_size = 500, tc.batch = 32;
  Trainer tr(lm.cfg, tc);
  const PackedBatch pb = tr.packed_batch(1);
  std::vector<std::uint8_t> ag, ac;
  gpu->predict(pb, ag);
  cpu->predict(pb, ac);
  Acts<float> acts;
  model_forward(acts, lm.view(), batch_of(pb));
  ASSERT_EQ(ag.size(), std::size_t(pb.rows()));
  ASSERT_EQ(ac.size(), std::size_t(pb.rows()));
  const int V = lm.cfg.vocab;
  std::int64_t checked = 0, differ = 0;
  for (int b = 0; b < pb.B; ++b)
    for (int t = 0; t < pb.lengths[std::size_t(b)]; ++t) {
      const std::size_t row = std::size_t(b) * std::size_t(pb.T) + std::size_t(t);
      std::vector<float> z(acts.logits.begin() + std::ptrdiff_t(row * V), acts.logits.begin() + std::ptrdiff_t((row + 1) * V));
      std::partial_sort(z.begin(), z.begin() + 2, z.end(), std::greater<float>());
      if (z[0] - z[1] < 1e-3f * std::max(1.f, std::abs(z[0]))) continue;  // a near tie: either answer is right
      ++checked;
      differ += ag[row] != ac[row];
    }
  EXPECT_GT(checked, pb.real_tokens / 2);
  EXPECT_EQ(differ, 0) << "of " << checked << " rows";
}

// No atomics, fixed-order reductions, cuBLAS reproducible on one device: two runs and a resumed run
// give the same checkpoint bytes.
TEST(CudaTrainGpu, DeterministicAndResumeIsBitIdentical) {
  REQUIRE_DEVICE();
  const ModelConfig mc = model(1, 4, 64);
  TrainConfig tc = train_cfg();
  tc.steps = 40;
  const std::string a = scratch("a"), b = scratch("b"), c = scratch("c");
  auto quiet = [](const std::string&) {};
  run_training(mc, tc, a, false, 0, quiet, make_cuda_device(mc));
  run_training(mc, tc, b, false, 0, quiet, make_cuda_device(mc));
  run_training(mc, tc, c, false, 17, quiet, make_cuda_device(mc));
  run_training(mc, tc, c, true, 0, quiet, make_cuda_device(mc));
  EXPECT_EQ(read_file(a + "/checkpoint.safetensors"), read_file(b + "/checkpoint.safetensors"));
  EXPECT_EQ(read_file(a + "/checkpoint.safetensors"), read_file(c + "/checkpoint.safetensors"));
  for (auto& d : {a, b, c}) std::filesystem::remove_all(d);
}
