// Training end to end on a micro problem (seconds): the loss must fall and exact match on a tiny fixed
// set must reach 100%; teacher-forced and greedy (KV cache) decoding agree; checkpoints round-trip
// bit for bit; a resumed run equals an uninterrupted one bit for bit.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <set>


#include "manyadd/learn/cli/cli_common.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/runs/train.hpp"
#include "learn_fixtures.hpp"

using namespace manyadd;
using namespace manyadd::learn;

namespace {
// 2500 steps reach ~99%; 4000 reach 100% on 8000 in-distribution instances (measured), a margin for the
// exact-match test.
TrainConfig micro_train() { return fixtures::micro_train(5000, 4000); }
TrainConfig with_precision(TrainConfig t, const char* p) {
  t.precision = p;
  return t;
}
using fixtures::scratch;

// One micro run shared by the tests below (training once keeps the suite within its time budget), in
// fp32 and the same run in bf16 mixed precision.
struct Micro {
  ModelConfig mc = fixtures::micro_model();
  TrainConfig tc = micro_train();
  Trainer tr{mc, tc};
  double first_loss = 0, last_loss = 0;
  explicit Micro(const char* precision = "fp32") : tc(with_precision(micro_train(), precision)) {
    const int window = 100;
    for (std::int64_t s = 1; s <= tc.steps; ++s) {
      const double l = tr.step().loss;
      if (s <= window) first_loss += l / window;
      if (s > tc.steps - window) last_loss += l / window;
    }
  }
};
Micro& micro() {
  static Micro m;
  return m;
}
Micro& micro_bf16() {
  static Micro m("bf16");
  return m;
}
}  // namespace

// Chance level on a digit is ln 10 = 2.30; the first 100 steps average ~1.3 (the model quickly learns
// the separators and the zero padding). With learning intact this run ends at a mean loss of ~5e-5
// over its last 100 steps (measured on this machine). The bound 0.005 is 100x above that, and below
// both failure modes seen while tuning: the format-only plateau (~1.0, before carries are learned) and
// a half-learned model (loss ~0.02 at ~95% exact match, this configuration stopped at 1500 steps).
TEST(LearnTrain, MicroRunLossFalls) {
  auto& m = micro();
  std::printf("micro run: mean loss first 100 steps %.4f, last 100 steps %.5f\n", m.first_loss, m.last_loss);
  EXPECT_GT(m.first_loss, 0.5);
  EXPECT_LT(m.last_loss, 0.005);
}

// A tiny fixed set: 10 instances of each in-distribution TA cell; every one must be exactly right,
// teacher-forced and greedy.
TEST(LearnTrain, MicroRunExactOnTinyFixedSet) {
  auto& m = micro();
  Rng rng(2024);
  Acts<float> a;
  int total = 0, ok_tf = 0, ok_gr = 0;
  for (int n = 1; n <= 2; ++n)
    for (int k = 2; k <= 3; ++k)
      for (int i = 0; i < 10; ++i) {
        const Example ex = make_example(sample_TA(rng, n, k), m.mc, 1, 1);
        ok_tf += teacher_forced_correct(a, m.tr.view(), ex);
        ok_gr += greedy_correct(m.tr.view(), ex);
        ++total;
      }
  EXPECT_EQ(ok_tf, total);
  EXPECT_EQ(ok_gr, total);
}

