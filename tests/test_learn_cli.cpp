// The learn/ CLIs as a user runs them: train -> evaluate -> dump_attention work and write their files;
// --resume through the CLI reproduces an uninterrupted run byte for byte; every corrupted, truncated or
// malformed input gives exit code 2 with a message naming the problem, never a crash.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <fmt/format.h>

#include "test_util.hpp"
#include "manyadd/learn/devices/cuda_device.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/runs/io.hpp"

namespace fs = std::filesystem;
using namespace manyadd;
using namespace manyadd::learn;

namespace {
using manyadd::testing::CmdResult;
using manyadd::testing::run_cmd;
const std::string& tmp() {
  static const std::string d = manyadd::testing::temp_dir("test_learn_cli");
  return d;
}
const std::string kTrain = TRAIN_EXE, kEval = EVALUATE_EXE, kDump = DUMP_ATTENTION_EXE,
                  kCompare = COMPARE_ATTENTION_EXE, kBatches = DUMP_BATCHES_EXE;
// A small, fast configuration (about a second of training).
const std::string kSmall =
    " --train-n 2 --train-m 3 --train-size 500 --max-pos1 6 --max-pos2 6 --d-model 16 --d-head 4 --d-ff 16"
    " --batch 8 --lr 0.01 --log-every 10 --eval-every 0 --eval-samples 5 --checkpoint-every 10 --steps 30";

// Trains the reference small model once.
const std::string& model_dir() {
  static const std::string d = [] {
    const std::string dir = tmp() + "/model";
    const CmdResult r = run_cmd(kTrain + " --out " + dir + kSmall);
    EXPECT_EQ(r.rc, 0) << r.err;
    return dir;
  }();
  return d;
}
std::string copy_model(const std::string& name) {
  const std::string d = tmp() + "/" + name;
  fs::remove_all(d);
  fs::copy(model_dir(), d, fs::copy_options::recursive);
  return d;
}
std::string slurp(const std::string& p) { return read_file(p); }
// The same tensors and metadata with a legacy checksum: the earlier FNV-1a basis, over the data alone.
std::string with_legacy_checksum(const std::string& file) {
  std::uint64_t hl = 0;
  std::memcpy(&hl, file.data(), 8);
  nlohmann::json h = nlohmann::json::parse(file.substr(8, hl));
  const std::string data = file.substr(8 + hl);
  h["__metadata__"]["checksum"] = fmt::format("{:016x}", fnv1a64(data.data(), data.size(), kFnv1a64LegacyOffset));
  return manyadd::testing::safetensors_with_header(h.dump(), data);
}
void spit(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}
}  // namespace

TEST(LearnCli, TrainWritesAModelDirectory) {
  const std::string d = model_dir();
  for (const char* f : {"config.json", "model.safetensors", "checkpoint.safetensors", "log.csv", "eval.csv"})
    EXPECT_TRUE(fs::exists(d + "/" + f)) << f;
  const auto cfg = read_json_file(d + "/config.json");
  EXPECT_EQ(cfg["model"]["d_model"], 16);
  EXPECT_EQ(cfg["step"], 30);
  // The position-ID rule in words, for a reader who loads the model elsewhere.
  const std::string rule = cfg["format"]["position_ids"];
  EXPECT_NE(rule.find("pos_mode coupled: two levels"), std::string::npos) << rule;
  EXPECT_NE(rule.find("-> s1 + t"), std::string::npos) << rule;
}

// A --json report names its tool, version, commit and command line, and its verdict is the exit code's.
void expect_report(const std::string& path, const std::string& tool, const std::string& verdict) {
  const auto rep = read_json_file(path);
  ASSERT_TRUE(rep.contains("manyadd")) << path;
  EXPECT_EQ(rep["manyadd"]["tool"], tool) << path;
  EXPECT_FALSE(rep["manyadd"]["version"].get<std::string>().empty()) << path;
  EXPECT_FALSE(rep["manyadd"]["commit"].get<std::string>().empty()) << path;
  EXPECT_EQ(rep["manyadd"]["argv"][0], tool) << path;
  EXPECT_EQ(rep["verdict"], verdict) << path;
}

TEST(LearnCli, EvaluateWritesGridAndAgreesWithGreedy) {
  // The grid files go where --csv/--png say, by default the current directory: never into the model.
  const std::string d = model_dir(), js = tmp() + "/eval.json", cwd = tmp() + "/eval_cwd";
  fs::create_directories(cwd);
  const CmdResult r = run_cmd("cd " + cwd + " && " + kEval + " --model " + d +
                              " --n-max 3 --m-max 4 --samples 10 --mode both --json " + js);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(cwd + "/grid.csv"));
  EXPECT_TRUE(fs::exists(cwd + "/grid.png"));
  EXPECT_FALSE(fs::exists(d + "/grid.csv"));
  EXPECT_FALSE(fs::exists(d + "/grid.png"));
  expect_report(js, "evaluate", "pass");  // --mode both checks the two verdicts agree
  const auto rep = read_json_file(js);
  EXPECT_EQ(rep["cells"].size(), 3u * 3u);
  EXPECT_EQ(rep["disagreements"], 0);
  // n = 3, m = 4 has l = 4: level-1 IDs up to 1 + 4 = 5 <= max_pos1 = 6, so it is evaluated, not NA.
  EXPECT_FALSE(rep["cells"].back()["accuracy"].is_null());
}

