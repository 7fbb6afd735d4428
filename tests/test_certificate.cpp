// The certificate must not lie and must be able to fail: on small shapes "proven" implies that
// exhaustive enumeration (every operand string, dense engine in double) passes, at every offset,
// also at a lambda just above lambda_min where the margins are thin; weakened models fail.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "manyadd/certificate.hpp"
#include "manyadd/closed_form.hpp"
#include "manyadd/dense.hpp"
#include "manyadd/structured.hpp"
#include "manyadd/verify.hpp"

using namespace manyadd;

namespace {
// Every problem of m operands of at most n digits (operands 0 .. 10^n - 1), through the dense
// engine; returns the number of failing instances.
template <class T = double>
int exhaustive_failures(const ConstructedModel& M, const Shape& s, std::int64_t s1, std::int64_t s2) {
  const auto ids = position_ids(s, s1, s2);
  int limit = 1;
  for (int i = 0; i < s.n; ++i) limit *= 10;
  std::vector<int> v(std::size_t(s.m), 0);
  int fails = 0;
  while (true) {
    Problem p;
    for (int x : v) p.operands.push_back(std::to_string(x));
    const auto seq = build_sequence(p, s);
    const auto R = dense_forward<T>(M, embed(M, seq, ids));
    const auto c = check_instance(seq, s, R.logits);
    fails += !(c.ok && c.answer == reference_sum(p).str());
    int i = 0;
    while (i < s.m && ++v[std::size_t(i)] == limit) v[std::size_t(i++)] = 0;
    if (i == s.m) break;
  }
  return fails;
}
}  // namespace

TEST(Certificate, ProvenImpliesExhaustivePasses) {
  for (auto [n, m] : std::vector<std::pair<int, int>>{{1, 1}, {1, 2}, {2, 1}, {1, 3}, {2, 2}, {3, 1}}) {
    const auto s = Shape::make(n, m);
    const auto dm = dims_ours(s);
    // at the default lambda, and just above lambda_min (thin margins)
    const double lam0 = default_lambda(s.N());
    const double lmin = certify(build_model(dm.P1, dm.P2, lam0), s, 1, 1).lambda_min;
    ASSERT_TRUE(std::isfinite(lmin));
    for (double lam : {lam0, lmin * 1.01}) {
      const auto M = build_model(dm.P1, dm.P2, lam);
      Certifier C(M, s, CertOptions{true, false});
      for (std::int64_t s1 = 1; s1 <= max_s1(s, dm.P1); ++s1)
        for (std::int64_t s2 = 1; s2 <= max_s2(s, dm.P2); ++s2) {
          const auto r = C.run(s1, s2);
          if (!r.margins[0].proven) continue;  // only "proven" makes a claim
          EXPECT_EQ(exhaustive_failures(M, s, s1, s2), 0) << "n=" << n << " m=" << m << " s1=" << s1 << " s2=" << s2
                                                          << " lambda=" << lam;
        }
    }
  }
}

TEST(Certificate, LambdaMinIsTheThreshold) {
  const auto s = Shape::make(4, 6);
  const auto dm = dims_ours(s);
  const double lmin = certify(build_model(dm.P1, dm.P2, 10.0), s, 2, 1).lambda_min;
  ASSERT_TRUE(std::isfinite(lmin));
  EXPECT_TRUE(certify(build_model(dm.P1, dm.P2, lmin * 1.01), s, 2, 1).margins[0].proven);
  EXPECT_FALSE(certify(build_model(dm.P1, dm.P2, lmin * 0.97), s, 2, 1).margins[0].proven);
}

TEST(Certificate, DefaultsAreProvenAcrossShapes) {
  for (auto [n, m] : std::vector<std::pair<int, int>>{{1, 1}, {5, 9}, {9, 5}, {20, 20}, {64, 3}, {3, 64}}) {
    const auto s = Shape::make(n, m);
    const auto dm = dims_ours(s);
    const auto r = certify(build_model(dm.P1, dm.P2, default_lambda(s.N())), s, 1, 1);
    EXPECT_TRUE(r.proven) << n << "x" << m;
    ASSERT_EQ(r.margins.size(), 3u);
    for (const auto& p : r.margins) EXPECT_GT(p.min_margin, 0.0) << p.precision;
  }
}

TEST(Certificate, WeakenedModelsFail) {
  const auto s = Shape::make(3, 4);
  const auto dm = dims_ours(s);
  // lambda far too small
  auto r = certify(build_model(dm.P1, dm.P2, 0.2), s, 1, 1);
  EXPECT_FALSE(r.proven);
  ASSERT_TRUE(r.failure.has_value());
  // each head switched off in turn
  for (int h = 0; h < 4; ++h) {
    std::array<double, 4> lam = {8, 8, 8, 8};
    lam[std::size_t(h)] = 0;
    r = certify(build_model(dm.P1, dm.P2, lam), s, 1, 1);
    EXPECT_FALSE(r.proven) << "head " << h + 1;
    const auto t = Shape::make(1, 2);
    const auto dt = dims_ours(t);
    EXPECT_GT(exhaustive_failures(build_model(dt.P1, dt.P2, lam), t, 1, 1), 0) << "head " << h + 1;
  }
  // the paper's dimension rule at l + 1 = 2^P1 (n = 2, m = 3, s1 = 1)
  const auto t = Shape::make(2, 3);
  r = certify(build_model(dims_paper(t).P1, dims_paper(t).P2, 8.0), t, 1, 1);
  EXPECT_FALSE(r.proven);
  // every instance fails there (the wrap hides the arrow); the all-zero one is enough to show it
  const auto M = build_model(dims_paper(t).P1, dims_paper(t).P2, 8.0);
  const auto seq = build_sequence(parse_problem("0+0+0"), t);
  EXPECT_FALSE(check_instance(seq, t, dense_forward<double>(M, embed(M, seq, position_ids(t, 1, 1))).logits).ok);
}