// The micro run in bf16 mixed precision (the CpuDevice with the bf16 rounding points) learns the task
// as the fp32 run does: its loss falls below the same bound (0.005, argued at MicroRunLossFalls; the
// bf16 run ends at ~3e-4, measured here, against ~5e-5 in fp32: bf16 inputs put a floor of about u =
// 2^-9 relative on every logit, so the last per-token losses stop falling earlier) and it answers at
// least 38 of the same fixed 40 instances exactly (95%), teacher-forced in bf16 (the precision it trained
// in), in fp32 (its weights are fp32), and greedy. Not all 40: whether a 4000-step micro run ends exact
// on every instance depends on its trajectory, i.e. on the seed and on every rounding. Measured with
// the CLI (this configuration, seeds 1-6, 200 samples per in-distribution cell): in bf16, 3 of 6 seeds
// exact on every cell with the attention in fp32 (before the attention's bf16 rounding points), 4 of 6
// with them, the others 86-99% on the n = 2 cells; in fp32, 6 of 6 exact. This seed answers 39 of 40 since the attention's
// rounding points were added (40 before). A model that did not learn (a broken rounding, a wrong
// gradient) scores near 0 here and keeps a loss far above the bound.
TEST(LearnTrain, MicroRunInBf16LearnsLikeFp32) {
  auto& m = micro_bf16();
  std::printf("micro run in bf16: mean loss first 100 steps %.4f, last 100 steps %.5f\n", m.first_loss, m.last_loss);
  EXPECT_EQ(m.tr.device().precision(), Precision::bf16);
  EXPECT_GT(m.first_loss, 0.5);
  EXPECT_LT(m.last_loss, 0.005);
  Rng rng(2024);  // the instances of MicroRunExactOnTinyFixedSet
  Acts<float> a;
  const ModelView<float> v32 = m.tr.view(), v16{m.mc, m.tr.layout(), m.tr.params().data(), Precision::bf16};
  int total = 0, ok16 = 0, ok32 = 0, okgr = 0;
  for (int n = 1; n <= 2; ++n)
    for (int k = 2; k <= 3; ++k)
      for (int i = 0; i < 10; ++i) {
        const Example ex = make_example(sample_TA(rng, n, k), m.mc, 1, 1);
        ok16 += teacher_forced_correct(a, v16, ex);
        ok32 += teacher_forced_correct(a, v32, ex);
        okgr += greedy_correct(v16, ex);
        ++total;
      }
  std::printf("micro run in bf16: exact on %d (bf16), %d (fp32), %d (greedy) of %d instances\n", ok16, ok32, okgr,
              total);
  EXPECT_GE(ok16, total - 2);
  EXPECT_GE(ok32, total - 2);
  EXPECT_GE(okgr, total - 2);
}

// data_seed: -1 (the default) is the seed, so earlier runs are unchanged (CpuDevice's bit-for-bit
// test in test_learn_batch runs the default); an explicit data_seed equal to the seed is the same run;
// another data seed changes the training set and order but not the initialization or the offsets'
// generator; another seed with the same data seed keeps the data.
TEST(LearnTrain, DataSeedSelectsTheDataOnly) {
  const ModelConfig mc = fixtures::micro_model();
  TrainConfig tc = fixtures::micro_train(300, 10);
  tc.seed = 5;
  auto tokens = [&](const TrainConfig& t, std::int64_t step) {
    Trainer tr(mc, t);
    return tr.packed_batch(step).tokens;
  };
  TrainConfig same = tc, other = tc, reseeded = tc;
  same.data_seed = 5;
  other.data_seed = 6;
  reseeded.seed = 9, reseeded.data_seed = 5;
  EXPECT_EQ(tokens(tc, 3), tokens(same, 3));
  EXPECT_NE(tokens(tc, 3), tokens(other, 3));
  EXPECT_EQ(tokens(tc, 3), tokens(reseeded, 3));  // same problems, same order (offsets are not tokens)
  EXPECT_EQ(Trainer(mc, tc).params(), Trainer(mc, other).params());
  EXPECT_NE(Trainer(mc, tc).params(), Trainer(mc, reseeded).params());
}