TEST(LearnCli, EvaluateMarksCellsBeyondMaxPosAsNA) {
  const std::string js = tmp() + "/eval_na.json";
  const CmdResult r = run_cmd(kEval + " --model " + model_dir() + " --n-min 6 --n-max 6 --m-min 2 --m-max 2 --samples 3 --json " + js +
                    " --csv " + tmp() + "/na.csv --png " + tmp() + "/na.png");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(read_json_file(js)["cells"][0]["accuracy"].is_null());
}

TEST(LearnCli, AnswerCharactersCountAsTheGridModelsMetric) {
  // Right-aligned columns, valid where either string has a digit, correct where both agree
  // (tagcat's number-number, number-pad and pad-number matches; pad-pad is no column).
  auto cnt = [](const std::string& a, const std::string& s) {
    std::int64_t c = 0, v = 0;
    count_answer_chars(a, s, c, v);
    return std::make_pair(c, v);
  };
  EXPECT_EQ(cnt("123", "123"), std::make_pair(std::int64_t(3), std::int64_t(3)));
  EXPECT_EQ(cnt("23", "123"), std::make_pair(std::int64_t(2), std::int64_t(3)));    // a digit missing
  EXPECT_EQ(cnt("9123", "123"), std::make_pair(std::int64_t(3), std::int64_t(4)));  // one too many
  EXPECT_EQ(cnt("1x3", "123"), std::make_pair(std::int64_t(2), std::int64_t(3)));   // a non-digit token
  EXPECT_EQ(cnt("", "5"), std::make_pair(std::int64_t(0), std::int64_t(1)));        // nothing answered
  EXPECT_EQ(cnt("1000", "999"), std::make_pair(std::int64_t(0), std::int64_t(4)));
}

TEST(LearnCli, EvaluateOnTheGridModelsInstances) {
  // The committed SA(10, 10) coupled_rel model is exact in its training distribution (models/README):
  // 2-4 terms of 1-5 digits, leading zeros included, must come out (nearly) all right; 2 terms of 100
  // digits need level-1 IDs beyond its max_pos 40 (NA); one-term problems, which its training set never
  // has, are written and run.
  const std::string m = manyadd::testing::source_path("models/cpu-sa1010-1l4h-d64-coupled-rel-far");
  const std::string csv = tmp() + "/inst.csv", js = tmp() + "/inst.json";
  const CmdResult r = run_cmd(kEval + " --model " + m + " --instance 2-4x1-5 --instance 2x100 --instance 1x3 --samples 60 "
                              "--threads 2 --csv " + csv + " --json " + js);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto rep = read_json_file(js);
  const auto& rows = rep["instances"];
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["instance"], "2-4x1-5");
  EXPECT_GE(rows[0]["answer_accuracy"].get<double>(), 0.95);
  EXPECT_GE(rows[0]["char_accuracy"].get<double>(), rows[0]["answer_accuracy"].get<double>() - 1e-12);
  EXPECT_FALSE(rows[1]["fits"].get<bool>());
  EXPECT_EQ(rows[2]["samples"], 60);
  for (const auto& row : {rows[0], rows[2]})  // the whole response right implies its answer right
    EXPECT_LE(row["exact"].get<std::int64_t>(), row["answer_exact"].get<std::int64_t>());
  // The same (seed, instance) gives the same numbers at any thread count.
  const std::string js1 = tmp() + "/inst1.json";
  ASSERT_EQ(run_cmd(kEval + " --model " + m + " --instance 2-4x1-5 --samples 60 --threads 1 --csv " + tmp() +
                    "/inst1.csv --json " + js1).rc, 0);
  EXPECT_EQ(read_json_file(js1)["instances"][0]["char_correct"], rows[0]["char_correct"]);
  for (const char* bad : {" --instance 0x5", " --instance 2x5-3", " --table v", " --instance 2x5 --device cpu-fast",
                          " --instance 2x5 --problem 1+2", " --instance 2x5 --n-max 3", " --instance 2x100000 --samples 100000000"}) {
    const CmdResult b = run_cmd(kEval + " --model " + m + bad + " --csv " + tmp() + "/bad.csv");
    EXPECT_EQ(b.rc, 2) << bad << b.err;
    EXPECT_FALSE(b.err.empty()) << bad;
  }
}

TEST(LearnCli, RequireFailsWithExitOne) {
  // A 30-step model is not perfect on its training region: --require 1 fails there.
  const CmdResult r = run_cmd(kEval + " --model " + model_dir() + " --n-max 2 --m-max 3 --samples 5 --require 1 --csv " + tmp() +
                    "/r.csv --png " + tmp() + "/r.png --json " + tmp() + "/r.json");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("--require"), std::string::npos) << r.err;
  expect_report(tmp() + "/r.json", "evaluate", "fail");
  // Without a check the grid is a product: "done".
  const CmdResult d = run_cmd(kEval + " --model " + model_dir() + " --n-max 1 --m-max 2 --samples 2 --csv " + tmp() +
                              "/d.csv --png " + tmp() + "/d.png --json " + tmp() + "/d.json");
  EXPECT_EQ(d.rc, 0) << d.err;
  expect_report(tmp() + "/d.json", "evaluate", "done");
  // --problem: pass or fail as the exit code (a 30-step model gets some wrong; either way they agree).
  for (const char* prob : {"12+34", "99+99+99", "1+2"}) {
    const CmdResult p = run_cmd(kEval + " --model " + model_dir() + " --problem " + prob + " --json " + tmp() + "/p.json");
    ASSERT_TRUE(p.rc == 0 || p.rc == 1) << p.err;
    expect_report(tmp() + "/p.json", "evaluate", p.rc == 0 ? "pass" : "fail");
  }
}

