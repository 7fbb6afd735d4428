// Hard training problems for the addition tasks (train.hard_fraction): the cases random SA(n, m) almost
// never holds and a learned model gets wrong (bench/results/learned-worst-case: every committed decoder
// errs on TA(10, 10) inputs of these kinds while 1000 random samples are right).
//   cascade   one step of the scratchpad, partial sum P_t + operand t+1, carries through every column of
//             the operand: the lowest column's digits sum to 10 or more, every higher one to exactly 9
//             (the "use sum 9" cascade; the authors' generate_hard_carry_sum_pair, github.com/HanseulJo/
//             position-coupling src/data/addition.py, for two operands: here the operand is fitted to the
//             partial sum of any step, so many-operand problems get it too)
//   near_max  every digit 9 (a quarter of them: the maximal partial sums) or 9 and 5-8 at random
// Shape as SA's second chunk (format.hpp sample_SA): operand count uniform in [2, m], one length L uniform
// in [1, n] for every operand, no leading zero (L > 1). Two cascades in three, else near_max.
#pragma once

#include <cstdint>
#include <vector>

#include "manyadd/format.hpp"

namespace manyadd::learn {

enum class HardKind { cascade, near_max };
// One hard problem; kind (optional) receives which, step (optional) the cascade's step t >= 1 (operand t,
// 0-based, added to the partial sum of operands 0 .. t-1), -1 for near_max.
Problem sample_hard_addition(Rng& rng, int n, int m, HardKind* kind = nullptr, int* step = nullptr);
// Each problem of data replaced by a hard one with probability fraction, from a stream of its own (seed):
// the problems not replaced, and their order, are the plain training set's. Returns how many were replaced.
std::int64_t mix_hard_addition(std::vector<Problem>& data, double fraction, int n, int m, std::uint64_t seed);
// The longest run of columns through which a carry propagates at one step of the scratchpad (a column
// whose two digits sum to 9 with a carry arriving), over every step of p: the cascade's measure.
int longest_carry_run(const Problem& p);

}  // namespace manyadd::learn
