// Host-side batching for device training, on the CPU: packing, the packed pipeline against learn's
// per-sequence forward/backward, the trainer's device path (through the CPU twin device) against the
// CPU trainer, resume on the device path, batched evaluation. Everything the CUDA device does around
// its kernels is checked here, on machines without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "manyadd/learn/devices/batch.hpp"
#include "manyadd/learn/devices/cuda_device.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/tasks/task.hpp"
#include "manyadd/learn/runs/train.hpp"
#include "learn_fixtures.hpp"

using namespace manyadd;
using namespace manyadd::learn;

namespace {
using fixtures::mixed_examples;
using fixtures::small_model;
double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}
using fixtures::scratch;
}  // namespace

// The varlen layout: the real tokens of every sequence concatenated in batch order, offsets marking where
// each starts, no padding; padded_rows rebuilds the padded (B, T) layout of the PyTorch twin.
TEST(Pack, VarlenLayoutAndValidation) {
  const ModelConfig c = small_model(PosMode::coupled, 1);
  const auto exs = mixed_examples(c, 7, 3);
  const PackedBatch pb = pack_batch(exs, c);
  int longest = 0, shortest = 1 << 30;
  std::int64_t tokens = 0, targets = 0;
  for (auto& e : exs) {
    longest = std::max(longest, e.T()), shortest = std::min(shortest, e.T());
    tokens += e.T();
    for (auto t : e.targets) targets += t >= 0;
  }
  ASSERT_LT(shortest, longest) << "the test batch should mix lengths";
  ASSERT_EQ(pb.B, 7);
  ASSERT_EQ(pb.T, longest);
  ASSERT_EQ(pb.offsets.size(), 8u);
  EXPECT_EQ(pb.offsets[0], 0);
  EXPECT_EQ(pb.real_tokens, tokens);
  EXPECT_EQ(pb.rows(), tokens);
  EXPECT_EQ(pb.counted_targets, targets);
  ASSERT_EQ(pb.tokens.size(), std::size_t(tokens));
  ASSERT_EQ(pb.targets.size(), std::size_t(tokens));
  ASSERT_EQ(pb.pos[1].size(), std::size_t(tokens));
  EXPECT_TRUE(pb.pos[2].empty());
  for (int b = 0; b < pb.B; ++b) {
    const auto& e = exs[std::size_t(b)];
    ASSERT_EQ(pb.length(b), e.T());
    for (int t = 0; t < e.T(); ++t) {
      const std::size_t i = std::size_t(pb.offsets[std::size_t(b)]) + std::size_t(t);
      EXPECT_EQ(pb.tokens[i], e.tokens[std::size_t(t)]);
      EXPECT_EQ(pb.targets[i], e.targets[std::size_t(t)]);
      EXPECT_EQ(pb.pos[0][i], e.pos[0][std::size_t(t)]);
      EXPECT_EQ(pb.pos[1][i], e.pos[1][std::size_t(t)]);
    }
  }
  // The embedding's readers: every row once, under the table row it reads, increasing within a group.
  for (int k = 0; k < 3; ++k) {
    const auto& rd = pb.readers[k];
    const auto& st = pb.reader_starts[k];
    const int rows = k == 0 ? c.vocab : c.max_pos(k - 1) + 1;
    ASSERT_EQ(st.size(), std::size_t(rows) + 1) << k;
    ASSERT_EQ(rd.size(), std::size_t(tokens)) << k;
    EXPECT_EQ(st[0], 0);
    EXPECT_EQ(st.back(), tokens);
    std::vector<int> seen(std::size_t(tokens), 0);
    for (int r = 0; r < rows; ++r)
      for (int i = st[std::size_t(r)]; i < st[std::size_t(r) + 1]; ++i) {
        const auto t = std::size_t(rd[std::size_t(i)]);
        ++seen[t];
        EXPECT_EQ(k == 0 ? int(pb.tokens[t]) : pb.pos[k - 1][t], r) << k;
        if (i > st[std::size_t(r)]) {
          EXPECT_LT(rd[std::size_t(i) - 1], rd[std::size_t(i)]) << k;
        }
      }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), tokens) << k;
  }
  EXPECT_TRUE(pb.readers[3].empty());
  // unpack_rows gives each sequence's rows in order; padded_rows puts them at b T and fills the rest.
  std::vector<float> x(std::size_t(pb.rows()) * 3);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  const auto rows = unpack_rows(pb, x.data(), 3);
  const auto pad = padded_rows<float>(pb, x.data(), 3, -1.f);
  ASSERT_EQ(pad.size(), std::size_t(pb.B) * std::size_t(pb.T) * 3);
  for (int b = 0; b < pb.B; ++b) {
    ASSERT_EQ(rows[std::size_t(b)].size(), std::size_t(exs[std::size_t(b)].T()) * 3);
    EXPECT_EQ(rows[std::size_t(b)][0], float(std::int64_t(pb.offsets[std::size_t(b)]) * 3));
    for (int t = 0; t < pb.T; ++t)
      for (int k = 0; k < 3; ++k) {
        const float want = t < pb.length(b) ? x[std::size_t((pb.offsets[std::size_t(b)] + t) * 3 + k)] : -1.f;
        EXPECT_EQ(pad[(std::size_t(b) * std::size_t(pb.T) + std::size_t(t)) * 3 + std::size_t(k)], want);
      }
  }
  // Bad input is an InputError, never a silent clamp.
  auto bad = exs;
  bad[2].pos[0][3] = c.max_pos1 + 1;
  EXPECT_THROW(pack_batch(bad, c), InputError);
  bad = exs;
  bad[1].tokens[0] = std::uint8_t(c.vocab);
  EXPECT_THROW(pack_batch(bad, c), InputError);
  bad = exs;
  bad[1] = Example{};
  EXPECT_THROW(pack_batch(bad, c), InputError);
  EXPECT_THROW(pack_batch({}, c), InputError);
  // model_forward refuses offsets that do not describe sequences of 1..T rows from row 0.
  const Layout lay = Layout::make(c);
  const auto P = init_params<float>(c, lay, 1);
  Acts<float> a;
  for (int which = 0; which < 3; ++which) {
    PackedBatch wrong = pb;
    if (which == 0) wrong.offsets[0] = 1;
    if (which == 1) wrong.offsets[2] = wrong.offsets[1];  // an empty sequence
    if (which == 2) wrong.T = shortest;                   // a sequence longer than T
    EXPECT_THROW(model_forward(a, ModelView<float>{c, lay, P.data()}, batch_of(wrong)), InputError) << which;
  }
}