// Progress goes to stderr: in a pipe, plain lines (at least the final one, with counts); --quiet
// leaves stderr empty on success while the results still reach stdout and the files.
TEST(LearnCli, ProgressInAPipeAndQuiet) {
  const std::string d = tmp() + "/progress_model";
  fs::remove_all(d);
  CmdResult r = run_cmd(kTrain + " --out " + d + kSmall + " --json " + tmp() + "/train.json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("train: 30/30 steps (100%)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;  // a pipe: no redrawn line
  EXPECT_NE(r.out.find("trained 30 steps"), std::string::npos) << r.out;
  expect_report(tmp() + "/train.json", "train", "done");
  fs::remove_all(d);
  r = run_cmd(kTrain + " --out " + d + kSmall + " --quiet");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("trained 30 steps"), std::string::npos) << r.out;
  // --stop-after: the progress counts to the stop, not to --steps.
  fs::remove_all(d);
  r = run_cmd(kTrain + " --out " + d + kSmall + " --stop-after 20");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("train: 20/20 steps (100%)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stopping at step 20 of 30"), std::string::npos) << r.err;

  const std::string grid = " --model " + d + " --n-max 2 --m-max 3 --samples 3 --csv " + tmp() + "/q.csv --png " + tmp() + "/q.png";
  r = run_cmd(kEval + grid);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("evaluate: 4/4 cells (100%)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exact match (%) per cell: one row per n = 1..2, columns m = 2..3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\nn= 2:"), std::string::npos) << r.err;
  r = run_cmd(kEval + grid + " --quiet");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("evaluated 2 x 2 cells"), std::string::npos) << r.out;

  const std::string cmp = " --learned " + d + " --grid --n 2 --m 3 --n-max 2 --m-max 3 --samples 2 --out " + tmp() + "/cmp_grid";
  r = run_cmd(kCompare + cmp);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("compare_attention --grid: 4/4 cells (100%)"), std::string::npos) << r.err;
  expect_report(tmp() + "/cmp_grid/grid_alignment.json", "compare_attention", "done");
  r = run_cmd(kCompare + cmp + " --quiet --json " + tmp() + "/cmp.json");
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_report(tmp() + "/cmp.json", "compare_attention", "done");
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("2 x 2 cells"), std::string::npos) << r.out;
  // One shape: compare.json in --out, by default ./compare_TA<n>x<m>, not inside the model directory.
  const std::string cwd = tmp() + "/cmp_cwd";
  fs::create_directories(cwd);
  r = run_cmd("cd " + cwd + " && " + kCompare + " --learned " + d + " --n 2 --m 3 --samples 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_report(cwd + "/compare_TA2x3/compare.json", "compare_attention", "done");
  EXPECT_FALSE(fs::exists(d + "/compare_TA2x3"));
}

TEST(LearnCli, DumpAttentionRowsAreDistributions) {
  const std::string out = tmp() + "/att";
  const CmdResult r = run_cmd(kDump + " --model " + model_dir() + " --n 2 --m 3 --samples 6 --out " + out + " --json " +
                              tmp() + "/att.json");
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_report(tmp() + "/att.json", "dump_attention", "done");
  const auto ts = read_safetensors(out + "/attention.safetensors").tensors;
  ASSERT_EQ(ts.size(), 4u);  // 1 layer x 4 heads
  EXPECT_TRUE(fs::exists(out + "/layer0_head3.png"));
  // Each averaged row is a mean of probability rows: sums to 1 (fp32 sums of <= 50 terms: 1e-5).
  for (auto& t : ts) {
    const auto T = t.shape[0];
    const auto v = t.to_f32();
    for (std::int64_t i = 0; i < T; ++i) {
      double s = 0;
      for (std::int64_t j = 0; j < T; ++j) s += v[std::size_t(i * T + j)];
      EXPECT_NEAR(s, 1.0, 1e-5) << t.name << " row " << i;
    }
  }
}

TEST(LearnCli, ResumeThroughTheCliIsByteIdentical) {
  const std::string d = tmp() + "/resumed";
  fs::remove_all(d);
  CmdResult r = run_cmd(kTrain + " --out " + d + kSmall + " --stop-after 15");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_json_file(d + "/config.json")["step"], 15);
  // As if the process had logged step 25 and died before its next checkpoint: resume must drop it.
  { std::ofstream(d + "/log.csv", std::ios::app) << "25,9.9,0,0,0,0\n"; }
  r = run_cmd(kTrain + " --out " + d + " --resume");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(slurp(d + "/model.safetensors"), slurp(model_dir() + "/model.safetensors"));
  // The log describes one history: the steps column is 10, 20, 30 once each (log_every 10).
  std::ifstream log(d + "/log.csv");
  std::string line, steps;
  std::getline(log, line);  // header
  while (std::getline(log, line)) steps += line.substr(0, line.find(',')) + " ";
  EXPECT_EQ(steps, "10 20 30 ");  // no row where --stop-after ended the first part (tests/test_learn_resume.cpp)
  EXPECT_EQ(slurp(d + "/checkpoint.safetensors"), slurp(model_dir() + "/checkpoint.safetensors"));
}

