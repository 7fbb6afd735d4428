// The edges of the tools' command lines that a fuzz run of them found, each as a user would hit it:
// an option's forgotten value (the next option taken as a file name), a FIFO where a file is read (a
// reader that would block forever), format_ids' work estimated before it starts and its ignored
// options refused, a --out name too long for the file system, --certify-cuda with a head switched off
// (the verdict, not bad input) and evaluate --require outside [0, 1]. Each ends with exit 2 and a
// message naming what to change -- except the certificate, which is a FAILED verdict (exit 1).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.hpp"

namespace fs = std::filesystem;
using manyadd::testing::CmdResult;
using manyadd::testing::run_cmd;

namespace {
const std::string kTrain = TRAIN_EXE, kEval = EVALUATE_EXE, kFormat = FORMAT_IDS_EXE,
                  kCompare = COMPARE_ATTENTION_EXE, kVerify = VERIFY_CONSTRUCTION_EXE;
const std::string& tmp() {
  static const std::string d = manyadd::testing::temp_dir("test_cli_edges");
  return d;
}
const std::string kModel = manyadd::testing::source_dir() + "/models/cpu-sa1010-1l4h-d64";

// `cmd` run in a fresh directory `dir` (its own cwd), bounded: a tool that blocks is killed after 60 s
// (exit 124), so a hang fails the test instead of stalling the suite.
CmdResult run_in(const std::string& dir, const std::string& cmd) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  return run_cmd("cd '" + dir + "' && timeout 60 " + cmd);
}
void expect_refused(const CmdResult& r, const std::string& says, const std::string& cmd) {
  EXPECT_EQ(r.rc, 2) << cmd << "\n" << r.out << r.err;
  EXPECT_NE(r.err.find(says), std::string::npos) << cmd << "\n" << r.err;
}
}  // namespace

TEST(CliEdges, AnOptionsValueIsNeverAnotherOption) {
  // The cases the fuzz run found: each wrote a file named after the next option, and exited 0.
  const std::pair<std::string, std::string> cases[] = {
      {kVerify + " --n 2 --m 2 --json --p2", "--p2"},
      {kEval + " --model " + kModel + " --csv --png", "--png"},
      {kTrain + " --out run --json --eval-samples", "--eval-samples"},
      {kCompare + " --json --n-min", "--n-min"},
      {kFormat + " --problem 1+2 --json --s1", "--s1"},
      {kFormat + " --problem 1+2 --json -h", "-h"},
  };
  int k = 0;
  for (const auto& [cmd, next] : cases) {
    const std::string dir = tmp() + "/opt" + std::to_string(k++);
    const CmdResult r = run_in(dir, cmd);
    expect_refused(r, "'" + next + "' is another option", cmd);
    EXPECT_TRUE(fs::is_empty(dir)) << cmd << ": wrote " << fs::directory_iterator(dir)->path();
  }
  // --opt=VALUE is always a value: the file is written where asked.
  const std::string dir = tmp() + "/opt_ok";
  EXPECT_EQ(run_in(dir, kFormat + " --problem 1+2 --json=out.json").rc, 0);
  EXPECT_TRUE(fs::exists(dir + "/out.json"));
}

TEST(CliEdges, ReadersRefuseAFifo) {
  const std::string dir = tmp() + "/fifo";
  fs::remove_all(dir);
  fs::create_directories(dir + "/model");
  ASSERT_EQ(::mkfifo((dir + "/config.json").c_str(), 0644), 0);
  fs::copy_file(kModel + "/model.safetensors", dir + "/model/model.safetensors");
  ASSERT_EQ(::mkfifo((dir + "/model/config.json").c_str(), 0644), 0);
  const std::string cmds[] = {
      kTrain + " --config " + dir + "/config.json --out " + dir + "/run",
      kEval + " --model " + dir + "/model --problem 57+48+96",
      kFormat + " --cases " + dir + "/config.json --json " + dir + "/out.json",
  };
  for (const auto& cmd : cmds) expect_refused(run_cmd("timeout 60 " + cmd), "not a regular file", cmd);
  // the weights as a FIFO behind a good config.json
  fs::remove(dir + "/model/config.json");
  fs::copy_file(kModel + "/config.json", dir + "/model/config.json");
  fs::remove(dir + "/model/model.safetensors");
  ASSERT_EQ(::mkfifo((dir + "/model/model.safetensors").c_str(), 0644), 0);
  const std::string cmd = kEval + " --model " + dir + "/model --problem 57+48+96";
  expect_refused(run_cmd("timeout 60 " + cmd), "not a regular file", cmd);
}

