// The whole claim's pieces against their independent twins: the token layout against format.cpp's
// position IDs; the closed form against the structure pass at EVERY shape and offset for P1 = P2 <= 5
// (P = 6: DISABLED_ test, run with --gtest_also_run_disabled_tests); the class union against the
// union of the structure pass's classes; the solver's proof and its non-vacuity; the monotonicity
// of every enclosure in u (RapidCheck); the whole-claim verdict against per-shape certificates at
// every shape and offset and exhaustive enumeration where it fits, for P1 = P2 in {2, 3}.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/closed_form.hpp"
#include "manyadd/closed_form_smt.hpp"
#include "manyadd/dense.hpp"
#include "manyadd/offset_cases.hpp"
#include "manyadd/structured.hpp"
#include "manyadd/certificate.hpp"
#include "manyadd/verify_cli.hpp"
#include "manyadd/whole_claim.hpp"

using namespace manyadd;
namespace cf = manyadd::closed;

namespace {
// A shape of width l with m operands (the structure depends on l and m only).
Shape shape_lm(std::int64_t l, std::int64_t m) {
  Shape s;
  s.n = int(std::max<std::int64_t>(1, l - 1));
  s.m = int(m);
  s.l = int(l);
  return s;
}

// The closed form's view of one response position: x per head and, for heads 1-2, what the
// certificate's structure check reads (distinct ID pairs, the pair when unique, separators only).
struct Expect {
  std::array<std::int64_t, 4> x;
  std::array<int, 2> pairs;
  std::array<std::int32_t, 2> pt, pj;
  std::array<bool, 2> only_sep;
};

std::vector<Expect> closed_view(std::int64_t l, std::int64_t m, int P1, int P2) {
  const Shape s = shape_lm(l, m);
  const auto ids = position_ids(s, 1, 1);  // relative IDs p - s are the same at every offset
  cf::Values v = cf::shape_values(l, m, 1, 1, P1, P2);
  std::vector<Expect> out;
  for (std::int64_t j = s.eq_index(); j < s.N(); ++j) {
    cf::set_query(v, j);
    Expect e{};
    e.x = cf::matched_counts(v);
    for (int h = 0; h < 2; ++h) {
      std::set<std::pair<int, int>> pr;
      bool sep = true;
      for (std::int64_t k : cf::matched_keys(v, h)) {
        pr.insert({ids.p1[std::size_t(k)] - 1, ids.p2[std::size_t(k)] - 1});
        if (ids.p1[std::size_t(k)] != 1) sep = false;
      }
      e.pairs[std::size_t(h)] = int(pr.size());
      e.pt[std::size_t(h)] = pr.size() == 1 ? pr.begin()->first : -1;
      e.pj[std::size_t(h)] = pr.size() == 1 ? pr.begin()->second : -1;
      e.only_sep[std::size_t(h)] = sep;
    }
    out.push_back(e);
  }
  return out;
}

// Closed form vs the structure pass at every shape (l <= 2^P1 - 1, m <= 2^P2 - 1) and every
// offset pair; returns the number of disagreeing (shape, offset, position) triples.
std::int64_t twin_mismatches(int P1, int P2, std::string& first) {
  const std::int64_t C1 = std::int64_t(1) << P1, C2 = std::int64_t(1) << P2;
  std::int64_t bad = 0;
  for (std::int64_t l = 1; l <= C1 - 1; ++l)
    for (std::int64_t m = 1; m <= C2 - 1; ++m) {
      const auto ex = closed_view(l, m, P1, P2);
      const Shape s = shape_lm(l, m);
      for (std::int64_t s1 = 1; s1 <= C1 - l; ++s1)
        for (std::int64_t s2 = 1; s2 <= C2 - m; ++s2) {
          StructuredStream st(s, s1, s2, P1, P2);
          st.run(nullptr, [&](const QueryMatch& q) {
            const Expect& e = ex[std::size_t(q.j - s.eq_index())];
            bool ok = true;
            for (int h = 0; h < 4; ++h)
              ok = ok && q.h[std::size_t(h)].x == e.x[std::size_t(h)] && q.h[std::size_t(h)].u == q.j + 1 - e.x[std::size_t(h)];
            for (int h = 0; h < 2; ++h) {
              const HeadMatch& hm = q.h[std::size_t(h)];
              ok = ok && hm.pairs == e.pairs[std::size_t(h)] && hm.only_separators == e.only_sep[std::size_t(h)];
              if (hm.pairs == 1) ok = ok && hm.pair_t == e.pt[std::size_t(h)] && hm.pair_j == e.pj[std::size_t(h)];
            }
            if (!ok && bad++ == 0)
              first = fmt::format("P1={} P2={} l={} m={} s1={} s2={} j={}: structure x = ({}, {}, {}, {}), closed form ({}, {}, {}, {})", P1,
                                  P2, l, m, s1, s2, q.j, q.h[0].x, q.h[1].x, q.h[2].x, q.h[3].x, e.x[0], e.x[1], e.x[2], e.x[3]);
          });
        }
    }
  return bad;
}
}  // namespace

