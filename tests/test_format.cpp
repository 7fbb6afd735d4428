// Task format: vocabulary, padding widths, sequences, position IDs (paper Table 4, Figure 4),
// samplers.
#include <set>

#include <gtest/gtest.h>

#include "manyadd/format.hpp"

using namespace manyadd;
using boost::multiprecision::cpp_int;

TEST(Format, VocabularyRoundTrip) {
  EXPECT_EQ(tokens_to_string(tokens_from_string("0123456789+=>$")), "0123456789+=>$");
  EXPECT_EQ(token_from_char('$'), int(kDollar));
  EXPECT_THROW(token_from_char('x'), InputError);
}

TEST(Format, WidthRules) {
  EXPECT_EQ(width_theorem(2, 3), 3);       // D.3: 57+48+96 uses l = 3
  EXPECT_EQ(width_theorem(1000, 1000), 1004);
  EXPECT_EQ(width_theorem(1, 10), 3);
  // minimal = digit count of m (10^n - 1), checked against Boost.Multiprecision
  for (int n = 1; n <= 25; ++n)
    for (int m = 1; m <= 1200; m += (m < 120 ? 1 : 37)) {
      cpp_int v = cpp_int(m) * (boost::multiprecision::pow(cpp_int(10), n) - 1);
      ASSERT_EQ(width_minimal(n, m), int(v.str().size())) << "n=" << n << " m=" << m;
    }
  EXPECT_EQ(width_minimal(1000, 1000), 1003);  // 1000 (10^1000 - 1) has 1003 digits
  EXPECT_EQ(width_minimal(2, 11), 4);          // the paper's Sec. 4.1 example: 99 x 11 = 1089
}

TEST(Format, WorkedExampleSequence) {
  const auto p = parse_problem("57+48+96");
  const auto s = Shape::make(2, 3);
  EXPECT_EQ(s.N(), 28);
  const auto seq = build_sequence(p, s);
  EXPECT_EQ(tokens_to_string(seq), "$057+048+096=000>750>501>102");  // D.3
  const auto parsed = parse_sequence(seq);
  EXPECT_EQ(parsed.m, 3);
  EXPECT_EQ(parsed.l, 3);
  EXPECT_EQ(parsed.problem.operands, (std::vector<std::string>{"57", "48", "96"}));
  EXPECT_EQ(parsed.partial_sums, (std::vector<std::string>{"0", "57", "105", "201"}));
}

TEST(Format, PositionIdsTable4) {
  const auto ids = position_ids(Shape::make(2, 3), 4, 2);
  const std::vector<std::int32_t> p1 = {0, 7, 6, 5, 4, 7, 6, 5, 4, 7, 6, 5, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7};
  const std::vector<std::int32_t> p2 = {0, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5};
  EXPECT_EQ(ids.p1, p1);
  EXPECT_EQ(ids.p2, p2);
}

TEST(Format, PositionIdsFigure4) {
  // Figure 4 writes the IDs without BOS and with both offsets 1.
  const auto ids = position_ids(Shape::make(2, 3), 1, 1);
  std::string a, b;
  for (std::size_t k = 1; k < ids.p1.size(); ++k) {
    a += char('0' + ids.p1[k]);
    b += char('0' + ids.p2[k]);
  }
  EXPECT_EQ(a, "432143214321234123412341234");
  EXPECT_EQ(b, "111122223331111222233334444");
}

TEST(Format, PositionIdAtMatchesArrays) {
  const auto s = Shape::make(3, 5, Padding::minimal);
  const auto ids = position_ids(s, 3, 2);
  for (std::int64_t k = 0; k < s.N(); ++k) {
    std::int32_t a, b;
    position_id_at(s, 3, 2, k, a, b);
    ASSERT_EQ(a, ids.p1[std::size_t(k)]);
    ASSERT_EQ(b, ids.p2[std::size_t(k)]);
  }
}

TEST(Format, BadInputs) {
  EXPECT_THROW(parse_problem("5x3"), InputError);
  EXPECT_THROW(parse_problem("5++3"), InputError);
  EXPECT_THROW(parse_problem(""), InputError);
  EXPECT_THROW(Shape::make(0, 3), InputError);
  EXPECT_THROW(Shape::make(3, -1), InputError);
  EXPECT_THROW(build_sequence(parse_problem("123+4"), Shape::make(2, 2)), InputError);  // 3 digits > n
  EXPECT_THROW(build_sequence(parse_problem("12+4"), Shape::make(2, 3)), InputError);   // 2 operands != m
  EXPECT_THROW(position_ids(Shape::make(2, 3), 0, 1), InputError);
  EXPECT_THROW(parse_sequence(tokens_from_string("$057+048=00>57")), InputError);
  EXPECT_THROW(parse_sequence(tokens_from_string("057+048+096=000>750>501>102$")), InputError);
}

