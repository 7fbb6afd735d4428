// The constructed model's pieces: hypercube vectors (Eqs. 3-4), layout, per-head Q/K structure,
// dimension rules, the default scale.
#include <gtest/gtest.h>

#include <cmath>

#include "manyadd/model.hpp"

using namespace manyadd;

TEST(Hypercube, Eq4ExhaustiveUpTo7) {
  for (int D = 1; D <= 7; ++D)
    for (std::int64_t a = 1; a <= (1 << D); ++a)
      for (std::int64_t b = 1; b <= (1 << D); ++b) {
        const auto u = hypercube(D, a), v = hypercube(D, b);
        int dot = 0;
        for (int i = 0; i < D; ++i) dot += u[std::size_t(i)] * v[std::size_t(i)];
        if (a == b) ASSERT_EQ(dot, D);
        else ASSERT_LE(dot, D - 2) << "D=" << D << " a=" << a << " b=" << b;
      }
}

TEST(Hypercube, Eq3BitsAndWrap) {
  EXPECT_EQ(hypercube(3, 1), (std::vector<int>{1, 1, 1}));     // k-1 = 000
  EXPECT_EQ(hypercube(3, 2), (std::vector<int>{1, 1, -1}));    // 001, most significant bit first
  EXPECT_EQ(hypercube(3, 8), (std::vector<int>{-1, -1, -1}));  // 111
  EXPECT_EQ(hypercube(3, 9), hypercube(3, 1));                 // v_{2^D + 1} := v_1 (D.4.2), extended
  EXPECT_THROW(hypercube(3, 0), InputError);
}

TEST(Model, LayoutNamesAndDimension) {
  const auto M = build_model(10, 10, 12.0);
  EXPECT_EQ(M.d(), 59);  // the headline shape's d: n = m = 1000, P1 = P2 = 10 (docs/construction.md)
  const auto names = M.layout.names();
  ASSERT_EQ(int(names.size()), 59);
  EXPECT_EQ(names[0], "NUM");
  EXPECT_EQ(names[6], "PRE_EOS");
  EXPECT_EQ(names[7], "SUM_0");
  EXPECT_EQ(names[16], "SUM_9");
  EXPECT_EQ(names[18], "EOS");
  EXPECT_EQ(names[19], "POS_1[0]");
  EXPECT_EQ(names[29], "POS_1_NEXT[0]");
  EXPECT_EQ(names[58], "POS_2_NEXT[9]");
}

TEST(Model, ScoresFollowTheIdRule) {
  // For every pair of columns with random IDs, each head's score is lambda P_h when the key's IDs
  // equal the query's target IDs (and for BOS), and at most lambda (P_h - 2) otherwise.
  const int P1 = 4, P2 = 3;
  const double lam = 2.5;
  const auto M = build_model(P1, P2, lam);
  auto column = [&](int p1, int p2, bool bos) {
    Eigen::VectorXd x = Eigen::VectorXd::Zero(M.d());
    x(Layout::FULL_ONES) = 1;
    x(Layout::IS_BOS) = bos;
    write_position(M.layout, bos ? 0 : p1, bos ? 0 : p2, x.data());
    return x;
  };
  for (int h = 0; h < 4; ++h) {
    const int P = h == 2 ? P1 : P1 + P2;
    for (int qp1 = 1; qp1 <= 15; ++qp1)
      for (int qp2 = 1; qp2 <= 7; ++qp2) {
        const Eigen::VectorXd q = M.heads[std::size_t(h)].Q * column(qp1, qp2, false);
        EXPECT_NEAR((M.heads[std::size_t(h)].K * column(0, 0, true)).dot(q), lam * P, 1e-9);
        for (int kp1 = 1; kp1 <= 16; ++kp1)
          for (int kp2 = 1; kp2 <= 8; ++kp2) {
            // target IDs of each head: (p1+1, p2-1), (p1, p2-1), (p1+1, any), (p1, p2)
            // (IDs compare modulo 2^P: the hypercube wraps, v_{2^P + 1} = v_1)
            auto same = [](int a, int b, int D) { return (a - 1) % (1 << D) == (b - 1) % (1 << D); };
            const int t1 = (h == 0 || h == 2) ? qp1 + 1 : qp1;
            const bool l1 = same(kp1, t1, P1);
            const bool l2 = h == 2 || (h == 3 ? same(kp2, qp2, P2) : same(kp2 + 1, qp2, P2));
            const double s = (M.heads[std::size_t(h)].K * column(kp1, kp2, false)).dot(q);
            if (l1 && l2) ASSERT_NEAR(s, lam * P, 1e-9);
            else ASSERT_LE(s, lam * (P - 2) + 1e-9);
          }
      }
  }
}

TEST(Model, DimensionRules) {
  const auto s = Shape::make(1000, 1000);
  EXPECT_EQ(dims_ours(s).P1, 10);
  EXPECT_EQ(dims_ours(s).P2, 10);
  EXPECT_EQ(dims_paper(s).P1, 10);
  const auto t = Shape::make(2, 3);  // l = 3: paper P1 = 2 (2^2 = l + 1), ours 3
  EXPECT_EQ(dims_paper(t).P1, 2);
  EXPECT_EQ(dims_ours(t).P1, 3);
  EXPECT_EQ(max_s1(t, 2), 1);
  EXPECT_EQ(max_s2(t, 2), 1);
  EXPECT_EQ(ceil_log2(1), 0);
  EXPECT_EQ(ceil_log2(5), 3);
  EXPECT_EQ(ceil_log2(8), 3);
}

TEST(Model, DefaultLambdaMeetsItsBound) {
  for (std::int64_t N : {28LL, 943LL, 2011005LL, 200000000LL}) {
    const double lam = default_lambda(N);
    EXPECT_LE(double(N) * std::exp(-2 * lam), 1e-4) << N;
    EXPECT_GT(double(N) * std::exp(-2 * (lam - 0.5)), 1e-4) << N << ": not the smallest multiple of 1/2";
  }
}

TEST(Model, BadParameters) {
  EXPECT_THROW(build_model(0, 3, 1.0), InputError);
  EXPECT_NO_THROW(build_model(3, 3, 0.0));  // a switched-off head, for ablations
  EXPECT_THROW(build_model(3, 3, -1.0), InputError);
  EXPECT_THROW(build_model(3, 3, std::nan("")), InputError);
}