// The forward/backward on a packed batch (what the CUDA device and its CPU twin run) equals the same
// code on each sequence alone (a batch of one, what the CPU trainer runs), summed over the batch, for
// every position mode and 1 or 2 layers. Double precision: the only
// differences are summation orders (GEMM blocking over R rows instead of T; gradients summed over the
// whole batch instead of per sequence), i.e. relative ~1e-15; 1e-10 of each tensor's largest entry
// leaves room for that while any wrong row, missed mask or attention across a sequence boundary gives O(1)
// differences.
// The authors' architecture options (unscaled scores, T5 init, tied readout, final LayerNorm) run
// through the same passes: checked too, coupled positions. FIRE (both thresholds, L inside the
// sequences: every sequence reads its block of the batch's one bias, against a bias of its own), RoPE
// (each sequence's rows turned by their index within it), and input injection, likewise. The sequences'
// lengths differ, so a rotation or bias block taken at a row's place in the batch instead of its index
// within its sequence fails (the per-sequence q, k and attention below catch it where the logits cannot).
TEST(PackedPipeline, EqualsPerSequenceForwardBackward) {
  struct Variant {
    PosMode mode;
    bool authors = false, injection = false;
    FireThreshold fire = FireThreshold::max;
    bool rel_far = false;
    bool rel_far_norm = false;
    bool rel_far_mask = false;
  };
  std::vector<Variant> variants;
  for (PosMode m : kPosModes) variants.push_back({m});
  variants.push_back({PosMode::coupled, true});
  variants.push_back({PosMode::fire, false, false, FireThreshold::min});
  variants.push_back({PosMode::fire, false, true});
  variants.push_back({PosMode::rope, false, true});
  variants.push_back({PosMode::coupled_rel, false, false, FireThreshold::max, true});  // rel_far, window 1
  variants.push_back({PosMode::coupled_rel, false, false, FireThreshold::max, true, true});  // and rel_far_norm
  variants.push_back({PosMode::coupled_rel, false, false, FireThreshold::max, false, false, true});  // rel_far_mask, window 1
  for (const Variant& v : variants)
    for (int layers = 1; layers <= 2; ++layers) {
      const PosMode mode = v.mode;
      const bool authors = v.authors;
      SCOPED_TRACE(std::string(pos_mode_name(mode)) + " layers " + std::to_string(layers) +
                   (authors ? " authors' options" : "") + (v.injection ? " input injection" : "") +
                   (mode == PosMode::fire ? std::string(" threshold ") + fire_threshold_name(v.fire) : "") +
                   (v.rel_far ? " rel_far" : "") + (v.rel_far_norm ? " rel_far_norm" : "") +
                   (v.rel_far_mask ? " rel_far_mask" : ""));
      ModelConfig c = small_model(mode, layers);
      c.init_std = 0.5f;  // far from uniform attention, so that masking errors would show
      if (authors) {
        c.attn_scale = AttnScale::none, c.init = InitScheme::t5, c.tie_readout = true, c.final_norm = NormKind::layer;
      }
      c.input_injection = v.injection, c.fire_threshold = v.fire;
      if (v.rel_far) c.rel_far = true, c.rel_window = 1;
      c.rel_far_norm = v.rel_far_norm;
      if (v.rel_far_mask) c.rel_far_mask = true, c.rel_window = 1;
      const Layout lay = Layout::make(c);
      auto P = init_params<double>(c, lay, 11 + std::uint64_t(layers));
      if (mode == PosMode::fire) P[std::size_t(lay.fire_L_sqrt)] = 4.1, P[std::size_t(lay.fire_c)] = 0.7;  // L 16.81
      const auto exs = mixed_examples(c, 5, 7 + std::uint64_t(layers));
      const PackedBatch pb = pack_batch(exs, c);
      int shorter = 0;  // sequences of different lengths: a shorter one reads a corner of FIRE's bias
      for (int b = 0; b < pb.B; ++b) shorter += pb.length(b) < pb.T;
      ASSERT_GE(shorter, 2);
      const double scale = 1.0 / double(pb.counted_targets);
      // reference: per sequence
      const ModelView<double> model{c, lay, P.data()};
      std::vector<double> Gref(P.size(), 0.0);
      double loss_ref = 0;
      Acts<double> a;
      GradScratch<double> g;
      std::vector<std::vector<double>> logits_ref;
      std::vector<std::vector<Acts<double>::Block>> blocks_ref;
      for (const auto& e : exs) {
        loss_ref += model_forward(a, model, batch_of(e));
        logits_ref.push_back(a.logits);
        blocks_ref.push_back(a.blocks);
        model_backward(Gref.data(), g, a, model, batch_of(e), scale);
      }
      // packed
      Acts<double> pa;
      GradScratch<double> pg;
      std::vector<double> G(P.size(), 0.0);
      const double loss = model_forward(pa, model, batch_of(pb));
      model_backward(G.data(), pg, pa, model, batch_of(pb), scale);
      EXPECT_NEAR(loss, loss_ref, 1e-10 * std::abs(loss_ref));
      for (int b = 0; b < pb.B; ++b) {
        const int T = pb.length(b);
        const double* z = pa.logits.data() + std::int64_t(pb.offsets[std::size_t(b)]) * c.vocab;
        const double ref_max = max_abs(logits_ref[std::size_t(b)]);
        for (int i = 0; i < T * c.vocab; ++i)
          ASSERT_NEAR(z[i], logits_ref[std::size_t(b)][std::size_t(i)], 1e-10 * ref_max) << "seq " << b << " entry " << i;
      }
      // Every layer's q and k (after RoPE's rotation) and attention probabilities (after FIRE's bias), sequence
      // by sequence: RoPE's scores depend on position differences alone, so a rotation by the batch row
      // (every position of a sequence shifted alike) would leave the logits unchanged and show only here.
      const std::int64_t D = std::int64_t(c.n_heads) * c.d_head;
      for (int l = 0; l < layers; ++l) {
        std::int64_t att_at = 0;
        for (int b = 0; b < pb.B; ++b) {
          const auto& rb = blocks_ref[std::size_t(b)][std::size_t(l)];
          const auto& pbk = pa.blocks[std::size_t(l)];
          const std::int64_t o = std::int64_t(pb.offsets[std::size_t(b)]) * D, n = pb.length(b) * D;
          const std::int64_t na = std::int64_t(c.n_heads) * pb.length(b) * pb.length(b);
          const double mq = max_abs(rb.q), mk = max_abs(rb.k);
          for (std::int64_t i = 0; i < n; ++i) {
            ASSERT_NEAR(pbk.q[std::size_t(o + i)], rb.q[std::size_t(i)], 1e-10 * mq) << "q layer " << l << " seq " << b;
            ASSERT_NEAR(pbk.k[std::size_t(o + i)], rb.k[std::size_t(i)], 1e-10 * mk) << "k layer " << l << " seq " << b;
          }
          for (std::int64_t i = 0; i < na; ++i)
            ASSERT_NEAR(pbk.att[std::size_t(att_at + i)], rb.att[std::size_t(i)], 1e-10) << "att layer " << l << " seq " << b;
          att_at += na;
        }
      }
      for (const auto& ts : lay.tensors) {
        std::vector<double> ref(Gref.begin() + ts.offset, Gref.begin() + ts.offset + ts.size);
        const double m = max_abs(ref);
        for (std::int64_t i = 0; i < ts.size; ++i)
          ASSERT_NEAR(G[std::size_t(ts.offset + i)], ref[std::size_t(i)], 1e-10 * m + 1e-300)
              << ts.name << "[" << i << "]";
      }
    }
}

