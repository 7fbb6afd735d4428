// The paper's worked example 57+48+96 (Appendix D, Tables 4-26; s1 = 4, s2 = 2, P1 = P2 = 3),
// value by value. lambda = 40 makes every unmatched key's weight < e^-80: the finite-scale model
// equals the paper's lambda -> infinity tables to within 1e-12 (the tolerance used below).
//
// Where the paper's tables disagree with the construction, the construction's value is tested and
// the disagreement recorded here and in the README:
//   * Table 23 (and Tables 22, 25 derived from it) has PRE_EOS = 1/2 at '=' and 1/3 at the '>'
//     before B_2. The construction (Eqs. 19-22) gives 1/3 at '=' (it matches BOS, the '+' after
//     A_1 and itself) and 1/2 at that '>' (only BOS and itself): exactly Table 20's values. So the
//     EOS row of Table 22 is -1 (not 0) at '=' and 0 (not -1) at that '>', and so is the '$' row
//     of Table 25 (-100 and 0). The output (Table 26) is unaffected.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "manyadd/dense.hpp"

using namespace manyadd;

namespace {
constexpr double kTol = 1e-12;

struct Example : ::testing::Test {
  Shape shape = Shape::make(2, 3);
  std::vector<std::uint8_t> seq = build_sequence(parse_problem("57+48+96"), shape);
  PositionIds ids = position_ids(shape, 4, 2);
  ConstructedModel M = build_model(3, 3, 40.0);
  Eigen::MatrixXd X0 = embed(M, seq, ids);
  DenseResult<double> R = dense_forward<double>(M, X0, DenseOptions{true});
  const int eq = 12;  // 0-based index of '='; the tables' response columns are 12..27

  // Output of head h alone (U_h V_h X0 A_h^T), the row it writes.
  double head_out(int h, int col) const {
    const Head& H = M.heads[std::size_t(h)];
    return (H.V * X0 * R.attention[std::size_t(h)].row(col).transpose())(0, 0);
  }
  void expect_row(const char* what, const std::vector<double>& want, const std::function<double(int)>& got) {
    ASSERT_EQ(int(want.size()), 16) << what;
    for (int c = 0; c < 16; ++c) EXPECT_NEAR(got(eq + c), want[std::size_t(c)], kTol) << what << " column " << c + 1;
  }
};
}  // namespace

TEST_F(Example, Table4InitialEmbedding) {
  const std::vector<double> num = {0, 0, 5, 7, 0, 0, 4, 8, 0, 0, 9, 6, 0, 0, 0, 0, 0, 7, 5, 0, 0, 5, 0, 1, 0, 1, 0, 2};
  for (int k = 0; k < 28; ++k) {
    EXPECT_EQ(X0(Layout::NUM, k), num[std::size_t(k)]);
    EXPECT_EQ(X0(Layout::IS_BOS, k), k == 0 ? 1.0 : 0.0);
    EXPECT_EQ(X0(Layout::FULL_ONES, k), 1.0);
    for (int r = Layout::PRE_SUM; r <= Layout::EOS; ++r) EXPECT_EQ(X0(r, k), 0.0);  // "filled in later"
    const auto& L = M.layout;
    for (int i = 0; i < 3; ++i) {
      const int p1 = ids.p1[std::size_t(k)], p2 = ids.p2[std::size_t(k)];
      EXPECT_EQ(X0(L.POS_1() + i, k), p1 ? hypercube(3, p1)[std::size_t(i)] : 0);
      EXPECT_EQ(X0(L.POS_1_NEXT() + i, k), p1 ? hypercube(3, p1 + 1)[std::size_t(i)] : 0);
      EXPECT_EQ(X0(L.POS_2() + i, k), p2 ? hypercube(3, p2)[std::size_t(i)] : 0);
      EXPECT_EQ(X0(L.POS_2_NEXT() + i, k), p2 ? hypercube(3, p2 + 1)[std::size_t(i)] : 0);
    }
  }
}

TEST_F(Example, Tables5And6QueryKeyHead1) {
  const Eigen::MatrixXd Q = M.heads[0].Q * X0 / std::sqrt(40.0), K = M.heads[0].K * X0 / std::sqrt(40.0);
  for (int k = 1; k < 28; ++k) {
    const int p1 = ids.p1[std::size_t(k)], p2 = ids.p2[std::size_t(k)];
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(Q(i, k), hypercube(3, p1 + 1)[std::size_t(i)], kTol);      // Table 5: v_{p1+1}
      EXPECT_NEAR(Q(3 + i, k), hypercube(3, p2)[std::size_t(i)], kTol);      // v_{p2}
      EXPECT_NEAR(K(i, k), hypercube(3, p1)[std::size_t(i)], kTol);          // Table 6: v_{p1}
      EXPECT_NEAR(K(3 + i, k), hypercube(3, p2 + 1)[std::size_t(i)], kTol);  // v_{p2+1}
    }
    EXPECT_NEAR(Q(6, k), std::sqrt(6.0), kTol);  // sqrt(P)
    EXPECT_NEAR(K(6, k), 0.0, kTol);
  }
  EXPECT_NEAR(K(6, 0), std::sqrt(6.0), kTol);
}