// --device auto, the default: the fast CPU device where it runs the model (the report names it), the reference
// with one line saying why where it does not (pos_mode fire), and the reference for greedy decoding.
TEST(LearnCli, DeviceAutoIsTheFastDeviceOrSaysWhy) {
  const std::string d = tmp() + "/auto", fire = tmp() + "/auto_fire", js = tmp() + "/auto.json";
  fs::remove_all(d), fs::remove_all(fire);
  CmdResult r = run_cmd(kTrain + " --out " + d + kSmall + " --json " + js);
  ASSERT_EQ(r.rc, 0) << r.err;
  // where oneDNN cannot load, auto says so and takes the reference
  const bool fast = r.err.find("device auto: cpu, the reference") == std::string::npos;
  EXPECT_EQ(read_json_file(js)["device"], fast ? "cpu-fast" : "cpu") << r.err;
  r = run_cmd(kTrain + " --out " + fire + kSmall + " --pos-mode fire --fire-width 8 --json " + js);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("train: device auto: cpu, the reference ("), std::string::npos) << r.err;
  EXPECT_EQ(read_json_file(js)["device"], "cpu");
  r = run_cmd(kEval + " --model " + d + " --n-max 2 --m-max 3 --samples 5 --csv " + tmp() + "/auto.csv --png " + tmp() +
              "/auto.png --json " + js);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_json_file(js)["device"], fast ? "cpu-fast" : "cpu");
  r = run_cmd(kEval + " --model " + d + " --n-max 2 --m-max 3 --samples 5 --mode greedy --csv " + tmp() +
              "/auto.csv --png " + tmp() + "/auto.png --json " + js);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_json_file(js)["device"], "cpu");
  EXPECT_EQ(run_cmd(kEval + " --model " + d + " --mode greedy --device cpu-fast").rc, 2);  // explicit: refused
  r = run_cmd(kTrain + " --help");
  EXPECT_NE(r.out.find("(default auto)"), std::string::npos) << r.out;
}

// The committed models (config.json files written before the architecture options existed) load with
// the defaults and give bit for bit the logits recorded from a build before the options were added
// (tests/data/learn_committed_logits.json: evaluate --problem, JSON floats are shortest round-trip, so
// equal doubles mean equal floats).
TEST(LearnCli, CommittedModelsGiveTheirRecordedLogits) {
  const auto rec = read_json_file(manyadd::testing::source_path("tests/data/learn_committed_logits.json"));
  for (auto it = rec["models"].begin(); it != rec["models"].end(); ++it) {
    const std::string js = tmp() + "/committed_" + it.key() + ".json";
    const CmdResult r = run_cmd(kEval + " --model " + manyadd::testing::source_path("models/" + it.key()) +
                                " --problem " + rec["problem"].get<std::string>() + " --json " + js);
    ASSERT_EQ(r.rc, 0) << r.err;
    expect_report(js, "evaluate", "pass");  // --problem checks the greedy answer
    const auto got = read_json_file(js)["logits_from_eq"];
    ASSERT_EQ(got.size(), it.value().size()) << it.key();
    for (std::size_t i = 0; i < got.size(); ++i)
      for (std::size_t v = 0; v < got[i].size(); ++v)
        ASSERT_EQ(got[i][v].get<double>(), it.value()[i][v].get<double>()) << it.key() << " row " << i << " logit " << v;
  }
}

// The architecture options through the CLI: the layout of the file follows them, config.json states
// them (fields and the architecture text), and a bf16 run records its precision; resuming it in fp32
// is refused (exit 2) unless --allow-precision-change.
TEST(LearnCli, OptionsAndPrecisionThroughTheCli) {
  const std::string d = tmp() + "/authors";
  fs::remove_all(d);
  CmdResult r = run_cmd(kTrain + " --out " + d + kSmall +
                        " --attn-scale none --init t5 --tie-readout true --final-norm layer --precision bf16"
                        " --warmup-from-zero true --data-seed 7 --stop-after 10");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto cfg = read_json_file(d + "/config.json");
  EXPECT_EQ(cfg["model"]["attn_scale"], "none");
  EXPECT_EQ(cfg["model"]["tie_readout"], true);
  EXPECT_EQ(cfg["train"]["precision"], "bf16");
  EXPECT_EQ(cfg["train"]["data_seed"], 7);
  EXPECT_NE(cfg["architecture"]["readout"].get<std::string>().find("tied"), std::string::npos);
  EXPECT_NE(cfg["architecture"]["final_norm"].get<std::string>().find("LayerNorm"), std::string::npos);
  EXPECT_NE(cfg["architecture"]["attention"].get<std::string>().find("unscaled"), std::string::npos);
  const auto w = read_safetensors(d + "/model.safetensors");
  EXPECT_EQ(w.find("lm_head.weight"), nullptr);
  EXPECT_NE(w.find("final_norm.bias"), nullptr);
  r = run_cmd(kTrain + " --out " + d + " --resume --precision fp32");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--allow-precision-change"), std::string::npos) << r.err;
  r = run_cmd(kTrain + " --out " + d + " --resume");  // its own precision: fine
  EXPECT_EQ(r.rc, 0) << r.err;
  r = run_cmd(kTrain + " --out " + d + " --resume --steps 40 --precision fp32 --allow-precision-change");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_json_file(d + "/config.json")["train"]["precision"], "fp32");
  // evaluate runs either precision on the same files.
  for (const char* p : {"fp32", "bf16"}) {
    r = run_cmd(kEval + " --model " + d + " --n-max 2 --m-max 3 --samples 4 --precision " + p + " --csv " + tmp() +
                "/p.csv --png " + tmp() + "/p.png");
    EXPECT_EQ(r.rc, 0) << p << ": " << r.err;
  }
  EXPECT_EQ(run_cmd(kEval + " --model " + d + " --precision fp8").rc, 2);
}