TEST(WholeClaimLayout, MatchesFormatPositionIds) {
  for (std::int64_t l = 1; l <= 6; ++l)
    for (std::int64_t m = 1; m <= 5; ++m)
      for (std::int64_t s1 : {1, 3})
        for (std::int64_t s2 : {1, 2}) {
          const Shape s = shape_lm(l, m);
          const auto ids = position_ids(s, s1, s2);
          const cf::Values v0 = cf::shape_values(l, m, s1, s2, 4, 4);
          std::vector<int> seen(std::size_t(s.N()), 0);
          for (const auto& K : cf::layout())
            for (std::int64_t b = -1; b <= m + 1; ++b)
              for (std::int64_t g = -1; g <= l + 1; ++g) {
                cf::Values v = v0;
                v[cf::BLK] = b;
                v[cf::SIG] = g;
                bool valid = true;
                for (const auto& a : K.valid) valid = valid && a.holds(v);
                if (!valid) continue;
                const std::int64_t k = cf::token_index(v0, K.kind, b, g);
                ASSERT_GE(k, 0);
                ASSERT_LT(k, s.N());
                ++seen[std::size_t(k)];
                EXPECT_EQ(K.p1.eval(v), ids.p1[std::size_t(k)]) << cf::tok_name(K.kind) << " l=" << l << " m=" << m;
                EXPECT_EQ(K.p2.eval(v), ids.p2[std::size_t(k)]) << cf::tok_name(K.kind) << " l=" << l << " m=" << m;
              }
          for (int c : seen) EXPECT_EQ(c, 1);  // a bijection onto the N tokens
        }
}

TEST(WholeClaimClosedForm, MatchesStructurePassAtEveryShapeAndOffset) {
  // P1 = P2 <= 5 and two lopsided pairs: ~2.5e5 (shape, offset) pairs at P = 5
  for (auto [P1, P2] : std::vector<std::pair<int, int>>{{2, 2}, {3, 3}, {4, 4}, {5, 5}, {2, 5}, {5, 2}, {3, 1}}) {
    std::string first;
    EXPECT_EQ(twin_mismatches(P1, P2, first), 0) << first;
  }
}

TEST(WholeClaimClosedForm, DISABLED_MatchesStructurePassAtP6) {
  std::string first;
  EXPECT_EQ(twin_mismatches(6, 6, first), 0) << first;
}

TEST(WholeClaimClosedForm, WrongFamiliesDisagreeWithTheStructurePass) {
  // The twin can fail: a closed form with one family shifted disagrees somewhere.
  auto fams = cf::families();
  fams[0].sig = fams[0].sig + 1;  // h1.A at significance t + 2
  const Shape s = shape_lm(3, 2);
  cf::Values v = cf::shape_values(3, 2, 1, 1, 3, 2);
  cf::set_query(v, s.eq_index() + 4 + 1);  // B_1's digit 1
  EXPECT_NE(cf::matched_keys(v, 0, fams), cf::matched_keys(v, 0));
}