// Teacher-forced argmax and greedy decoding see the same prefix up to the first wrong token, so the
// greedy output must equal the teacher-forced predictions up to and including that token. Checked on
// instances in and out of the training distribution (where the model makes mistakes, so the
// divergence point is exercised too).
TEST(LearnTrain, TeacherForcedEqualsGreedy) {
  auto& m = micro();
  Rng rng(77);
  Acts<float> a;
  int wrong = 0;
  for (int i = 0; i < 60; ++i) {
    const int n = int(rng.uniform(1, 3)), k = int(rng.uniform(2, 4));
    const Shape s = Shape::make(n, k, Padding::minimal);
    if (!shape_fits(m.mc, s)) continue;
    const Example ex = make_example(sample_TA(rng, n, k), m.mc, 1, 1);
    std::vector<std::uint8_t> tf, gr;
    const bool ok_tf = teacher_forced_correct(a, m.tr.view(), ex, &tf);
    const bool ok_gr = greedy_correct(m.tr.view(), ex, &gr);
    EXPECT_EQ(ok_tf, ok_gr);
    wrong += !ok_tf;
    // First position where teacher-forced disagrees with the target (or the end).
    const auto eq = std::size_t(s.eq_index());
    std::size_t k1 = 0;
    while (k1 < tf.size() && tf[k1] == ex.targets[eq + k1]) ++k1;
    const std::size_t upto = std::min(tf.size(), k1 + 1);
    ASSERT_GE(gr.size(), std::min(upto, gr.size()));
    for (std::size_t j = 0; j < upto && j < gr.size(); ++j) EXPECT_EQ(gr[j], tf[j]) << "index " << j;
    if (k1 < tf.size() && tf[k1] != kDollar) {
      EXPECT_GT(gr.size(), k1);
    }
  }
  std::printf("teacher/greedy compared on 60 instances, %d wrong answers among them\n", wrong);
}

TEST(LearnTrain, CheckpointRoundTripIsExact) {
  auto& m = micro();
  const std::string dir = scratch("roundtrip");
  m.tr.save(dir);
  const LoadedModel lm = load_model_dir(dir);
  ASSERT_EQ(lm.params.size(), m.tr.params().size());
  EXPECT_EQ(0, std::memcmp(lm.params.data(), m.tr.params().data(), lm.params.size() * sizeof(float)));
  EXPECT_EQ(lm.cfg.d_model, m.mc.d_model);
  // The optimizer state (Adam moments) round-trips through checkpoint.safetensors; ResumeIsBitIdentical
  // shows it is all a run needs.
  Trainer a(m.mc, m.tc);
  a.load_checkpoint(dir);
  EXPECT_EQ(a.steps_done(), m.tc.steps);
  EXPECT_EQ(0, std::memcmp(a.params().data(), m.tr.params().data(), lm.params.size() * sizeof(float)));
  std::filesystem::remove_all(dir);
}

// 40 steps straight vs 20 steps, checkpoint, a fresh trainer restored from it, 20 more steps.
TEST(LearnTrain, ResumeIsBitIdentical) {
  ModelConfig mc = fixtures::micro_model();
  TrainConfig tc = micro_train();
  tc.steps = 40;
  tc.train_size = 300;  // several epochs in 40 x 16 samples: the reshuffle is crossed on resume
  Trainer straight(mc, tc);
  for (int i = 0; i < 40; ++i) straight.step();
  const std::string dir = scratch("resume");
  {
    Trainer first(mc, tc);
    for (int i = 0; i < 20; ++i) first.step();
    first.save(dir);
  }
  Trainer second(mc, tc);
  second.load_checkpoint(dir);
  ASSERT_EQ(second.steps_done(), 20);
  for (int i = 0; i < 20; ++i) second.step();
  ASSERT_EQ(straight.params().size(), second.params().size());
  EXPECT_EQ(0, std::memcmp(straight.params().data(), second.params().data(), straight.params().size() * sizeof(float)));
  // The comparison is not vacuous: training moved the weights.
  Trainer fresh(mc, tc);
  EXPECT_NE(0, std::memcmp(straight.params().data(), fresh.params().data(), fresh.params().size() * sizeof(float)));
  std::filesystem::remove_all(dir);
}

// Thread count does not change the result beyond float reassociation of the gradient reduction; the
// run is deterministic for a fixed thread count (two runs, same bits).
TEST(LearnTrain, DeterministicForFixedThreads) {
  ModelConfig mc = fixtures::micro_model();
  TrainConfig tc = micro_train();
  tc.steps = 10;
  Trainer a(mc, tc), b(mc, tc);
  for (int i = 0; i < 10; ++i) a.step(), b.step();
  EXPECT_EQ(0, std::memcmp(a.params().data(), b.params().data(), a.params().size() * sizeof(float)));
}

