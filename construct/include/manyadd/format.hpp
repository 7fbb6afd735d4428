// Task format of Cho et al. (ICLR 2025; Sec. 4.1, Appendix D.3/D.4.2; docs/construction.md): vocabulary, the scratchpad sequence
// `$ A_1 + ... + A_m = B_0 > B_1 > ... > B_m`, the two padding rules, bi-level position IDs with
// offsets, Boost.Multiprecision reference sums, and the SA/TA samplers of Sec. 4.2.
// Indices in code are 0-based; the paper's token k is our index k-1.
#pragma once

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/multiprecision/cpp_int.hpp>

#include "manyadd/core/error.hpp"
#include "manyadd/mt64.hpp"

namespace manyadd {

// Vocabulary V = (0, ..., 9, '+', '=', '>', '$') in the paper's order (D.1); '$' is BOS and EOS.
// The learned models' other tasks (learn/include/manyadd/learn/tasks/task.hpp) add '*' (multiplication,
// Sec. 5) as token 14: the constructed model and addition keep the 14 tokens.
enum Tok : std::uint8_t { kPlus = 10, kEq = 11, kArrow = 12, kDollar = 13, kStar = 14 };
inline constexpr int kVocab = 14;
inline constexpr int kVocabTasks = 15;  // kVocab and '*'
char token_char(int tok);     // tokens 0..14; throws InputError beyond
int token_from_char(char c);  // throws InputError
// The first `vocab` characters of "0123456789+=>$*" (vocab 14 or 15; throws InputError otherwise).
std::string vocabulary_string(int vocab);
std::string tokens_to_string(const std::vector<std::uint8_t>& toks);
std::vector<std::uint8_t> tokens_from_string(const std::string& s);  // throws InputError

// Zero-padding width l of every number.
//   theorem: l = n + 1 + floor(log10 m)                (Appendix D.3)
//   minimal: digit count of m * (10^n - 1)             (Sec. 4.1, what the experiments use)
enum class Padding { theorem, minimal };
Padding parse_padding(const std::string& s);  // throws InputError
const char* padding_name(Padding p);
int width_theorem(std::int64_t n, std::int64_t m);
int width_minimal(std::int64_t n, std::int64_t m);
int width(Padding p, std::int64_t n, std::int64_t m);

// One shape: m operands of at most n digits, every number padded to l digits.
struct Shape {
  int n = 0, m = 0, l = 0;
  Padding padding = Padding::theorem;
  static Shape make(std::int64_t n, std::int64_t m, Padding p = Padding::theorem);  // validates
  std::int64_t N() const { return std::int64_t(2 * m + 1) * (l + 1); }  // sequence length
  std::int64_t query_len() const { return std::int64_t(m) * (l + 1) + 1; }  // BOS .. last operand
  std::int64_t eq_index() const { return std::int64_t(m) * (l + 1); }  // 0-based index of '='
};

// An addition problem: the operands as decimal strings (most significant first, no padding).
struct Problem {
  std::vector<std::string> operands;
  std::string to_string() const;  // "57+48+96"
  int max_digits() const;
};
Problem parse_problem(const std::string& s);  // "57+48+96"; throws InputError

// Reference answer (independent of the sequence builder's digit arithmetic).
boost::multiprecision::cpp_int reference_sum(const Problem& p);
// The same answer as a decimal string by column sums and one carry pass, O(n m) with no
// conversions (the samples of verify_construction: ~20x faster than reference_sum().str() at
// n = m = 10000); tests check it against reference_sum. Throws InputError on a non-digit.
std::string decimal_sum(const Problem& p);

// The teacher-forced sequence of N tokens for `p` padded to shape.l (the shape's n and m must admit
// p: every operand at most n digits, exactly m operands). The partial sums are computed by
// schoolbook digit addition, O(n m); tests check them against reference_sum.
std::vector<std::uint8_t> build_sequence(const Problem& p, const Shape& shape);

// Inverse of build_sequence: checks the layout and returns the operands (padding stripped) and the
// partial sums b_0..b_m as decimal strings. Throws InputError on any malformed sequence.
struct ParsedSequence {
  int m = 0, l = 0;
  Problem problem;
  std::vector<std::string> partial_sums;  // b_0 .. b_m, no padding
};
ParsedSequence parse_sequence(const std::vector<std::uint8_t>& toks);

// Bi-level coupled position IDs (Appendix D.4.2, Eqs. 1-2), for offsets s1, s2 >= 1.
//   level 1: BOS 0; a digit of significance t (1 = least) s1 + t; every separator s1.
//   level 2: BOS 0; A_i and the '+' after it s2 + i - 1; '=' and B_0 s2; '>' before B_i and B_i s2 + i.
// They depend on the shape only, never on the digits.
struct PositionIds {
  std::vector<std::int32_t> p1, p2;
};
PositionIds position_ids(const Shape& shape, std::int64_t s1, std::int64_t s2);
// The same, for one 0-based index (O(1)); used by engines that never materialize the arrays.
void position_id_at(const Shape& shape, std::int64_t s1, std::int64_t s2, std::int64_t k,
                    std::int32_t& p1, std::int32_t& p2);

// Deterministic samplers (a fixed generator and our own uniform draw, so a seed gives the same
// problems with every standard library). A 1-digit operand is uniform in [0, 9]; a k-digit operand
// (k >= 2) is uniform in [10^(k-1), 10^k - 1], i.e. it never starts with 0.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : g_(seed) {}
  // inclusive, unbiased; inline so that constant bounds (the digit draws) compile to no division
  std::uint64_t uniform(std::uint64_t lo, std::uint64_t hi) {
    const std::uint64_t span = hi - lo;
    if (span == ~std::uint64_t(0)) return g_();
    const std::uint64_t range = span + 1;
    const std::uint64_t limit = ~std::uint64_t(0) - (~std::uint64_t(0) % range);  // reject the biased tail
    std::uint64_t x;
    do {
      x = g_();
    } while (x >= limit);
    return lo + x % range;
  }

 private:
  Mt64 g_;  // std::mt19937_64 output for output (mt64.hpp)
};
std::string random_operand(Rng& rng, int digits);
// TA(n, m): exactly m operands of exactly n digits.
Problem sample_TA(Rng& rng, int n, int m);
// SA(n, m), `count` problems in two equal chunks (Sec. 4.2): first chunk, operand count uniform in
// [2, m] and each operand's length independently uniform in [1, n]; second chunk, count uniform in
// [2, m] and one length uniform in [1, n] shared by all operands. For odd counts the first chunk
// gets the extra problem.
std::vector<Problem> sample_SA(Rng& rng, int n, int m, std::int64_t count);

}  // namespace manyadd