// Every combination of the architecture options and precisions (the T5 options and bf16 were refused by
// the CUDA device before it ran them) passes the CUDA device's check, up to d_head 512; only a wider head
// is refused, by name, before any device is looked for (the same message with and without a GPU). Where
// no GPU exists make_cuda_device then fails for that reason alone ("no CUDA device"); with one it builds.
TEST(CudaDeviceOptions, EveryOptionIsAcceptedAndOnlyWideHeadsAreRefused) {
  std::string why;
  const bool gpu = cuda_training_available(&why);
  int combos = 0;
  for (auto scale : {AttnScale::inv_sqrt_dhead, AttnScale::none})
    for (auto init : {InitScheme::normal, InitScheme::t5})
      for (bool tie : {false, true})
        for (auto fn : {NormKind::rms, NormKind::layer})
          for (auto prec : {Precision::fp32, Precision::bf16})
            for (int heads : {4, 1}) {
              ModelConfig c;
              c.attn_scale = scale, c.init = init, c.tie_readout = tie, c.final_norm = fn;
              c.n_heads = heads, c.d_head = heads == 1 ? 512 : 16;  // d_head 512: the widest the kernels take
              const std::string what = fmt::format("{} {} tie {} {} {} d_head {}", attn_scale_name(scale),
                                                   init_name(init), tie, norm_kind_name(fn), precision_name(prec),
                                                   c.d_head);
              SCOPED_TRACE(what);
              EXPECT_NO_THROW(check_cuda_supports(c, prec));
              try {
                auto dev = make_cuda_device(c, prec);
                EXPECT_TRUE(gpu) << "a CUDA device was made where none is available";
                EXPECT_EQ(dev->precision(), prec);
                EXPECT_EQ(dev->name(), "cuda");
              } catch (const InputError& e) {
                EXPECT_FALSE(gpu) << e.what();
                EXPECT_EQ(std::string(e.what()).rfind("no CUDA device: ", 0), 0u) << e.what();
              }
              ++combos;
            }
  EXPECT_EQ(combos, 64);
  for (int d_head : {513, 1024}) {
    ModelConfig c;
    c.n_heads = 1, c.d_head = d_head;
    for (auto prec : {Precision::fp32, Precision::bf16}) {
      for (int via_make = 0; via_make < 2; ++via_make) {
        try {
          if (via_make) make_cuda_device(c, prec);
          else check_cuda_supports(c, prec);
          ADD_FAILURE() << "d_head " << d_head << " was accepted";
        } catch (const InputError& e) {
          EXPECT_EQ(std::string(e.what()).rfind("--device cuda does not support d_head " + std::to_string(d_head), 0),
                    0u)
              << e.what();
        }
      }
    }
  }
}

