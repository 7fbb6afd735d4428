// --dims-table for n, m <= 8: the certificate's minimal dimensions and its verdict on the paper's
// formula must equal what runs of the dense engine find: for every candidate P (from the smallest
// with a valid offset upward) the model is run at EVERY offset pair on the all-nines instance and
// a random one; the empirical minimum is the first P where all runs pass. (Failures from undersized
// hypercubes do not depend on the digits, which is why two instances per offset suffice to find
// them; the certificate covers all digits where it says "proven".)
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "manyadd/dense.hpp"
#include "manyadd/verify.hpp"
#include "manyadd/verify_cli.hpp"

using namespace manyadd;

namespace {
bool runs_pass(const Shape& s, int P1, int P2, double lam) {
  if (max_s1(s, P1) < 1 || max_s2(s, P2) < 1) return false;  // no valid offset: the rule is unusable
  const auto M = build_model(P1, P2, lam);
  Rng rng(5);
  Problem nines;
  for (int i = 0; i < s.m; ++i) nines.operands.push_back(std::string(std::size_t(s.n), '9'));
  const std::vector<Problem> probs = {nines, sample_TA(rng, s.n, s.m)};
  for (std::int64_t s1 = 1; s1 <= max_s1(s, P1); ++s1)
    for (std::int64_t s2 = 1; s2 <= max_s2(s, P2); ++s2) {
      const auto ids = position_ids(s, s1, s2);
      for (const auto& p : probs) {
        const auto seq = build_sequence(p, s);
        const auto c = check_instance(seq, s, dense_forward<double>(M, embed(M, seq, ids)).logits);
        if (!c.ok) return false;
      }
    }
  return true;
}
}  // namespace

TEST(DimsTable, MatchesDenseRunsUpTo8x8) {
  const std::string path = ::testing::TempDir() + "/dims_table.json";
  std::vector<std::string> args = {"verify_construction", "--dims-table", "--n-max", "8", "--m-max", "8", "--json", path};
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  ASSERT_EQ(verify_construction_main(int(argv.size()), argv.data(), out, err), 0) << err.str();
  std::ifstream f(path);
  const auto j = nlohmann::json::parse(f);
  ASSERT_EQ(j["dims_table"].size(), 64u);
  for (const auto& row : j["dims_table"]) {
    const int n = row["n"], m = row["m"];
    const auto s = Shape::make(n, m);
    const double lam = row["lambda"];
    const Dims ours = dims_ours(s), paper = dims_paper(s);
    int e1 = std::max(1, ceil_log2(s.l + 1));
    while (!runs_pass(s, e1, ours.P2 + 1, lam)) ++e1;
    int e2 = std::max(1, ceil_log2(s.m + 1));
    while (!runs_pass(s, ours.P1 + 1, e2, lam)) ++e2;
    EXPECT_EQ(row["P1_min"].get<int>(), e1) << n << "x" << m;
    EXPECT_EQ(row["P2_min"].get<int>(), e2) << n << "x" << m;
    EXPECT_EQ(row["paper_holds"].get<bool>(), runs_pass(s, paper.P1, paper.P2, lam)) << n << "x" << m;
    if (!row["paper_holds"].get<bool>() && max_s1(s, paper.P1) >= 1) {
      EXPECT_FALSE(row["counterexample"].is_null());
    }
  }
}
