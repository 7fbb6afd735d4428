// What the tasks' writers and readers share (task.hpp's formats; private to the tasks room): digit
// arithmetic on least-significant-first digit vectors, the checks of typed problems, the Writer that
// builds a sequence with its relative position IDs, the Reader that parses one back, the base of the
// tasks on two numbers, and the task families' instances (task_addition.cpp, task_parity.cpp,
// task_multiplication.cpp) that task.cpp's registry hands out. Every writer does its arithmetic digit by
// digit (schoolbook addition and multiplication by one digit on least-significant-first digit vectors);
// every reader and reference answer uses Boost.Multiprecision instead, so a sequence that reads back
// consistently was checked by arithmetic independent of the code that wrote it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <boost/multiprecision/cpp_int.hpp>
#include <fmt/format.h>

#include "manyadd/core/error.hpp"
#include "manyadd/learn/tasks/task.hpp"
#include "manyadd/learn/tasks/train_config.hpp"

namespace manyadd::learn::task_detail {

using boost::multiprecision::cpp_int;
using Digits = std::vector<std::uint8_t>;  // least significant digit first


inline std::string strip_zeros(const std::string& s) {
  const auto i = s.find_first_not_of('0');
  return i == std::string::npos ? std::string("0") : s.substr(i);
}
inline Digits lsd_first(const std::string& s) {
  Digits d(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) d[i] = std::uint8_t(s[s.size() - 1 - i] - '0');
  return d;
}
// acc += x * 10^shift (acc grows as needed).
inline void add_into(Digits& acc, const Digits& x, std::size_t shift) {
  if (acc.size() < x.size() + shift) acc.resize(x.size() + shift, 0);
  int carry = 0;
  for (std::size_t i = shift; i < acc.size(); ++i) {
    const int s = acc[i] + (i - shift < x.size() ? x[i - shift] : 0) + carry;
    acc[i] = std::uint8_t(s % 10);
    carry = s / 10;
    if (i - shift >= x.size() && carry == 0) break;
  }
  if (carry) acc.push_back(std::uint8_t(carry));
}
inline Digits mul_digit(const Digits& a, int d) {
  Digits out;
  out.reserve(a.size() + 1);
  int carry = 0;
  for (auto x : a) {
    const int p = x * d + carry;
    out.push_back(std::uint8_t(p % 10));
    carry = p / 10;
  }
  if (carry) out.push_back(std::uint8_t(carry));
  return out;
}
// Digit k (0-based, least significant first) of d, zero beyond its length; the number must fit `width`.
inline int digit(const Digits& d, std::size_t k) { return k < d.size() ? d[k] : 0; }
inline void check_fits(const Digits& d, std::size_t width, const char* what) {
  for (std::size_t k = width; k < d.size(); ++k)
    MANYADD_INVARIANT(d[k] == 0, fmt::format("{} does not fit its {} digits", what, width));
}

inline std::string nines(int k) { return std::string(std::size_t(k), '9'); }

// Operands separated by `sep` (digits only, spaces ignored, leading zeros stripped unless `keep`).
inline std::vector<std::string> split_operands(const std::string& text, char sep, const char* example) {
  std::vector<std::string> ops;
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) throw InputError(fmt::format("problem '{}': empty operand (expected e.g. {})", text, example));
    ops.push_back(strip_zeros(cur));
    cur.clear();
  };
  for (char c : text) {
    if (c == sep) flush();
    else if (c >= '0' && c <= '9') cur += c;
    else if (c == ' ') continue;
    else throw InputError(fmt::format("problem '{}': unexpected character '{}' (expected e.g. {})", text, c, example));
  }
  flush();
  return ops;
}
inline void check_digits(const std::string& o, const char* what, bool no_leading_zero = false) {
  if (o.empty() || o.find_first_not_of("0123456789") != std::string::npos)
    throw InputError(fmt::format("{} '{}' is not a decimal number", what, o));
  if (no_leading_zero && o.size() > 1 && o[0] == '0')
    throw InputError(fmt::format("{} '{}' has a leading zero (numbers are written without)", what, o));
}
inline void check_len(std::size_t len, std::size_t max, const char* what) {
  if (len > max) throw InputError(fmt::format("{} has {} digits, above the {} this task writes", what, len, max));
}