TEST(LearnTrain, LearningRateSchedule) {
  TrainConfig tc;
  tc.steps = 1000;
  tc.lr = 1.0;
  EXPECT_DOUBLE_EQ(lr_at(tc, 1), 0.1);    // warm-up over 1% = 10 steps
  EXPECT_DOUBLE_EQ(lr_at(tc, 10), 1.0);   // peak
  EXPECT_NEAR(lr_at(tc, 1000), 0.1, 1e-12);  // cosine ends at 0.1 lr
  EXPECT_NEAR(lr_at(tc, 505), 0.55, 1e-12);  // half-way through the decay: (1 + 0.1) / 2
  // Warm-up from 0 (the authors' LambdaLR): step t runs at the value of step t - 1; the first at lr 0.
  TrainConfig z = tc;
  z.warmup_from_zero = true;
  EXPECT_EQ(lr_at(z, 1), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(z, 2), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(z, 11), 1.0);
  for (std::int64_t t = 2; t <= 1000; ++t) ASSERT_EQ(lr_at(z, t), lr_at(tc, t - 1)) << t;
}

// Targets: only the response and the final EOS carry loss.
TEST(LearnData, TargetsCoverResponseAndEos) {
  ModelConfig c;
  const Problem p = parse_problem("57+48+96");
  const Shape s = shape_of(p);
  const Example ex = make_example(p, c, 1, 1);
  ASSERT_EQ(ex.T(), s.N());
  for (std::int64_t k = 0; k < s.N(); ++k) {
    if (k < s.eq_index()) EXPECT_EQ(ex.targets[std::size_t(k)], -1);
    else if (k + 1 < s.N()) EXPECT_EQ(ex.targets[std::size_t(k)], ex.tokens[std::size_t(k + 1)]);
    else EXPECT_EQ(ex.targets[std::size_t(k)], kDollar);
  }
}

// Training offsets stay inside the tables and cover the admissible range.
TEST(LearnData, RandomOffsetsStayInRange) {
  ModelConfig c;
  c.max_pos1 = 9;
  c.max_pos2 = 7;
  Rng rng(5);
  const Problem p = parse_problem("123+4+56");  // l = digits(3 x 999) = 4, m = 3
  const Shape shape = shape_of(p);
  ASSERT_EQ(shape.l, 4);
  std::set<int> s1s;
  for (int i = 0; i < 300; ++i) {
    const Example ex = make_train_example(p, c, rng);
    int mx1 = 0, mx2 = 0;
    for (auto v : ex.pos[0]) mx1 = std::max(mx1, int(v));
    for (auto v : ex.pos[1]) mx2 = std::max(mx2, int(v));
    EXPECT_LE(mx1, c.max_pos1);
    EXPECT_LE(mx2, c.max_pos2);
    s1s.insert(mx1);
  }
  // s1 in [1, max_pos1 - l] and the largest level-1 ID is s1 + l: every value in [l + 1, max_pos1] occurs.
  EXPECT_EQ(int(s1s.size()), c.max_pos1 - shape.l);
}

namespace {
// A random 2-layer model for the decoding tests (init_std 0.5: far from uniform attention).
ModelConfig decode_model(PosMode mode) {
  ModelConfig c;
  c.n_layers = 2;
  c.d_model = 24;
  c.d_head = 6;
  c.d_ff = 20;
  c.pos_mode = mode;
  c.max_pos1 = mode == PosMode::absolute ? 60 : 10;
  c.max_pos2 = 8;
  c.init_std = 0.5f;
  c.abacus_k = 2;
  return c;
}
// Every mode an addition model can have (coupled3 reads three levels), and input injection; FIRE with
// either threshold, its L moved into the sequence (init_params gives 256) by the tests' weights.
std::vector<ModelConfig> decode_models() {
  std::vector<ModelConfig> v;
  for (PosMode m : kPosModes)
    if (m != PosMode::coupled3) v.push_back(decode_model(m));
  ModelConfig f = decode_model(PosMode::fire);
  f.fire_threshold = FireThreshold::min;
  v.push_back(f);
  ModelConfig inj = decode_model(PosMode::rope);
  inj.input_injection = true;
  v.push_back(inj);
  return v;
}
}  // namespace

