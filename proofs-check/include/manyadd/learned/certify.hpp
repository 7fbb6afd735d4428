// The certificate of a one-layer learned decoder on one addition shape at fixed offsets: for every
// response row (the query at position i predicting token i + 1, EOS after the last) and every input of
// the shape, the fp32 forward's prediction is the right token -- or a failing input, or "unknown" when
// the budget ran out. Teacher-forced right at every row for every input implies greedy decoding right
// for every input (by induction over the rows).
//
// How (learn/README-style derivation in proofs-check/README.md, "The learned certificate"):
//  * Branch and bound over the digits (digits.hpp): a node is a set of inputs given by digit domains kept
//    arc-consistent with the column constraints. A node whose query and target tokens are single values is
//    bounded; one whose every key is a single value (a leaf: one input, realized by its operand digits) is
//    evaluated exactly.
//  * One layer: every key's score and value depend on its own token and position alone, so at a query
//    head h's output is (N0 + sum_j w_j(t_j) u_j(t_j)) / (D0 + sum_j w_j(t_j)) over the keys j with more
//    than one possible token t_j (independent choices: a superset of the realizable inputs), the rest in
//    N0, D0. Its extreme value along any direction is a linear-fractional maximum over independent choices,
//    exact by Dinkelbach's method (keys with the same position class, domain and bias share the choice).
//  * The attention output's box (per coordinate, summed over heads) enters the rest of the layer (residual,
//    RMSNorm, GEGLU FFN, RMSNorm, final RMSNorm, readout) as an affine form with one symbol per coordinate;
//    each nonlinear step adds a sound remainder (RMSNorm's Taylor remainder, GELU's |gelu''| <= 0.8, the
//    product's second-order term as fresh symbols); the margin's linear part is then minimised over the exact
//    attention set again by Dinkelbach, head by head.
//  * fp32: every step of the model's own fp32 forward (the reference, --device cpu: any summation order,
//    libm's expf/tanhf within 4 ulp, sqrtf correctly rounded) is enclosed by adding its rounding error,
//    bounded from the enclosure's magnitudes; the attention's fp32 error from the scores' and values'
//    rounding and the softmax. A row is proven when the lower bound exceeds kSlack.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "manyadd/core/progress.hpp"
#include "manyadd/learned/digits.hpp"
#include "manyadd/learned/net.hpp"

namespace manyadd::learned {

// The absolute margin a proven row keeps above every bound (covers the double arithmetic of the bounds
// themselves: relative 2^-53 per operation on magnitudes below 10^4).
inline constexpr double kSlack = 1e-6;

struct CertOptions {
  std::int64_t max_nodes = 1'000'000;  // per row
  double seconds = 0;                  // wall-clock budget of the whole certificate (0: none)
  int threads = 2;
  double bound_radius = 0.1;           // bound a node only when its estimated box radius (L2) is below this
  bool fp32 = true;                    // cover the fp32 forward's rounding; false: the model in real arithmetic
};

enum class RowStatus { proven, failing, unknown };
const char* row_status_name(RowStatus s);

struct RowResult {
  std::int64_t row = 0;     // query position (predicts row + 1; EOS after the last)
  RowStatus status = RowStatus::unknown;
  std::int64_t nodes = 0, leaves = 0, bounded = 0, pruned = 0;
  double min_bound = 0;     // smallest lower bound of a proven node (proven rows); the failing margin otherwise
  double min_exact = 0;     // smallest exact margin over the inputs evaluated one by one (+inf when none)
  std::string why;          // unknown: what ran out
  Problem witness;          // failing: the input whose exact margin at this row is not above the fp32 bound
  double witness_margin = 0;  // its exact (real-arithmetic) margin
};

// The fp32 allowances of a shape (what rounding can move), reported beside the verdict.
struct Fp32Allowance {
  double score_error = 0;    // |fl(score) - score| at most
  double softmax_rel = 0;    // |fl(p) - p| <= softmax_rel p
  double attn_error = 0;     // largest coordinate of the attention output's error bound
};

struct CertResult {
  RowStatus status = RowStatus::unknown;  // proven: every row proven; failing: some row has a failing input
  std::vector<RowResult> rows;
  Fp32Allowance fp32;
  double seconds = 0;
  std::int64_t nodes = 0;
};

// The certificate at offsets (s1, s2) whose position IDs are `pos` (Net::positions). Rows in parallel
// (threads), each stopping at its first failing input. `progress` may be null.
CertResult certify_shape(const OneLayer& w, const DigitVars& dv, const Positions& pos, const CertOptions& opt,
                         const ProgressOptions& progress);

// The exact (real-arithmetic) margins of one input at one row and the bound the fp32 forward's margins
// may differ by: the certificate's leaf evaluation, exposed for tests (the fp32 margins must lie within).
struct LeafEval {
  int target = 0;               // the right token at this row
  std::vector<double> margin;   // V: logit(target) - logit(o) in exact arithmetic (0 at the target)
  std::vector<double> error;    // V: |fp32 margin - exact margin| at most
};
LeafEval evaluate_leaf(const OneLayer& w, const DigitVars& dv, const Positions& pos, const Problem& p, std::int64_t row,
                       bool fp32 = true);

// The certificate's lower bound of the margin at `row` over the inputs of the domains `d` (propagated; its
// query and target tokens single values): the set bound of the branch and bound, or the leaf's when every key
// is a single value. -inf when no bound (the enclosure too wide). Exposed for tests: it must never exceed the
// fp32 margin of an input of the set.
double bound_inputs(const OneLayer& w, const DigitVars& dv, const Positions& pos, const Domains& d, std::int64_t row);

}  // namespace manyadd::learned
