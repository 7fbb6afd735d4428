// The structured O(N) engine and the exact row engine against the dense engine, their independent
// twin, on random small shapes, offsets, scales and operands - undersized hypercubes included
// (IDs that alias modulo 2^P must be handled identically by all engines).
#include <algorithm>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "manyadd/dense.hpp"
#include "manyadd/structured.hpp"

using namespace manyadd;

namespace {
struct Case {
  Shape shape;
  std::vector<std::uint8_t> seq;
  int P1 = 0, P2 = 0;
  std::int64_t s1 = 1, s2 = 1;
};

// Random shape, operands, dimensions (sometimes too small) and offsets (IDs may exceed 2^P).
Case gen_case() {
  Case c;
  const int n = *rc::gen::inRange(1, 6), m = *rc::gen::inRange(1, 6);
  c.shape = Shape::make(n, m, *rc::gen::element(Padding::theorem, Padding::minimal));
  Problem p;
  for (int i = 0; i < m; ++i) {
    const int len = *rc::gen::inRange(1, n + 1);
    std::string s;
    for (int k = 0; k < len; ++k) s += char('0' + *rc::gen::inRange(k == 0 && len > 1 ? 1 : 0, 10));
    p.operands.push_back(s);
  }
  c.seq = build_sequence(p, c.shape);
  const Dims ours = dims_ours(c.shape);
  c.P1 = std::max(1, ours.P1 - *rc::gen::inRange(0, 3));
  c.P2 = std::max(1, ours.P2 - *rc::gen::inRange(0, 2));
  c.s1 = *rc::gen::inRange<std::int64_t>(1, 6);
  c.s2 = *rc::gen::inRange<std::int64_t>(1, 6);
  return c;
}
}  // namespace

// Limit mode: with lambda = 40 every unmatched weight is below e^-80 ~ 1.8e-35, under double's
// resolution next to the matched weights, so the dense engine computes the limit up to rounding:
// head outputs agree to 1e-12 (a few ulps of values <= 27) and predictions exactly.
RC_GTEST_PROP(Structured, LimitModeEqualsDense, ()) {
  const Case c = gen_case();
  const auto M = build_model(c.P1, c.P2, 40.0);
  const auto F = CompiledFFN::build(M);
  const auto S = structured_forward(M, F, c.seq, c.shape, c.s1, c.s2, StructuredOptions{true, false, {}});
  const auto D = dense_forward<double>(M, embed(M, c.seq, position_ids(c.shape, c.s1, c.s2)));
  const auto eq = c.shape.eq_index();
  for (std::int64_t k = eq; k < c.shape.N(); ++k) {
    const auto r = std::size_t(k - eq);
    // Predictions must agree unless the dense logits nearly tie (undersized dimensions can put g
    // on a kink where two digits score the same: then argmax is decided by rounding alone).
    std::vector<double> lg(D.logits.col(k).data(), D.logits.col(k).data() + kVocab);
    std::sort(lg.rbegin(), lg.rend());
    if (lg[0] - lg[1] > 1e-9) RC_ASSERT(S.pred[r] == D.pred[std::size_t(k)]);
    for (int h = 0; h < 4; ++h)
      RC_ASSERT(std::abs(S.out[r][std::size_t(h)] - (D.Y(3 + h, k) - 0.0)) <= 1e-12);
  }
}

// Finite mode: the dense value (double, lambda in [0.2, 6]) lies inside the structured interval,
// widened by 1e-12 for the dense engine's own rounding.
RC_GTEST_PROP(Structured, FiniteModeEnclosesDense, ()) {
  const Case c = gen_case();
  const double lam = *rc::gen::inRange(2, 61) / 10.0;
  const auto M = build_model(c.P1, c.P2, lam);
  const auto F = CompiledFFN::build(M);
  const auto S = structured_forward(M, F, c.seq, c.shape, c.s1, c.s2, StructuredOptions{true, true, {}});
  const auto D = dense_forward<double>(M, embed(M, c.seq, position_ids(c.shape, c.s1, c.s2)));
  const auto eq = c.shape.eq_index();
  for (std::int64_t k = eq; k < c.shape.N(); ++k)
    for (int h = 0; h < 4; ++h) {
      const auto iv = S.iv[std::size_t(k - eq)][std::size_t(h)];
      const double v = D.Y(3 + h, k);
      RC_ASSERT(iv.lo - 1e-12 <= v);
      RC_ASSERT(v <= iv.hi + 1e-12);
    }
}

// The row engine computes the same real softmax as the dense engine, row by row: relative 1e-12
// (both sum O(N) positive terms in double; N <= 200 here).
RC_GTEST_PROP(Structured, RowEngineEqualsDense, ()) {
  const Case c = gen_case();
  const double lam = *rc::gen::inRange(1, 61) / 10.0;
  const auto M = build_model(c.P1, c.P2, lam);
  const auto F = CompiledFFN::build(M);
  const auto D = dense_forward<double>(M, embed(M, c.seq, position_ids(c.shape, c.s1, c.s2)));
  RowEngine E(M, c.shape, c.s1, c.s2, c.seq);
  for (std::int64_t k = 0; k < c.shape.N(); ++k) {
    const auto r = E.row(k, F);
    for (int h = 0; h < 4; ++h) RC_ASSERT(std::abs(r.out[std::size_t(h)] - D.Y(3 + h, k)) <= 1e-12 * (1 + std::abs(D.Y(3 + h, k))));
    for (int t = 0; t < kVocab; ++t) RC_ASSERT(std::abs(r.logits[std::size_t(t)] - D.logits(t, k)) <= 1e-9);
  }
}