// The KV-cache decoder against the full forward, position by position: for every prefix length k the
// greedy step after tokens[0..k] must give the full forward's argmax at k. Random 2-layer models in
// every position mode, so every layer's cache and every embedding path is exercised. Positions whose
// top-two logits are within 1e-4 are skipped (fp32 summation order differs between the two paths,
// ~1e-6 relative; a genuine near-tie may flip legitimately).
TEST(LearnDecode, KvCacheMatchesFullForwardAllModes) {
  for (const ModelConfig& c : decode_models()) {
    const PosMode mode = c.pos_mode;
    const Layout lay = Layout::make(c);
    auto P = init_params<float>(c, lay, 99 + int(mode));
    if (mode == PosMode::fire) P[std::size_t(lay.fire_L_sqrt)] = 3.1f, P[std::size_t(lay.fire_c)] = 0.7f;  // L = 9.61
    const Example ex = make_example(parse_problem("123+45+6+78"), c, 2, 1);
    Acts<float> a;
    const ModelView<float> model{c, lay, P.data()};
    model_forward(a, model, batch_of(ex));
    KvDecoder dec(model);
    int compared = 0;
    for (int k = 0; k < ex.T(); ++k) {
      const float* z = a.logits.data() + std::size_t(k) * kVocab;
      std::vector<float> s(z, z + kVocab);
      std::sort(s.rbegin(), s.rend());
      if (s[0] - s[1] < 1e-4f) continue;
      const std::vector<std::uint8_t> prefix(ex.tokens.begin(), ex.tokens.begin() + k + 1);
      const auto out = dec.greedy(prefix, ex.pos, 1);
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(int(out[0]), int(std::max_element(z, z + kVocab) - z)) << pos_mode_name(mode) << " k=" << k;
      ++compared;
    }
    EXPECT_GT(compared, ex.T() / 2) << pos_mode_name(mode);
  }
}

// Greedy decoding over many steps: after the prompt, every new token is one model_forward row against
// the cached keys/values (past > 0). Each generated token must be the full forward's argmax at its
// position, the full forward run on the decoder's own output (prompt + generated tokens). Random
// 2-layer models in every position mode, every prompt length. Positions whose top-two logits are
// within 1e-4 are skipped (the two paths sum in different orders, ~1e-6 relative in fp32; a genuine
// near-tie may flip legitimately).
TEST(LearnDecode, GreedyEqualsFullForwardArgmaxAtEveryStep) {
  for (const ModelConfig& c : decode_models()) {
    const PosMode mode = c.pos_mode;
    const Layout lay = Layout::make(c);
    auto P = init_params<float>(c, lay, 7 + int(mode));
    if (mode == PosMode::fire) P[std::size_t(lay.fire_L_sqrt)] = 3.1f, P[std::size_t(lay.fire_c)] = 0.7f;  // L = 9.61
    const ModelView<float> model{c, lay, P.data()};
    const Example ex = make_example(parse_problem("123+45+6+78"), c, 2, 1);
    const KvDecoder dec(model);
    Acts<float> a;
    int cached_steps = 0;
    for (int k = 1; k < ex.T(); ++k) {
      const std::vector<std::uint8_t> prefix(ex.tokens.begin(), ex.tokens.begin() + k);
      const auto gen = dec.greedy(prefix, ex.pos, ex.T() - k);
      ASSERT_FALSE(gen.empty());
      std::vector<std::uint8_t> seq = prefix;
      seq.insert(seq.end(), gen.begin(), gen.end());
      BatchView x;
      x.B = 1, x.T = int(seq.size()) - 1;  // the last generated token is never read back
      x.tokens = seq.data();
      for (int lv = 0; lv < pos_levels(mode); ++lv) x.pos[lv] = ex.pos[lv].data();
      if (x.T < 1) continue;
      model_forward(a, model, x);
      for (std::size_t i = 0; i < gen.size() && k - 1 + int(i) < x.T; ++i) {
        const float* z = a.logits.data() + std::size_t(k - 1 + int(i)) * kVocab;
        std::vector<float> s(z, z + kVocab);
        std::sort(s.rbegin(), s.rend());
        if (s[0] - s[1] < 1e-4f) continue;
        EXPECT_EQ(int(gen[i]), int(std::max_element(z, z + kVocab) - z)) << pos_mode_name(mode) << " k=" << k << " i=" << i;
        cached_steps += i > 0;
      }
    }
    EXPECT_GT(cached_steps, ex.T()) << pos_mode_name(mode) << ": too few tokens decoded from the cache";
  }
}

