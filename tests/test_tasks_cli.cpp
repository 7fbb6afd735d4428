// --task in the learn/ CLIs as a user runs them: train writes the task into config.json, evaluate
// scores the task's grid (both metrics, parity's one axis) and one problem in the task's notation,
// dump_attention averages a test cell of any task, compare_attention refuses what it cannot compare;
// every wrong task, mode, axis, problem or offset gives exit 2 with a message naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/learn/tasks/task.hpp"

namespace fs = std::filesystem;
using namespace manyadd;
using manyadd::testing::CmdResult;
using manyadd::testing::run_cmd;

namespace {
const std::string& tmp() {
  static const std::string d = manyadd::testing::temp_dir("test_tasks_cli");
  return d;
}
const std::string kTrain = TRAIN_EXE, kEval = EVALUATE_EXE, kDump = DUMP_ATTENTION_EXE,
                  kCompare = COMPARE_ATTENTION_EXE;
// 30 steps of a tiny model (a fraction of a second): the tools' plumbing, not learning (test_tasks_train).
const std::string kTiny = " --d-model 16 --d-head 4 --d-ff 16 --train-size 300 --batch 8 --steps 30 --lr 0.01"
                          " --eval-every 0 --eval-samples 5 --log-every 10";

const std::string& parity_dir() {
  static const std::string d = [] {
    const std::string dir = tmp() + "/parity";
    const CmdResult r = run_cmd(kTrain + " --out " + dir + " --task parity --pos-mode digits --train-n 4 --train-m 1"
                                         " --max-pos1 8" + kTiny);
    EXPECT_EQ(r.rc, 0) << r.err;
    return dir;
  }();
  return d;
}
const std::string& mul_dir() {
  static const std::string d = [] {
    const std::string dir = tmp() + "/mul";
    const CmdResult r = run_cmd(kTrain + " --out " + dir + " --task multiplication --pos-mode coupled3 --train-n 2"
                                         " --train-m 2 --max-pos1 8 --max-pos2 6 --max-pos3 8" + kTiny);
    EXPECT_EQ(r.rc, 0) << r.err;
    return dir;
  }();
  return d;
}
void expect_refused(const std::string& cmd, const std::string& says) {
  const CmdResult r = run_cmd(cmd);
  EXPECT_EQ(r.rc, 2) << cmd << "\n" << r.err;
  EXPECT_NE(r.err.find(says), std::string::npos) << cmd << "\n" << r.err;
}
}  // namespace

TEST(TasksCli, TrainRecordsTheTaskAndItsVocabulary) {
  const auto p = read_json_file(parity_dir() + "/config.json");
  EXPECT_EQ(p["train"]["task"], "parity");
  EXPECT_EQ(p["model"]["vocab"], 14);
  EXPECT_EQ(p["format"]["task"], "parity");
  const auto m = read_json_file(mul_dir() + "/config.json");
  EXPECT_EQ(m["train"]["task"], "multiplication");
  EXPECT_EQ(m["model"]["vocab"], 15);  // '*' joins the vocabulary without being asked for
  EXPECT_EQ(m["model"]["vocabulary"], "0123456789+=>$*");
  EXPECT_EQ(m["model"]["pos_mode"], "coupled3");
}

TEST(TasksCli, EvaluateScoresTheTasksGrid) {
  const std::string js = tmp() + "/parity_eval.json", csv = tmp() + "/parity.csv";
  CmdResult r = run_cmd(kEval + " --model " + parity_dir() + " --n-max 10 --samples 20 --csv " + csv + " --png " +
                        tmp() + "/parity.png --json " + js);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string text = read_file(csv);
  EXPECT_EQ(text.substr(0, text.find('\n')), "n,samples,exact,accuracy,answer_exact,answer_accuracy");
  const auto rep = read_json_file(js);
  EXPECT_EQ(rep["task"], "parity");
  ASSERT_EQ(rep["cells"].size(), 2u);  // lengths 5 and 10: the task's step 5
  EXPECT_EQ(rep["cells"][0]["n"], 5);
  EXPECT_FALSE(rep["cells"][0].contains("m"));
  EXPECT_EQ(rep["cells"][0]["samples"], 20);
  EXPECT_GE(rep["cells"][0]["answer_exact"].get<int>(), rep["cells"][0]["exact"].get<int>());  // a part of the whole
  EXPECT_TRUE(rep["cells"][1]["accuracy"].is_null());  // 10 bits need ID 1 + 10 > max_pos1 8: NA, not a guess
  EXPECT_FALSE(rep["cells"][0]["accuracy"].is_null());
  const std::string mjs = tmp() + "/mul_eval.json";
  r = run_cmd(kEval + " --model " + mul_dir() + " --n-max 2 --m-max 3 --samples 5 --mode both --png " + tmp() +
              "/mul.png --csv " + tmp() + "/mul.csv --json " + mjs);
  ASSERT_TRUE(r.rc == 0 || r.rc == 1) << r.err;  // 1: greedy and teacher-forced may disagree on a barely trained model
  const auto mrep = read_json_file(mjs);
  EXPECT_EQ(mrep["cells"].size(), 6u);  // TM(1..2, 1..3)
  EXPECT_EQ(mrep["cells"][0]["m"], 1);
}

