// The tensor-core kernel's rounding model (proofs-check kernel_rounding.hpp) against its CPU twin
// (construct TcTwin): the model's enclosure, built from a query's matched/unmatched counts only, must
// contain the twin's nominal replay (one execution the device may perform), the twin's score bounds
// and rise counts must stay within the model's, on many shapes and on rows of the full-size sequence
// (N = 2,011,005); and the enclosure must be narrow enough to mean something.
#include <gtest/gtest.h>

#include <cmath>

#include "constructed_case.hpp"
#include "manyadd/cuda_engine.hpp"
#include "manyadd/kernel_rounding.hpp"
#include "manyadd/structured.hpp"

namespace {
using namespace manyadd;

using cases::Case;
using cases::make_case;

// Heads 1-2 carry 3 NUM (<= 27), heads 3-4 IS_BOS (<= 1).
int vmax(int h) { return h < 2 ? 27 : 1; }

// The matches of the asked rows (sorted), from the structured stream.
std::vector<QueryMatch> matches(const Case& c, const std::vector<std::int64_t>& rows) {
  StructuredStream st(c.shape, 1, 1, c.M.layout.P1, c.M.layout.P2);
  std::vector<QueryMatch> out;
  std::size_t next = 0;
  st.run(c.seq.data(), [&](const QueryMatch& q) {
    if (next < rows.size() && rows[next] == q.j) out.push_back(q), ++next;
  });
  return out;
}

struct Stats {
  double used = 0;   // largest (twin width) / (model box width)
  double width = 0;  // largest model box width relative to max(1, |centre|)
  std::int64_t checked = 0;
  double score = 0;  // largest (twin score bound / 2) / (model's eta2)
};

void check_rows(const Case& c, const std::vector<std::int64_t>& rows, Stats& S) {
  const TcTwin twin(c.M, c.seq, c.shape, 1, 1);
  const auto tw = twin.rows(rows);
  const auto qm = matches(c, rows);
  ASSERT_EQ(qm.size(), rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (int h = 0; h < 4; ++h) {
      const HeadMatch& hm = qm[r].h[std::size_t(h)];
      const KernelRounding k = kernel_rounding(c.M, h, twin.plan().D);
      // The twin's per-score MMA bound is within twice the model's score bound (step 1): the twin
      // doubles its bound (centred on its own chain, exponents of its own addends), the model does not.
      EXPECT_LE(tw[r].score_bound[std::size_t(h)] / 2, k.eta2) << "row " << rows[r] << " head " << h + 1;
      S.score = std::max(S.score, tw[r].score_bound[std::size_t(h)] / 2 / k.eta2);
      // The rises are within the model's x - 1 (step 3).
      EXPECT_LE(tw[r].rises[std::size_t(h)], hm.x - 1) << "row " << rows[r] << " head " << h + 1;
      const auto box = kernel_head_box(hm.vsum, hm.x, hm.u, vmax(h), k);
      // The twin's nominal run is one execution the device may perform (RN MMA steps, exp2 rounded
      // correctly): it must lie in the model's box. (The twin's own interval is not compared: it
      // bounds each rescale separately and so loses their telescoping on rows with many rises.)
      const float lo = tw[r].lo[std::size_t(h)], hi = tw[r].hi[std::size_t(h)], nom = tw[r].out[std::size_t(h)];
      EXPECT_LE(box.lo, double(nom)) << "n=" << c.shape.n << " m=" << c.shape.m << " row " << rows[r] << " head " << h + 1;
      EXPECT_GE(box.hi, double(nom)) << "n=" << c.shape.n << " m=" << c.shape.m << " row " << rows[r] << " head " << h + 1;
      const double centre = 0.5 * (box.lo + box.hi);
      S.width = std::max(S.width, (box.hi - box.lo) / std::max(1.0, std::abs(centre)));
      S.used = std::max(S.used, double(hi - lo) / (box.hi - box.lo));  // information only
      ++S.checked;
    }
}

TEST(KernelRounding, EnclosesTheTwinOnManyShapes) {
  Stats S;
  std::uint64_t seed = 11;
  for (int n = 1; n <= 7; n += 2)
    for (int m = 1; m <= 7; m += 2, ++seed) {
      const Case c = make_case(n, m, seed);
      std::vector<std::int64_t> rows;
      for (std::int64_t i = c.shape.eq_index(); i < c.shape.N(); ++i) rows.push_back(i);
      check_rows(c, rows, S);
    }
  for (auto [n, m] : {std::pair{3, 60}, std::pair{40, 4}, std::pair{20, 20}}) {
    const Case c = make_case(n, m, ++seed);
    std::vector<std::int64_t> rows;
    for (std::int64_t i = c.shape.eq_index(); i < c.shape.N(); i += 7) rows.push_back(i);
    rows.push_back(c.shape.N() - 1);
    check_rows(c, rows, S);
  }
  std::printf("[ bounds ] %lld (row, head) pairs: twin width <= %.3g of the model's box; box width <= %.3g relative; "
              "twin score bound / 2 <= %.3g of eta2\n",
              (long long)S.checked, S.used, S.width, S.score);
  // Meaningful: the box is narrow against the FFN's thresholds (head outputs 1/3 vs 1/2 and the
  // digit sums' 1/10 steps differ by > 0.05 relative).
  EXPECT_LT(S.width, 0.02);
}

// Full size, n = m = 1000 (N = 2,011,005): sampled rows only (each O(N)); also the exact double row
// engine's value lies in the model's box (the box contains the real softmax).
TEST(KernelRounding, EnclosesTheTwinAtFullSize) {
  const Case c = make_case(1000, 1000, 7);
  const std::int64_t N = c.shape.N(), eq = c.shape.eq_index();
  const std::vector<std::int64_t> rows = {eq, N - 1};
  Stats S;
  check_rows(c, rows, S);
  const CompiledFFN F = CompiledFFN::build(c.M);
  RowEngine exact(c.M, c.shape, 1, 1, c.seq);
  const auto qm = matches(c, rows);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto rr = exact.row(rows[r], F);
    for (int h = 0; h < 4; ++h) {
      const HeadMatch& hm = qm[r].h[std::size_t(h)];
      const auto box = kernel_head_box(hm.vsum, hm.x, hm.u, vmax(h), kernel_rounding(c.M, h, 24));
      EXPECT_LE(box.lo, rr.out[std::size_t(h)]);
      EXPECT_GE(box.hi, rr.out[std::size_t(h)]);
    }
  }
  std::printf("[ bounds ] full size: twin width <= %.3g of the model's box; box width <= %.3g relative\n", S.used, S.width);
}

// The model is not vacuous: a twin 1% off, or the score bound of a tenth of the kernel's steps,
// is caught on some rows.
TEST(KernelRounding, RejectsWrongValues) {
  const Case c = make_case(5, 5, 3);
  std::vector<std::int64_t> rows;
  for (std::int64_t i = c.shape.eq_index(); i < c.shape.N(); ++i) rows.push_back(i);
  const TcTwin twin(c.M, c.seq, c.shape, 1, 1);
  const auto tw = twin.rows(rows);
  const auto qm = matches(c, rows);
  std::int64_t out = 0;
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (int h = 0; h < 4; ++h) {
      const HeadMatch& hm = qm[r].h[std::size_t(h)];
      const auto box = kernel_head_box(hm.vsum, hm.x, hm.u, vmax(h), kernel_rounding(c.M, h, twin.plan().D));
      const double wrong = double(tw[r].out[std::size_t(h)]) * 1.01;
      out += wrong > box.hi || wrong < box.lo;
    }
  EXPECT_GT(out, std::int64_t(rows.size()));  // most (row, head) pairs with a nonzero output
  EXPECT_THROW(kernel_rounding(c.M, 0, 4), InputError);
  EXPECT_THROW(kernel_rounding(c.M, 4, 24), InputError);
  // step 1 reads the construction's Q/K layout (which dims are zero for which key): another refused
  ConstructedModel other = c.M;
  other.heads[2].Q(0, other.layout.POS_1_NEXT()) *= 1.5;
  EXPECT_THROW(kernel_rounding(other, 2, twin.plan().D), InputError);
  EXPECT_NO_THROW(kernel_rounding(other, 3, twin.plan().D));
}

}  // namespace