TEST_F(Example, Tables7And11ValuesOfHeads1And2) {
  const std::vector<double> want = {0, 0, 15, 21, 0, 0, 12, 24, 0, 0, 27, 18, 0, 0, 0, 0, 0, 21, 15, 0, 0, 15, 0, 3, 0, 3, 0, 6};
  for (int h = 0; h < 2; ++h) {
    const Eigen::MatrixXd UV = M.heads[std::size_t(h)].U * M.heads[std::size_t(h)].V * X0;
    for (int k = 0; k < 28; ++k) EXPECT_EQ(UV(M.heads[std::size_t(h)].target, k), want[std::size_t(k)]);
  }
}

TEST_F(Example, Table8Head1DigitSum) {
  expect_row("PRE_SUM (Table 8)", {0, 0, 0, 0, 7, 5, 0, 0, 15, 9, 0, 0, 11, 9, 1, 0}, [&](int c) { return head_out(0, c); });
}

TEST_F(Example, Table12Head2Carry) {
  expect_row("PRE_CARRY (Table 12)", {0, 0, 0, 0, 0, 7, 5, 0, 0, 15, 9, 0, 0, 11, 9, 1}, [&](int c) { return head_out(1, c); });
}

TEST_F(Example, Table16Head3Arrow) {
  const double q = 0.25, f = 0.2, s = 1.0 / 6, v = 1.0 / 7;
  expect_row("PRE_ARROW (Table 16)", {q, q, q, 1, f, f, f, 1, s, s, s, 1, v, v, v, 1}, [&](int c) { return head_out(2, c); });
}

TEST_F(Example, Table20Head4Eos) {
  const double t = 1.0 / 3, h = 0.5;
  expect_row("PRE_EOS (Table 20)", {t, t, t, t, t, t, t, t, h, t, t, t, h, h, h, h}, [&](int c) { return head_out(3, c); });
}

TEST_F(Example, Tables21To23ResidualAfterTheLayer) {
  const double t = 1.0 / 3, h = 0.5;
  expect_row("NUM", {0, 0, 0, 0, 0, 7, 5, 0, 0, 5, 0, 1, 0, 1, 0, 2}, [&](int c) { return R.X1(Layout::NUM, c); });
  expect_row("PRE_SUM", {0, 0, 0, 0, 7, 5, 0, 0, 15, 9, 0, 0, 11, 9, 1, 0}, [&](int c) { return R.Y(Layout::PRE_SUM, c); });
  expect_row("PRE_CARRY", {0, 0, 0, 0, 0, 7, 5, 0, 0, 15, 9, 0, 0, 11, 9, 1}, [&](int c) { return R.Y(Layout::PRE_CARRY, c); });
  // Table 23 prints 1/2 at column 1 and 1/3 at column 9: the construction (and Table 20) disagree.
  expect_row("PRE_EOS", {t, t, t, t, t, t, t, t, h, t, t, t, h, h, h, h}, [&](int c) { return R.X1(Layout::PRE_EOS, c); });
  // Table 22: SUM one-hot (e^10_{k+1} = digit k), ARROW, EOS.
  const std::vector<int> digit = {0, 0, 0, 0, 7, 5, 0, 0, 5, 0, 1, 0, 1, 0, 2, 0};
  for (int c = 0; c < 16; ++c)
    for (int k = 0; k < 10; ++k)
      EXPECT_NEAR(R.X1(Layout::SUM(k), eq + c), k == digit[std::size_t(c)] ? 1.0 : 0.0, kTol) << "SUM_" << k << " col " << c + 1;
  expect_row("ARROW", {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1}, [&](int c) { return R.X1(Layout::ARROW, c); });
  // Table 22 prints 0 at column 1 and -1 at column 9, following its PRE_EOS (see the file header).
  expect_row("EOS", {-1, -1, -1, 0, -1, -1, -1, 0, 0, -1, -1, 0, 0, 0, 0, 1}, [&](int c) { return R.X1(Layout::EOS, c); });
  // The position rows pass through unchanged.
  EXPECT_TRUE(R.X1.bottomRows(12).isApprox(X0.bottomRows(12)));
}

TEST_F(Example, Tables25And26Readout) {
  const std::vector<int> digit = {0, 0, 0, 0, 7, 5, 0, 0, 5, 0, 1, 0, 1, 0, 2, 0};
  const std::vector<double> arrow = {0, 0, 0, 10, 0, 0, 0, 10, 0, 0, 0, 10, 0, 0, 0, 10};
  // Table 25 prints 0 at column 1 and -100 at column 9 (see the file header).
  const std::vector<double> dollar = {-100, -100, -100, 0, -100, -100, -100, 0, 0, -100, -100, 0, 0, 0, 0, 100};
  for (int c = 0; c < 16; ++c) {
    for (int k = 0; k < 10; ++k) EXPECT_NEAR(R.logits(k, eq + c), k == digit[std::size_t(c)] ? 1.0 : 0.0, kTol);
    EXPECT_NEAR(R.logits(kPlus, eq + c), 0.0, kTol);
    EXPECT_NEAR(R.logits(kEq, eq + c), 0.0, kTol);
    EXPECT_NEAR(R.logits(kArrow, eq + c), arrow[std::size_t(c)], kTol);
    EXPECT_NEAR(R.logits(kDollar, eq + c), dollar[std::size_t(c)], kTol);
  }
  std::vector<std::uint8_t> out(R.pred.begin() + eq, R.pred.end());
  EXPECT_EQ(tokens_to_string(out), "000>750>501>102$");  // Table 26
}