TEST(WholeClaimClasses, UnionMatchesEnumeration) {
  for (auto [P1, P2] : std::vector<std::pair<int, int>>{{2, 2}, {3, 3}, {4, 4}, {5, 5}, {2, 4}, {4, 2}, {3, 1}}) {
    const std::int64_t C1 = std::int64_t(1) << P1, C2 = std::int64_t(1) << P2;
    for (std::int64_t L : {C1 - 2, C1 - 1}) {
      std::set<std::tuple<int, int, std::int64_t, std::int64_t>> enumerated, closed;
      for (std::int64_t l = 1; l <= L; ++l)
        for (std::int64_t m = 1; m <= C2 - 1; ++m)
          for (std::int64_t s1 = 1; s1 <= C1 - l; ++s1)
            for (std::int64_t s2 = 1; s2 <= C2 - m; ++s2) {
              // every offset pair up to P = 4; the four extreme ones at P = 5 (its every offset is
              // the closed-form twin's)
              if (P1 + P2 >= 10 && !((s1 == 1 || s1 == C1 - l) && (s2 == 1 || s2 == C2 - m))) continue;
              const auto R = response_structure(shape_lm(l, m), s1, s2, P1, P2);
              ASSERT_FALSE(R.failure.has_value()) << "l=" << l << " m=" << m << ": " << R.failure->reason;
              for (const auto& c : R.classes) enumerated.insert({c.kind, c.expect, c.x3, c.x4});
            }
      std::int64_t count = 0;
      for (const auto& g : class_groups({1, L, 1, C2 - 1}, P1, P2)) {
        count += g.size();
        for (std::int64_t x3 = g.x3_lo; x3 <= g.x3_hi; x3 += g.x3_step) closed.insert({g.kind, g.expect, x3, g.x4});
      }
      EXPECT_EQ(std::int64_t(closed.size()), count) << "groups overlap";
      EXPECT_EQ(closed, enumerated) << "P1=" << P1 << " P2=" << P2 << " l <= " << L;
    }
  }
}

TEST(WholeClaimSmt, ProvesTheClosedFormAndIsNotVacuous) {
  // (3, 1): one operand only, several families never occur (their witnesses must be unsat)
  // (the CLI runs the wrong key lists at every P it proves; here once, at P = 2)
  for (auto [P1, P2, mut] : std::vector<std::tuple<int, int, bool>>{{2, 2, true}, {5, 5, false}, {3, 1, false}}) {
    const auto M = build_model(P1, P2, 10.0);
    const std::int64_t C1 = std::int64_t(1) << P1, C2 = std::int64_t(1) << P2;
    const auto rep = prove_closed_form(M, {P1, P2, 1, C1 - 1, 1, C2 - 1}, cf::families(), SmtOptions{true, mut, 2, 120000});
    EXPECT_TRUE(rep.proven) << P1 << "," << P2;
    EXPECT_TRUE(rep.non_vacuous) << P1 << "," << P2;
    EXPECT_EQ(rep.proofs, 16);
    if (mut) {
      EXPECT_GE(rep.mutants, 90);
    }
    for (const auto& c : rep.checks) {
      EXPECT_TRUE(c.ok) << c.name << ": " << c.result << " " << c.model;
      if (c.role == "mutant") {
        EXPECT_EQ(c.result, "sat") << c.name;  // refuted with a concrete assignment
      }
      if (c.name.find("(wrap)") != std::string::npos && P2 >= 2) {
        EXPECT_EQ(c.result, "sat") << c.name;  // the wrap is found
      }
    }
    // Without l = 2^P1 - 1 no wrap family occurs: those witnesses must come back unsat.
    const auto no_wrap = prove_closed_form(M, {P1, P2, 1, C1 - 2, 1, C2 - 1}, cf::families(), SmtOptions{true, false, 2, 120000});
    EXPECT_TRUE(no_wrap.proven && no_wrap.non_vacuous);
    for (const auto& c : no_wrap.checks) {
      if (c.name.find("(wrap)") != std::string::npos) {
        EXPECT_EQ(c.result, "unsat") << c.name;
      }
    }
  }
}