namespace {
using namespace manyadd;

// The far-tile skip (constructed_tc.hpp, kernel_rounding.hpp step 5) at lambda = 14, where
// unmatched scores lie 2 lambda log2 e = 40.4 below the top and every tile without a matched key is
// dropped: the twin with the skip stays inside the model's boxes, drops tiles on most rows, predicts
// what the structured engine does, and differs from the twin without it by no more than the dropped
// weights (each < 2^-32 of the running max) and the few roundings they shift.
TEST(KernelRounding, FarTileSkipStaysInTheModel) {
  std::uint64_t seed = 70;
  Stats S;
  std::int64_t skipped = 0, row_heads = 0;
  double worst = 0;
  for (auto [n, m] : {std::pair{8, 20}, std::pair{30, 6}, std::pair{12, 12}}) {
    cases::Case c = cases::make_case(n, m, ++seed);
    c.M = build_model(c.M.layout.P1, c.M.layout.P2, 14.0);
    std::vector<std::int64_t> rows;
    for (std::int64_t i = c.shape.eq_index(); i < c.shape.N(); ++i) rows.push_back(i);
    check_rows(c, rows, S);  // inside the model's box (the twin skips by default)
    const auto on = TcTwin(c.M, c.seq, c.shape, 1, 1).rows(rows), off = TcTwin(c.M, c.seq, c.shape, 1, 1, false).rows(rows);
    for (std::size_t r = 0; r < rows.size(); ++r)
      for (int h = 0; h < 4; ++h) {
        EXPECT_EQ(off[r].skipped[std::size_t(h)], 0);
        skipped += on[r].skipped[std::size_t(h)];
        ++row_heads;
        const double a = on[r].out[std::size_t(h)], b = off[r].out[std::size_t(h)];
        worst = std::max(worst, std::abs(a - b) / std::max(1.0, std::abs(b)));
        // dropped: < 64 keys per skipped tile, each of weight < 2^-32 (l >= ~1: the top key's p = 1)
        // and value <= 27; then a few ulps (2^-23 relative each) of sums that round differently
        const double tol = 64.0 * on[r].skipped[std::size_t(h)] * 27 * std::ldexp(1.0, -31) + std::ldexp(1.0, -20) * std::max(1.0, std::abs(b));
        EXPECT_LE(std::abs(a - b), tol) << "n=" << n << " m=" << m << " row " << rows[r] << " head " << h + 1;
      }
    CudaOptions o, o_off;
    o_off.skip_far_tiles = false;
    const CompiledFFN F = CompiledFFN::build(c.M);
    const auto St = structured_forward(c.M, F, c.seq, c.shape, 1, 1);
    const auto R = cuda_forward_cpu_twin(c.M, c.seq, c.shape, 1, 1, o), Roff = cuda_forward_cpu_twin(c.M, c.seq, c.shape, 1, 1, o_off);
    EXPECT_EQ(R.pred, St.pred);
    EXPECT_EQ(Roff.pred, St.pred);
  }
  std::printf("[ skip ] %lld tiles skipped over %lld (row, head) pairs; |skip - no skip| <= %.3g relative; box width <= %.3g\n",
              (long long)skipped, (long long)row_heads, worst, S.width);
  EXPECT_GT(skipped, row_heads);  // more than one tile per row on average
}

// The skip threshold must exceed twice the score bound (else a matched key could be dropped): a
// model whose score bound is that wide is refused.
TEST(KernelRounding, RefusesASkipWithinTheScoreError) {
  const auto M = build_model(3, 3, 100.0);
  EXPECT_NO_THROW(kernel_rounding(M, 0, 8));
  try {
    kernel_rounding(M, 0, 8, 1e4);
    ADD_FAILURE() << "no refusal";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("skip"), std::string::npos) << e.what();
  }
}

}  // namespace