// The CUDA device runs every architecture option and both precisions: with a GPU these runs train, without
// one they are refused for the missing device alone. Only a head wider than the attention kernels take
// is refused by name, before any device is looked for, on every machine.
TEST(LearnCli, CudaRunsEveryOptionAndRefusesOnlyWideHeads) {
  std::string why;
  const bool gpu = cuda_training_available(&why);
  const char* cases[] = {" --attn-scale none", " --tie-readout true", " --final-norm layer", " --precision bf16",
                         " --init t5 --attn-scale none --tie-readout true --final-norm layer --precision bf16",
                         " --n-heads 1 --d-head 512", " --n-heads 1 --d-head 600"};
  for (const char* flags : cases) {
    const bool wide = std::string(flags).find("600") != std::string::npos;
    const std::string out = tmp() + "/cuda_options";
    fs::remove_all(out);
    std::string base = kSmall;  // without its own --d-head when the case sets one
    if (std::string(flags).find("--d-head") != std::string::npos) base.replace(base.find(" --d-head 4"), 11, "");
    const CmdResult r = run_cmd(kTrain + " --out " + out + base + flags + " --device cuda");
    if (wide) {
      EXPECT_EQ(r.rc, 2) << flags;
      EXPECT_NE(r.err.find("--device cuda does not support d_head 600 (at most 512"), std::string::npos) << r.err;
    } else if (gpu) {
      EXPECT_EQ(r.rc, 0) << flags << ": " << r.err;
      continue;
    } else {
      EXPECT_EQ(r.rc, 2) << flags;
      EXPECT_NE(r.err.find("no CUDA device: "), std::string::npos) << flags << ": " << r.err;
      EXPECT_EQ(r.err.find("does not support"), std::string::npos) << flags << ": " << r.err;
    }
    EXPECT_FALSE(fs::exists(out + "/checkpoint.safetensors"));
  }
}

// FIRE, RoPE and input injection run on the CUDA device: with a GPU they train and evaluate there
// (fp32 and bf16), without one they are refused for the missing device alone (exit 2, "no CUDA device",
// never "does not support"), writing nothing. All three train and evaluate on the CPU, and
// dump_attention reads them.
TEST(LearnCli, FireRopeAndInputInjectionRunOnCuda) {
  std::string why;
  const bool gpu = cuda_training_available(&why);
  for (const char* flags : {" --pos-mode fire", " --pos-mode fire --fire-threshold min", " --pos-mode rope",
                            " --input-injection true --n-layers 2"}) {
    SCOPED_TRACE(flags);
    const std::string out = tmp() + "/on_cuda";
    for (const char* prec : {"", " --precision bf16"}) {
      fs::remove_all(out);
      const CmdResult r = run_cmd(kTrain + " --out " + out + kSmall + flags + prec + " --device cuda");
      if (gpu) {
        EXPECT_EQ(r.rc, 0) << r.err;
        continue;
      }
      EXPECT_EQ(r.rc, 2) << r.err;
      EXPECT_NE(r.err.find("no CUDA device: "), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find("does not support"), std::string::npos) << r.err;
      EXPECT_FALSE(fs::exists(out)) << "nothing may be written on a refused run";
    }
    fs::remove_all(out);
    const CmdResult t = run_cmd(kTrain + " --out " + out + kSmall + flags);
    ASSERT_EQ(t.rc, 0) << t.err;
    const CmdResult e = run_cmd(kEval + " --model " + out + " --n-max 2 --m-max 3 --samples 5 --csv " + out +
                                "/g.csv --png " + out + "/g.png --device cuda");
    if (gpu) {
      EXPECT_EQ(e.rc, 0) << e.err;
    } else {
      EXPECT_EQ(e.rc, 2) << e.err;
      EXPECT_NE(e.err.find("no CUDA device: "), std::string::npos) << e.err;
    }
    EXPECT_EQ(run_cmd(kEval + " --model " + out + " --n-max 2 --m-max 3 --samples 5 --csv " + out + "/g.csv --png " +
                      out + "/g.png --mode both").rc,
              0);
    EXPECT_EQ(run_cmd(kDump + " --model " + out + " --n 2 --m 3 --samples 3 --out " + out + "/attn").rc, 0);
  }
}

// The strict configuration-vs-weights check with FIRE's tensors: a FIRE model's weights under another
// pos_mode, another width, or without FIRE, and a FIRE configuration over a model without it.
TEST(LearnCli, FireWeightsMustMatchTheConfiguration) {
  const std::string fire = tmp() + "/fire_model";
  fs::remove_all(fire);
  ASSERT_EQ(run_cmd(kTrain + " --out " + fire + kSmall + " --pos-mode fire --fire-width 8").rc, 0);
  auto edited = [&](const std::string& name, const std::string& from, const std::function<void(nlohmann::json&)>& edit) {
    const std::string d = tmp() + "/" + name;
    fs::remove_all(d);
    fs::copy(from, d, fs::copy_options::recursive);
    auto cfg = read_json_file(d + "/config.json");
    edit(cfg["model"]);
    spit(d + "/config.json", cfg.dump());
    return d;
  };
  const std::string args = " --n-max 1 --m-max 2 --samples 1";
  auto refused = [&](const std::string& dir, const std::string& needle) {
    const CmdResult r = run_cmd(kEval + " --model " + dir + args);
    EXPECT_EQ(r.rc, 2) << dir << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << dir << "\n" << r.err;
  };
  refused(edited("fire_as_none", fire, [](auto& m) {
            m["pos_mode"] = "none";
            m.erase("fire_width"), m.erase("fire_threshold");
          }),
          "tensor 'fire.mlp.0.weight' is not part of the model");
  refused(edited("fire_wider", fire, [](auto& m) { m["fire_width"] = 16; }),
          "tensor 'fire.mlp.0.weight' has shape [8, 1], the configuration implies [16, 1]");
  refused(edited("fire_field_elsewhere", fire, [](auto& m) { m["pos_mode"] = "rope"; }),
          "model.fire_width applies to pos_mode fire only");
  refused(edited("coupled_as_fire", model_dir(), [](auto& m) { m["pos_mode"] = "fire"; }),
          "tensor 'pos_emb.0.weight' is not part of the model");
  refused(edited("bad_threshold", fire, [](auto& m) { m["fire_threshold"] = "mean"; }), "fire_threshold 'mean' unknown");
  refused(edited("bad_injection", fire, [](auto& m) { m["input_injection"] = 1; }), "input_injection must be true or false");
  refused(edited("odd_rope", model_dir(), [](auto& m) {
            m["pos_mode"] = "rope";
            m["d_head"] = 3;
          }),
          "d_head must be even");
}