TEST(CliEdges, FormatIdsEstimatesItsWorkFirst) {
  // The address space capped at 4 GiB: the estimates are refused here whatever the machine's memory,
  // and a missing estimate would show as the allocator's failure, not as this message.
  const std::string cap = "ulimit -v 4194304 && ";
  std::string ones = "1";
  for (int k = 1; k < 20000; ++k) ones += "+1";
  const std::string dir = tmp() + "/format";
  fs::remove_all(dir);
  fs::create_directories(dir);
  CmdResult r = run_cmd("cd '" + dir + "' && " + cap + "timeout 60 " + kFormat + " --problem " + ones + " --n 1000000");
  expect_refused(r, "--problem's sequence", "--problem 1+...+1 --n 1000000");
  EXPECT_NE(r.err.find("needs ~"), std::string::npos) << r.err;
  // --cases: each case fits, all of them do not (2e6 tokens each, 200 of them), nor 10000 drawn
  // problems of 1000 x 1000 digits
  std::string thousand = "1";
  for (int k = 1; k < 1000; ++k) thousand += "+1";
  {
    std::ofstream f(dir + "/cases.json");
    f << "[";
    for (int k = 0; k < 200; ++k) f << "{\"problem\": \"" << thousand << "\", \"n\": 1000},";
    f << "{\"sample\": \"TA\", \"n\": 1000, \"m\": 1000, \"count\": 10000, \"seed\": 1}]";
  }
  r = run_cmd("cd '" + dir + "' && " + cap + "timeout 60 " + kFormat + " --cases cases.json --json out.json");
  expect_refused(r, "--cases cases.json (201 cases)", "--cases of 200 large sequences");
  EXPECT_FALSE(fs::exists(dir + "/out.json"));
  // what fits runs
  EXPECT_EQ(run_cmd(cap + kFormat + " --problem " + thousand + " --n 3").rc, 0);
}

TEST(CliEdges, FormatIdsRefusesTheOptionsItWouldIgnore) {
  const std::string dir = tmp() + "/ignored";
  fs::create_directories(dir);
  { std::ofstream(dir + "/cases.json") << "[{\"problem\": \"1+2\"}]"; }
  const std::string cases = kFormat + " --cases " + dir + "/cases.json --json " + dir + "/out.json";
  for (const char* opt : {"--task parity", "--padding theorem", "--pos-mode digits", "--s1 2", "--n 3"})
    expect_refused(run_cmd(cases + " " + opt), "does not apply to --cases", opt);
  EXPECT_EQ(run_cmd(cases).rc, 0);
  expect_refused(run_cmd(kFormat + " --problem 1011 --task parity --padding bogus"), "--padding applies to addition",
                 "parity --padding");
  expect_refused(run_cmd(kFormat + " --problem 1011 --task parity --n 5"), "--n applies to addition", "parity --n");
  expect_refused(run_cmd(kFormat + " --problem 1+2 --s3 2"), "--s3 applies to 3-level tasks", "addition --s3");
  EXPECT_EQ(run_cmd(kFormat + " --problem 12*34 --task multiplication --s3 2").rc, 0);
}

TEST(CliEdges, TrainRefusesAnOutNameTooLong) {
  const std::string name = tmp() + "/" + std::string(300, 'a');
  const std::string cmd = kTrain + " --out " + name + " --steps 1 --train-size 10 --eval-every 0";
  const CmdResult r = run_cmd(cmd);
  expect_refused(r, "name too long", cmd);
}

TEST(CliEdges, CertifyCudaWithAHeadSwitchedOffIsAVerdict) {
  // lambda 0 switches head 4 off: the model is wrong, which the certificate says (FAILED, exit 1) with
  // or without --certify-cuda; the kernel's rounding model has no bound there, which is part of it.
  for (const char* extra : {"", " --certify-cuda"}) {
    const std::string json = tmp() + "/lambda0.json";
    const std::string cmd = kVerify + " --n 2 --m 2 --lambdas 6.5,6.5,6.5,0 --json " + json + extra;
    const CmdResult r = run_cmd(cmd);
    EXPECT_EQ(r.rc, 1) << cmd << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("FAILED"), std::string::npos) << cmd << "\n" << r.out;
  }
}

TEST(CliEdges, EvaluateRequireIsAFraction) {
  for (const char* v : {"100", "1.01", "-2"}) {
    const std::string cmd = kEval + " --model " + kModel + " --problem 57+48+96 --require " + v;
    expect_refused(run_cmd(cmd), "--require", cmd);
  }
}