// `train --help` documents every configuration field, and the defaults it states are the real ones.
TEST(LearnConfig, HelpDocumentsEveryFieldWithItsDefault) {
  nlohmann::json mj = ModelConfig{}, tj = TrainConfig{};
  // Fields written only for the models they apply to: their defaults from such models.
  ModelConfig abacus, fire, injection;
  abacus.pos_mode = PosMode::abacus;
  fire.pos_mode = PosMode::fire;
  injection.input_injection = true;
  mj["abacus_k"] = nlohmann::json(abacus).at("abacus_k");
  for (const char* k : {"fire_width", "fire_threshold"}) mj[k] = nlohmann::json(fire).at(k);
  mj["input_injection"] = false;
  EXPECT_EQ(nlohmann::json(injection).at("input_injection"), true);  // written when on
  EXPECT_FALSE(nlohmann::json(ModelConfig{}).contains("input_injection"));  // and absent when off
  // pos_codes, pos_code_scale: written when some level is not learned; the defaults all learned, scale 1
  ModelConfig coded;
  coded.pos_codes[1] = PosCode::shuffled;
  EXPECT_EQ(nlohmann::json(coded).at("pos_codes"), "learned,shuffled");
  EXPECT_FALSE(nlohmann::json(ModelConfig{}).contains("pos_codes"));
  mj["pos_codes"] = ModelConfig{}.pos_codes_string();
  mj["pos_code_scale"] = nlohmann::json(coded).at("pos_code_scale");
  mj["pos_code_distance"] = ModelConfig{}.pos_code_distance;
  ModelConfig rel;
  rel.pos_mode = PosMode::coupled_rel;
  mj["rel_window"] = nlohmann::json(rel).at("rel_window");
  mj["rel_far"] = false;  // written when true
  rel.rel_far = true;
  EXPECT_EQ(nlohmann::json(rel).at("rel_far"), true);
  mj["rel_far_norm"] = false;  // written when true
  rel.rel_far_norm = true;
  EXPECT_EQ(nlohmann::json(rel).at("rel_far_norm"), true);
  mj["rel_far_mask"] = false;  // written when true
  ModelConfig masked;
  masked.pos_mode = PosMode::coupled_rel, masked.rel_far_mask = true;
  EXPECT_EQ(nlohmann::json(masked).at("rel_far_mask"), true);
  mj["rel_value"] = false;  // written when true
  masked.rel_value = true;
  EXPECT_EQ(nlohmann::json(masked).at("rel_value"), true);
  EXPECT_FALSE(nlohmann::json(rel).contains("rel_value"));
  EXPECT_FALSE(nlohmann::json(ModelConfig{}).contains("rel_window"));
  EXPECT_FALSE(nlohmann::json(coded).contains("pos_code_distance"));  // written when not 1
  CLI::App app;  // the options as train declares them; their descriptions are what --help prints
  const ConfigOptions opts(app);
  std::set<std::string> documented;
  for (auto& f : config_fields()) {
    const std::string sec = f.section;
    const nlohmann::json& j = sec == "model" ? mj : tj;
    ASSERT_TRUE(j.contains(f.name)) << sec << "." << f.name << " is documented but not a field";
    documented.insert(sec + "." + f.name);
    const std::string help = app.get_option(config_flag(f))->get_description();
    const auto k = help.find("(default ");
    ASSERT_NE(k, std::string::npos) << f.name << ": no default stated";
    const std::string d = help.substr(k + 9, help.find(')', k) - k - 9);
    const auto& v = j[f.name];
    if (v.is_string()) {
      EXPECT_EQ(d, v.get<std::string>()) << f.name;
    } else if (v.is_boolean()) {
      EXPECT_EQ(d, v.get<bool>() ? "true" : "false") << f.name;
    } else {
      const double want = v.get<double>(), got = std::stod(d);
      EXPECT_NEAR(got, want, 1e-6 * std::abs(want)) << f.name << ": help says " << d;
    }
  }
  for (auto it = mj.begin(); it != mj.end(); ++it)
    if (it.key() != "vocab" && it.key() != "vocabulary") {  // fixed by the task, not settable
      EXPECT_TRUE(documented.count("model." + it.key())) << "model." << it.key() << " undocumented";
    }
  for (auto it = tj.begin(); it != tj.end(); ++it)
    EXPECT_TRUE(documented.count("train." + it.key())) << "train." << it.key() << " undocumented";
}