TEST(WholeClaimSmt, WrongModelsAndWrongListsAreRefuted) {
  const auto M = build_model(3, 3, 10.0);
  const SmtRange R{3, 3, 1, 7, 1, 7};
  // head 1's key reads POS_2 instead of POS_2_NEXT: the closed form no longer holds
  auto W = M;
  const Layout& L = M.layout;
  for (int i = 0; i < L.P2; ++i) {
    std::swap(W.heads[0].K(L.P1 + i, L.POS_2() + i), W.heads[0].K(L.P1 + i, L.POS_2_NEXT() + i));
  }
  const auto bad = prove_closed_form(W, R, cf::families(), SmtOptions{false, false, 2, 120000});
  EXPECT_FALSE(bad.proven);
  // a deliberately wrong key list (head 3 without B's digits) is not proven either
  auto fams = cf::families();
  fams.erase(std::remove_if(fams.begin(), fams.end(), [](const cf::Family& f) { return f.name == "h3.B"; }), fams.end());
  const auto wrong = prove_closed_form(M, R, fams, SmtOptions{false, false, 2, 120000});
  EXPECT_FALSE(wrong.proven);
  // a head whose score reads a digit is refused before the solver runs
  auto D = M;
  D.heads[1].Q(0, Layout::NUM) = 1.0;
  EXPECT_THROW(score_structure(D, 1), InputError);
}

// Every enclosure widens as the unmatched count u grows (lo non-increasing, hi non-decreasing), in
// real arithmetic and in both floating-point models: the monotonicity that lets one check at N_max
// cover every shape. And a group's enclosure over x in [x, x_hi] holds each x's own enclosure.
// Exact rationals.
RC_GTEST_PROP(WholeClaimEnclosure, WidensWithUnmatchedAndCoversMatchedRanges, ()) {
  const double lambda = *rc::gen::element(2.0, 6.5, 9.3, 12.0, 20.0, 48.0);
  const int P = *rc::gen::inRange(2, 21);
  const auto M = build_model(P, P, lambda);
  const int head = *rc::gen::inRange(0, 4), prec = *rc::gen::inRange(0, 3);
  const bool digits = head < 2;
  const std::int64_t x = digits ? 3 : *rc::gen::inRange<std::int64_t>(1, 1 << 20);
  const std::int64_t vsum = digits ? 3 * *rc::gen::inRange<std::int64_t>(0, 19) : 1;
  const int vmax = digits ? 27 : 0;
  const std::int64_t u1 = *rc::gen::inRange<std::int64_t>(0, std::int64_t(1) << 40);
  const std::int64_t u2 = u1 + *rc::gen::inRange<std::int64_t>(0, std::int64_t(1) << 40);
  const auto a = head_enclosure(M, head, prec, vsum, x, u1, vmax), b = head_enclosure(M, head, prec, vsum, x, u2, vmax);
  RC_ASSERT(b.lo <= a.lo);
  RC_ASSERT(b.hi >= a.hi);
  RC_ASSERT(a.lo <= a.hi);
  if (!digits) {
    const std::int64_t xh = x + *rc::gen::inRange<std::int64_t>(0, 1 << 24);
    const std::int64_t y = *rc::gen::inRange<std::int64_t>(x, xh + 1);
    const auto g = head_enclosure(M, head, prec, vsum, x, u1, vmax, xh), c = head_enclosure(M, head, prec, vsum, y, u1, vmax);
    RC_ASSERT(g.lo <= c.lo);
    RC_ASSERT(g.hi >= c.hi);
  }
}

namespace {
int cli(std::vector<std::string> args, std::string* out_text = nullptr) {
  args.insert(args.begin(), "verify_construction");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = verify_construction_main(int(argv.size()), argv.data(), out, err);
  if (out_text) *out_text = out.str() + err.str();
  return code;
}
}  // namespace