// FIRE (both thresholds), RoPE and input injection (and RoPE with injection) pass the CUDA device's
// check in both precisions; without a GPU make_cuda_device then fails for the missing device alone, with
// one it builds. A d_head the attention kernels cannot hold is refused by name, before any device is
// looked for (the same message on machines with and without a GPU). The packed CPU twin runs all of them
// (PackedPipeline above).
TEST(CudaDeviceOptions, FireRopeAndInputInjectionAreAcceptedWideHeadsRefusedByName) {
  std::string why;
  const bool gpu = cuda_training_available(&why);
  for (int k = 0; k < 6; ++k) {
    ModelConfig c;
    c.n_layers = 2;
    if (k == 0 || k == 1) c.pos_mode = PosMode::fire;
    if (k == 1) c.fire_threshold = FireThreshold::min;
    if (k == 2 || k == 4) c.pos_mode = PosMode::rope;
    if (k == 3 || k == 4) c.input_injection = true;
    if (k == 5) c.d_head = 520, c.d_model = 520, c.n_heads = 1;
    const bool refused = k == 5;
    for (auto prec : {Precision::fp32, Precision::bf16})
      for (int via_make = 0; via_make < 2; ++via_make) {
        SCOPED_TRACE(std::string(pos_mode_name(c.pos_mode)) + (c.input_injection ? " input_injection " : " ") +
                     "d_head " + std::to_string(c.d_head) + " " + precision_name(prec) +
                     (via_make ? " make_cuda_device" : " check_cuda_supports"));
        try {
          if (via_make) make_cuda_device(c, prec);
          else check_cuda_supports(c, prec);
          EXPECT_TRUE(!refused && (gpu || !via_make)) << "accepted";
        } catch (const InputError& e) {
          const std::string want = refused ? "--device cuda does not support d_head" : "no CUDA device: ";
          EXPECT_TRUE(refused || (via_make && !gpu)) << e.what();
          EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
        }
      }
  }
}

// Deferred statistics (TrainDevice::step_async / take_results, Trainer::step_async / finish_steps) are
// the statistics of step() bit for bit, and the weights after them too: on both CPU devices (the CUDA
// device's own check is in test_cuda_train). A plain step() with deferred steps pending is a bug.
TEST(DeferredStats, EqualStepByStep) {
  const ModelConfig mc = small_model(PosMode::coupled, 2);
  TrainConfig tc = fixtures::micro_train(300, 7);
  for (int packed = 0; packed < 2; ++packed) {
    SCOPED_TRACE(packed ? "cpu-packed" : "cpu");
    Trainer a(mc, tc), b(mc, tc);
    if (packed) a.attach_device(make_packed_cpu_device(mc)), b.attach_device(make_packed_cpu_device(mc));
    std::vector<StepStats> one;
    for (int s = 0; s < 7; ++s) one.push_back(a.step());
    std::vector<StepStats> deferred;
    for (int s = 0; s < 7; ++s) {
      const StepStats st = b.step_async();
      EXPECT_EQ(st.tokens, one[std::size_t(s)].tokens);
      EXPECT_TRUE(std::isnan(st.loss));
      if (s == 3) {
        EXPECT_THROW(b.step(), InvariantError);
        for (const auto& x : b.finish_steps()) deferred.push_back(x);
      }
    }
    for (const auto& x : b.finish_steps()) deferred.push_back(x);
    ASSERT_EQ(deferred.size(), one.size());
    for (std::size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(deferred[i].loss, one[i].loss) << i;
      EXPECT_EQ(deferred[i].grad_norm, one[i].grad_norm) << i;
      EXPECT_EQ(deferred[i].targets, one[i].targets) << i;
    }
    EXPECT_EQ(a.params(), b.params());
    EXPECT_TRUE(b.finish_steps().empty());
  }
}