TEST(TasksCli, EvaluateOneProblemInTheTasksNotation) {
  const std::string js = tmp() + "/mul_problem.json";
  const CmdResult r = run_cmd(kEval + " --model " + mul_dir() + " --problem 37*92 --s1 2 --s2 3 --s3 4 --json " + js);
  ASSERT_TRUE(r.rc == 0 || r.rc == 1) << r.err;
  const auto rep = read_json_file(js);
  // S_1 = 37 x 2 = 074, S_2 = 37 x 9 = 333 (reversed); C_1 = 0074, C_2 = 74 + 3330 = 3404 (reversed)
  EXPECT_EQ(rep["tokens"], "$37*92=470+333=4700>4043");
  EXPECT_EQ(rep["answer"], "3404");
  EXPECT_EQ(rep["pos3"][0], 0);
  EXPECT_EQ(rep["pos3"][6], 4);  // the '=' before S_1: s3 + 0
  EXPECT_EQ(rep["pos3"][7], 5);  // S_1's first digit: s3 + 1
  EXPECT_EQ(rep["pos2"][13], 4);  // S_2's last digit: s2 + 1
  EXPECT_EQ(rep["pos1"][4], 0);   // B's digits have no level-1 ID
  EXPECT_EQ(rep["logits_from_eq"].size(), 18u);  // '=' .. the last token: one row per counted target
  EXPECT_EQ(rep["logits_from_eq"][0].size(), 15u);
}

TEST(TasksCli, DumpAttentionAveragesAnyTasksCell) {
  const std::string out = tmp() + "/att", js = tmp() + "/att.json";
  const CmdResult r = run_cmd(kDump + " --model " + mul_dir() + " --n 2 --m 2 --samples 8 --out " + out + " --json " + js);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(out + "/attention.safetensors"));
  const auto rep = read_json_file(js);
  EXPECT_EQ(rep["task"], "multiplication");
  EXPECT_EQ(rep["T"], 2 + 2 + 2 + 2 * 4 + 2 * 5);  // $ A * B = S_1 + S_2 = C_1 > C_2 for 2 x 2 digits
  EXPECT_EQ(rep["heads"], 4);
}

TEST(TasksCli, BadTasksAndInputsExit2) {
  const std::string p = parity_dir(), m = mul_dir();
  expect_refused(kTrain + " --out " + tmp() + "/x --task division", "task 'division' unknown");
  expect_refused(kTrain + " --out " + tmp() + "/x --task parity --pos-mode coupled", "use pos_mode digits");
  expect_refused(kTrain + " --out " + tmp() + "/x --task multiplication --pos-mode coupled", "use pos_mode coupled3");
  expect_refused(kTrain + " --out " + tmp() + "/x --task multiplication --pos-mode coupled3 --train-n 10 --train-m 10"
                          " --max-pos1 8",
                 "cannot hold the multiplication training set");
  expect_refused(kEval + " --model " + p + " --task multiplication", "trained on task parity");
  expect_refused(kEval + " --model " + p + " --m-min 2", "one axis");
  expect_refused(kEval + " --model " + p + " --n-min 0", "--n-min");
  expect_refused(kEval + " --model " + p + " --problem 01a", "a parity query is a bit string");
  expect_refused(kEval + " --model " + m + " --problem 3*4*5", "exactly two factors");
  expect_refused(kEval + " --model " + m + " --problem 37*92 --s3 100", "max_pos3=8");
  expect_refused(kDump + " --model " + p + " --n 6 --m 3 --out " + tmp() + "/y", "drop --m");
  expect_refused(kDump + " --model " + m + " --task parity --out " + tmp() + "/y", "trained on task multiplication");
  expect_refused(kDump + " --constructed --task parity --out " + tmp() + "/y", "--task addition only");
  expect_refused(kCompare + " --learned " + p, "trained on task parity");
  expect_refused(kCompare + " --learned constructed --task multiplication --out " + tmp() + "/y", "--task multiplication");
  // A config.json naming a task that does not exist, or not as a string: refused on load.
  const std::string bad = tmp() + "/badtask";
  fs::remove_all(bad);
  fs::copy(p, bad, fs::copy_options::recursive);
  auto cfg = read_json_file(bad + "/config.json");
  cfg["train"]["task"] = 7;
  atomic_write(bad + "/config.json", cfg.dump());
  expect_refused(kEval + " --model " + bad + " --n-max 5 --samples 2", "train.task must be a string");
  cfg["train"]["task"] = "subtraction";
  atomic_write(bad + "/config.json", cfg.dump());
  expect_refused(kEval + " --model " + bad + " --n-max 5 --samples 2", "task 'subtraction' unknown");
}