// The whole claim at P1 = P2 in {2, 3} against its twins: the per-shape certificate at EVERY shape
// (both padding rules) and offset pair on the same model (all three precisions at P = 2, real
// arithmetic at P = 3, where the whole claim's own boundary samples run all three), and exhaustive
// enumeration (dense attention, every digit string) at every offset pair wherever 10^(n m) <= 10^4.
TEST(WholeClaimCrossCheck, EveryShapeAndOffsetAtSmallP) {
  for (int P : {2, 3}) {
    WholeClaimOptions o;
    o.P1 = o.P2 = P;
    o.sample_shapes = 0;
    o.non_vacuity = false;  // the solver's witnesses and refutations are WholeClaimSmt's
    const auto W = whole_claim(o);
    const std::int64_t C = std::int64_t(1) << P;
    ASSERT_TRUE(W.proven) << W.reason;
    EXPECT_EQ(W.claimed.l_hi, C - 2);
    EXPECT_EQ(W.claimed.m_hi, C - 1);
    ASSERT_EQ(W.failing.size(), 2u);
    for (const auto& f : W.failing) ASSERT_TRUE(f.counterexample.has_value()) << f.what;
    EXPECT_EQ(W.failing[0].counterexample->l, C - 1);
    EXPECT_EQ(W.failing[0].counterexample->engine, "dense");
    const auto M = build_model(P, P, W.lambda);
    std::set<std::pair<std::int64_t, std::int64_t>> seen;
    for (Padding pad : {Padding::theorem, Padding::minimal})
      for (std::int64_t n = 1; n <= C; ++n)
        for (std::int64_t m = 1; m <= C - 1; ++m) {
          const Shape s = Shape::make(n, m, pad);
          if (s.l > C - 1 || !seen.insert({s.l, m}).second) continue;
          const bool claimed = s.l <= W.claimed.l_hi;
          Certifier cert(M, s, CertOptions{P == 2, false, false});  // a structure pass per offset pair
          for (std::int64_t s1 = 1; s1 <= C - s.l; ++s1)
            for (std::int64_t s2 = 1; s2 <= C - m; ++s2) {
              const auto r = cert.run(s1, s2);
              EXPECT_EQ(r.proven, claimed) << "P=" << P << " n=" << n << " m=" << m << " l=" << s.l << " s1=" << s1 << " s2=" << s2;
              if (!r.proven) continue;
              for (const auto& pm : r.margins) {
                const int p = pm.precision == "real" ? 0 : pm.precision == "float64" ? 1 : 2;
                EXPECT_GE(pm.min_margin, W.margin[std::size_t(p)]) << pm.precision;
              }
            }
          double inst = 1;
          for (std::int64_t k = 0; k < n * m; ++k) inst *= 10;
          if (inst > 1e4) continue;
          std::string text;
          const int code = cli({"--n", std::to_string(n), "--m", std::to_string(m), "--padding", padding_name(pad), "--p1",
                                std::to_string(P), "--p2", std::to_string(P), "--lambda", fmt::format("{}", W.lambda), "--offsets",
                                "all", "--exhaustive", "--no-certify", "--samples", "1", "--cross-check", "0"},
                               &text);
          EXPECT_EQ(code, claimed ? 0 : 1) << text;
        }
  }
}

TEST(WholeClaim, ClassesAndRangesAreReportedAndBadLambdasFail) {
  WholeClaimOptions o;
  o.P1 = 4;
  o.P2 = 3;
  o.non_vacuity = false;
  const auto W = whole_claim(o);
  ASSERT_TRUE(W.proven) << W.reason;
  std::int64_t classes = 0;
  for (const auto& g : class_groups(W.claimed, 4, 3)) classes += g.size();
  EXPECT_EQ(W.classes, classes);
  EXPECT_EQ(W.n_tokens_max, (2 * 7 + 1) * (14 + 1));
  // pairs: sum_{l=1}^{14} (16 - l) * sum_{m=1}^{7} (8 - m) = 119 * 28
  EXPECT_EQ(W.pairs_covered, "3332");
  EXPECT_GT(W.margin[2], 0.0);
  EXPECT_FALSE(W.windows[2].empty);
  EXPECT_LT(W.windows[0].lo, W.lambda);
  EXPECT_GT(W.windows[2].hi, W.lambda);
  for (const auto& x : W.samples) EXPECT_TRUE(x.skipped || x.agrees) << x.n << "x" << x.m;
  EXPECT_GE(W.samples.size(), 8u);
  // below lambda_min (real) and above the float32 window: FAILED with the reason
  o.sample_shapes = 0;
  o.lambda = W.lambda_min * 0.9;
  auto lo = whole_claim(o);
  EXPECT_FALSE(lo.proven);
  EXPECT_NE(lo.reason.find("real window"), std::string::npos) << lo.reason;
  o.lambda = W.windows[2].hi * 1.5;
  auto hi = whole_claim(o);
  EXPECT_FALSE(hi.proven);
  EXPECT_NE(hi.reason.find("float32 window"), std::string::npos) << hi.reason;
  // bad input before anything is built
  for (auto [p1, p2, lam] : std::vector<std::tuple<int, int, double>>{{1, 3, 0}, {31, 3, 0}, {3, 0, 0}, {30, 31, 0}, {3, 3, -1}})
    EXPECT_THROW(whole_claim(WholeClaimOptions{p1, p2, lam}), InputError);
}

