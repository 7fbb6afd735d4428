// verify_construction end to end: exit codes 0/1/2, messages, JSON keys, the paper's dimension
// formula failing where it must, and the real binary's exit codes.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "manyadd/verify_cli.hpp"
#include "test_util.hpp"

namespace {
struct Run {
  int code;
  std::string out, err;
};

Run run(std::vector<std::string> args) {
  args.insert(args.begin(), "verify_construction");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = manyadd::verify_construction_main(int(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

nlohmann::json run_json(std::vector<std::string> args, int expect_code) {
  const std::string path = ::testing::TempDir() + "/verify_report.json";
  std::remove(path.c_str());
  args.push_back("--json");
  args.push_back(path);
  const auto r = run(args);
  EXPECT_EQ(r.code, expect_code) << r.out << r.err;
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}
}  // namespace

TEST(VerifyCli, SmallShapeVerifies) {
  const auto j = run_json({"--n", "4", "--m", "5", "--samples", "5"}, 0);
  for (const char* key : {"n", "m", "l", "P1", "P2", "d", "lambda", "N", "offsets_checked", "certificate", "samples",
                          "engines", "engines_agree", "counterexample", "seconds"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["N"], (2 * 5 + 1) * (4 + 1 + 0 + 1));
  EXPECT_EQ(j["samples"]["checked"], 5);
  EXPECT_EQ(j["samples"]["exact"], 5);
  EXPECT_EQ(j["certificate"]["status"], "proven");
  EXPECT_GT(j["certificate"]["lambda_min"].get<double>(), 0.0);
  EXPECT_LT(j["certificate"]["lambda_min"].get<double>(), j["lambda"].get<double>());
  EXPECT_EQ(j["cross_check"]["agree"], j["cross_check"]["rows"]);
  EXPECT_TRUE(j["counterexample"].is_null());
  EXPECT_TRUE(j["engines_agree"].get<bool>());
  // provenance and a verdict that agrees with the exit code (core/report.hpp)
  EXPECT_EQ(j["verdict"], "pass");
  EXPECT_EQ(j["manyadd"]["tool"], "verify_construction");
  EXPECT_EQ(j["manyadd"]["argv"][0], "verify_construction");
  EXPECT_FALSE(j["manyadd"]["commit"].get<std::string>().empty());
}

TEST(VerifyCli, AllOffsetsAndRandomOffsets) {
  // n = 2, m = 3: l = 3, P1 = 3, P2 = 2 -> s1 in [1, 5], s2 in [1, 1]
  auto j = run_json({"--n", "2", "--m", "3", "--samples", "2", "--offsets", "all"}, 0);
  EXPECT_EQ(j["offsets_checked"].size(), 5u);
  j = run_json({"--n", "2", "--m", "3", "--samples", "1", "--offsets", "random:4", "--seed", "9"}, 0);
  EXPECT_EQ(j["offsets_checked"].size(), 4u);
}

TEST(VerifyCli, WorkedExampleDump) {
  const auto r = run({"--problem", "57+48+96", "--s1", "4", "--s2", "2", "--p1", "3", "--p2", "3", "--dump", "residual"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("PRE_ARROW"), std::string::npos);
  EXPECT_NE(r.out.find("1/4"), std::string::npos);
  EXPECT_NE(r.out.find("1/7"), std::string::npos);
  const auto a = run({"--problem", "57+48+96", "--s1", "4", "--s2", "2", "--p1", "3", "--p2", "3", "--dump", "attention"});
  EXPECT_EQ(a.code, 0) << a.err;
  EXPECT_NE(a.out.find("head 1 (digit_sum)"), std::string::npos);
}

TEST(VerifyCli, DumpJsonCarriesEveryToken) {
  const auto j = run_json({"--problem", "57+48+96", "--s1", "4", "--s2", "2", "--p1", "3", "--p2", "3", "--dump",
                           "residual"}, 0);
  ASSERT_TRUE(j.contains("residual"));
  EXPECT_EQ(j["residual"]["tokens"].size(), 28u);
  EXPECT_EQ(j["residual"]["rows"]["PRE_SUM"].size(), 28u);
  EXPECT_NEAR(j["residual"]["rows"]["PRE_SUM"][24].get<double>(), 11.0, 1e-3);  // '>' before B_3: (6+5)
}

// The paper's dimension formula P1 = ceil(log2 l) leaves 2^P1 = l + 1 at n = 2, m = 3: the only
// offset s1 = 1 puts B_i's most significant digit at ID 2^P1, whose "next" vector wraps to v_1 =
// the separators' ID, so head 3 never sees PRE_ARROW = 1 and '>' is never predicted.
TEST(VerifyCli, PaperDimsFailWithCounterexample) {
  const auto j = run_json({"--n", "2", "--m", "3", "--dims", "paper", "--samples", "1"}, 1);
  EXPECT_EQ(j["P1"], 2);
  ASSERT_FALSE(j["counterexample"].is_null());
  EXPECT_EQ(j["counterexample"]["expected"], ">");
  EXPECT_EQ(j["counterexample"]["position"], 16);  // B_0's last digit predicts the first '>'
  EXPECT_EQ(j["verdict"], "fail");
}

TEST(VerifyCli, QuietIsAcceptedByEveryMode) {
  EXPECT_EQ(run({"--n", "2", "--m", "2", "--samples", "2", "--exhaustive", "--quiet"}).code, 0);
  EXPECT_EQ(run({"--dims-table", "--n-max", "2", "--m-max", "2", "--quiet"}).code, 0);
}

TEST(VerifyCli, PerHeadLambdasAreWhatTheReportNames) {
  const auto j = run_json({"--n", "3", "--m", "3", "--lambdas", "6,7,8,9", "--samples", "1"}, 0);
  EXPECT_TRUE(j["lambda"].is_null());  // no common lambda ran
  EXPECT_EQ(j["lambdas"], nlohmann::json({6.0, 7.0, 8.0, 9.0}));
}

// The certificate can fail, and its failures are real: a lambda far too small, a head switched
// off, dimensions too small each give "failed" and a counterexample that the dense engine confirms.
TEST(VerifyCli, WeakenedModelsFailWithConfirmedCounterexamples) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--n", "3", "--m", "4", "--lambda", "0.3"},
           {"--n", "3", "--m", "4", "--lambdas", "6,6,0,6"},
           {"--n", "3", "--m", "4", "--lambdas", "0,6,6,6"},
           {"--n", "3", "--m", "4", "--p1", "2", "--allow-aliasing"},
           {"--n", "2", "--m", "4", "--p2", "2", "--allow-aliasing"}}) {
    const auto j = run_json(args, 1);
    EXPECT_EQ(j["certificate"]["status"], "failed") << args[4];
    ASSERT_FALSE(j["counterexample"].is_null()) << args[4] << " " << args[5];
    EXPECT_EQ(j["counterexample"]["confirmed_by"], "dense") << args[4];
  }
  // With the dense engine as the sample engine the samples fail too.
  const auto j = run_json({"--n", "3", "--m", "4", "--lambda", "0.05", "--engine", "dense", "--samples", "2"}, 1);
  EXPECT_LT(j["samples"]["exact"].get<int>(), 2);
}

TEST(VerifyCli, BadInputExitsTwoWithMessage) {
  struct Case {
    std::vector<std::string> args;
    std::string msg;
  };
  const std::vector<Case> cases = {
      {{"--n", "0", "--m", "3"}, "--n must be >= 1"},
      {{"--n", "3", "--m", "-2"}, "--m must be >= 1"},
      {{"--n", "abc", "--m", "3"}, "--n"},
      {{"--n", "3"}, "--n N --m M"},
      {{"--n", "3", "--m", "3", "--s1", "99"}, "--s1 99 outside its range"},
      {{"--n", "3", "--m", "3", "--s2", "0"}, "--s2 0 outside its range"},
      {{"--n", "3", "--m", "3", "--offsets", "some"}, "--offsets 'some'"},
      {{"--n", "3", "--m", "3", "--offsets", "random:0"}, "random:K"},
      {{"--n", "3", "--m", "3", "--lambda", "0"}, "--lambda must be > 0"},
      {{"--n", "3", "--m", "3", "--lambda", "-1"}, "--lambda must be > 0"},
      {{"--n", "3", "--m", "3", "--engine", "warp"}, "--engine 'warp'"},
      {{"--n", "3", "--m", "3", "--dims", "big"}, "--dims 'big'"},
      {{"--n", "3", "--m", "3", "--p1", "1"}, "no valid level-1 offset"},
      {{"--n", "3", "--m", "3", "--padding", "wide"}, "padding rule 'wide'"},
      {{"--problem", "5x3"}, "unexpected character 'x'"},
      {{"--problem", "123+4", "--n", "2"}, "operand of 3 digits"},
      {{"--n", "3", "--m", "3", "--dump", "residual"}, "--dump needs one explicit --problem"},
      {{"--n", "3", "--m", "3", "--dump", "weights"}, "--dump 'weights'"},
      {{"--n", "3", "--m", "3", "--json", "/nonexistent-dir/x.json"}, "cannot write --json"},
      {{"--n", "3", "--m", "3", "--bogus"}, "bogus"},
      // Too large: refused with the estimate before anything is allocated.
      {{"--n", "1000", "--m", "1000", "--engine", "dense"}, "GiB"},
      {{"--n", "100000", "--m", "100000"}, "GiB"},
      {{"--n", "100000000", "--m", "100000000"}, "GiB"},
      // Samples that would run for hours are refused with the estimate (was: ran silently).
      {{"--n", "2", "--m", "2", "--samples", "4294967296"}, "would take"},
      {{"--n", "3", "--m", "3", "--lambdas", "1,2,3"}, "--lambdas"},
      {{"--n", "3", "--m", "3", "--lambdas", "1,2,3,-4"}, "must be >= 0"},
  };
  for (const auto& c : cases) {
    const auto r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args[0] << " ... " << r.out;
    EXPECT_NE(r.err.find(c.msg), std::string::npos) << "stderr was: " << r.err;
  }
}

// Every option is parsed strictly: a number must be all number, of the option's type and range.
TEST(VerifyCli, StrictOptionsExitTwo) {
  const std::vector<std::vector<std::string>> cases = {
      {"--n", "3.5", "--m", "3"},      {"--n", "", "--m", "3"},          {"--n", "3", "--m", "3", "--samples", "-1"},
      {"--n", "3", "--m", "3", "--lambda", "nan"}, {"--n", "3", "--m", "3", "--seed", "-1"},
      {"--n", "3", "--m", "3", "--lambdas", "1,nan,1,1"}, {"--n", "3", "--m", "3", "--threads", "0"},
      {"--n", "3", "--m", "3", "--cross-check", "1e3"},  {"--n", "3", "--m", "3", "--json", "/dev/null"},
      {"--n", "3", "--m", "3", "--offsets", "random:+4"}};
  for (const auto& c : cases) {
    const auto r = run(c);
    EXPECT_EQ(r.code, 2) << c[0] << " " << c[1] << " ... " << r.out;
    EXPECT_NE(r.err.find("verify_construction: "), std::string::npos) << r.err;
  }
}

TEST(VerifyCli, ExportWritesTheModel) {
  const std::string dir = ::testing::TempDir() + "/exported_model";
  const auto r = run({"--n", "2", "--m", "3", "--samples", "1", "--export", dir});
  EXPECT_EQ(r.code, 0) << r.err;
  std::ifstream cfg(dir + "/config.json");
  ASSERT_TRUE(cfg.good());
  const auto j = nlohmann::json::parse(cfg);
  EXPECT_EQ(j.dump().find("PRE_ARROW") != std::string::npos, true);
  EXPECT_TRUE(std::ifstream(dir + "/model.safetensors").good());
  EXPECT_EQ(run({"--n", "2", "--m", "3", "--export", "/proc/forbidden/x"}).code, 2);
}

TEST(VerifyCli, RealBinaryExitCodes) {
  auto status = [&](const std::string& args) { return manyadd::testing::run_cmd(std::string(VERIFY_CONSTRUCTION_EXE) + " " + args).rc; };
  EXPECT_EQ(status("--n 3 --m 3 --samples 2"), 0);
  EXPECT_EQ(status("--n 3 --m 3 --lambda 0.05"), 1);
  EXPECT_EQ(status("--n x"), 2);
  EXPECT_EQ(status("--help"), 0);
}

// --certify-cuda adds the CUDA program's precision to the certificate (its margin in the JSON, its
// name in the summary line); it needs the certificate and is no part of --whole-claim.
TEST(VerifyCli, CertifyCudaAddsTheKernelPrecision) {
  const auto j = run_json({"--n", "4", "--m", "3", "--certify-cuda"}, 0);
  ASSERT_TRUE(j["certificate"]["margins"].contains("float32-cuda"));
  EXPECT_EQ(j["certificate"]["margins"]["float32-cuda"]["proven"], true);
  EXPECT_GT(j["certificate"]["margins"]["float32-cuda"]["min_margin"].get<double>(), 0);
  EXPECT_NE(run({"--n", "4", "--m", "3", "--certify-cuda"}).out.find("real, float64, float32, float32-cuda"), std::string::npos);
  EXPECT_FALSE(run_json({"--n", "4", "--m", "3"}, 0)["certificate"]["margins"].contains("float32-cuda"));
  const auto bad = run({"--n", "4", "--m", "3", "--certify-cuda", "--no-certify"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--certify-cuda needs the certificate"), std::string::npos) << bad.err;
  EXPECT_EQ(run({"--whole-claim", "--p1", "4", "--p2", "4", "--certify-cuda"}).code, 2);
}