// Figure 1's other rows (learn/configs/paper/fig1-6l8h-*.json) are fig1-6l8h.json with the task and
// the positions of the row, nothing else: every other field of both sections equal.
TEST(PaperConfigs, Figure1RowsDifferOnlyInTaskAndPositions) {
  const auto base = read_json_file(manyadd::testing::source_path("learn/configs/paper/fig1-6l8h.json"));
  struct Row {
    const char* file;
    const char* task;
    PosMode mode;
  };
  const Row rows[] = {{"fig1-6l8h-coupled-noscratch", "addition-noscratch", PosMode::digits},
                      {"fig1-6l8h-nope", "addition", PosMode::none},
                      {"fig1-6l8h-nope-noscratch", "addition-noscratch", PosMode::none},
                      {"fig1-6l8h-fire", "addition", PosMode::fire},
                      {"fig1-6l8h-fire-noscratch", "addition-noscratch", PosMode::fire}};
  for (const auto& r : rows) {
    SCOPED_TRACE(r.file);
    auto j = read_json_file(manyadd::testing::source_path(std::string("learn/configs/paper/") + r.file + ".json"));
    ModelConfig mc;
    TrainConfig tc;
    from_json(j.at("model"), mc);
    from_json(j.at("train"), tc);
    EXPECT_EQ(mc.pos_mode, r.mode);
    EXPECT_EQ(tc.task, r.task);
    if (r.mode == PosMode::fire) {  // the authors' FIRE: d_fire 32, their threshold (layers.hpp)
      EXPECT_EQ(mc.fire_width, 32);
      EXPECT_EQ(mc.fire_threshold, FireThreshold::min);
      j["model"].erase("fire_width"), j["model"].erase("fire_threshold");
    }
    j["model"]["pos_mode"] = base["model"]["pos_mode"];
    j["train"].erase("task");
    EXPECT_EQ(j["model"], base["model"]);
    EXPECT_EQ(j["train"], base["train"]);
  }
}

// McLeish et al.'s Abacus runs (learn/configs/mcleish/*.json): their Table 5 where this trainer has the
// field (16 heads of 64, hidden 1024, GLU hidden 1024, k = 100, lr 1e-4), their data (two operands of
// 1-20 digits, 20 million problems), max_pos1 covering training (k + 21 - 1) and the 100-digit tests;
// with and without input injection.
TEST(PaperConfigs, McLeishAbacusRuns) {
  for (const char* f : {"abacus-ii", "abacus-st"}) {
    SCOPED_TRACE(f);
    const auto j = read_json_file(manyadd::testing::source_path(std::string("learn/configs/mcleish/") + f + ".json"));
    ModelConfig mc;
    TrainConfig tc;
    from_json(j.at("model"), mc);
    from_json(j.at("train"), tc);
    EXPECT_EQ(mc.n_layers, 16);
    EXPECT_EQ(mc.n_heads, 16);
    EXPECT_EQ(mc.d_model, 1024);
    EXPECT_EQ(mc.n_heads * mc.d_head, 1024);
    EXPECT_EQ(mc.d_ff, 1024);
    EXPECT_EQ(mc.pos_mode, PosMode::abacus);
    EXPECT_EQ(mc.abacus_k, 100);
    EXPECT_GE(mc.max_pos1, 100 + 21 - 1);
    EXPECT_EQ(mc.input_injection, std::string(f) == "abacus-ii");
    EXPECT_EQ(tc.task, "addition-2op");
    EXPECT_EQ(tc.train_n, 20);
    EXPECT_EQ(tc.train_m, 20);
    EXPECT_EQ(tc.train_size, 20'000'000);
    EXPECT_EQ(tc.lr, 1e-4);
    // what the trainer checks before it builds the data (Trainer's constructor): the longest training
    // number fits at beta = k, and the 100-digit test cells at beta = 1
    const Task& t = task_named(tc.task);
    EXPECT_NO_THROW(t.check_model(mc));
    EXPECT_GE(max_offset(mc, t.extent(tc.train_n, tc.train_m), 0), mc.abacus_k);
    EXPECT_TRUE(fits(mc, t.extent(100, 100)));
  }
}

