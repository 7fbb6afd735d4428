// The parity tasks (task.hpp): with the authors' scratchpad of running parities, and without.
#include "task_detail.hpp"

#include <algorithm>

#include <boost/multiprecision/cpp_int.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/tasks/hard_data.hpp"

namespace manyadd::learn::task_detail {

namespace {

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

}  // namespace

const Task& parity_family(TaskKind k) { return member_of<Parity, ParityNoScratch>(k, "parity_family"); }

}  // namespace manyadd::learn::task_detail