// The building blocks the whole claim joins: part 1's classes of one shape, and parts 2-3 on
// class groups given directly, agree with the per-shape certifier's verdicts.
TEST(Certificate, ClassCertifierAgreesWithCertifier) {
  const auto s = Shape::make(4, 6);
  const auto dm = dims_ours(s);
  for (double lam : {10.0, 0.5}) {
    const auto M = build_model(dm.P1, dm.P2, lam);
    const auto R = response_structure(s, 2, 1, dm.P1, dm.P2);
    ASSERT_FALSE(R.failure.has_value());
    std::int64_t positions = 0;
    ClassCertifier C(M, s.N());
    bool all = true;
    for (const auto& c : R.classes) {
      positions += c.count;
      const auto v = C.check(ClassGroup{c.kind, c.expect, c.x3, c.x3, 1, c.x4, "test"});
      all = all && v.ok[0] && v.ok[1] && v.ok[2];
      if (!v.ok[0]) {
        EXPECT_EQ(v.failing_x3, c.x3);
        EXPECT_FALSE(v.reason.empty());
      }
    }
    EXPECT_EQ(positions, R.positions);
    EXPECT_EQ(all, certify(M, s, 2, 1).proven) << "lambda " << lam;
  }
}

// The exact enclosure contains the structured engine's finite-lambda interval (which uses the
// unmatched keys' actual value sum instead of u vmax).
TEST(Certificate, HeadEnclosureContainsTheStructuredInterval) {
  const auto M = build_model(5, 4, 7.0);
  const double eps = std::nextafter(std::exp(-14.0), 1.0) * (1 + 1e-15);
  for (std::int64_t u : {0, 7, 1000, 1000000})
    for (std::int64_t S : {0, 5, 18}) {
      HeadMatch m;
      m.x = 3;
      m.u = u;
      m.vsum = 3 * S;
      m.usum = 27 * u / 2;
      const auto iv = head_interval(m, eps);
      const auto e = head_enclosure(M, 0, 0, m.vsum, m.x, u, 27);
      EXPECT_LE(e.lo.convert_to<double>(), iv.lo * (1 + 1e-12));
      EXPECT_GE(e.hi.convert_to<double>(), iv.hi * (1 - 1e-12));
    }
}

// The rounding model (part 3) must not lie either: wherever float64 / float32 is proven, the dense
// engine in that precision passes every instance, across the lambda window's ends.
TEST(Certificate, FloatProvenImpliesExhaustiveFloatPasses) {
  for (auto [n, m] : std::vector<std::pair<int, int>>{{1, 2}, {2, 1}}) {
    const auto s = Shape::make(n, m);
    const auto dm = dims_ours(s);
    const double lmin = certify(build_model(dm.P1, dm.P2, 10.0), s, 1, 1).lambda_min;
    int proven = 0;
    for (double lam : {lmin * 1.003, lmin * 1.05, 30.0, 60.0, 120.0}) {
      const auto M = build_model(dm.P1, dm.P2, lam);
      const auto r = certify(M, s, 1, 1, CertOptions{true, false});
      ASSERT_EQ(r.margins.size(), 3u);
      if (r.margins[1].proven) {
        ++proven;
        EXPECT_EQ(exhaustive_failures<double>(M, s, 1, 1), 0) << n << "x" << m << " lambda " << lam;
      }
      if (r.margins[2].proven) {
        EXPECT_EQ(exhaustive_failures<float>(M, s, 1, 1), 0) << n << "x" << m << " lambda " << lam;
      }
    }
    EXPECT_GE(proven, 3);
  }
}