// --exhaustive enumerates one offset pair per wrap case and lets the others inherit its verdict
// only when their attention cannot move any instance's margin that far (margin_shift_bound); the
// bound must hold for real instances, and a failing case is enumerated everywhere.
RC_GTEST_PROP(WholeClaimExhaustive, MarginShiftBoundHoldsBetweenOffsetsOfACase, ()) {
  const int n = *rc::gen::inRange(1, 4), m = *rc::gen::inRange(1, 4);
  const Shape s = Shape::make(n, m);
  const Dims dm = dims_ours(s);
  const int P1 = dm.P1 + *rc::gen::inRange(0, 2), P2 = dm.P2 + *rc::gen::inRange(0, 2);
  const double lambda = *rc::gen::element(0.7, 2.0, 4.0, 9.0);
  const auto M = build_model(P1, P2, lambda);
  const auto F = CompiledFFN::build(M);
  const std::int64_t a1 = *rc::gen::inRange<std::int64_t>(1, max_s1(s, P1) + 1), a2 = *rc::gen::inRange<std::int64_t>(1, max_s2(s, P2) + 1);
  const std::int64_t b1 = *rc::gen::inRange<std::int64_t>(1, max_s1(s, P1) + 1), b2 = *rc::gen::inRange<std::int64_t>(1, max_s2(s, P2) + 1);
  RC_PRE(wrap_case(s, P1, P2, a1, a2) == wrap_case(s, P1, P2, b1, b2));
  Rng rng(*rc::gen::arbitrary<std::uint32_t>());
  Problem p;
  for (int k = 0; k < m; ++k) p.operands.push_back(random_operand(rng, n));
  const auto seq = build_sequence(p, s);
  DenseOptions keep;
  keep.keep_attention = true;
  const auto A = dense_forward<double>(M, embed(M, seq, position_ids(s, a1, a2)), keep);
  const auto B = dense_forward<double>(M, embed(M, seq, position_ids(s, b1, b2)), keep);
  const auto shift = margin_shift_bound(F, A.attention, B.attention, s.eq_index());
  for (std::int64_t j = s.eq_index(); j < s.N(); ++j) {
    const int e = j + 1 < s.N() ? seq[std::size_t(j + 1)] : int(kDollar);
    auto margin = [&](const Eigen::MatrixXd& L) {
      double o = -1e300;
      for (int t = 0; t < kVocab; ++t)
        if (t != e) o = std::max(o, L(t, j));
      return L(e, j) - o;
    };
    RC_ASSERT(std::abs(margin(A.logits) - margin(B.logits)) <= shift[std::size_t(j - s.eq_index())] + 1e-9);
  }
}