TEST(AdamW, ScalarsAndClipping) {
  TrainConfig tc;
  tc.steps = 1000;
  tc.lr = 1e-3;
  tc.grad_clip = 1.0;
  EXPECT_DOUBLE_EQ(adam_scalars(tc, 5, 4.0).clip, 0.25);
  EXPECT_DOUBLE_EQ(adam_scalars(tc, 5, 0.5).clip, 1.0);
  tc.grad_clip = 0;
  EXPECT_DOUBLE_EQ(adam_scalars(tc, 5, 4.0).clip, 1.0);
  // One hand-computed element: t = 1, lr_at(1) = lr / warmup(10 steps) = 1e-4; bias corrections make
  // the first update lr_t * g / (|g| + eps') = lr_t * sign(g) up to eps.
  const AdamScalars s = adam_scalars(tc, 1, 1.0);
  float p = 1.f, m = 0.f, v = 0.f;
  const float g = 0.5f;
  adamw_update(&p, &m, &v, &g, 1, s);
  EXPECT_NEAR(p, 1.f - 1e-4f, 1e-9);
  EXPECT_FLOAT_EQ(m, 0.05f);
}

namespace {
TrainConfig trainer_cfg() {
  TrainConfig t = fixtures::micro_train(2000, 400);
  t.eval_samples = 20;
  return t;
}
}  // namespace

// The device path trains on exactly the CPU trainer's batches. After 40 CPU steps (a model that tells
// batches apart) both trainers take step 41 from the same state: same loss and gradient norm up to
// fp32 summation order (the CPU trainer sums per sequence and per thread, the packed pipeline over the
// whole batch; relative differences ~1e-7 observed, bounded by ~C eps = 32 * 6e-8 per dot product,
// hence 1e-5 for the loss and 1e-4 for the norm). The batch of another step gives a loss further off
// than 100x that tolerance: the check can tell batches apart.
TEST(DevicePath, SameBatchesAsTheCpuTrainer) {
  const ModelConfig mc = fixtures::micro_model();
  const TrainConfig tc = trainer_cfg();
  Trainer cpu(mc, tc);
  for (int s = 0; s < 40; ++s) cpu.step();
  const std::string dir = scratch("same");
  cpu.save(dir);
  Trainer dev(mc, tc);
  dev.load_checkpoint(dir);
  dev.attach_device(make_packed_cpu_device(mc));
  Acts<float> pa;
  const PackedBatch other = dev.packed_batch(42);
  const double other_loss = double(model_forward(pa, cpu.view(), batch_of(other))) / double(other.counted_targets);
  const StepStats a = cpu.step(), b = dev.step();
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_NEAR(b.loss, a.loss, 1e-5 * a.loss);
  EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-4 * a.grad_norm);
  EXPECT_GT(std::abs(other_loss - a.loss), 100 * 1e-5 * a.loss) << "batches of different steps should differ";
  // And the update: same state, gradients equal up to fp32 order -> weights within a small fraction of
  // one step (lr = 1e-2 here, so 1e-4 is 1% of a full step; a wrong gradient moves them by O(lr)).
  const auto& pc = cpu.params();
  const auto& pd = dev.params();
  double worst = 0;
  for (std::size_t i = 0; i < pc.size(); ++i) worst = std::max(worst, double(std::abs(pc[i] - pd[i])));
  EXPECT_LT(worst, 1e-4);
  std::filesystem::remove_all(dir);
}

namespace {
std::uint64_t fnv1a(const std::vector<float>& p) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto* b = reinterpret_cast<const unsigned char*>(p.data());
  for (std::size_t i = 0; i < p.size() * sizeof(float); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}
}  // namespace

