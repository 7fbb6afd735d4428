// Properties on random small shapes, offsets and operands (RapidCheck): format round trips,
// coupling invariants, float vs double engines, and the model's greedy output vs
// Boost.Multiprecision.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "manyadd/dense.hpp"
#include "manyadd/verify.hpp"

using namespace manyadd;
using boost::multiprecision::cpp_int;

namespace {
struct Case {
  Shape shape;
  Problem problem;
  std::int64_t s1 = 1, s2 = 1;
  Dims dims;
};

// A random shape (n, m <= 6), padding rule, operands of at most n digits, valid offsets for our
// dimensions.
Case gen_case() {
  Case c;
  const int n = *rc::gen::inRange(1, 7);
  const int m = *rc::gen::inRange(1, 7);
  c.shape = Shape::make(n, m, *rc::gen::element(Padding::theorem, Padding::minimal));
  for (int i = 0; i < m; ++i) {
    const int len = *rc::gen::inRange(1, n + 1);
    std::string s;
    for (int k = 0; k < len; ++k) s += char('0' + *rc::gen::inRange(k == 0 && len > 1 ? 1 : 0, 10));
    c.problem.operands.push_back(s);
  }
  c.dims = dims_ours(c.shape);
  c.s1 = *rc::gen::inRange<std::int64_t>(1, max_s1(c.shape, c.dims.P1) + 1);
  c.s2 = *rc::gen::inRange<std::int64_t>(1, max_s2(c.shape, c.dims.P2) + 1);
  return c;
}
}  // namespace

RC_GTEST_PROP(Properties, FormatRoundTrip, ()) {
  const Case c = gen_case();
  const auto seq = build_sequence(c.problem, c.shape);
  RC_ASSERT(std::int64_t(seq.size()) == c.shape.N());
  const auto parsed = parse_sequence(seq);
  RC_ASSERT(parsed.m == c.shape.m);
  RC_ASSERT(parsed.l == c.shape.l);
  RC_ASSERT(parsed.problem.operands == c.problem.operands);
  cpp_int acc = 0;
  RC_ASSERT(parsed.partial_sums[0] == "0");
  for (int j = 0; j < c.shape.m; ++j) {
    acc += cpp_int(c.problem.operands[std::size_t(j)]);
    RC_ASSERT(parsed.partial_sums[std::size_t(j + 1)] == acc.str());
  }
  RC_ASSERT(parse_problem(c.problem.to_string()).operands == c.problem.operands);
}

RC_GTEST_PROP(Properties, CouplingInvariants, ()) {
  const Case c = gen_case();
  const auto& s = c.shape;
  const auto ids = position_ids(s, c.s1, c.s2);
  const auto seq = build_sequence(c.problem, s);
  const std::int64_t L = s.l + 1;
  // Significance of each digit and which number it belongs to, from the layout alone.
  auto query_digit = [&](int i, int t) { return std::size_t(1 + std::int64_t(i - 1) * L + (s.l - t)); };  // A_i, sig t
  auto resp_digit = [&](int j, int t) { return std::size_t(std::int64_t(s.m + j) * L + t); };            // B_j, sig t
  for (int t = 1; t <= s.l; ++t) {
    for (int i = 1; i <= s.m; ++i) RC_ASSERT(ids.p1[query_digit(i, t)] == c.s1 + t);
    for (int j = 0; j <= s.m; ++j) RC_ASSERT(ids.p1[resp_digit(j, t)] == c.s1 + t);
  }
  // Equal level-1 IDs exactly for digits of equal significance; separators all s1.
  for (std::size_t k = 1; k < seq.size(); ++k) {
    if (seq[k] >= 10) RC_ASSERT(ids.p1[k] == c.s1);
    else RC_ASSERT(ids.p1[k] > c.s1);
  }
  // A_i shares its level-2 ID with B_{i-1}, and no other number shares it.
  for (int i = 1; i <= s.m; ++i)
    for (int t = 1; t <= s.l; ++t) {
      RC_ASSERT(ids.p2[query_digit(i, t)] == ids.p2[resp_digit(i - 1, t)]);
      for (int j = 0; j <= s.m; ++j)
        if (j != i - 1) RC_ASSERT(ids.p2[resp_digit(j, t)] != ids.p2[query_digit(i, t)]);
    }
  RC_ASSERT(ids.p1[0] == 0);
  RC_ASSERT(ids.p2[0] == 0);
}

RC_GTEST_PROP(Properties, HypercubeInnerProducts, ()) {
  const int D = *rc::gen::inRange(1, 25);
  const std::int64_t a = *rc::gen::inRange<std::int64_t>(1, (std::int64_t(1) << D) + 1);
  const std::int64_t b = *rc::gen::inRange<std::int64_t>(1, (std::int64_t(1) << D) + 1);
  const auto u = hypercube(D, a), v = hypercube(D, b);
  int dot = 0;
  for (int i = 0; i < D; ++i) dot += u[std::size_t(i)] * v[std::size_t(i)];
  if (a == b) RC_ASSERT(dot == D);
  else RC_ASSERT(dot <= D - 2);
}

RC_GTEST_PROP(Properties, EnginesAgreeAndGreedyEqualsBoost, ()) {
  const Case c = gen_case();
  const auto M = build_model(c.dims.P1, c.dims.P2, default_lambda(c.shape.N()));
  const auto seq = build_sequence(c.problem, c.shape);
  const auto X0 = embed(M, seq, position_ids(c.shape, c.s1, c.s2));
  const auto R64 = dense_forward<double>(M, X0);
  const auto R32 = dense_forward<float>(M, X0);
  const auto eq = std::size_t(c.shape.eq_index());
  RC_ASSERT(std::equal(R64.pred.begin() + long(eq), R64.pred.end(), R32.pred.begin() + long(eq)));
  const auto r = check_instance(seq, c.shape, R64.logits);
  RC_ASSERT(r.ok);
  RC_ASSERT(r.answer == reference_sum(c.problem).str());
}

// True greedy decoding (one forward pass per generated token, from the query only) produces the
// same response as the teacher-forced check — the induction of docs/construction.md, tested.
RC_GTEST_PROP(Properties, GreedyDecodingMatchesTeacherForcing, ()) {
  Case c = gen_case();
  const auto M = build_model(c.dims.P1, c.dims.P2, default_lambda(c.shape.N()));
  const auto full = build_sequence(c.problem, c.shape);
  const auto ids = position_ids(c.shape, c.s1, c.s2);
  std::vector<std::uint8_t> seq(full.begin(), full.begin() + c.shape.eq_index() + 1);  // through '='
  while (std::int64_t(seq.size()) <= c.shape.N()) {
    PositionIds pre;
    const std::size_t K = std::min(seq.size(), ids.p1.size());
    pre.p1.assign(ids.p1.begin(), ids.p1.begin() + long(K));
    pre.p2.assign(ids.p2.begin(), ids.p2.begin() + long(K));
    const std::vector<std::uint8_t> in(seq.begin(), seq.begin() + long(K));
    const auto R = dense_forward<double>(M, embed(M, in, pre));
    const auto next = R.pred.back();
    if (std::int64_t(seq.size()) == c.shape.N()) {
      RC_ASSERT(next == kDollar);
      break;
    }
    seq.push_back(next);
  }
  RC_ASSERT(seq == full);
}
