// The addition tasks (task.hpp): the paper's scratchpad of partial sums on two coupled levels, its
// single-level variant without a scratchpad, and two-operand addition in McLeish et al.'s format.
#include "task_detail.hpp"

#include <algorithm>

#include <boost/multiprecision/cpp_int.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/tasks/hard_data.hpp"

namespace manyadd::learn::task_detail {

namespace {

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

}  // namespace

const Task& addition_family(TaskKind k) { return member_of<Addition, AdditionNoScratch, Addition2op>(k, "addition_family"); }

}  // namespace manyadd::learn::task_detail