// The CPU trainer as a device (CpuDevice, the default) repeats the arithmetic of the per-sequence CPU
// trainer that Trainer::step ran before it became a device, bit for bit: 20 steps of the micro model
// give exactly the per-step loss and gradient norm and the final weights (FNV-1a of their bytes) that
// the former trainer computed (recorded from a build of commit 530f246 on x86-64, Debian 12: g++ 12.2,
// Eigen 3.4.0, glibc 2.36). Exact, because every sum has a fixed order: Eigen's GEMM blocking depends
// only on the shapes, each thread owns a fixed block of sequences, per-thread gradients are reduced in
// thread order. A libm whose expf/tanhf/logf round differently, or Eigen built for another SIMD width,
// changes the last bits: then this test fails and the next one (tolerance) still holds.
TEST(CpuDevice, RepeatsTheFormerCpuTrainerBitForBit) {
  const double expected[20][2] = {
{0x1.5512ff417d05fp+1, 0x1.d40a4996b14cbp+0},
      {0x1.4864a526b6527p+1, 0x1.afe6d024d05c3p+0},
      {0x1.33ffbed097b42p+1, 0x1.9f894395828e4p+0},
      {0x1.21edbdc47711ep+1, 0x1.b8f9dbdd5be6fp+0},
      {0x1.0531f0f23c8f2p+1, 0x1.b57b059998c02p+0},
      {0x1.fc0c792492492p+0, 0x1.0b2aa2a7f7467p+0},
      {0x1.f0a856c7ec7ecp+0, 0x1.f9ecb76392831p-1},
      {0x1.011f9e4b5edcfp+1, 0x1.dc5fd87fe00ccp+2},
      {0x1.c28b71f1165e7p+0, 0x1.60725808edf65p+0},
      {0x1.b3a42bbd1b03ep+0, 0x1.45e30e8793a56p+0},
      {0x1.a5b456e74f44ep+0, 0x1.8e4a7f99ece48p+0},
      {0x1.7808633bb06a2p+0, 0x1.c04789fe38ed8p-1},
      {0x1.82cb4c30c30c3p+0, 0x1.b56fdec8ca7ep+0},
      {0x1.702dafa04c8f9p+0, 0x1.c632b8c9268bdp-1},
      {0x1.690398e177c7ap+0, 0x1.3c3004a8de549p+0},
      {0x1.4171060299571p+0, 0x1.6ab4cfcad079ep-1},
      {0x1.526e38e80a16bp+0, 0x1.6151f09d31609p+0},
      {0x1.4fccb14e5e0a7p+0, 0x1.a05ae1b0aed9ep-1},
      {0x1.3da5b611a7b96p+0, 0x1.4def2b03715d3p+1},
      {0x1.4971605fb3707p+0, 0x1.d8b88df2e418p+0},
  };
  Trainer tr(fixtures::micro_model(), trainer_cfg());
  ASSERT_EQ(tr.device().name(), "cpu");
  for (int s = 0; s < 20; ++s) {
    const StepStats st = tr.step();
    EXPECT_EQ(st.loss, expected[s][0]) << "step " << s + 1;
    EXPECT_EQ(st.grad_norm, expected[s][1]) << "step " << s + 1;
  }
  EXPECT_EQ(fnv1a(tr.params()), 0x9d446ec6952c60eeull);
}

// CpuDevice (one sequence at a time, per-thread sums) and PackedCpuDevice (the whole varlen batch in one
// pass) train the same 20 steps from the same initial state. Their arithmetic differs only in summation
// order (GEMMs over the R rows of the batch instead of one sequence's, one gradient sum over the batch
// instead of per sequence and thread): ~1e-7 relative per step at equal weights (DevicePath above). Over
// 20 steps at lr 1e-2 that difference is carried along, not amplified: measured 7e-7 relative for the
// losses and 5e-7 absolute for the weights (printed; 6e-7 and 6e-7 with the former padded batches), so
// 1e-5 for both leaves a 14x margin. A different batch, a wrong
// gradient or a missed pass moves the loss of the very next step by far more (DevicePath: another
// step's batch is > 100x the tolerance away), and the weights by O(lr) = 1e-2.
TEST(CpuDevice, TrainsLikeThePackedTwin) {
  Trainer cpu(fixtures::micro_model(), trainer_cfg()), packed(fixtures::micro_model(), trainer_cfg());
  packed.attach_device(make_packed_cpu_device(fixtures::micro_model()));
  double worst_loss = 0;
  for (int s = 0; s < 20; ++s) {
    const StepStats a = cpu.step(), b = packed.step();
    EXPECT_EQ(a.targets, b.targets);
    EXPECT_NEAR(b.loss, a.loss, 1e-5 * a.loss) << "step " << s + 1;
    worst_loss = std::max(worst_loss, std::abs(b.loss - a.loss) / a.loss);
  }
  const auto& pc = cpu.params();
  const auto& pp = packed.params();
  double worst = 0;
  for (std::size_t i = 0; i < pc.size(); ++i) worst = std::max(worst, double(std::abs(pc[i] - pp[i])));
  std::printf("CpuDevice vs PackedCpuDevice over 20 steps: max relative loss difference %.2e, max |weight "
              "difference| %.2e\n", worst_loss, worst);
  EXPECT_LT(worst, 1e-5);
  // Not vacuous: the weights moved by far more than the tolerance.
  Trainer fresh(fixtures::micro_model(), trainer_cfg());
  double moved = 0;
  for (std::size_t i = 0; i < pc.size(); ++i) moved = std::max(moved, double(std::abs(pc[i] - fresh.params()[i])));
  EXPECT_GT(moved, 100 * 1e-5);
}