TEST(Structured, RefusesOtherStructures) {
  auto M = build_model(3, 3, 5.0);
  M.W1(0, Layout::SUM(2)) = 1.0;
  EXPECT_THROW(CompiledFFN::build(M), InputError);
  auto M2 = build_model(3, 3, 5.0);
  M2.heads[1].Q(0, 0) = 1.0;
  EXPECT_THROW(CompiledFFN::build(M2), InputError);
}

TEST(Structured, WorkedExampleLimitValues) {
  const auto shape = Shape::make(2, 3);
  const auto seq = build_sequence(parse_problem("57+48+96"), shape);
  const auto M = build_model(3, 3, 10.0);
  const auto S = structured_forward(M, CompiledFFN::build(M), seq, shape, 4, 2, StructuredOptions{true, false, {}});
  const std::vector<double> pre_sum = {0, 0, 0, 0, 7, 5, 0, 0, 15, 9, 0, 0, 11, 9, 1, 0};  // Table 8
  for (std::size_t c = 0; c < 16; ++c) EXPECT_EQ(S.out[c][0], pre_sum[c]);
  EXPECT_EQ(S.out[3][2], 1.0);        // PRE_ARROW at B_0's last digit (Table 16)
  EXPECT_EQ(S.out[0][2], 0.25);
  EXPECT_EQ(S.first_mismatch, -1);
  std::vector<std::uint8_t> pred(S.pred.begin(), S.pred.end());
  EXPECT_EQ(tokens_to_string(pred), "000>750>501>102$");
}

// RowEngine::rows (one pass over the digits for a batch) gives row()'s results bit for bit, for
// any batch: the rows in a random order, repeated, and every row of the sequence.
RC_GTEST_PROP(Structured, RowBatchEqualsRowByRow, ()) {
  const Case c = gen_case();
  const double lam = *rc::gen::inRange(2, 61) / 10.0;
  const auto M = build_model(c.P1, c.P2, lam);
  const auto F = CompiledFFN::build(M);
  RowEngine E(M, c.shape, c.s1, c.s2, c.seq);
  std::vector<std::int64_t> js;
  for (std::int64_t k = 0; k < c.shape.N(); ++k) js.push_back(k);
  const auto picked = *rc::gen::container<std::vector<std::int64_t>>(rc::gen::inRange<std::int64_t>(0, c.shape.N()));
  for (const auto& batch : {js, picked}) {
    const std::vector<RowResult> R = E.rows(batch, F);
    RC_ASSERT(R.size() == batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const RowResult one = E.row(batch[i], F);
      RC_ASSERT(R[i].out == one.out);
      RC_ASSERT(R[i].logits == one.logits);
    }
  }
}

// The structured pass's predictions and margins (its logit cache and per-entry summaries) equal
// the readout computed afresh at every row from the head outputs, in the same order of sums
// (c0 + the digit-side groups, then + the other groups): exactly, not up to a tolerance.
RC_GTEST_PROP(Structured, CachedReadoutEqualsAFreshOne, ()) {
  const Case c = gen_case();
  const auto M = build_model(c.P1, c.P2, 40.0);
  const auto F = CompiledFFN::build(M);
  const auto S = structured_forward(M, F, c.seq, c.shape, c.s1, c.s2, StructuredOptions{true, false, {}});
  const std::int64_t eq = c.shape.eq_index(), N = c.shape.N();
  double min_margin = 1e300;
  std::int64_t first_mismatch = -1;
  for (std::int64_t k = eq; k < N; ++k) {
    const auto r = std::size_t(k - eq);
    std::array<double, 7> y{};
    y[Layout::NUM] = c.seq[std::size_t(k)] < 10 ? c.seq[std::size_t(k)] : 0;
    y[Layout::FULL_ONES] = 1;
    for (int h = 0; h < 4; ++h) y[std::size_t(3 + h)] = S.out[r][std::size_t(h)];
    std::array<double, kVocab> lg = F.c0, other{};
    F.add_groups(y, true, lg);
    F.add_groups(y, false, other);
    for (int t = 0; t < kVocab; ++t) lg[std::size_t(t)] += other[std::size_t(t)];
    int best = 0;
    for (int t = 1; t < kVocab; ++t)
      if (lg[std::size_t(t)] > lg[std::size_t(best)]) best = t;
    const int expected = k + 1 < N ? c.seq[std::size_t(k + 1)] : int(kDollar);
    double rival = -1e300;
    for (int t = 0; t < kVocab; ++t)
      if (t != expected) rival = std::max(rival, lg[std::size_t(t)]);
    const double margin = lg[std::size_t(expected)] - rival;
    RC_ASSERT(int(S.pred[r]) == best);
    min_margin = std::min(min_margin, margin);
    if (!(margin > 0) && first_mismatch < 0) first_mismatch = k;
  }
  RC_ASSERT(S.min_margin == min_margin);
  RC_ASSERT(S.first_mismatch == first_mismatch);
}