// The committed configurations of the paper's figures (learn/configs/paper/*.json) load, carry the
// exact Table 2 recipe and the authors' architecture options, and have the figures' shapes; the
// Figure 1 baseline has Table 2's "63M" trainable parameters (our layout without the PAD/UNK rows of
// the authors' 16-token vocabulary: 62.9M).
TEST(PaperConfigs, AreTable2AndTheFigures) {
  struct Want {
    const char* file;
    int L, H, d, dh, ff;
    const char* final_norm;
  };
  const Want want[] = {{"fig12-d64", 1, 4, 64, 16, 256, "rms"},       {"fig12-d128", 1, 4, 128, 32, 512, "rms"},
                       {"fig12-d256", 1, 4, 256, 64, 1024, "rms"},    {"fig12-d512", 1, 4, 512, 128, 2048, "rms"},
                       {"fig10-1l2h", 1, 2, 1024, 512, 2048, "layer"}, {"fig10-1l4h", 1, 4, 1024, 256, 2048, "layer"},
                       {"fig10-2l2h", 2, 2, 1024, 512, 2048, "layer"}, {"fig1-6l8h", 6, 8, 1024, 128, 2048, "layer"}};
  for (const auto& w : want) {
    SCOPED_TRACE(w.file);
    const auto j = read_json_file(manyadd::testing::source_path(std::string("learn/configs/paper/") + w.file + ".json"));
    ModelConfig mc;
    TrainConfig tc;
    from_json(j.at("model"), mc);
    from_json(j.at("train"), tc);
    EXPECT_EQ(mc.n_layers, w.L);
    EXPECT_EQ(mc.n_heads, w.H);
    EXPECT_EQ(mc.d_model, w.d);
    EXPECT_EQ(mc.d_head, w.dh);
    EXPECT_EQ(mc.d_ff, w.ff);
    EXPECT_STREQ(norm_kind_name(mc.final_norm), w.final_norm);
    EXPECT_EQ(mc.max_pos1, 40);
    EXPECT_EQ(mc.max_pos2, 40);
    EXPECT_EQ(mc.pos_mode, PosMode::coupled);
    EXPECT_EQ(mc.attn_scale, AttnScale::none);
    EXPECT_EQ(mc.init, InitScheme::t5);
    EXPECT_TRUE(mc.tie_readout);
    EXPECT_EQ(tc.train_n, 10);
    EXPECT_EQ(tc.train_m, 10);
    EXPECT_EQ(tc.train_size, 500000);
    EXPECT_EQ(tc.steps, 50000);
    EXPECT_EQ(tc.batch, 400);
    EXPECT_EQ(tc.lr, 3e-5);
    EXPECT_EQ(tc.warmup_frac, 0.01);
    EXPECT_TRUE(tc.warmup_from_zero);
    EXPECT_EQ(tc.min_lr_frac, 0.1);
    EXPECT_EQ(tc.beta1, 0.9);
    EXPECT_EQ(tc.beta2, 0.95);
    EXPECT_EQ(tc.adam_eps, 1e-8);
    EXPECT_EQ(tc.weight_decay, 0.0);
    EXPECT_EQ(tc.grad_clip, 1.0);
    EXPECT_EQ(tc.precision, "bf16");
    EXPECT_EQ(tc.data_seed, -1);  // set per run: --data-seed
    EXPECT_EQ(lr_at(tc, 1), 0.0);
    EXPECT_DOUBLE_EQ(lr_at(tc, 501), 3e-5);
    if (std::string(w.file) == "fig1-6l8h") {
      const auto n = Layout::make(mc).total;
      EXPECT_GT(n, 62'500'000);
      EXPECT_LT(n, 63'500'000);
    }
  }
}