// Frozen position codes take no step on either CPU device, with weight decay on (the decay would move
// them if the update walked them): after 5 steps every frozen table is bit-identical to its
// initialization while the learned tensors moved; the CUDA device walks the same segments
// (test_cuda_train, skipped without a GPU).
TEST(PosCodes, FrozenTablesTakeNoStep) {
  for (const char* codes : {"learned,shuffled", "frozen", "hypercube,learned"}) {
    SCOPED_TRACE(codes);
    ModelConfig mc = small_model(PosMode::coupled, 1);
    mc.d_model = 32;
    from_json(nlohmann::json{{"pos_codes", codes}}, mc);
    TrainConfig tc = fixtures::micro_train(300, 7);
    tc.weight_decay = 0.1;
    for (int packed = 0; packed < 2; ++packed) {
      SCOPED_TRACE(packed ? "cpu-packed" : "cpu");
      Trainer tr(mc, tc);
      if (packed) tr.attach_device(make_packed_cpu_device(mc));
      const std::vector<float> before = tr.params();
      for (int s = 0; s < 5; ++s) tr.step();
      const Layout lay = Layout::make(mc);
      for (const auto& t : lay.tensors) {
        bool same = true;
        for (std::int64_t i = t.offset; i < t.offset + t.size; ++i) same = same && tr.params()[std::size_t(i)] == before[std::size_t(i)];
        EXPECT_EQ(same, !t.trainable) << t.name << (t.trainable ? " did not move" : " is frozen but moved");
      }
    }
  }
}

// On the device path, resume == uninterrupted, bit for bit (files compared byte for byte), and the
// evaluation through the device (packed batches) gives the CPU evaluation's counts.
TEST(DevicePath, ResumeIsBitIdenticalAndEvalMatches) {
  const ModelConfig mc = fixtures::micro_model();
  TrainConfig tc = trainer_cfg();
  tc.steps = 60;
  tc.eval_every = 0;
  tc.checkpoint_every = 0;
  const std::string a = scratch("full"), b = scratch("resumed");
  run_training(mc, tc, a, false, 0, quiet_progress(), make_packed_cpu_device(mc));
  run_training(mc, tc, b, false, 25, quiet_progress(), make_packed_cpu_device(mc));
  const auto rep = run_training(mc, tc, b, true, 0, quiet_progress(), make_packed_cpu_device(mc));
  EXPECT_EQ(rep["device"], "cpu-packed");
  EXPECT_EQ(read_file(a + "/checkpoint.safetensors"), read_file(b + "/checkpoint.safetensors"));
  EXPECT_EQ(read_file(a + "/model.safetensors"), read_file(b + "/model.safetensors"));
  // --max-seconds: a (tiny) time limit stops after the first step, with a checkpoint; resuming gives the
  // uninterrupted run's bits.
  const std::string c = scratch("timed");
  const auto part = run_training(mc, tc, c, false, 0, quiet_progress(), make_packed_cpu_device(mc), 1e-9);
  EXPECT_EQ(part["steps"], 1);
  EXPECT_EQ(part["finished"], false);
  run_training(mc, tc, c, true, 0, quiet_progress(), make_packed_cpu_device(mc));
  EXPECT_EQ(read_file(a + "/checkpoint.safetensors"), read_file(c + "/checkpoint.safetensors"));
  std::filesystem::remove_all(c);
  // Batched evaluation == per-sequence CPU evaluation (same verdict rule; argmax gaps far above fp32
  // summation-order noise for this model, so the counts agree exactly).
  const LoadedModel lm = load_model_dir(a);
  auto dev = make_packed_cpu_device(mc);
  const std::vector<float> zeros(lm.params.size(), 0.f);
  dev->set_state(lm.params, zeros, zeros);
  for (auto [n, m] : {std::pair{2, 2}, std::pair{2, 3}, std::pair{3, 3}}) {
    const auto c1 = eval_cell(lm.view(), n, m, 50, 9, 2, EvalMode::teacher);
    const auto c2 = eval_cell(lm.view(), n, m, 50, 9, 2, EvalMode::teacher, dev.get());
    EXPECT_EQ(c1.exact, c2.exact) << n << "x" << m;
    EXPECT_EQ(c1.fits, c2.fits);
  }
  EXPECT_THROW(eval_cell(lm.view(), 2, 2, 5, 9, 1, EvalMode::greedy, dev.get()), InputError);
  // The 60-step model above scores 0 exact on those cells, so equal counts say little: the committed
  // trained model (100% teacher-forced there) makes them meaningful.
  const LoadedModel tm = load_model_dir(manyadd::testing::source_path("models/cpu-sa1010-1l4h-d64"));
  auto tdev = make_packed_cpu_device(tm.cfg);
  const std::vector<float> tz(tm.params.size(), 0.f);
  tdev->set_state(tm.params, tz, tz);
  for (auto [n, m] : {std::pair{3, 3}, std::pair{10, 10}}) {
    const auto c1 = eval_cell(tm.view(), n, m, 20, 9, 2, EvalMode::teacher);
    const auto c2 = eval_cell(tm.view(), n, m, 20, 9, 2, EvalMode::teacher, tdev.get());
    EXPECT_EQ(c1.exact, 20) << n << "x" << m;
    EXPECT_EQ(c2.exact, c1.exact) << n << "x" << m;
  }
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);
}

