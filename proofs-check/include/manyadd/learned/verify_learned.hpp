// verify_learned: a trained decoder's worst case on one addition shape TA(n, m) at fixed offsets, in three
// stages (proofs-check/README.md, "verify_learned"):
//   samples      random instances drawn as `evaluate` draws a cell, greedy decoding (what the accuracy
//                of a grid cell measures), their smallest teacher-forced margins kept as attack starts;
//   attack       a search for the input with the smallest teacher-forced margin (logit of the right token
//                minus the best other, over every response row): structured starts, then coordinate
//                moves and digit sweeps around the worst row, within a time budget; an input it finds
//                wrong is confirmed by greedy decoding, shrunk (digits zeroed while it still fails) and
//                printed with the model's answer and the true sum;
//   certificate  one-layer models: PROVEN for every one of the 10^(n m) inputs, a failing input, or
//                UNKNOWN (certify.hpp).
// Every forward here is learn's fp32 reference (--device cpu).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "manyadd/format.hpp"
#include "manyadd/learned/net.hpp"

namespace manyadd::learned {

// A shape at fixed offsets on one model: sequences of its problems through the model.
class Instance {
 public:
  Instance(const Net& net, const Shape& shape, std::int64_t s1, std::int64_t s2);
  const Shape& shape() const { return shape_; }
  const Net& net() const { return net_; }
  std::int64_t s1() const { return s1_; }
  std::int64_t s2() const { return s2_; }
  const Positions& positions() const { return pos_; }
  // Teacher-forced margins at every response row (rows eq .. N-1; the last predicts EOS); min and argmin.
  struct Probe {
    double min_margin = 0;
    std::int64_t row = 0;  // the sequence position of the query whose margin is smallest
    std::vector<double> margins;
  };
  Probe probe(const Problem& p) const;
  // Greedy decoding from '='. first_wrong: index into the response of the first wrong token, -1 if exact.
  struct Greedy {
    bool exact = false;
    std::vector<std::uint8_t> expected, got;  // the response with EOS
    std::int64_t first_wrong = -1;
  };
  Greedy greedy(const Problem& p) const;

 private:
  const Net& net_;
  Shape shape_;
  std::int64_t s1_, s2_;
  Positions pos_;
};

// A problem of the shape with every operand exactly n digits (leading zeros kept).
Problem padded_problem(const Shape& shape, const std::vector<std::string>& operands);
// The structured inputs the attack starts from: all zeros, all nines, one operand of nines among zeros,
// carry cascades (partial sums of nines then a one), alternating 0/9, columns summing to 9, and so on.
std::vector<Problem> structured_starts(const Shape& shape);

struct AttackOptions {
  double seconds = 10;
  std::uint64_t seed = 1;
  int threads = 2;
  std::vector<Problem> starts;  // extra starts (the samples' worst), tried after the structured ones
  bool shrink = true;           // shrink a counterexample (false: Counterexample::problem is the one found)
};
struct Counterexample {
  Problem found;          // the input the search found wrong
  Problem problem;        // shrunk: digits zeroed while greedy decoding stays wrong
  double margin = 0;      // teacher-forced smallest margin of `problem`
  std::int64_t row = 0;   // where
  Instance::Greedy greedy;
};
struct AttackResult {
  std::int64_t evaluations = 0;
  double seconds = 0;
  double best_margin = 0;  // smallest teacher-forced margin seen
  Problem best;
  std::int64_t best_row = 0;
  bool found = false;      // a confirmed counterexample
  Counterexample cex;
};
AttackResult attack(const Instance& inst, const AttackOptions& opt);
// Zeroes digits one at a time (most significant first, operand by operand) while greedy decoding stays
// wrong, keeping one operand's leading digit when the input has one (so that `evaluate --problem`, which
// drops leading zeros, writes it in the same shape); each try one teacher-forced forward (a wrong row is
// a wrong greedy token), the result confirmed by greedy decoding (p itself if not).
Problem shrink(const Instance& inst, const Problem& p);

// The command (options -> stages -> report), callable in-process; returns the exit code.
int verify_learned_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace manyadd::learned