TEST(WholeClaimExhaustive, InheritsWithinAWrapCaseAndNeverHidesAFailure) {
  const std::string path = ::testing::TempDir() + "/exhaustive.json";
  auto run_json = [&](std::vector<std::string> args, int expect) {
    std::remove(path.c_str());
    args.insert(args.end(), {"--json", path});
    std::string text;
    EXPECT_EQ(cli(args, &text), expect) << text;
    std::ifstream f(path);
    return nlohmann::json::parse(f);
  };
  // n = 2, m = 2, P1 = 3, P2 = 3: 5 x 6 offset pairs, one wrap case
  auto j = run_json({"--n", "2", "--m", "2", "--p1", "3", "--p2", "3", "--offsets", "all", "--exhaustive", "--samples", "1"}, 0);
  EXPECT_EQ(j["exhaustive"]["failures"], 0);
  EXPECT_EQ(j["exhaustive"]["instances"], 30 * 10000);
  EXPECT_GE(j["exhaustive"]["offset_pairs_inherited"].get<int>(), 1);
  EXPECT_EQ(j["exhaustive"]["offset_pairs_enumerated"].get<int>() + j["exhaustive"]["offset_pairs_inherited"].get<int>(), 30);
  // lambda far too small: the first pair fails, so every pair is enumerated and fails
  j = run_json({"--n", "2", "--m", "2", "--p1", "3", "--p2", "3", "--offsets", "all", "--exhaustive", "--samples", "1", "--lambda", "0.3"}, 1);
  EXPECT_EQ(j["exhaustive"]["offset_pairs_inherited"], 0);
  EXPECT_GT(j["exhaustive"]["failures"].get<int>(), 0);
}

TEST(WholeClaimCli, ReportsTheClaimAndRefusesBadInput) {
  const std::string path = ::testing::TempDir() + "/whole_claim.json";
  std::remove(path.c_str());
  std::string text;
  ASSERT_EQ(cli({"--whole-claim", "--p1", "3", "--p2", "2", "--no-non-vacuity", "--json", path}, &text), 0) << text;
  std::ifstream f(path);
  const auto j = nlohmann::json::parse(f)["whole_claim"];
  for (const char* k : {"P1", "P2", "lambda", "l_range", "m_range", "n_ranges", "pairs_covered", "classes", "margins", "lambda_min",
                        "lambda_windows", "seconds", "failing", "part1", "per_shape_samples"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["status"], "proven");
  EXPECT_EQ(j["l_range"], nlohmann::json::array({1, 6}));
  EXPECT_EQ(j["m_range"], nlohmann::json::array({1, 3}));
  for (const char* p : {"real", "float64", "float32"}) {
    EXPECT_GT(j["margins"][p]["min_margin"].get<double>(), 0) << p;
    EXPECT_FALSE(j["lambda_windows"][p]["empty"].get<bool>()) << p;
  }
  EXPECT_TRUE(j["lambda_windows"]["real"]["hi"].is_null());  // +infinity
  ASSERT_EQ(j["failing"].size(), 2u);
  EXPECT_EQ(j["failing"][0]["counterexample"]["confirmed_by"], "dense");
  EXPECT_NE(text.find("VERIFIED for the claimed range"), std::string::npos);
  // a lambda outside the float32 window: FAILED with the reason, exit 1
  EXPECT_EQ(cli({"--whole-claim", "--p1", "3", "--p2", "2", "--no-non-vacuity", "--sample-shapes", "0", "--lambda", "5000"}, &text), 1);
  EXPECT_NE(text.find("outside the float32 window"), std::string::npos) << text;
  // the window table
  std::remove(path.c_str());
  ASSERT_EQ(cli({"--whole-claim", "--windows-table", "2:4", "--json", path}, &text), 0) << text;
  std::ifstream g(path);
  EXPECT_EQ(nlohmann::json::parse(g)["lambda_windows_table"].size(), 3u);
  // bad input: exit 2 with a message, before anything is built
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--whole-claim", "--p1", "1", "--p2", "3"}, "--p1 1 outside [2, 30]"},
      {{"--whole-claim", "--p1", "31", "--p2", "3"}, "--p1: 31 is outside [1, 30]"},
      {{"--whole-claim", "--p1", "3", "--p2", "0"}, "--p2: 0 is outside [1, 30]"},
      {{"--whole-claim", "--p1", "30", "--p2", "31"}, "--p2: 31 is outside [1, 30]"},
      {{"--whole-claim", "--p1", "30", "--p2", "30", "--lambda", "-1"}, "--lambda must be > 0"},
      {{"--whole-claim", "--p1", "3", "--p2", "3", "--lambda", "0"}, "--lambda must be > 0"},
      {{"--whole-claim", "--p1", "3"}, "--whole-claim needs --p1 P1 --p2 P2"},
      {{"--whole-claim", "--p1", "3", "--p2", "3", "--n", "4"}, "--n does not apply"},
      {{"--whole-claim", "--p1", "3", "--p2", "3", "--offsets", "all"}, "--offsets does not apply"},
      {{"--whole-claim", "--p1", "3", "--p2", "3", "--no-certify"}, "--certify does not apply"},
      {{"--whole-claim", "--windows-table", "2:x"}, "expected A:B"},
      {{"--whole-claim", "--windows-table", "2:3", "--p1", "3"}, "takes no --p1"},
      {{"--dims-table", "--n-max", "2", "--m-max", "2", "--no-non-vacuity"}, "go with --whole-claim"},
      {{"--whole-claim", "--windows-table", "5:2"}, "2 <= A <= B <= 30"},
      {{"--whole-claim", "--windows-table", "2-5"}, "expected A:B"},
      {{"--whole-claim", "--p1", "3", "--p2", "3", "--sample-shapes", "-1"}, "--sample-shapes"},
      {{"--n", "3", "--m", "3", "--windows-table", "2:3"}, "go with --whole-claim"},
  };
  for (const auto& [args, msg] : bad) {
    EXPECT_EQ(cli(args, &text), 2) << args[1];
    EXPECT_NE(text.find(msg), std::string::npos) << text;
  }
}