namespace {
// A device that records a fingerprint of every batch it trains on (then trains on it with the packed CPU
// twin), taking a random 0-3 ms first: the packing thread then finishes sometimes before, sometimes
// after the step that waits for it.
std::uint64_t fingerprint(const PackedBatch& pb) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mixin = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  };
  mixin(pb.offsets.data(), pb.offsets.size() * 4);
  mixin(pb.tokens.data(), pb.tokens.size());
  mixin(pb.targets.data(), pb.targets.size() * 4);
  for (const auto& p : pb.pos) mixin(p.data(), p.size() * 4);
  return h;
}
class RecordingDevice final : public TrainDevice {
 public:
  RecordingDevice(const ModelConfig& c, std::uint64_t seed) : inner_(make_packed_cpu_device(c)), rng_(seed) {}
  std::string name() const override { return "recording"; }
  Precision precision() const override { return inner_->precision(); }
  void set_state(const std::vector<float>& p, const std::vector<float>& m, const std::vector<float>& v) override {
    inner_->set_state(p, m, v);
  }
  void get_state(std::vector<float>& p, std::vector<float>& m, std::vector<float>& v) override {
    inner_->get_state(p, m, v);
  }
  StepResult step(const PackedBatch& pb, float s, const TrainConfig& tc, std::int64_t t) override {
    std::this_thread::sleep_for(std::chrono::microseconds(rng_.uniform(0, 3000)));
    seen.emplace_back(t, fingerprint(pb));
    return inner_->step(pb, s, tc, t);
  }
  double gradient(const PackedBatch& pb, float s, std::vector<float>& g) override { return inner_->gradient(pb, s, g); }
  void predict(const PackedBatch& pb, std::vector<std::uint8_t>& a) override { inner_->predict(pb, a); }
  std::vector<std::pair<std::int64_t, std::uint64_t>> seen;  // (step, batch fingerprint)

 private:
  std::unique_ptr<TrainDevice> inner_;
  Rng rng_;
};
}  // namespace

// The packing thread (Trainer::step_async packs step t + 1 on a worker while step t computes) hands the
// device exactly the batches packed on the calling thread (packed_batch(t) of a fresh trainer), in step
// order, whatever the timing (random device delays; the caller sampling other steps' batches meanwhile);
// after a checkpoint is loaded the batch packed ahead for the old position is dropped, and training
// continues with the checkpoint's next step.
TEST(PackingThread, SameBatchesWhateverTheTiming) {
  const ModelConfig mc = fixtures::micro_model();
  const TrainConfig tc = fixtures::micro_train(300, 40);
  Trainer fresh(mc, tc);
  std::vector<std::uint64_t> want(41);
  for (int t = 1; t <= 40; ++t) want[std::size_t(t)] = fingerprint(fresh.packed_batch(t));
  EXPECT_NE(want[1], want[2]);
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("delays seed " + std::to_string(seed));
    Trainer tr(mc, tc);
    auto dev = std::make_shared<RecordingDevice>(mc, seed);
    tr.attach_device(dev);
    for (int s = 0; s < 12; ++s) {
      tr.step_async();
      if (s % 3 == 0) {  // the caller samples while the worker packs
        EXPECT_EQ(fingerprint(tr.packed_batch(40 - s)), want[std::size_t(40 - s)]);
      }
      if (s % 4 == 3) tr.finish_steps();
    }
    tr.finish_steps();
    const std::string dir = scratch("packing_" + std::to_string(seed));
    tr.save(dir);  // at step 12; the worker holds step 13's batch
    for (int s = 0; s < 3; ++s) tr.step();
    tr.load_checkpoint(dir);  // back to step 12: step 16's batch, packed ahead, must not be used
    for (int s = 0; s < 3; ++s) tr.step();
    std::filesystem::remove_all(dir);
    ASSERT_EQ(dev->seen.size(), 18u);
    for (std::size_t i = 0; i < dev->seen.size(); ++i) {
      const std::int64_t t = i < 15 ? std::int64_t(i) + 1 : std::int64_t(i) - 2;
      EXPECT_EQ(dev->seen[i].first, t) << i;
      EXPECT_EQ(dev->seen[i].second, want[std::size_t(t)]) << "step " << t;
    }
  }
  // The last step packs nothing ahead, and a run of one step trains on step 1's batch.
  TrainConfig one = tc;
  one.steps = 1;
  Trainer tr(mc, one);
  auto dev = std::make_shared<RecordingDevice>(mc, 4);
  tr.attach_device(dev);
  tr.step();
  ASSERT_EQ(dev->seen.size(), 1u);
  EXPECT_EQ(dev->seen[0].second, want[1]);
}