// ---- bad input: exit 2 and a message that names the problem ----------------------------------------
TEST(LearnCli, TruncatedWeightsExitTwo) {
  const std::string d = copy_model("trunc");
  const std::string s = slurp(d + "/model.safetensors");
  spit(d + "/model.safetensors", s.substr(0, s.size() / 2));
  const CmdResult r = run_cmd(kEval + " --model " + d + " --n-max 1 --m-max 2 --samples 1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("model.safetensors"), std::string::npos) << r.err;
  spit(d + "/model.safetensors", s.substr(0, 5));
  EXPECT_EQ(run_cmd(kEval + " --model " + d + " --samples 1").rc, 2);
}

TEST(LearnCli, CorruptedWeightsExitTwo) {
  const std::string d = copy_model("flip");
  std::string s = slurp(d + "/model.safetensors");
  s[s.size() - 3] = char(s[s.size() - 3] ^ 0x40);  // one bit in the last weight
  spit(d + "/model.safetensors", s);
  const CmdResult r = run_cmd(kEval + " --model " + d + " --n-max 1 --m-max 2 --samples 1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("checksum"), std::string::npos) << r.err;
}

TEST(LearnCli, CorruptedHeaderExitTwo) {
  const std::string d = copy_model("hdr");
  std::string s = slurp(d + "/model.safetensors");
  s[10] = '#';  // inside the JSON header
  spit(d + "/model.safetensors", s);
  const CmdResult r = run_cmd(kEval + " --model " + d + " --n-max 1 --m-max 2 --samples 1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("not a valid"), std::string::npos) << r.err;
}

TEST(LearnCli, BadConfigExitTwo) {
  const std::string d = copy_model("cfg");
  spit(d + "/config.json", "{\"model\": {\"d_model\": ");
  CmdResult r = run_cmd(kEval + " --model " + d + " --samples 1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("not valid JSON"), std::string::npos) << r.err;
  spit(d + "/config.json", "{\"model\": {\"d_model\": \"wide\"}}");
  r = run_cmd(kEval + " --model " + d + " --samples 1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("d_model"), std::string::npos) << r.err;
  // A config that parses but disagrees with the weights' shapes.
  spit(d + "/config.json", "{\"model\": {\"d_model\": 24, \"d_head\": 4, \"d_ff\": 16, \"max_pos1\": 6, \"max_pos2\": 6}}");
  r = run_cmd(kEval + " --model " + d + " --samples 1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("shape"), std::string::npos) << r.err;
  EXPECT_EQ(run_cmd(kEval + " --model " + tmp() + "/does_not_exist").rc, 2);
}

// The weights must be exactly the tensors the configuration implies, checked before the parameters are
// allocated: a configuration that uses part of the file, a file with more, a configuration far larger
// than the file (refused by its shapes at once, not after allocating gigabytes: run under a 2 GiB
// address-space limit).
TEST(LearnCli, WeightsMustBeExactlyTheConfigurationsTensors) {
  auto expect_refused = [](const std::string& cmd, const std::string& needle) {
    const CmdResult r = run_cmd(cmd);
    EXPECT_EQ(r.rc, 2) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << cmd << "\n" << r.err;
  };
  auto with_model = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    const std::string d = copy_model(name);
    auto cfg = read_json_file(d + "/config.json");
    edit(cfg["model"]);
    spit(d + "/config.json", cfg.dump());
    return d;
  };
  const std::string args = " --n-max 1 --m-max 2 --samples 1";
  expect_refused(kEval + " --model " + with_model("none", [](auto& m) { m["pos_mode"] = "none"; }) + args,
                 "tensor 'pos_emb.0.weight' is not part of the model");
  expect_refused(kEval + " --model " + with_model("two", [](auto& m) { m["n_layers"] = 2; }) + args,
                 "tensor 'layers.1.attn.k.weight' (shape [16, 16]) is missing");
  {  // a two-layer committed model read as one layer
    const std::string d = tmp() + "/first_layer";
    fs::remove_all(d);
    fs::copy(manyadd::testing::source_path("models/cpu-sa1010-2l2h-d64"), d);
    auto cfg = read_json_file(d + "/config.json");
    cfg["model"]["n_layers"] = 1;
    spit(d + "/config.json", cfg.dump());
    expect_refused(kEval + " --model " + d + args, "tensor 'layers.1.");
  }
  {  // an extra tensor in an otherwise valid file
    const std::string d = copy_model("extra");
    SafetensorsFile f = read_safetensors(d + "/model.safetensors");
    f.tensors.push_back(make_tensor("extra.weight", {2}, std::vector<float>{1, 2}));
    auto meta = f.metadata;
    meta.erase("checksum");
    write_safetensors(d + "/model.safetensors", f.tensors, meta);
    expect_refused(kEval + " --model " + d + args, "tensor 'extra.weight' is not part of the model");
  }
  const std::string big = with_model("big", [](auto& m) {
    m["d_model"] = 8192;
    m["d_ff"] = 65536;
  });
  const std::string limit = "ulimit -v 3000000; ";  // the configuration implies 6.4 GB of parameters
  expect_refused(limit + kEval + " --model " + big + args, "has shape [14, 16], the configuration implies [14, 8192]");
  expect_refused(limit + kDump + " --model " + big + " --n 2 --m 2 --samples 1 --out " + tmp() + "/big_dump",
                 "the configuration implies [14, 8192]");
  expect_refused(limit + kCompare + " --learned " + big + " --n 2 --m 2 --samples 1 --out " + tmp() + "/big_cmp",
                 "the configuration implies [14, 8192]");
  expect_refused(limit + kBatches + " --run " + big + " --out " + tmp() + "/big.bin", "the configuration implies [14, 8192]");
}

// Work sized by options is checked against the machine before it starts (under a 4 GiB address-space
// limit, so that the outcome does not depend on this machine's memory).
TEST(LearnCli, WorkBeyondTheMachineIsRefusedBeforeItStarts) {
  const std::string limit = "ulimit -v 4000000; ";
  CmdResult r = run_cmd(limit + kEval + " --model " + model_dir() + " --n-max 1 --m-max 2 --samples 4294967296");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--samples 4294967296 per cell up to TA(1, 2) needs ~"), std::string::npos) << r.err;
  const std::string d = tmp() + "/huge_eval";
  std::string flags = kSmall;
  flags.replace(flags.find("--eval-samples 5"), 16, "--eval-samples 4294967296");
  r = run_cmd(limit + kTrain + " --out " + d + flags);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("eval_samples 4294967296) needs ~"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d + "/log.csv"));  // refused before the first step, not after the last
  r = run_cmd(limit + kDump + " --model " + model_dir() + " --n 11 --m 11 --samples 100000000 --out " + tmp() +
              "/huge_dump");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--samples 100000000 of TA(11, 11) needs ~"), std::string::npos) << r.err;
}

// The checkpoint's step is under its checksum and parsed strictly; a legacy checkpoint (whose step
// was outside its checksum) is refused.
TEST(LearnCli, CheckpointStepIsCheckedAndStrict) {
  const std::string d = copy_model("step");
  const std::string good = slurp(d + "/checkpoint.safetensors");
  auto resume = [&](const std::string& needle) {
    const CmdResult r = run_cmd(kTrain + " --out " + d + " --resume --steps 40");
    EXPECT_EQ(r.rc, 2) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  };
  std::string edited = good;
  const auto k = edited.find("\"step\":\"30\"");
  ASSERT_NE(k, std::string::npos);
  edited.replace(k, 11, "\"step\":\"20\"");
  spit(d + "/checkpoint.safetensors", edited);
  resume("checksum mismatch");
  SafetensorsFile f = parse_safetensors(good, "checkpoint");
  auto meta = f.metadata;
  meta.erase("checksum");
  meta["step"] = "30x";
  spit(d + "/checkpoint.safetensors", safetensors_bytes(f.tensors, meta));
  resume("its step: '30x' is not an integer");
  // The same file with a legacy checksum: FNV-1a (the earlier basis) of the data alone.
  meta["step"] = "30";
  const std::string legacy = with_legacy_checksum(safetensors_bytes(f.tensors, meta));
  EXPECT_TRUE(parse_safetensors(legacy, "legacy").legacy_checksum);  // readable where allowed (models/)
  spit(d + "/checkpoint.safetensors", legacy);
  resume("legacy checksum");
  // A checkpoint of another model's tensors (moments missing).
  std::vector<Tensor> weights_only;
  for (const auto& t : f.tensors)
    if (t.name.rfind("adam.", 0) != 0) weights_only.push_back(t);
  spit(d + "/checkpoint.safetensors", safetensors_bytes(weights_only, meta));
  resume("tensor 'adam.m.");
}

// Settings that differ from those the checkpoint was trained with (under its checksum) are named, and
// kept with the run as train_grid keeps them: config.json's "run", the checkpoint (a later resume adds
// its own change after them, and none when its settings are the checkpoint's) and the report.
TEST(LearnCli, ResumeNamesChangedTrainSettings) {
  const std::string d = copy_model("extend");
  EXPECT_FALSE(nlohmann::json::parse(slurp(d + "/config.json")).contains("run"));  // a run never changed
  CmdResult r = run_cmd(kTrain + " --out " + d + " --resume --steps 32 --lr 0.02 --json " + d + "/r1.json");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("resuming with train settings other than the checkpoint's: lr 0.01 -> 0.02; steps 30 -> 32;"),
            std::string::npos)
      << r.err;
  const std::string first = "@30: lr 0.01 -> 0.02; steps 30 -> 32;";
  EXPECT_EQ(nlohmann::json::parse(slurp(d + "/config.json")).at("run").at("train_changes"), first);
  EXPECT_EQ(nlohmann::json::parse(slurp(d + "/r1.json")).at("train_changes"), first);
  r = run_cmd(kTrain + " --out " + d + " --resume --steps 32 --lr 0.02");  // the checkpoint's settings: no change
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("other than the checkpoint's"), std::string::npos) << r.err;
  r = run_cmd(kTrain + " --out " + d + " --resume --steps 34 --lr 0.02");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(d + "/config.json")).at("run").at("train_changes"),
            first + " @32: steps 32 -> 34;");
  const CmdResult e = run_cmd(kEval + " --model " + d + " --problem 12+34");  // the model still loads
  EXPECT_TRUE(e.rc == 0 || e.rc == 1) << e.err;                               // (1: a 34-step model's wrong sum)
}