// --offsets all shares one structure pass per wrap case; sharing changes no result.
TEST(Certificate, SharedOffsetsGiveTheSameResults) {
  for (auto [n, m, P1] : std::vector<std::tuple<int, int, int>>{{3, 4, 3}, {2, 3, 0}, {5, 2, 0}}) {
    const auto s = Shape::make(n, m);
    const auto dm = dims_ours(s);
    const int p1 = P1 ? P1 : dm.P1;  // {3, 4, 3}: l = 5 < 2^3 - 1, several offsets, no wrap
    const auto M = build_model(p1, dm.P2 + 1, 8.0);
    Certifier shared(M, s, CertOptions{true, false, true}), each(M, s, CertOptions{true, false, false});
    std::int64_t pairs = 0;
    for (std::int64_t s1 = 1; s1 <= max_s1(s, p1); ++s1)
      for (std::int64_t s2 = 1; s2 <= max_s2(s, dm.P2 + 1); ++s2) {
        const auto a = shared.run(s1, s2), b = each.run(s1, s2);
        ++pairs;
        EXPECT_EQ(a.proven, b.proven);
        EXPECT_EQ(a.classes, b.classes);
        ASSERT_EQ(a.margins.size(), b.margins.size());
        for (std::size_t k = 0; k < a.margins.size(); ++k) EXPECT_EQ(a.margins[k].min_margin, b.margins[k].min_margin);
      }
    EXPECT_EQ(each.structure_passes(), pairs);
    EXPECT_LE(shared.structure_passes(), 4);
    EXPECT_GE(pairs, 4);
  }
}

// Heads 1-2 where part 1 does not pin their matches down (the query of a most significant digit,
// which predicts '>' or '$', and where they see separators only): parts 2-3 take their enclosure
// from the precision's rounding model over every matched count the closed form allows, not an
// exact bound. (Before, the '>'/'$' query used [0, 27] in every precision: a computed average of
// values in [0, 27] is not within [0, 27] in floating point. The last block fails on that box.)
TEST(Certificate, UnpinnedHeadsUseTheRoundingModel) {
  // the closed form's families: one key each for heads 1-2 (5 families each), ranges for head 3
  EXPECT_EQ(closed::max_matched_keys(0), 6);
  EXPECT_EQ(closed::max_matched_keys(1), 6);
  EXPECT_EQ(closed::max_matched_keys(2), -1);
  EXPECT_EQ(head12_max_keys(), 6);
  const auto M = build_model(3, 3, 7.0);
  for (int p = 0; p < 4; ++p)
    for (int h = 0; h < 2; ++h)
      for (bool sep : {false, true}) {
        ExactInterval prev{0, 0};
        for (std::int64_t u : {0, 10, 1000, 2000000}) {
          const ExactInterval e = unpinned_head_enclosure(M, h, p, u, sep);
          EXPECT_EQ(e.lo, 0);
          EXPECT_GE(e.hi, prev.hi) << "widens with u";
          prev = e;
          if (p == 0) {  // a convex combination (head_enclosure's real upper end is looser)
            EXPECT_LE(e.hi, 27);
          }
          // it holds every admissible count and matched sum (BOS has value 0)
          for (std::int64_t x = 1; x <= 6; ++x)
            for (std::int64_t vsum : {std::int64_t(0), sep ? 0 : 27 * (x - 1)})
              EXPECT_GE(e.hi, std::min<boost::multiprecision::mpq_rational>(head_enclosure(M, h, p, vsum, x, u, 27).hi, p == 0 ? 27 : 1e300))
                  << "precision " << p << " x " << x << " u " << u;
        }
      }
  // The dense float32 engine's head-1/2 outputs at every such query of a few shapes lie inside.
  for (auto [n, m] : {std::pair{2, 3}, std::pair{3, 2}, std::pair{1, 5}}) {
    const Shape s = Shape::make(n, m);
    const Dims dm = dims_ours(s);
    const auto Mf = build_model(dm.P1, dm.P2, default_lambda(s.N()));
    Problem pr;
    for (int k = 0; k < m; ++k) pr.operands.push_back(std::string(std::size_t(n), char('9' - k % 2)));
    const auto seq = build_sequence(pr, s);
    const auto R = dense_forward<float>(Mf, embed(Mf, seq, position_ids(s, 1, 1)));
    int checked = 0;
    for (std::int64_t j = s.eq_index(); j < s.N(); ++j) {
      const std::int64_t rel = j - s.eq_index(), i = rel / (s.l + 1), t = rel % (s.l + 1);
      const bool msd = t == s.l, sep = !msd && (i == 0 || t == 0);
      if (!msd && !sep) continue;
      for (int h = 0; h < 2; ++h) {
        if (!msd && i > 0 && h == 0) continue;  // head 1 at a separator query is pinned (x = 3)
        const double y = double(R.Y(h == 0 ? Layout::PRE_SUM : Layout::PRE_CARRY, j));
        const ExactInterval e = unpinned_head_enclosure(Mf, h, 2, s.N(), !msd);
        EXPECT_LE(e.lo.convert_to<double>(), y);
        EXPECT_GE(e.hi.convert_to<double>(), y) << "n=" << n << " m=" << m << " row " << j << " head " << h + 1;
        ++checked;
      }
    }
    EXPECT_GT(checked, m);
  }
  // Where the rounding model is wide (float32 at lambda = 5e4: score errors ~0.2), the most
  // significant digit's enclosure reaches above 27, so the box [0, 27] is not what it proves.
  const auto W = build_model(2, 2, 5e4);
  EXPECT_GT(unpinned_head_enclosure(W, 1, 2, 20, false).hi, 27);
  EXPECT_GT(unpinned_head_enclosure(W, 1, 3, 20, false).hi, 27);
  EXPECT_LE(unpinned_head_enclosure(W, 1, 0, 20, false).hi, 27);
}