TEST(Format, SamplersAreDeterministicAndWellFormed) {
  Rng a(42), b(42);
  for (int i = 0; i < 50; ++i) {
    const auto p = sample_TA(a, 7, 4), q = sample_TA(b, 7, 4);
    ASSERT_EQ(p.operands, q.operands);
    ASSERT_EQ(p.operands.size(), 4u);
    for (auto& o : p.operands) {
      ASSERT_EQ(o.size(), 7u);
      ASSERT_NE(o[0], '0');  // multi-digit operands never start with 0
    }
  }
  // 1-digit operands cover 0..9
  std::set<std::string> seen;
  for (int i = 0; i < 500; ++i) seen.insert(sample_TA(a, 1, 1).operands[0]);
  EXPECT_EQ(seen.size(), 10u);
}

TEST(Format, SamplerSAChunks) {
  Rng r(7);
  const auto set = sample_SA(r, 6, 5, 2001);
  ASSERT_EQ(set.size(), 2001u);
  bool mixed_lengths_seen = false;
  for (std::size_t i = 0; i < set.size(); ++i) {
    const auto& ops = set[i].operands;
    ASSERT_GE(ops.size(), 2u);
    ASSERT_LE(ops.size(), 5u);
    std::set<std::size_t> lens;
    for (auto& o : ops) {
      ASSERT_GE(o.size(), 1u);
      ASSERT_LE(o.size(), 6u);
      if (o.size() > 1) {
        ASSERT_NE(o[0], '0');
      }
      lens.insert(o.size());
    }
    if (i >= 1001) {
      ASSERT_EQ(lens.size(), 1u) << "second chunk: one length for all operands";
    }
    if (i < 1001 && lens.size() > 1) mixed_lengths_seen = true;
  }
  EXPECT_TRUE(mixed_lengths_seen);
}

TEST(Format, ReferenceSumLongOperands) {
  Rng r(3);
  const auto p = sample_TA(r, 300, 40);
  const auto s = Shape::make(300, 40);
  const auto parsed = parse_sequence(build_sequence(p, s));
  EXPECT_EQ(parsed.partial_sums.back(), reference_sum(p).str());
}

// Mt64 is std::mt19937_64 output for output (the samplers' stream must not change): seeds at the
// edges, a million outputs each (3,200 twists).
TEST(Format, Mt64IsStdMt19937_64) {
  for (std::uint64_t seed : {std::uint64_t(0), std::uint64_t(1), std::uint64_t(5489), std::uint64_t(12345),
                             ~std::uint64_t(0)}) {
    std::mt19937_64 ref(seed);
    Mt64 g(seed);
    for (int i = 0; i < 1000000; ++i) ASSERT_EQ(g(), ref()) << "seed " << seed << " output " << i;
  }
}

// decimal_sum is reference_sum in decimal: the samplers' problems (TA and SA), long carries (all
// nines), zeros, one operand, and a non-digit refused.
TEST(Format, DecimalSumIsReferenceSum) {
  Rng r(11);
  std::vector<Problem> ps;
  for (int i = 0; i < 200; ++i) ps.push_back(sample_TA(r, int(r.uniform(1, 40)), int(r.uniform(1, 60))));
  for (const Problem& p : sample_SA(r, 30, 30, 200)) ps.push_back(p);
  Problem nines, zeros, one = parse_problem("7");
  for (int i = 0; i < 1000; ++i) {
    nines.operands.push_back(std::string(std::size_t(1 + i % 50), '9'));
    zeros.operands.push_back("0");
  }
  for (const Problem& p : {nines, zeros, one}) ps.push_back(p);
  for (const Problem& p : ps) ASSERT_EQ(decimal_sum(p), reference_sum(p).str()) << p.to_string();
  // operands with leading zeros (the padded problems verify_learned prints) are decimal, never octal
  EXPECT_EQ(reference_sum(Problem{{"010", "09", "000", "0"}}).str(), "19");
  EXPECT_EQ(decimal_sum(Problem{{"010", "09", "000", "0"}}), "19");
  Problem bad;
  bad.operands = {"12", "3x"};
  EXPECT_THROW(decimal_sum(bad), InputError);
}
