// The digits of one addition shape as variables with domains, tied by the column constraints of the
// scratchpad: the tokens of `$ A_1 + ... + A_m = B_0 > B_1 > ... > B_m` (format.hpp) are the operand
// digits A_i[t] (the input, written most significant first), the partial-sum digits B_j[t] (written least
// significant first; B_0 = 0) and symbols; hidden carries c_j[t] link them:
//     B_{j-1}[t] + A_j[t] + c_j[t] = B_j[t] + 10 c_j[t+1]      (j = 1..m, t = 1..l; c_j[1] = c_j[l+1] = 0)
// t = 1 is the least significant digit. A domain is a bit mask (digits: bits 0..9; carries: bits 0..1).
// propagate() makes every column constraint arc-consistent (each value of each of its five variables has
// a support): it never removes a value that some input realizes, and when every operand digit is a
// single value it leaves exactly the partial sums and carries of that input (the column equations then
// determine everything, column by column). A domain that empties means no input realizes the others.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "manyadd/format.hpp"

namespace manyadd::learned {

using Domains = std::vector<std::uint16_t>;

inline int popcount16(std::uint16_t m) { return __builtin_popcount(unsigned(m)); }
inline int lowest_bit(std::uint16_t m) { return __builtin_ctz(unsigned(m)); }

class DigitVars {
 public:
  explicit DigitVars(const Shape& shape);  // shape.n digits of input per operand, shape.l written

  const Shape& shape() const { return shape_; }
  int vars() const { return vars_; }
  int A(int i, int t) const { return (i - 1) * l_ + (t - 1); }                      // i = 1..m, t = 1..l
  int B(int j, int t) const { return m_ * l_ + j * l_ + (t - 1); }                  // j = 0..m
  int carry(int j, int t) const { return m_ * l_ + (m_ + 1) * l_ + (j - 1) * (l_ + 1) + (t - 1); }  // t = 1..l+1
  bool is_carry(int v) const { return v >= m_ * l_ + (m_ + 1) * l_; }
  std::string name(int v) const;  // "A_3[2]", "B_1[4]", "c_2[3]"

  // The sequence: per position, its digit variable or -1 for a symbol (and the symbol's token).
  std::int64_t N() const { return std::int64_t(var_at_.size()); }
  std::int64_t eq() const { return shape_.eq_index(); }
  int var_at(std::int64_t pos) const { return var_at_[std::size_t(pos)]; }
  std::uint8_t symbol_at(std::int64_t pos) const { return sym_at_[std::size_t(pos)]; }
  std::int64_t position_of(int v) const { return pos_of_[std::size_t(v)]; }  // -1 for carries

  // Every domain full except the fixed ones: padding digits A_i[t] = 0 for t > n, B_0 = 0, c_j[1] = 0,
  // c_j[l+1] = 0; then propagated.
  Domains root() const;
  // Arc consistency of every column constraint; false when some domain empties.
  bool propagate(Domains& d) const;

  // The operands of an assignment whose operand digits are single values (most significant first, n
  // digits each, leading zeros kept).
  Problem problem_of(const Domains& d) const;
  // Narrows the propagated domains d to one input of the set: each operand digit still free fixed to its
  // lowest value that propagates, in order, without backtracking. true: every operand digit of d is then a
  // single value (problem_of reads the input). false: a free digit had no value that propagates (the set
  // may still hold inputs: arc consistency is not global); d is then left partly narrowed.
  bool narrow_to_one_input(Domains& d) const;
  // The domains of one input (every variable a single value), propagated.
  Domains of_problem(const Problem& p) const;

 private:
  Shape shape_;
  int n_, m_, l_, vars_;
  std::vector<int> var_at_;
  std::vector<std::uint8_t> sym_at_;
  std::vector<std::int64_t> pos_of_;
  bool revise(Domains& d, int j, int t, bool& changed) const;
};

}  // namespace manyadd::learned