// A checkpoint written before a train field existed (here hard_fraction, and task) is resumed as trained
// with that field's default: no change is named, and none recorded.
TEST(LearnCli, ResumeOfAnOlderCheckpointNamesNoChange) {
  const std::string d = copy_model("older");
  SafetensorsFile f = parse_safetensors(slurp(d + "/checkpoint.safetensors"), "checkpoint");
  auto meta = f.metadata;
  meta.erase("checksum");
  auto tc = nlohmann::json::parse(meta.at("run.train_config"));
  ASSERT_TRUE(tc.contains("hard_fraction"));
  tc.erase("hard_fraction"), tc.erase("task");
  meta["run.train_config"] = tc.dump();
  spit(d + "/checkpoint.safetensors", safetensors_bytes(f.tensors, meta));
  CmdResult r = run_cmd(kTrain + " --out " + d + " --resume --steps 32");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("other than the checkpoint's: steps 30 -> 32;"), std::string::npos) << r.err;  // steps only
  EXPECT_EQ(r.err.find("hard_fraction"), std::string::npos) << r.err;
}

TEST(LearnCli, TruncatedCheckpointRefusesResume) {
  const std::string d = copy_model("ckpt");
  const std::string s = slurp(d + "/checkpoint.safetensors");
  spit(d + "/checkpoint.safetensors", s.substr(0, s.size() - 100));
  const CmdResult r = run_cmd(kTrain + " --out " + d + " --resume --steps 40");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("checkpoint.safetensors"), std::string::npos) << r.err;
}