// Builds a Written token by token with its relative IDs (-1: ID 0).
struct Writer {
  Written w;
  explicit Writer(int levels, std::int64_t reserve) {
    w.levels = levels;
    w.tokens.reserve(std::size_t(reserve));
    for (int lv = 0; lv < levels; ++lv) w.rel[lv].reserve(std::size_t(reserve));
  }
  void put(int tok, std::int64_t r0, std::int64_t r1 = -1, std::int64_t r2 = -1) {
    w.tokens.push_back(std::uint8_t(tok));
    const std::int64_t r[kMaxPosLevels] = {r0, r1, r2};
    for (int lv = 0; lv < w.levels; ++lv) w.rel[lv].push_back(std::int32_t(r[lv]));
  }
  std::int64_t size() const { return std::int64_t(w.tokens.size()); }
  Written done(std::int64_t eq, std::int64_t answer_len, const Task::Extent* spans = nullptr) {
    w.eq = eq;
    w.answer_end = size();
    w.answer_begin = w.answer_end - answer_len;
    for (int lv = 0; lv < w.levels; ++lv) {
      std::int32_t mx = 0;
      for (auto r : w.rel[lv]) mx = std::max(mx, r);
      w.span[std::size_t(lv)] = spans ? std::int32_t(spans->span[std::size_t(lv)]) : mx;
      MANYADD_INVARIANT(w.span[std::size_t(lv)] >= mx, "a span below the largest relative ID");
    }
    return std::move(w);
  }
};

// Token reader for the parsers: InputError naming the sequence on any surprise.
struct Reader {
  const std::vector<std::uint8_t>& t;
  const char* task;
  std::size_t k = 0;
  InputError bad(const std::string& why) const {
    std::string s;
    for (auto x : t) s += x < kVocabTasks ? token_char(x) : '?';
    return InputError(fmt::format("malformed {} sequence ({}): {}", task, why, s));
  }
  void expect(int tok, const char* what) {
    if (k >= t.size() || t[k] != tok) throw bad(fmt::format("expected {} at index {}", what, k));
    ++k;
  }
  std::size_t run_of_digits(int base = 10) const {  // digits from k on
    std::size_t e = k;
    while (e < t.size() && t[e] < base) ++e;
    return e - k;
  }
  std::string digits(std::size_t n, bool reversed, int base = 10) {
    if (k + n > t.size()) throw bad("too short");
    std::string s;
    for (std::size_t i = 0; i < n; ++i) {
      if (t[k + i] >= base) throw bad(fmt::format("a non-digit at index {}", k + i));
      s += char('0' + t[k + i]);
    }
    k += n;
    if (reversed) std::reverse(s.begin(), s.end());
    return s;
  }
  void end() const {
    if (k != t.size()) throw bad(fmt::format("{} tokens left over", t.size() - k));
  }
};

inline std::string number_string(const cpp_int& v) { return v.str(); }
// A decimal string as a number (Boost reads a leading 0 as octal: the zeros go first).
inline cpp_int big(const std::string& s) { return cpp_int(strip_zeros(s)); }


// Tasks on two numbers of i and j digits (addition-2op, multiplication). Training: the lengths uniform
// in [1, n] x [1, m], each number uniform among those of its length (1 digit: 0..9; k digits: no
// leading zero): the paper's SM(n, m), and McLeish et al. A.6 ("sample equally ... from all i x i
// possible operand lengths"). Test cell (i, j): numbers of exactly i and j digits (TM(i, j)).
class TwoNumbers : public Task {
 public:
  std::vector<Problem> sample_train(Rng& rng, const TrainConfig& tc) const override {
    std::vector<Problem> out(std::size_t(tc.train_size));
    for (auto& p : out) {
      const int la = int(rng.uniform(1, std::uint64_t(tc.train_n))), lb = int(rng.uniform(1, std::uint64_t(tc.train_m)));
      p.operands = {random_operand(rng, la), random_operand(rng, lb)};
    }
    return out;
  }
  Problem sample_cell(Rng& rng, int i, int j) const override {
    Problem p;
    p.operands = {random_operand(rng, i), random_operand(rng, j)};
    return p;
  }
  Problem largest(int i, int j) const override {
    Problem p;
    p.operands = {nines(i), nines(j)};
    return p;
  }
  bool in_training_region(const TrainConfig& tc, int i, int j) const override {
    return i >= 1 && i <= tc.train_n && j >= 1 && j <= tc.train_m;
  }
};

// The instance of kind k among a family's task classes (one static instance of each, built on first use);
// InvariantError naming the family for a kind of another family.
template <class... Tasks>
const Task& member_of(TaskKind k, const char* family) {
  static const std::tuple<Tasks...> members;
  const Task* found = nullptr;
  std::apply([&](const auto&... t) { ((found = found ? found : t.kind() == k ? &t : nullptr), ...); }, members);
  if (!found) throw InvariantError(fmt::format("{}: task {} is of another family", family, task_name(k)));
  return *found;
}

// The families' instances, by kind (InvariantError for a kind of another family).
const Task& addition_family(TaskKind k);        // addition, addition-noscratch, addition-2op
const Task& parity_family(TaskKind k);          // parity, parity-noscratch
const Task& multiplication_family(TaskKind k);  // multiplication, multiplication-noscratch

}  // namespace manyadd::learn::task_detail
