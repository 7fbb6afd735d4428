// The multiplication tasks (task.hpp): the two-stage scratchpad on three coupled levels, and without.
#include "task_detail.hpp"

#include <algorithm>

#include <boost/multiprecision/cpp_int.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/tasks/hard_data.hpp"

namespace manyadd::learn::task_detail {

namespace {

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

const Task& multiplication_family(TaskKind k) { return member_of<Multiplication, MultiplicationNoScratch>(k, "multiplication_family"); }

}  // namespace manyadd::learn::task_detail