// Parts 2-3 check boxes: every shape's classes of one kind lie in class_box(kind, expect, m, m),
// halves of an m range in the range's box, and a box's margin is never above a box inside it (a
// failing hull must not be answered by its corners: at P = 18, lambda = 16 the box of B_0's
// classes over every m fails in float32 while its two corner classes pass).
TEST(WholeClaimBoxes, HoldEveryShapesClassesAndAreMonotone) {
  for (int P : {3, 4}) {
    const std::int64_t C = std::int64_t(1) << P;
    for (std::int64_t l = 1; l <= C - 2; ++l)
      for (std::int64_t m = 1; m <= C - 1; ++m) {
        const auto R = response_structure(shape_lm(l, m), 1, 1, P, P);
        for (const auto& c : R.classes) {
          const ClassBox b = class_box(c.kind, c.expect, m, m), w = class_box(c.kind, c.expect, 1, C - 1);
          for (const ClassBox& x : {b, w}) {
            EXPECT_TRUE(c.x3 >= x.x3_lo && c.x3 <= x.x3_hi && c.x4 >= x.x4_lo && c.x4 <= x.x4_hi)
                << "l=" << l << " m=" << m << " kind " << c.kind << " x3=" << c.x3 << " x4=" << c.x4;
          }
          const auto kinds = claimed_kinds(l);
          EXPECT_NE(std::find(kinds.begin(), kinds.end(), std::make_pair(c.kind, c.expect)), kinds.end());
        }
      }
  }
  const int P = 18;
  const auto M = build_model(P, P, 16.0);
  const ShapeRange r{1, (1 << P) - 2, 1, (1 << P) - 1};
  ClassCertifier C(M, max_tokens(r));
  std::array<bool, 3> ok_all{}, ok_one{};
  const auto all = C.box_margins(class_box(kDigitB0, -1, 1, r.m_hi), ok_all);
  const auto one = C.box_margins(class_box(kDigitB0, -1, 1, 1), ok_one);
  for (int p = 0; p < 3; ++p) EXPECT_LE(all[std::size_t(p)], one[std::size_t(p)]) << p;
  EXPECT_FALSE(ok_all[2]);
  EXPECT_TRUE(ok_one[2]);
  // one group (x4 = 2, x3 over 2 .. m_hi + 1): its hull fails in float32 though each class of it
  // passes alone, its two ends included; the group must not pass
  const auto v = C.check(ClassGroup{kDigitB0, -1, 2, r.m_hi + 1, 1, 2, "x3 over every m"});
  EXPECT_FALSE(v.ok[2]);
  for (std::int64_t x3 : {std::int64_t(2), std::int64_t(3), r.m_hi + 1}) EXPECT_TRUE(C.check(ClassGroup{kDigitB0, -1, x3, x3, 1, 2, ""}).ok[2]);
}
