// The tasks: see task.hpp. Every writer does its arithmetic digit by digit (schoolbook addition and
// multiplication by one digit on least-significant-first digit vectors); every reader and reference
// answer uses Boost.Multiprecision instead, so a sequence that reads back consistently was checked
// by arithmetic independent of the code that wrote it.
#include "manyadd/learn/tasks/task.hpp"

#include <algorithm>

#include <boost/multiprecision/cpp_int.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/tasks/hard_data.hpp"
#include "manyadd/learn/runs/train.hpp"

namespace manyadd::learn {

namespace {
using boost::multiprecision::cpp_int;
using Digits = std::vector<std::uint8_t>;  // least significant digit first

const std::vector<TaskKind> kAll = {TaskKind::addition,       TaskKind::addition_noscratch, TaskKind::addition_2op,
                                    TaskKind::parity,         TaskKind::parity_noscratch,   TaskKind::multiplication,
                                    TaskKind::multiplication_noscratch};

std::string strip_zeros(const std::string& s) {
  const auto i = s.find_first_not_of('0');
  return i == std::string::npos ? std::string("0") : s.substr(i);
}
Digits lsd_first(const std::string& s) {
  Digits d(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) d[i] = std::uint8_t(s[s.size() - 1 - i] - '0');
  return d;
}
// acc += x * 10^shift (acc grows as needed).
void add_into(Digits& acc, const Digits& x, std::size_t shift) {
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
Digits mul_digit(const Digits& a, int d) {
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
int digit(const Digits& d, std::size_t k) { return k < d.size() ? d[k] : 0; }
void check_fits(const Digits& d, std::size_t width, const char* what) {
  for (std::size_t k = width; k < d.size(); ++k)
    MANYADD_INVARIANT(d[k] == 0, fmt::format("{} does not fit its {} digits", what, width));
}

std::string nines(int k) { return std::string(std::size_t(k), '9'); }

// Operands separated by `sep` (digits only, spaces ignored, leading zeros stripped unless `keep`).
std::vector<std::string> split_operands(const std::string& text, char sep, const char* example) {
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
void check_digits(const std::string& o, const char* what, bool no_leading_zero = false) {
  if (o.empty() || o.find_first_not_of("0123456789") != std::string::npos)
    throw InputError(fmt::format("{} '{}' is not a decimal number", what, o));
  if (no_leading_zero && o.size() > 1 && o[0] == '0')
    throw InputError(fmt::format("{} '{}' has a leading zero (numbers are written without)", what, o));
}
void check_len(std::size_t len, std::size_t max, const char* what) {
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

std::string number_string(const cpp_int& v) { return v.str(); }
// A decimal string as a number (Boost reads a leading 0 as octal: the zeros go first).
cpp_int big(const std::string& s) { return cpp_int(strip_zeros(s)); }

// ---- addition (construct's format) and its single-level variant -------------------------------

class AdditionBase : public Task {
 public:
  Problem parse(const std::string& text) const override {
    Problem p = parse_problem(text);
    if (p.operands.size() < 2) throw InputError(fmt::format("problem '{}': needs at least two operands", text));
    return p;
  }
  std::string to_string(const Problem& p) const override { return p.to_string(); }
  std::string reference_answer(const Problem& p) const override { return number_string(reference_sum(p)); }
  void check_train(const TrainConfig& tc) const override {
    if (tc.train_m < 2 || tc.train_m > 1000)
      throw InputError(fmt::format("train.train_m must be in [2, 1000] (got {})", tc.train_m));
  }
  bool has_hard_data() const override { return true; }
  // SA(n, m), then (hard_fraction > 0) hard problems in place of some, from their own stream
  std::vector<Problem> sample_train(Rng& rng, const TrainConfig& tc) const override {
    std::vector<Problem> out = sample_SA(rng, tc.train_n, tc.train_m, tc.train_size);
    mix_hard_addition(out, tc.hard_fraction, tc.train_n, tc.train_m, seed_mix(tc.data_seed_value(), 0x4A4D));
    return out;
  }
  Problem sample_cell(Rng& rng, int i, int j) const override { return sample_TA(rng, i, j); }
  Problem largest(int i, int j) const override {
    Problem p;
    p.operands.assign(std::size_t(j), nines(i));
    return p;
  }
  GridAxis axis(int a) const override {
    return a == 0 ? GridAxis{"n", "LENGTH OF EACH OPERAND", 1, 30, 1, 1, 10000}
                  : GridAxis{"m", "NUMBER OF OPERANDS", 2, 30, 1, 2, 10000};
  }
  bool in_training_region(const TrainConfig& tc, int i, int j) const override {
    return i >= 1 && i <= tc.train_n && j >= 2 && j <= tc.train_m;
  }
  std::string shape_words(const Problem& p) const override {
    const Shape s = shape_of(p);
    return fmt::format("shape (n={}, m={}, l={})", s.n, s.m, s.l);
  }
};

class Addition final : public AdditionBase {
 public:
  TaskKind kind() const override { return TaskKind::addition; }
  int levels() const override { return 2; }
  nlohmann::json describe() const override {
    return {{"vocabulary", vocabulary_string(kVocab)},
            {"bos_eos", "$"},
            {"padding", "minimal"},
            {"sequence", "$ A_1 + ... + A_m = B_0 > B_1 > ... > B_m, operands zero-padded to l, "
                         "partial sums reversed (least significant digit first)"},
            {"position_ids", "two levels (bi-level Position Coupling, construct/'s IDs): level 1 a digit of "
                             "significance t (1 = least significant) of an operand or a partial sum -> s1 + t, "
                             "'+', '=' and '>' -> s1; level 2 the digits of A_i and the '+' after it -> s2 + i - 1, "
                             "'=' -> s2, the digits of B_j and the '>' before it -> s2 + j; BOS 0 on both levels"},
            {"source", "Cho et al., ICLR 2025, Sec. 4 and Appendix B: SA(n, m) with the scratchpad"}};
  }
  // construct's sequence and coupled IDs (at offsets 1: every ID but BOS's is >= 1, so rel = ID - 1).
  Written write(const Problem& p) const override {
    const Shape shape = shape_of(p);
    Written w;
    w.tokens = build_sequence(p, shape);
    w.levels = 2;
    const PositionIds ids = position_ids(shape, 1, 1);
    for (int lv = 0; lv < 2; ++lv) {
      const auto& src = lv == 0 ? ids.p1 : ids.p2;
      w.rel[lv].resize(src.size());
      for (std::size_t k = 0; k < src.size(); ++k) w.rel[lv][k] = src[k] - 1;
    }
    w.eq = shape.eq_index();
    w.answer_end = shape.N();
    w.answer_begin = shape.N() - shape.l;
    w.span = {shape.l, shape.m, 0};
    return w;
  }
  Reading read(const std::vector<std::uint8_t>& toks) const override {
    const ParsedSequence ps = parse_sequence(toks);
    Reading r;
    r.answer = ps.partial_sums.back();
    cpp_int acc = 0;
    if (big(ps.partial_sums[0]) != 0) r.consistent = false, r.why = "B_0 is not 0";
    for (int j = 0; j < ps.m && r.consistent; ++j) {
      acc += big(ps.problem.operands[std::size_t(j)]);
      if (big(ps.partial_sums[std::size_t(j + 1)]) != acc)
        r.consistent = false, r.why = fmt::format("B_{} is not A_1 + .. + A_{}", j + 1, j + 1);
    }
    return r;
  }
  Extent cell_extent(int i, int j) const override {
    const Shape s = Shape::make(i, j, Padding::minimal);
    return {s.N(), {s.l, s.m, 0}};
  }
};

class AdditionNoScratch final : public AdditionBase {
 public:
  TaskKind kind() const override { return TaskKind::addition_noscratch; }
  int levels() const override { return 1; }
  nlohmann::json describe() const override {
    return {{"task", name()},
            {"vocabulary", vocabulary_string(kVocab)},
            {"bos_eos", "$"},
            {"padding", "minimal"},
            {"sequence", "$ A_1 + ... + A_m = C, operands and the sum C zero-padded to l (the digits of m (10^n - 1)), "
                         "C reversed (least significant digit first)"},
            {"position_ids", "one level: a digit of significance t -> s + t; '+' and '=' -> s; BOS 0"},
            {"source", "Cho et al., ICLR 2025, Figure 1 (-Scratchpad), Sec. 4.3: single-level Position Coupling"}};
  }
  Written write(const Problem& p) const override {
    const Shape shape = shape_of(p);
    const int l = shape.l, m = shape.m;
    for (auto& o : p.operands) check_digits(o, "operand");
    Writer w(1, cell_extent(shape.n, m).T);
    w.put(kDollar, -1);
    Digits sum;
    for (int i = 0; i < m; ++i) {
      const std::string& o = p.operands[std::size_t(i)];
      const Digits d = lsd_first(o);
      add_into(sum, d, 0);
      for (int r = 0; r < l; ++r) w.put(digit(d, std::size_t(l - 1 - r)), l - r);  // significance l - r
      w.put(i + 1 < m ? kPlus : kEq, 0);
    }
    check_fits(sum, std::size_t(l), "the sum");
    const std::int64_t eq = w.size() - 1;
    for (int t = 1; t <= l; ++t) w.put(digit(sum, std::size_t(t - 1)), t);
    return w.done(eq, l);
  }
  Reading read(const std::vector<std::uint8_t>& toks) const override {
    Reader rd{toks, name()};
    rd.expect(kDollar, "'$'");
    const std::size_t l = rd.run_of_digits();
    if (l == 0) throw rd.bad("no operand");
    std::vector<std::string> ops;
    for (;;) {
      ops.push_back(rd.digits(l, false));
      if (rd.k < toks.size() && toks[rd.k] == kPlus) {
        ++rd.k;
        continue;
      }
      rd.expect(kEq, "'+' or '='");
      break;
    }
    Reading r;
    const std::string c = rd.digits(l, true);
    rd.end();
    r.answer = strip_zeros(c);
    cpp_int sum = 0;
    for (auto& o : ops) sum += big(o);
    if (big(r.answer) != sum) r.consistent = false, r.why = "C is not the sum of the operands";
    return r;
  }
  Extent cell_extent(int i, int j) const override {
    const Shape s = Shape::make(i, j, Padding::minimal);
    return {std::int64_t(j) * (s.l + 1) + 1 + s.l, {s.l, 0, 0}};
  }
};

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

// McLeish et al.'s two-operand format: operands and answer reversed, no padding; Abacus IDs: the
// t-th digit of each number (significance t) -> s + t - 1, every other token 0.
class Addition2op final : public TwoNumbers {
 public:
  static constexpr std::size_t kMaxDigits = 100'000;
  TaskKind kind() const override { return TaskKind::addition_2op; }
  int levels() const override { return 1; }
  nlohmann::json describe() const override {
    return {{"task", name()},
            {"vocabulary", vocabulary_string(kVocab)},
            {"bos_eos", "$"},
            {"padding", "none"},
            {"sequence", "$ rev(a) + rev(b) = rev(a + b): operands and sum least significant digit first, no "
                         "zero padding"},
            {"position_ids", "one level (Abacus): the digit of significance t of every number -> s + t - 1; "
                             "'+', '=' and BOS 0"},
            {"source", "McLeish et al., NeurIPS 2024, Sec. 3 (format), Sec. 3.1 (Abacus Embeddings)"}};
  }
  Problem parse(const std::string& text) const override {
    Problem p;
    p.operands = split_operands(text, '+', "57+48");
    if (p.operands.size() != 2) throw InputError(fmt::format("problem '{}': needs exactly two operands", text));
    return p;
  }
  std::string to_string(const Problem& p) const override { return p.to_string(); }
  std::string reference_answer(const Problem& p) const override { return number_string(reference_sum(p)); }
  std::string shape_words(const Problem& p) const override {
    return fmt::format("operands of {} and {} digits", p.operands.at(0).size(), p.operands.at(1).size());
  }
  Written write(const Problem& p) const override {
    if (p.operands.size() != 2) throw InputError("addition-2op: exactly two operands");
    for (auto& o : p.operands) check_digits(o, "operand", true), check_len(o.size(), kMaxDigits, "an operand");
    const Digits a = lsd_first(p.operands[0]), b = lsd_first(p.operands[1]);
    Digits sum = a;
    add_into(sum, b, 0);
    while (sum.size() > 1 && sum.back() == 0) sum.pop_back();
    Writer w(1, std::int64_t(a.size() + b.size() + sum.size()) + 3);
    w.put(kDollar, -1);
    for (std::size_t t = 0; t < a.size(); ++t) w.put(a[t], std::int64_t(t));
    w.put(kPlus, -1);
    for (std::size_t t = 0; t < b.size(); ++t) w.put(b[t], std::int64_t(t));
    w.put(kEq, -1);
    const std::int64_t eq = w.size() - 1;
    for (std::size_t t = 0; t < sum.size(); ++t) w.put(sum[t], std::int64_t(t));
    return w.done(eq, std::int64_t(sum.size()));
  }
  Reading read(const std::vector<std::uint8_t>& toks) const override {
    Reader rd{toks, name()};
    rd.expect(kDollar, "'$'");
    const std::string a = rd.digits(rd.run_of_digits(), true);
    rd.expect(kPlus, "'+'");
    const std::string b = rd.digits(rd.run_of_digits(), true);
    rd.expect(kEq, "'='");
    const std::size_t n = rd.run_of_digits();
    if (a.empty() || b.empty() || n == 0) throw rd.bad("an empty number");
    const std::string c = rd.digits(n, true);
    rd.end();
    Reading r;
    r.answer = strip_zeros(c);
    const cpp_int sum = big(a) + big(b);
    if (c != number_string(sum)) r.consistent = false, r.why = "the answer is not rev(a + b)";
    return r;
  }
  void check_train(const TrainConfig& tc) const override {
    if (tc.train_m < 1 || tc.train_m > 1000)
      throw InputError(fmt::format("train.train_m must be in [1, 1000] (got {})", tc.train_m));
  }
  Extent cell_extent(int i, int j) const override {
    const std::int64_t s = std::max(i, j) + 1;  // 9..9 + 9..9 carries into one more digit
    return {3 + std::int64_t(i) + j + s, {s - 1, 0, 0}};
  }
  GridAxis axis(int a) const override {
    return a == 0 ? GridAxis{"n", "DIGITS OF THE FIRST OPERAND", 1, 100, 1, 1, 100000}
                  : GridAxis{"m", "DIGITS OF THE SECOND OPERAND", 1, 100, 1, 1, 100000};
  }
};

// ---- parity ---------------------------------------------------------------------------------------

class ParityBase : public Task {
 public:
  static constexpr std::size_t kMaxBits = 1'000'000;
  Problem parse(const std::string& text) const override {
    std::string bits;
    for (char c : text) {
      if (c == '0' || c == '1') bits += c;
      else if (c != ' ') throw InputError(fmt::format("problem '{}': a parity query is a bit string (e.g. 0101)", text));
    }
    if (bits.empty()) throw InputError(fmt::format("problem '{}': empty bit string (expected e.g. 0101)", text));
    Problem p;
    p.operands = {bits};
    return p;
  }
  std::string to_string(const Problem& p) const override { return p.operands.at(0); }
  std::string reference_answer(const Problem& p) const override {
    const auto ones = std::count(p.operands.at(0).begin(), p.operands.at(0).end(), '1');
    return ones % 2 ? "1" : "0";
  }
  std::string shape_words(const Problem& p) const override {
    return fmt::format("a query of {} bits", p.operands.at(0).size());
  }
  const std::string& bits_of(const Problem& p) const {
    if (p.operands.size() != 1) throw InputError(fmt::format("{}: one bit string per instance", name()));
    const std::string& x = p.operands[0];
    if (x.empty() || x.find_first_not_of("01") != std::string::npos)
      throw InputError(fmt::format("{}: '{}' is not a bit string", name(), x));
    check_len(x.size(), kMaxBits, "the query");
    return x;
  }
  void check_train(const TrainConfig&) const override {}  // train_n: lengths 1..n (train_m unused)
  // Lengths uniform in [1, n], bits uniform (the authors' ParityDataset).
  std::vector<Problem> sample_train(Rng& rng, const TrainConfig& tc) const override {
    std::vector<Problem> out(std::size_t(tc.train_size));
    for (auto& p : out) p = sample_cell(rng, int(rng.uniform(1, std::uint64_t(tc.train_n))), 1);
    return out;
  }
  Problem sample_cell(Rng& rng, int i, int) const override {
    std::string x(std::size_t(i), '0');
    for (auto& c : x) c = char('0' + rng.uniform(0, 1));
    Problem p;
    p.operands = {x};
    return p;
  }
  Problem largest(int i, int) const override {
    Problem p;
    p.operands = {std::string(std::size_t(i), '1')};
    return p;
  }
  bool two_axes() const override { return false; }
  GridAxis axis(int) const override { return {"n", "QUERY LENGTH", 5, 100, 5, 1, 1000000}; }
  bool in_training_region(const TrainConfig& tc, int i, int) const override { return i >= 1 && i <= tc.train_n; }
};

class Parity final : public ParityBase {
 public:
  TaskKind kind() const override { return TaskKind::parity; }
  int levels() const override { return 1; }
  nlohmann::json describe() const override {
    return {{"task", name()},
            {"vocabulary", vocabulary_string(kVocab)},
            {"bos_eos", "$"},
            {"sequence", "$ x_1 .. x_n = y_1 .. y_n with y_k = x_1 xor .. xor x_k (the running parity; y_n is the "
                         "answer)"},
            {"position_ids", "one level: x_k -> s + k, '=' -> s, y_k -> s + k, BOS 0 (Figure 2: 0101=0110 has "
                             "2345 1 2345)"},
            {"source", "Cho et al., ICLR 2025, Sec. 3, Figure 2; the scratchpad of Anil et al. 2022"}};
  }
  Written write(const Problem& p) const override {
    const std::string& x = bits_of(p);
    const std::int64_t n = std::int64_t(x.size());
    Writer w(1, 2 * n + 2);
    w.put(kDollar, -1);
    for (std::int64_t k = 1; k <= n; ++k) w.put(x[std::size_t(k - 1)] - '0', k);
    w.put(kEq, 0);
    const std::int64_t eq = w.size() - 1;
    int y = 0;
    for (std::int64_t k = 1; k <= n; ++k) {
      y ^= x[std::size_t(k - 1)] - '0';
      w.put(y, k);
    }
    return w.done(eq, 1);
  }
  Reading read(const std::vector<std::uint8_t>& toks) const override {
    Reader rd{toks, name()};
    rd.expect(kDollar, "'$'");
    const std::size_t n = rd.run_of_digits(2);
    if (n == 0) throw rd.bad("no query bit");
    const std::string x = rd.digits(n, false, 2);
    rd.expect(kEq, "'='");
    const std::string y = rd.digits(n, false, 2);
    rd.end();
    Reading r;
    r.answer = y.substr(n - 1);
    // Independently of the writer: y_k = (number of ones among x_1..x_k) mod 2.
    std::int64_t ones = 0;
    for (std::size_t k = 0; k < n && r.consistent; ++k) {
      ones += x[k] == '1';
      if (y[k] - '0' != ones % 2) r.consistent = false, r.why = fmt::format("y_{} is not the parity of x_1..x_{}", k + 1, k + 1);
    }
    return r;
  }
  Extent cell_extent(int i, int) const override { return {2 * std::int64_t(i) + 2, {i, 0, 0}}; }
};

// The authors' coupled parity without a scratchpad (src/data/parity.py, ParityDatasetWithCoupledPositions):
// every query bit -> s, '=' -> s + 1, the answer -> s.
class ParityNoScratch final : public ParityBase {
 public:
  TaskKind kind() const override { return TaskKind::parity_noscratch; }
  int levels() const override { return 1; }
  nlohmann::json describe() const override {
    return {{"task", name()},
            {"vocabulary", vocabulary_string(kVocab)},
            {"bos_eos", "$"},
            {"sequence", "$ x_1 .. x_n = y with y = x_1 xor .. xor x_n"},
            {"position_ids", "one level: every x_k -> s, '=' -> s + 1, y -> s, BOS 0"},
            {"source", "Cho et al., ICLR 2025, Sec. 3 (parity without scratchpad); the ID rule of the authors' "
                       "coupled parity dataset"}};
  }
  Written write(const Problem& p) const override {
    const std::string& x = bits_of(p);
    Writer w(1, std::int64_t(x.size()) + 3);
    w.put(kDollar, -1);
    int y = 0;
    for (char c : x) w.put(c - '0', 0), y ^= c - '0';
    w.put(kEq, 1);
    const std::int64_t eq = w.size() - 1;
    w.put(y, 0);
    return w.done(eq, 1);
  }
  Reading read(const std::vector<std::uint8_t>& toks) const override {
    Reader rd{toks, name()};
    rd.expect(kDollar, "'$'");
    const std::size_t n = rd.run_of_digits(2);
    if (n == 0) throw rd.bad("no query bit");
    const std::string x = rd.digits(n, false, 2);
    rd.expect(kEq, "'='");
    Reading r;
    r.answer = rd.digits(1, false, 2);
    rd.end();
    const auto ones = std::count(x.begin(), x.end(), '1');
    if (r.answer != (ones % 2 ? "1" : "0")) r.consistent = false, r.why = "y is not the parity of the query";
    return r;
  }
  Extent cell_extent(int i, int) const override { return {std::int64_t(i) + 3, {1, 0, 0}}; }
};

// ---- multiplication -------------------------------------------------------------------------------

class MultiplicationBase : public TwoNumbers {
 public:
  static constexpr std::size_t kMaxDigits = 1000;
  int vocab() const override { return kVocabTasks; }
  Problem parse(const std::string& text) const override {
    Problem p;
    p.operands = split_operands(text, '*', "37*925");
    if (p.operands.size() != 2) throw InputError(fmt::format("problem '{}': needs exactly two factors", text));
    for (auto& o : p.operands) check_len(o.size(), kMaxDigits, "a factor");
    return p;
  }
  std::string to_string(const Problem& p) const override { return p.operands.at(0) + "*" + p.operands.at(1); }
  std::string reference_answer(const Problem& p) const override {
    return number_string(big(p.operands.at(0)) * big(p.operands.at(1)));
  }
  std::string shape_words(const Problem& p) const override {
    return fmt::format("factors of {} and {} digits", p.operands.at(0).size(), p.operands.at(1).size());
  }
  void factors(const Problem& p, Digits& a, Digits& b) const {
    if (p.operands.size() != 2) throw InputError(fmt::format("{}: exactly two factors", name()));
    for (auto& o : p.operands) check_digits(o, "factor", true), check_len(o.size(), kMaxDigits, "a factor");
    a = lsd_first(p.operands[0]), b = lsd_first(p.operands[1]);
  }
  void check_train(const TrainConfig& tc) const override {
    if (tc.train_n > int(kMaxDigits) || tc.train_m < 1 || tc.train_m > int(kMaxDigits))
      throw InputError(fmt::format("train.train_n and train.train_m must be in [1, {}] (got {}, {})", kMaxDigits,
                                   tc.train_n, tc.train_m));
  }
  GridAxis axis(int a) const override {
    return a == 0 ? GridAxis{"n", "DIGITS OF THE FIRST FACTOR", 1, 30, 1, 1, int(kMaxDigits)}
                  : GridAxis{"m", "DIGITS OF THE SECOND FACTOR", 1, 30, 1, 1, int(kMaxDigits)};
  }
  // The query A*B= with its IDs (A's k-th least significant digit: level 1 rel k; B's: level 2 rel
  // k - 1 in the scratchpad task, level 1 rel k without).
  static void put_query(Writer& w, const Digits& a, const Digits& b, bool scratch) {
    const std::int64_t M = std::int64_t(a.size()), N = std::int64_t(b.size());
    w.put(kDollar, -1, -1, -1);
    for (std::int64_t r = 0; r < M; ++r) w.put(a[std::size_t(M - 1 - r)], M - r, -1, -1);
    w.put(kStar, scratch ? -1 : 0, -1, -1);
    for (std::int64_t r = 0; r < N; ++r) {
      if (scratch) w.put(b[std::size_t(N - 1 - r)], -1, N - r - 1, -1);
      else w.put(b[std::size_t(N - 1 - r)], N - r);
    }
  }
  // A*B= from the start of a sequence: the factors (most significant digit first).
  static void read_query(Reader& rd, std::string& a, std::string& b) {
    rd.expect(kDollar, "'$'");
    a = rd.digits(rd.run_of_digits(), false);
    rd.expect(kStar, "'*'");
    b = rd.digits(rd.run_of_digits(), false);
    if (a.empty() || b.empty()) throw rd.bad("an empty factor");
    rd.expect(kEq, "'='");
  }
};

// Two-stage scratchpad, tri-level coupling (Sec. 5.1, Figure 8b; the authors' MultiplicationScratchPad
// DatasetWithCoupledPositions). With A of M digits and B of N digits (b_j its j-th least significant):
//   $ A * B = S_1 + S_2 + .. + S_N = C_1 > C_2 > .. > C_N
//   S_j = A b_j, zero-padded to M + 1 and reversed; C_j = sum_{k <= j} S_k 10^(k-1), padded to M + N, reversed.
// Relative IDs (level 1, 2, 3; -1 = ID 0):
//   A's k-th least significant digit (k, -1, -1); '*' (-1, -1, -1); B's k-th (-1, k - 1, -1);
//   the separator before S_j ('=' or '+') (0, j - 1, j - 1); S_j's k-th digit (k, j - 1, j - 1 + k);
//   the separator before C_j ('=' or '>') (-1, j - 1, 0); C_j's k-th digit (-1, j - 1, k).
// Offset spans (the authors' samplers): level 1 max(M + 1, N), level 2 N - 1, level 3 M + N.
class Multiplication final : public MultiplicationBase {
 public:
  TaskKind kind() const override { return TaskKind::multiplication; }
  int levels() const override { return 3; }
  nlohmann::json describe() const override {
    return {{"task", name()},
            {"vocabulary", vocabulary_string(kVocabTasks)},
            {"bos_eos", "$"},
            {"sequence", "$ A * B = S_1 + .. + S_N = C_1 > .. > C_N: S_j = A times the j-th least significant digit "
                         "of B, zero-padded to M + 1 digits and reversed; C_j = S_1 + S_2 10 + .. + S_j 10^(j-1), "
                         "zero-padded to M + N digits and reversed (M, N: the digits of A, B)"},
            {"position_ids", "three levels: A's k-th least significant digit (s1+k, 0, 0); '*' (0, 0, 0); B's "
                             "(0, s2+k-1, 0); the separator before S_j (s1, s2+j-1, s3+j-1); S_j's k-th digit "
                             "(s1+k, s2+j-1, s3+j-1+k); the separator before C_j (0, s2+j-1, s3); C_j's k-th digit "
                             "(0, s2+j-1, s3+k); BOS (0, 0, 0)"},
            {"source", "Cho et al., ICLR 2025, Sec. 5.1, Figure 8b"}};
  }
  Written write(const Problem& p) const override {
    Digits a, b;
    factors(p, a, b);
    const std::int64_t M = std::int64_t(a.size()), N = std::int64_t(b.size());
    const Extent ext = cell_extent(int(M), int(N));
    Writer w(3, ext.T);
    put_query(w, a, b, true);
    w.put(kEq, 0, 0, 0);
    const std::int64_t eq = w.size() - 1;
    std::vector<Digits> S(static_cast<std::size_t>(N));
    for (std::int64_t j = 1; j <= N; ++j) {
      if (j > 1) w.put(kPlus, 0, j - 1, j - 1);
      S[std::size_t(j - 1)] = mul_digit(a, b[std::size_t(j - 1)]);
      check_fits(S[std::size_t(j - 1)], std::size_t(M + 1), "a stage-1 product");
      for (std::int64_t k = 1; k <= M + 1; ++k) w.put(digit(S[std::size_t(j - 1)], std::size_t(k - 1)), k, j - 1, j - 1 + k);
    }
    Digits C;
    for (std::int64_t j = 1; j <= N; ++j) {
      w.put(j == 1 ? kEq : kArrow, -1, j - 1, 0);
      add_into(C, S[std::size_t(j - 1)], std::size_t(j - 1));
      check_fits(C, std::size_t(M + N), "a stage-2 sum");
      for (std::int64_t k = 1; k <= M + N; ++k) w.put(digit(C, std::size_t(k - 1)), -1, j - 1, k);
    }
    MANYADD_INVARIANT(w.size() == ext.T, "multiplication: the sequence length differs from extent()");
    return w.done(eq, M + N, &ext);
  }
  Reading read(const std::vector<std::uint8_t>& toks) const override {
    Reader rd{toks, name()};
    std::string a, b;
    read_query(rd, a, b);
    const std::size_t M = a.size(), N = b.size();
    std::vector<std::string> S, C;
    for (std::size_t j = 0; j < N; ++j) {
      if (j) rd.expect(kPlus, "'+'");
      S.push_back(rd.digits(M + 1, true));
    }
    rd.expect(kEq, "the second '='");
    for (std::size_t j = 0; j < N; ++j) {
      if (j) rd.expect(kArrow, "'>'");
      C.push_back(rd.digits(M + N, true));
    }
    rd.end();
    Reading r;
    r.answer = strip_zeros(C.back());
    const cpp_int A = big(a);
    cpp_int acc = 0, shift = 1;
    for (std::size_t j = 0; j < N && r.consistent; ++j) {
      const cpp_int s = A * (b[N - 1 - j] - '0');
      if (big(S[j]) != s) {
        r.consistent = false, r.why = fmt::format("S_{} is not A times b_{}", j + 1, j + 1);
        break;
      }
      acc += s * shift;
      shift *= 10;
      if (big(C[j]) != acc) r.consistent = false, r.why = fmt::format("C_{} is not S_1 + .. + S_{} 10^{}", j + 1, j + 1, j);
    }
    return r;
  }
  Extent cell_extent(int i, int j) const override {
    const std::int64_t M = i, N = j;
    return {M + N + 2 + N * (M + 2) + N * (M + N + 1), {std::max(M + 1, N), N - 1, M + N}};
  }
};

// Without scratchpad (the authors' MultiplicationDatasetWithCoupledPositions, padding and the answer
// reversed): $ A * B = C, C = A B zero-padded to M + N digits and reversed; one level: the k-th least
// significant digit of A, B and C -> s + k, '*' and '=' -> s, BOS 0.
class MultiplicationNoScratch final : public MultiplicationBase {
 public:
  TaskKind kind() const override { return TaskKind::multiplication_noscratch; }
  int levels() const override { return 1; }
  nlohmann::json describe() const override {
    return {{"task", name()},
            {"vocabulary", vocabulary_string(kVocabTasks)},
            {"bos_eos", "$"},
            {"sequence", "$ A * B = C: C = A B zero-padded to M + N digits and reversed"},
            {"position_ids", "one level: the k-th least significant digit of A, B and C -> s + k; '*' and '=' -> s; "
                             "BOS 0"},
            {"source", "Cho et al., ICLR 2025, Sec. 5.3 (Position Coupling without scratchpad, the N x M rule of "
                       "Cho et al. 2024)"}};
  }
  Written write(const Problem& p) const override {
    Digits a, b;
    factors(p, a, b);
    const std::int64_t M = std::int64_t(a.size()), N = std::int64_t(b.size());
    Writer w(1, cell_extent(int(M), int(N)).T);
    put_query(w, a, b, false);
    w.put(kEq, 0);
    const std::int64_t eq = w.size() - 1;
    Digits C;
    for (std::int64_t j = 0; j < N; ++j) add_into(C, mul_digit(a, b[std::size_t(j)]), std::size_t(j));
    check_fits(C, std::size_t(M + N), "the product");
    for (std::int64_t k = 1; k <= M + N; ++k) w.put(digit(C, std::size_t(k - 1)), k);
    return w.done(eq, M + N);
  }
  Reading read(const std::vector<std::uint8_t>& toks) const override {
    Reader rd{toks, name()};
    std::string a, b;
    read_query(rd, a, b);
    const std::string c = rd.digits(a.size() + b.size(), true);
    rd.end();
    Reading r;
    r.answer = strip_zeros(c);
    if (big(r.answer) != big(a) * big(b)) r.consistent = false, r.why = "C is not A times B";
    return r;
  }
  Extent cell_extent(int i, int j) const override {
    const std::int64_t L = std::int64_t(i) + j;
    return {2 * L + 3, {L, 0, 0}};
  }
};

}  // namespace

TaskKind parse_task(const std::string& s) {
  for (auto k : kAll)
    if (s == task_name(k)) return k;
  throw InputError(fmt::format("task '{}' unknown ({})", s, task_names()));
}

const char* task_name(TaskKind k) {
  switch (k) {
    case TaskKind::addition: return "addition";
    case TaskKind::addition_noscratch: return "addition-noscratch";
    case TaskKind::addition_2op: return "addition-2op";
    case TaskKind::parity: return "parity";
    case TaskKind::parity_noscratch: return "parity-noscratch";
    case TaskKind::multiplication: return "multiplication";
    case TaskKind::multiplication_noscratch: return "multiplication-noscratch";
  }
  return "?";
}

const std::vector<TaskKind>& all_tasks() { return kAll; }

std::string task_names() {
  std::string s;
  for (auto k : kAll) s += (s.empty() ? "" : "|") + std::string(task_name(k));
  return s;
}

std::vector<std::pair<int, int>> Task::training_cells(const TrainConfig& tc) const {
  std::vector<std::pair<int, int>> cells;
  const GridAxis a0 = axis(0);
  const int j_lo = two_axes() ? axis(1).min_value : 1, j_hi = two_axes() ? tc.train_m : 1;
  for (int i = a0.min_value; i <= tc.train_n; ++i)
    for (int j = j_lo; j <= j_hi; ++j)
      if (in_training_region(tc, i, j)) cells.emplace_back(i, j);
  return cells;
}

Task::Extent Task::extent(int i, int j) const {
  Extent e = cell_extent(i, j);
  // Every run is longest in the all-nines instance (a carry only lengthens a number); the property test
  // in tests/test_tasks.cpp checks every sampled instance against it.
  e.digit_run = longest_digit_run(write(largest(i, j)).tokens);
  return e;
}

void Task::check_model(const ModelConfig& c) const {
  if (c.vocab < vocab())
    throw InputError(fmt::format("task {} uses the tokens '{}': the model's vocab {} is too small (set model.vocab "
                                 "{})",
                                 name(), vocabulary_string(vocab()), c.vocab, vocab()));
  const int need = pos_levels(c.pos_mode);
  const bool coupled =
      c.pos_mode == PosMode::coupled || c.pos_mode == PosMode::coupled3 || c.pos_mode == PosMode::coupled_rel;
  if (coupled && need != levels()) {
    const char* fix = levels() == 1 ? "digits (its single-level coupling)" : levels() == 2 ? "coupled" : "coupled3";
    throw InputError(fmt::format("task {} couples positions on {} level{}, pos_mode {} on {}: use pos_mode {} (or "
                                 "absolute / none)",
                                 name(), levels(), levels() == 1 ? "" : "s", pos_mode_name(c.pos_mode), need, fix));
  }
}

const Task& task(TaskKind k) {
  static const Addition add;
  static const AdditionNoScratch add_ns;
  static const Addition2op add_2;
  static const Parity par;
  static const ParityNoScratch par_ns;
  static const Multiplication mul;
  static const MultiplicationNoScratch mul_ns;
  switch (k) {
    case TaskKind::addition: return add;
    case TaskKind::addition_noscratch: return add_ns;
    case TaskKind::addition_2op: return add_2;
    case TaskKind::parity: return par;
    case TaskKind::parity_noscratch: return par_ns;
    case TaskKind::multiplication: return mul;
    case TaskKind::multiplication_noscratch: return mul_ns;
  }
  throw InvariantError("task: unknown kind");
}

const Task& task_named(const std::string& name) { return task(parse_task(name)); }

std::string position_rule(const Task& t, PosMode mode) {
  const nlohmann::json d = t.describe();
  const std::string coupling = d.value("position_ids", std::string("the task's coupling"));
  const std::string offsets = " (offsets s, s1, s2, s3 >= 1: random per sample in training, 1 at evaluation "
                              "unless given)";
  switch (mode) {
    case PosMode::coupled:
    case PosMode::coupled3: return "pos_mode " + std::string(pos_mode_name(mode)) + ": " + coupling + offsets;
    case PosMode::digits: return "pos_mode digits: one table, level 1 of the task's coupling alone: " + coupling + offsets;
    case PosMode::absolute: return "pos_mode absolute: one table, BOS 0, the token at index k >= 1 -> s + k - 1" + offsets;
    case PosMode::none: return "pos_mode none: no position embeddings (causal attention alone)";
    case PosMode::fire:
      return "pos_mode fire: no position IDs and no table; every layer's attention scores get FIRE's learned bias "
             "b_h(i, j) of the query's and key's token indices i, j (BOS 0), a function of log(|c| (i - j) + 1) / "
             "log(|c| n_i + 1), n_i = max(i, L) or min(i, L) (fire_threshold) (Li et al. 2024)";
    case PosMode::rope:
      return "pos_mode rope: no position IDs and no table; every layer's queries and keys are rotated by their token "
             "index (BOS 0), the pair (2k, 2k+1) by the angle index * 10000^(-2k/d_head) (Su et al. 2021)";
    case PosMode::coupled_rel:
      return "pos_mode coupled_rel: no table; " + coupling + offsets +
             "; every layer's score of a query and a key gets a learned gain per head, level and ID difference d "
             "(|d| <= rel_window), none otherwise";
    case PosMode::abacus:
      return "pos_mode abacus: one table; each maximal run of digit tokens is numbered beta, beta + 1, ... from "
             "its first token, every other token 0; beta uniform in [1, abacus_k], one per batch, in training, 1 at "
             "evaluation (McLeish et al. 2024, Sec. 3.1)";
  }
  return "";
}

const Task& task_of_model(const nlohmann::json& config_json, const std::string& requested, const std::string& dir) {
  std::string trained = "addition";
  if (config_json.contains("train") && config_json["train"].is_object() && config_json["train"].contains("task")) {
    const auto& t = config_json["train"]["task"];
    if (!t.is_string()) throw InputError(fmt::format("{}/config.json: train.task must be a string ({})", dir, task_names()));
    trained = t.get<std::string>();
  }
  const Task& tk = task_named(trained);
  if (!requested.empty() && parse_task(requested) != tk.kind())
    throw InputError(fmt::format("the model in {} was trained on task {}; --task {} is another format (drop --task, "
                                 "or give {})",
                                 dir, tk.name(), requested, tk.name()));
  return tk;
}

}  // namespace manyadd::learn