TEST(LearnCli, BadFlagsExitTwo) {
  EXPECT_EQ(run_cmd(kTrain + " --out " + tmp() + "/x --lr -1").rc, 2);
  EXPECT_EQ(run_cmd(kTrain + " --out " + tmp() + "/x --pos-mode rotary").rc, 2);
  for (const char* bad : {" --tie-readout yes", " --attn-scale half", " --init xavier", " --final-norm batch",
                          " --precision fp16", " --data-seed -2", " --warmup-from-zero 1"}) {
    const CmdResult r = run_cmd(kTrain + " --out " + tmp() + "/x" + bad);
    EXPECT_EQ(r.rc, 2) << bad;
    EXPECT_FALSE(r.err.empty()) << bad;
  }
  EXPECT_EQ(run_cmd(kTrain + " --out " + tmp() + "/x --no-such-flag").rc, 2);
  EXPECT_EQ(run_cmd(kTrain).rc, 2);  // --out is required
  const std::string cfg = tmp() + "/bad_config.json";
  spit(cfg, "{\"train\": {\"stepz\": 3}}");
  const CmdResult r = run_cmd(kTrain + " --out " + tmp() + "/x --config " + cfg);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("stepz"), std::string::npos) << r.err;
  // A model too small for its own training shapes is refused before any work.
  EXPECT_EQ(run_cmd(kTrain + " --out " + tmp() + "/x --max-pos1 3").rc, 2);
  // An existing run is not overwritten without --resume.
  EXPECT_EQ(run_cmd(kTrain + " --out " + model_dir() + kSmall).rc, 2);
  EXPECT_EQ(run_cmd(kEval + " --model " + model_dir() + " --mode fast").rc, 2);
  EXPECT_EQ(run_cmd(kDump + " --model " + model_dir() + " --out " + tmp() + "/a2 --n 9 --m 9").rc, 2);  // beyond max_pos
  EXPECT_EQ(run_cmd(kTrain + " --help").rc, 0);
}

namespace {
// Removes the scratch directory after the whole suite.
struct Cleanup : ::testing::Environment {
  void TearDown() override { fs::remove_all(tmp()); }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new Cleanup);
}  // namespace

// Any truncation or any single corrupted byte of a weights file either raises InputError (the CLIs'
// exit 2) or loads exactly the original weights (a flip that does not change meaning, e.g. inside a
// metadata string); never a crash, never silently different weights.
RC_GTEST_PROP(LearnCliFuzz, CorruptedSafetensorsNeverLoadWrongWeights, ()) {
  ModelConfig c;
  c.d_model = 8;
  c.d_head = 2;
  c.d_ff = 4;
  c.max_pos1 = 5;
  c.max_pos2 = 5;
  const Layout lay = Layout::make(c);
  const auto P = init_params<float>(c, lay, 4);
  const std::string good = safetensors_bytes(params_to_tensors(lay, P), {{"format", "pt"}});
  std::string bad = good;
  if (*rc::gen::arbitrary<bool>()) {
    bad.resize(*rc::gen::inRange<std::size_t>(0, good.size()));
  } else {
    const auto k = *rc::gen::inRange<std::size_t>(0, good.size());
    bad[k] = char(bad[k] ^ *rc::gen::inRange(1, 256));
  }
  const std::string path = tmp() + "/fuzz.safetensors";
  spit(path, bad);
  try {
    std::vector<float> Q;
    tensors_to_params(lay, read_safetensors(path), Q);
    RC_ASSERT(Q == P);
  } catch (const manyadd::InputError&) {
    RC_SUCCEED("rejected");
  }
}
