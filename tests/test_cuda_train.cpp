// CUDA training device: the no-device path on every machine (library and CLIs exit 2 with the reason);
// on a GPU, whole steps against the packed CPU twin, determinism and resume. Without a device every
// GPU test is a skip with the reason, never a pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "cuda_train_test_util.hpp"
#include "learn_fixtures.hpp"
#include "manyadd/learn/devices/cuda_device.hpp"
#include "manyadd/learn/devices/batch.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/tasks/task.hpp"
#include "manyadd/learn/runs/train.hpp"

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
// The authors' architecture options on a model: all of them, or one at a time (which = 0..3).
ModelConfig with_options(ModelConfig c, int which = -1) {
  if (which < 0 || which == 0) c.attn_scale = AttnScale::none;
  if (which < 0 || which == 1) c.init = InitScheme::t5;
  if (which < 0 || which == 2) c.tie_readout = true;
  if (which < 0 || which == 3) c.final_norm = NormKind::layer;
  return c;
}
std::string describe(const ModelConfig& c) {
  return std::to_string(c.n_layers) + "L" + std::to_string(c.n_heads) + "H d_model " + std::to_string(c.d_model) +
         " d_head " + std::to_string(c.d_head) + " attn_scale " + attn_scale_name(c.attn_scale) + " init " +
         init_name(c.init) + " tie_readout " + (c.tie_readout ? "true" : "false") + " final_norm " +
         norm_kind_name(c.final_norm);
}
// Multiplication with the tri-level coupling (pos_mode coupled3: three position tables), 2 x 2 digits;
// the tables hold the training set (the sizes of tests/test_tasks_cli.cpp).
ModelConfig mul_model(int layers, int heads, int d_model) {
  ModelConfig c = model(layers, heads, d_model);
  c.vocab = task(TaskKind::multiplication).vocab();
  c.pos_mode = PosMode::coupled3;
  c.max_pos1 = 8, c.max_pos2 = 6, c.max_pos3 = 8;
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
TrainConfig mul_cfg() {
  TrainConfig t = train_cfg();
  t.task = "multiplication";
  t.train_n = 2, t.train_m = 2, t.train_size = 1000;
  return t;
}

// One step from the same state (10 CPU steps: nonzero moments, a state that tells batches apart) on the
// GPU and on the packed CPU twin; the bounds are StepMatchesPackedCpuTwin's.
void expect_step_matches(const ModelConfig& mc, const TrainConfig& tc) {
  Trainer warm(mc, tc);
  for (int s = 0; s < 10; ++s) warm.step();
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

// One batch's loss and every gradient tensor from the initial weights, GPU against the packed CPU twin
// (fp32 both); the bounds are EveryGradientMatchesPackedCpuTwin's. Returns each tensor's largest
// |gradient| on the CPU, by name.
// adjust: a change to the initial weights before both devices take them (FIRE: L inside the sequences).
using Adjust = std::function<void(std::vector<float>&, const Layout&)>;
std::map<std::string, double> expect_gradients_match(const ModelConfig& mc, const TrainConfig& tc,
                                                     const Adjust& adjust = {}) {
  Trainer tr(mc, tc);
  const PackedBatch pb = tr.packed_batch(1);
  const Layout lay = Layout::make(mc);
  auto cpu = make_packed_cpu_device(mc);
  auto gpu = make_cuda_device(mc);
  std::vector<float> params = tr.params();
  if (adjust) adjust(params, lay);
  const std::vector<float> zeros(params.size(), 0.f);
  cpu->set_state(params, zeros, zeros);
  gpu->set_state(params, zeros, zeros);
  std::vector<float> gc, gg;
  const float scale = 1.f / float(pb.counted_targets);
  const double lc = cpu->gradient(pb, scale, gc), lg = gpu->gradient(pb, scale, gg);
  EXPECT_NEAR(lg, lc, 1e-5 * lc);
  std::map<std::string, double> largest;
  for (const auto& ts : lay.tensors) {
    double m = 0, e = 0;
    for (std::int64_t i = ts.offset; i < ts.offset + ts.size; ++i) {
      m = std::max(m, double(std::abs(gc[std::size_t(i)])));
      e = std::max(e, double(std::abs(gg[std::size_t(i)] - gc[std::size_t(i)])));
    }
    EXPECT_LE(e, 1e-4 * m) << ts.name << ": max |gpu - cpu| " << e << ", max |cpu| " << m;
    largest[ts.name] = m;
  }
  return largest;
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

// pos_mode coupled3 passes the CUDA device's check in both precisions (the embedding kernels read up to
// three position tables); without a GPU make_cuda_device then fails for the missing device alone.
TEST(CudaTrainNoDevice, Coupled3IsRefusedOnlyForTheMissingDevice) {
  std::string why;
  if (cuda_training_available(&why)) GTEST_SKIP() << "a CUDA device is present; the no-device path is not reachable";
  const ModelConfig mc = mul_model(1, 4, 32);
  for (auto prec : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(precision_name(prec));
    EXPECT_NO_THROW(check_cuda_supports(mc, prec));
    try {
      make_cuda_device(mc, prec);
      FAIL() << "make_cuda_device returned without a device";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("no CUDA device: ", 0), 0u) << e.what();
    }
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
  // The paper's configuration (bf16, every T5 option, d_head 512) is refused for the missing device only;
  // a head wider than the kernels take is refused by name first.
  const std::string paper = " --out " + out + " --config " +
                            manyadd::testing::source_path("learn/configs/paper/fig10-2l2h.json") +
                            " --batch 4 --train-size 100 --device cuda";
  const CmdResult p = run_cmd(std::string(TRAIN_EXE) + paper);
  EXPECT_EQ(p.rc, 2);
  EXPECT_NE(p.err.find("no CUDA device: "), std::string::npos) << p.err;
  EXPECT_EQ(p.err.find("does not support"), std::string::npos) << p.err;
  const CmdResult wide = run_cmd(std::string(TRAIN_EXE) + paper + " --n-heads 1 --d-head 1024");
  EXPECT_EQ(wide.rc, 2);
  EXPECT_NE(wide.err.find("--device cuda does not support d_head 1024"), std::string::npos) << wide.err;
  EXPECT_FALSE(std::filesystem::exists(out)) << "nothing may be written on a refused run";
  // Multiplication's tri-level coupling (three position tables) is refused for the missing device only.
  const CmdResult mul = run_cmd(std::string(TRAIN_EXE) + " --out " + out + " --task multiplication --pos-mode coupled3"
                                " --train-n 2 --train-m 2 --max-pos1 8 --max-pos2 6 --max-pos3 8 --steps 3 --batch 4"
                                " --d-model 16 --d-head 4 --d-ff 32 --train-size 50 --device cuda");
  EXPECT_EQ(mul.rc, 2);
  EXPECT_NE(mul.err.find("no CUDA device: "), std::string::npos) << mul.err;
  EXPECT_EQ(mul.err.find("does not support"), std::string::npos) << mul.err;
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
    expect_step_matches(mc, train_cfg());
  }
}

// Every gradient tensor of one batch against the packed CPU twin (fp32 both), for 1 and 2 layers and
// every head-width class the kernels instantiate. Each gradient entry is a sum over up to R = B T rows
// of products that themselves passed ~10 fp32 reductions of length <= max(d_model, d_ff, T); in
// different orders on the two sides: errors ~1e-6 of the tensor's largest entry are expected, 1e-4 is
// the bound (a wrong pass, mask or index gives O(1)).
// The same for every architecture option of the authors' model, one at a time and all together (a tied
// readout adds its gradient to the token table's before the embedding's rows; the GPU adds the rows'
// sum to it, the CPU row by row: another fp32 order, within the same bound), and at d_head 512, the
// widest head the attention kernels take (2L2H d_model 1024, Figure 10's model).
TEST(CudaTrainGpu, EveryGradientMatchesPackedCpuTwin) {
  REQUIRE_DEVICE();
  std::vector<ModelConfig> models = {model(1, 4, 32), model(2, 2, 128), model(1, 4, 384), model(1, 4, 512)};
  for (int which = 0; which < 4; ++which) models.push_back(with_options(model(2, 2, 64), which));
  models.push_back(with_options(model(2, 2, 128)));
  models.push_back(with_options(model(1, 4, 256)));
  models.push_back(with_options(model(2, 2, 1024)));
  for (const auto& mc : models) {
    SCOPED_TRACE(describe(mc));
    expect_gradients_match(mc, train_cfg());
  }
}

// Multiplication with pos_mode coupled3 (three position tables, the third read by the embedding kernels
// only here): every gradient tensor of one batch against the packed CPU twin (fp32 both), then one
// whole step from a trained state. Bounds and reasons of the two tests above: each gradient entry is a
// sum of products that passed ~10 fp32 reductions, in different orders on the two sides (~1e-6 of the
// tensor's largest entry expected; 1e-4 the bound; the embedding itself is bitwise the twin's, so the
// position tables carry only the order differences of the layers above them); loss 1e-5 and gradient
// norm 1e-4 relative; weights after the step within 1% of a full step. A table dropped or read with
// another level's IDs gives O(1) errors in pos_emb.2 (and in every tensor after the first step).
TEST(CudaTrainGpu, Coupled3MultiplicationMatchesPackedCpuTwin) {
  REQUIRE_DEVICE();
  for (const auto& mc : {mul_model(1, 4, 64), mul_model(2, 2, 128)}) {
    SCOPED_TRACE(describe(mc) + " multiplication coupled3");
    const TrainConfig tc = mul_cfg();
    ASSERT_FALSE(Trainer(mc, tc).packed_batch(1).pos[2].empty()) << "the batch carries no third level";
    const auto largest = expect_gradients_match(mc, tc);
    for (int lv = 0; lv < kMaxPosLevels; ++lv) {
      const std::string name = "pos_emb." + std::to_string(lv) + ".weight";
      ASSERT_EQ(largest.count(name), 1u) << name;
      EXPECT_GT(largest.at(name), 0.0) << name << " has no gradient";
    }
    expect_step_matches(mc, tc);
  }
}

// Batched teacher-forced evaluation on the GPU gives the CPU evaluation's counts. The model trained here
// for 300 steps scores 0 exact on every cell (measured on the CPU), so its counts alone would pass with
// any predictions; the committed trained model (models/cpu-sa1010-1l4h-d64, 100% teacher-forced on these
// cells on the CPU) makes the counts meaningful, and row by row the GPU's argmax must equal the packed
// CPU twin's on every row whose top-2 logit gap exceeds fp32 order noise (mixed lengths, varlen rows).
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
    for (int t = 0; t < pb.length(b); ++t) {
      const std::size_t row = std::size_t(pb.offsets[std::size_t(b)]) + std::size_t(t);
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
  run_training(mc, tc, a, false, 0, quiet_progress(), make_cuda_device(mc));
  run_training(mc, tc, b, false, 0, quiet_progress(), make_cuda_device(mc));
  run_training(mc, tc, c, false, 17, quiet_progress(), make_cuda_device(mc));
  run_training(mc, tc, c, true, 0, quiet_progress(), make_cuda_device(mc));
  EXPECT_EQ(read_file(a + "/checkpoint.safetensors"), read_file(b + "/checkpoint.safetensors"));
  EXPECT_EQ(read_file(a + "/checkpoint.safetensors"), read_file(c + "/checkpoint.safetensors"));
  for (auto& d : {a, b, c}) std::filesystem::remove_all(d);
}

// bf16: the CUDA device against PackedCpuDevice in bf16, one batch's loss and every gradient tensor.
// Both round at the same points (learn/README "Precision"; cuda_device.cpp lists its buffers) and
// every product of two bf16 values is exact in fp32, so they differ only by (a) fp32 accumulation order
// (the fp32 bound of EveryGradientMatchesPackedCpuTwin, 1e-4 of a tensor's largest entry) and (b) flips:
// a value whose fp32 result lies within that order difference of a bf16 rounding boundary rounds to
// neighbouring bf16 numbers on the two sides, one ulp (<= 2u relative, u = 2^-8) apart. A flip needs
// |order error| ~ 1e-6 relative against an ulp of 4e-3, so ~1e-6 / 4e-3 < 1% of a rounding point's
// values flip (more where an fp32 value is itself the remainder of a cancellation). Then:
//  * loss and gradient norm: within 2u relative (the argument and bound of test_learn_precision's
//    Bf16.PerSequenceAndPackedDevicesAgree, the same situation on two CPU devices);
//  * per tensor, relative L2: a flip fraction f perturbs a rounding point's values by sqrt(f) 2u in
//    relative L2, at most u (the bf16 rounding itself) while f <= 25%; so the difference stays within
//    test_learn_precision's bound on the whole bf16-vs-fp32 difference, 2 (P_f + P_b) u (P_f = 11 L + 2
//    forward and P_b = 1 + 6 L backward rounding points, gains <= 2), plus the fp32 order term;
//  * control: over the whole gradient the twins are much closer than bf16 is to fp32 (~sqrt(f) of it):
//    at most half of |G_bf16 - G_fp32| on the CPU. A device that skipped a rounding point (computed it
//    in fp32) or rounded elsewhere differs from the twin by a full rounding's effect and fails this.
namespace {
void expect_bf16_gradients_match(const ModelConfig& mc, const Adjust& adjust = {}) {
  constexpr double kU = 1.0 / 256;
  {
    TrainConfig tc = train_cfg();
    tc.precision = "bf16";
    Trainer tr(mc, tc);
    const PackedBatch pb = tr.packed_batch(1);
    const Layout lay = Layout::make(mc);
    auto cpu16 = make_packed_cpu_device(mc, Precision::bf16), cpu32 = make_packed_cpu_device(mc);
    auto gpu = make_cuda_device(mc, Precision::bf16);
    std::vector<float> params = tr.params();
    if (adjust) adjust(params, lay);
    const std::vector<float> zeros(params.size(), 0.f);
    for (auto* d : {cpu16.get(), cpu32.get(), gpu.get()}) d->set_state(params, zeros, zeros);
    std::vector<float> gc, g32, gg;
    const float scale = 1.f / float(pb.counted_targets);
    const double lc = cpu16->gradient(pb, scale, gc), lg = gpu->gradient(pb, scale, gg);
    cpu32->gradient(pb, scale, g32);
    EXPECT_NEAR(lg, lc, 2 * kU * lc);
    const int L = mc.n_layers, Pf = 11 * L + 2, Pb = 1 + 6 * L;
    const double bound = 2 * (Pf + Pb) * kU;
    double nc = 0, ng = 0, dtwin = 0, dprec = 0, worst = 0;
    for (const auto& ts : lay.tensors) {
      double d = 0, n = 0, m = 0;
      for (std::int64_t i = ts.offset; i < ts.offset + ts.size; ++i) {
        const double c = gc[std::size_t(i)], g = gg[std::size_t(i)], f = g32[std::size_t(i)];
        d += (g - c) * (g - c), n += c * c, m = std::max(m, std::abs(c));
        dprec += (c - f) * (c - f);
        nc += c * c, ng += g * g;
      }
      dtwin += d;
      if (n == 0) continue;
      const double rel = std::sqrt(d / n);
      worst = std::max(worst, rel);
      EXPECT_LE(rel, bound + 1e-4 * m / std::sqrt(n / double(ts.size))) << ts.name;
    }
    EXPECT_NEAR(std::sqrt(ng), std::sqrt(nc), 2 * kU * std::sqrt(nc));
    EXPECT_GT(dprec, 0.0);
    EXPECT_LE(std::sqrt(dtwin), 0.5 * std::sqrt(dprec)) << "the GPU is not closer to its bf16 twin than bf16 to fp32";
    std::printf("[ bf16 GPU vs bf16 CPU, %s ] loss %.2e relative (bound %.2e), worst gradient tensor %.2e (bound "
                "%.2e), whole gradient %.2e of the bf16-vs-fp32 difference (bound 0.5)\n",
                describe(mc).c_str(), std::abs(lg - lc) / lc, 2 * kU, worst, bound, std::sqrt(dtwin / dprec));
  }
}
}  // namespace

TEST(CudaTrainGpu, Bf16GradientMatchesPackedCpuTwin) {
  REQUIRE_DEVICE();
  for (const auto& mc : {model(1, 4, 64), with_options(model(2, 2, 128)), with_options(model(1, 4, 256)),
                         with_options(model(2, 2, 1024))}) {
    SCOPED_TRACE(describe(mc));
    expect_bf16_gradients_match(mc);
  }
}

// RoPE and input injection on the GPU against the packed CPU twin, with the bounds and reasons of the
// tests above: every gradient tensor of one batch in fp32 (1e-4 of the tensor's largest entry), one whole
// step from a trained state (loss 1e-5, gradient norm 1e-4 relative, weights within 1% of a step), and
// the bf16 gradient (Bf16GradientMatchesPackedCpuTwin's bounds: RoPE moves q's and k's rounding after
// the rotation and dq's and dk's after the inverse rotation, adding none; injection's sums are fp32, so
// P_f and P_b are unchanged). A pass or rounding point left out (no rotation, the rotation's backward
// forgotten or rounded before it, no injection or its gradient not reaching x0) gives O(1) or
// full-rounding differences. A rotation by the wrong row index would pass here (RoPE's scores depend on
// position differences alone): CudaKernelsGpu.RopeIsBitwiseTheCpu and CudaRopeReplay catch that.
TEST(CudaTrainGpu, RopeAndInputInjectionMatchPackedCpuTwin) {
  REQUIRE_DEVICE();
  std::vector<ModelConfig> models;
  for (int layers : {1, 2}) {
    ModelConfig mc = model(layers, 4, 64);
    mc.pos_mode = PosMode::rope;
    models.push_back(mc);
  }
  ModelConfig inj = model(2, 2, 64);
  inj.input_injection = true;
  models.push_back(inj);
  ModelConfig both = with_options(model(3, 2, 128));
  both.pos_mode = PosMode::rope, both.input_injection = true;
  models.push_back(both);
  for (const auto& mc : models) {
    SCOPED_TRACE(describe(mc) + " pos_mode " + pos_mode_name(mc.pos_mode) +
                 (mc.input_injection ? " input_injection" : ""));
    expect_gradients_match(mc, train_cfg());
    expect_step_matches(mc, train_cfg());
    expect_bf16_gradients_match(mc);
  }
}

// FIRE (both thresholds) on the GPU against the packed CPU twin, with the bounds and reasons of the tests
// above: every gradient tensor of one batch in fp32 (1e-4 of the tensor's largest entry; FIRE's c and
// L_sqrt are sums over the pairs whose fp32 order differs: the GPU sums their terms in double, the CPU in
// float; CudaTrainFire.ScalarGradientsAreWellConditionedInFp32 bounds the CPU's own error at 1e-5), one whole step from a
// trained state (loss 1e-5, gradient norm 1e-4 relative, weights within 1% of a step), and the bf16
// gradient (Bf16GradientMatchesPackedCpuTwin's bounds: the bias and its MLP are fp32 on both sides, no
// rounding point added). The gradients from the initial weights run twice: as initialized (L = 256, beyond
// every sequence: max puts every row on L, min none) and with L = 6.25 and c = 0.7, inside the sequences
// (rows on both sides of the threshold, L_sqrt's gradient from the rows on L only). The GPU's MLP runs on
// every pair unmerged (kernels/README "FIRE on CUDA"), the twin's on the merged pairs: the same values,
// summed in another order. A bias read by the key instead of the distance, one layer's or sequence's
// gradient left out, or the MLP's backward on the wrong operand gives O(1) differences in fire.* (and the
// attention weights); CudaFireReplay and CudaAttentionReplay / CudaFlashReplay's controls catch each in
// the kernels on the CPU.
// FIRE's models of FireMatchesPackedCpuTwin, and the change to their weights that puts L inside the sequences.
namespace {
const Adjust kFireInside = [](std::vector<float>& p, const Layout& lay) {
  p[std::size_t(lay.fire_L_sqrt)] = 2.5f, p[std::size_t(lay.fire_c)] = 0.7f;
};
std::vector<ModelConfig> fire_models() {
  std::vector<ModelConfig> models;
  for (auto thr : {FireThreshold::max, FireThreshold::min}) {
    ModelConfig mc = model(thr == FireThreshold::max ? 1 : 2, thr == FireThreshold::max ? 4 : 2, 64);
    mc.pos_mode = PosMode::fire, mc.fire_threshold = thr;
    models.push_back(mc);
  }
  ModelConfig authors = with_options(model(2, 2, 128));
  authors.pos_mode = PosMode::fire, authors.fire_threshold = FireThreshold::min;
  models.push_back(authors);
  return models;
}
}  // namespace

// The CPU side of FireMatchesPackedCpuTwin's bound for FIRE's scalars (runs everywhere): c's and L_sqrt's
// gradients are sums over every pair and sequence in which terms of both signs meet, so their fp32 value
// could lose digits to cancellation, and the GPU sums in another order (per-pair terms in double). The
// packed CPU twin's fp32 gradients of fire.* against the same model in double (model_backward<double>,
// the exact arithmetic up to 1e-15): within 1e-5 of each tensor's largest entry, a tenth of the GPU
// test's 1e-4 (so two fp32 orders, each this close to the exact value, pass it).
TEST(CudaTrainFire, ScalarGradientsAreWellConditionedInFp32) {
  for (const auto& mc : fire_models())
    for (const Adjust& adj : {Adjust{}, kFireInside}) {
      SCOPED_TRACE(describe(mc) + " threshold " + fire_threshold_name(mc.fire_threshold) +
                   (adj ? " L 6.25, c 0.7" : " as initialized"));
      Trainer tr(mc, train_cfg());
      const PackedBatch pb = tr.packed_batch(1);
      const Layout lay = Layout::make(mc);
      std::vector<float> params = tr.params();
      if (adj) adj(params, lay);
      auto cpu = make_packed_cpu_device(mc);
      const std::vector<float> zeros(params.size(), 0.f);
      cpu->set_state(params, zeros, zeros);
      std::vector<float> gc;
      const float scale = 1.f / float(pb.counted_targets);
      cpu->gradient(pb, scale, gc);
      const std::vector<double> pd(params.begin(), params.end());
      const ModelView<double> md{mc, lay, pd.data()};
      Acts<double> a;
      GradScratch<double> g;
      std::vector<double> gd(pd.size(), 0.0);
      model_forward(a, md, batch_of(pb));
      model_backward(gd.data(), g, a, md, batch_of(pb), double(scale));
      for (const auto& ts : lay.tensors) {
        if (ts.name.rfind("fire.", 0) != 0) continue;
        double m = 0, e = 0;
        for (std::int64_t i = ts.offset; i < ts.offset + ts.size; ++i)
          m = std::max(m, std::abs(gd[std::size_t(i)])), e = std::max(e, std::abs(gc[std::size_t(i)] - gd[std::size_t(i)]));
        EXPECT_LE(e, 1e-5 * m) << ts.name << ": max |fp32 - double| " << e << ", max |double| " << m;
        std::printf("[ fire fp32 ] %s %s: %.1e of the largest entry\n", describe(mc).c_str(), ts.name.c_str(),
                    m > 0 ? e / m : 0.0);
      }
    }
}

TEST(CudaTrainGpu, FireMatchesPackedCpuTwin) {
  REQUIRE_DEVICE();
  const Adjust& inside = kFireInside;
  const std::vector<ModelConfig> models = fire_models();
  for (const auto& mc : models) {
    SCOPED_TRACE(describe(mc) + " pos_mode fire threshold " + fire_threshold_name(mc.fire_threshold));
    for (const Adjust& adj : {Adjust{}, inside}) {
      SCOPED_TRACE(adj ? "L 6.25, c 0.7" : "as initialized");
      const auto largest = expect_gradients_match(mc, train_cfg(), adj);
      for (const char* name : {"fire.mlp.0.weight", "fire.mlp.2.weight", "fire.mlp.4.weight", "fire.c"})
        EXPECT_GT(largest.at(name), 0.0) << name << " has no gradient";
      if (adj || mc.fire_threshold == FireThreshold::max) {
        EXPECT_GT(largest.at("fire.L_sqrt"), 0.0);
      }
      expect_bf16_gradients_match(mc, adj);
    }
    expect_step_matches(mc, train_cfg());
  }
}

// One whole bf16 step (forward, backward with the tensor-core attention, gradient norm, clipping, AdamW)
// on the GPU against PackedCpuDevice in bf16, from the same state (10 bf16 steps on the GPU: nonzero
// moments). Loss and gradient norm within 2u (Bf16GradientMatchesPackedCpuTwin's argument: the twins
// differ by fp32 order and the flips it causes). The weights after the step: AdamW maps the gradient
// entry by entry through the same moments, so the twins' weights differ as their gradients do; the
// control is the fp32 step from the same state (the bf16-vs-fp32 difference of one step), and the GPU's
// weights must be at most half as far from its bf16 twin's, in L2 (a skipped or moved rounding point
// differs by a whole rounding's effect and fails this, as in the gradient test).
TEST(CudaTrainGpu, Bf16StepMatchesPackedCpuTwin) {
  REQUIRE_DEVICE();
  constexpr double kU = 1.0 / 256;
  for (const auto& mc : {with_options(model(1, 4, 256)), with_options(model(2, 2, 128))}) {
    SCOPED_TRACE(describe(mc));
    TrainConfig tc = train_cfg();
    tc.precision = "bf16";
    Trainer warm(mc, tc);
    warm.attach_device(make_cuda_device(mc, Precision::bf16));
    for (int s = 0; s < 10; ++s) warm.step();
    const std::string dir = scratch("step16");
    warm.save(dir);
    TrainConfig t32 = tc;
    t32.precision = "fp32";
    Trainer cpu(mc, tc), gpu(mc, tc), c32(mc, t32);
    cpu.load_checkpoint(dir), gpu.load_checkpoint(dir), c32.load_checkpoint(dir, true);
    cpu.attach_device(make_packed_cpu_device(mc, Precision::bf16));
    gpu.attach_device(make_cuda_device(mc, Precision::bf16));
    c32.attach_device(make_packed_cpu_device(mc));
    const StepStats a = cpu.step(), b = gpu.step();
    c32.step();
    EXPECT_NEAR(b.loss, a.loss, 2 * kU * a.loss);
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 2 * kU * a.grad_norm);
    double dtwin = 0, dprec = 0;
    for (std::size_t i = 0; i < cpu.params().size(); ++i) {
      const double c = cpu.params()[i], g = gpu.params()[i], f = c32.params()[i];
      dtwin += (g - c) * (g - c), dprec += (f - c) * (f - c);
    }
    EXPECT_GT(dprec, 0.0);
    EXPECT_LE(std::sqrt(dtwin), 0.5 * std::sqrt(dprec)) << "the GPU step is not closer to its bf16 twin than fp32 is";
    std::printf("[ bf16 GPU step vs bf16 CPU step, %s ] loss %.2e, gradient norm %.2e relative; weights %.2e of the "
                "bf16-vs-fp32 step difference (bound 0.5)\n",
                describe(mc).c_str(), std::abs(b.loss - a.loss) / a.loss,
                std::abs(b.grad_norm - a.grad_norm) / a.grad_norm, std::sqrt(dtwin / dprec));
    std::filesystem::remove_all(dir);
  }
}

// Deferred statistics on the GPU: n launched steps read back at once equal n steps read one by one
// (loss, gradient norm, weights and moments bitwise), in fp32 and bf16.
TEST(CudaTrainGpu, DeferredStatsEqualStepByStep) {
  REQUIRE_DEVICE();
  for (const char* prec : {"fp32", "bf16"}) {
    SCOPED_TRACE(prec);
    const ModelConfig mc = with_options(model(2, 2, 64));
    TrainConfig tc = train_cfg();
    tc.precision = prec;
    Trainer a(mc, tc), b(mc, tc);
    a.attach_device(make_cuda_device(mc, tc.precision_value()));
    b.attach_device(make_cuda_device(mc, tc.precision_value()));
    std::vector<StepStats> one, later;
    for (int s = 0; s < 9; ++s) one.push_back(a.step());
    for (int s = 0; s < 9; ++s) b.step_async();
    later = b.finish_steps();
    ASSERT_EQ(later.size(), one.size());
    for (std::size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(later[i].loss, one[i].loss) << i;
      EXPECT_EQ(later[i].grad_norm, one[i].grad_norm) << i;
    }
    EXPECT_EQ(a.params(), b.params());
  }
}

// The paper's recipe on the GPU: bf16 with every T5 option, two runs and a run stopped and resumed give
// the same checkpoint bytes and the same log rows (the statistics read back once per log line).
TEST(CudaTrainGpu, Bf16PaperOptionsDeterministicAndResumeIsBitIdentical) {
  REQUIRE_DEVICE();
  const ModelConfig mc = with_options(model(2, 2, 64));
  TrainConfig tc = train_cfg();
  tc.steps = 40, tc.precision = "bf16", tc.log_every = 5, tc.warmup_from_zero = true;
  const std::string a = scratch("a16"), b = scratch("b16"), c = scratch("c16");
  run_training(mc, tc, a, false, 0, quiet_progress(), make_cuda_device(mc, Precision::bf16));
  run_training(mc, tc, b, false, 0, quiet_progress(), make_cuda_device(mc, Precision::bf16));
  run_training(mc, tc, c, false, 17, quiet_progress(), make_cuda_device(mc, Precision::bf16));
  run_training(mc, tc, c, true, 0, quiet_progress(), make_cuda_device(mc, Precision::bf16));
  EXPECT_EQ(read_file(a + "/checkpoint.safetensors"), read_file(b + "/checkpoint.safetensors"));
  EXPECT_EQ(read_file(a + "/checkpoint.safetensors"), read_file(c + "/checkpoint.safetensors"));
  // log.csv: step, loss, lr, grad_norm are the run's; tokens/s and elapsed seconds are wall clock.
  auto run_columns = [](const std::string& dir) {
    std::string out, line;
    std::istringstream in(read_file(dir + "/log.csv"));
    while (std::getline(in, line)) {
      std::size_t cut = 0;
      for (int k = 0; k < 4 && cut != std::string::npos; ++k) cut = line.find(',', cut + (k ? 1 : 0));
      out += line.substr(0, cut) + "\n";
    }
    return out;
  };
  const std::string rows = run_columns(a);
  EXPECT_EQ(rows, run_columns(c));
  EXPECT_EQ(std::count(rows.begin(), rows.end(), '\n'), 1 + 40 / 5);
  for (auto& d : {a, b, c}) std::filesystem::remove_all(d);
}
