// Offset pairs that the proof cannot tell apart. Offsets enter part 1 only through the wrap of a
// "next" vector (v_{2^P + 1} = v_1; closed_form.hpp, proven by the whole claim's solver run for every
// offset pair whose IDs stay within [1, 2^P]): pairs with the same wrap case have the same matched
// keys at every position, so the certificate runs one structure pass per case and --exhaustive
// enumerates one pair per case, carrying its margins to the others when the unmatched keys' weights
// (the only difference at finite lambda) cannot move a logit that far.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "manyadd/format.hpp"
#include "manyadd/structured.hpp"

namespace manyadd {

using OffsetPair = std::pair<std::int64_t, std::int64_t>;

// Whether every position ID of the shape at (s1, s2) lies in [1, 2^P] (no aliasing).
bool ids_in_range(const Shape& s, int P1, int P2, std::int64_t s1, std::int64_t s2);
// The wrap case, keyed conservatively by both levels: an ID at 2^P together with a key at ID 1.
std::pair<bool, bool> wrap_case(const Shape& s, int P1, int P2, std::int64_t s1, std::int64_t s2);
// The offset pairs grouped by wrap case, in their first-seen order; pairs with aliasing IDs stand
// alone.
std::vector<std::vector<OffsetPair>> group_by_wrap_case(const Shape& s, int P1, int P2, const std::vector<OffsetPair>& offsets);

// For two attention matrices of the same shape (4 heads, rows = queries), per response query j >=
// first_row: a bound on how far the margin of ANY instance can move from one to the other. A head's
// output moves by at most vmax_h sum_i |A_h(j, i) - B_h(j, i)| (values in [0, 27] for heads 1-2, [0,
// 1] for heads 3-4), a logit by the feed-forward layer's Lipschitz sums sum_u |C_u,t| sum_c |w_u,c|
// |dy_c|, the margin by twice the largest logit move.
std::vector<double> margin_shift_bound(const CompiledFFN& F, const std::array<Eigen::MatrixXd, 4>& A,
                                       const std::array<Eigen::MatrixXd, 4>& B, std::int64_t first_row);

}  // namespace manyadd
