// Theorem 4.1's whole claim for one built model: with P1, P2 and lambda fixed, greedy decoding is
// right for every shape the model serves, at every valid offset pair, for every digit input, in
// exact arithmetic and in the dense engine's float64 and float32 arithmetic.
//  Part 1, once for every shape and offset: the closed form of each head's matched keys
//    (closed_form.hpp), proven by an SMT solver against the built model's scores
//    (closed_form_smt.hpp); offsets enter only through the level-1 wrap at l = 2^P1 - 1.
//  Classes: the union of the response-position classes over all shapes, in closed form
//    (class_groups): O(2^P2) classes in a handful of groups.
//  Parts 2-3, once, at the largest N: every head's enclosure widens as its unmatched-key count u
//    grows (head_enclosure; a property test checks it), so the check with u = N_max covers every
//    shape with fewer tokens.
// Shape ranges that the paper's statement admits but that fail are reported with a concrete
// counterexample, confirmed by the dense (N <= 4000) or the exact row engine.
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "manyadd/certificate.hpp"
#include "manyadd/closed_form_smt.hpp"

namespace manyadd {

// l in [l_lo, l_hi], m in [m_lo, m_hi]; every offset pair s1 in [1, 2^P1 - l], s2 in [1, 2^P2 - m].
struct ShapeRange {
  std::int64_t l_lo = 1, l_hi = 0, m_lo = 1, m_hi = 0;
  bool empty() const { return l_hi < l_lo || m_hi < m_lo; }
};

// The union of the response-position classes of every shape and offset pair of `r` (which must
// start at l = m = 1 and allow offsets: l <= 2^P1 - 1, m <= 2^P2 - 1), in closed form from the
// closed-form counts x3 = 1 + m + i (t < l), x4 = 2 + [the next A block exists], and the wrap at
// l = 2^P1 - 1. A group's `origin` names the shapes it comes from; groups with origin starting
// "wrap" exist only at l = 2^P1 - 1.
std::vector<ClassGroup> class_groups(const ShapeRange& r, int P1, int P2);
// The hull of the classes of one kind and expected token over every shape with m in [a, b] (any
// width, no wrap): parts 2-3 check these boxes, halving m while one fails, so that each shape's own
// hull (the per-shape certificate's) lies in a checked box. The kinds present when l <= l_hi.
ClassBox class_box(int kind, int expect, std::int64_t a, std::int64_t b);
std::vector<std::pair<int, int>> claimed_kinds(std::int64_t l_hi);
// Largest N = (2m + 1)(l + 1) over the range.
std::int64_t max_tokens(const ShapeRange& r);

struct WholeClaimOptions {
  int P1 = 0, P2 = 0;
  double lambda = 0;        // 0: default_lambda of the claimed range's largest N
  int threads = 2;
  bool non_vacuity = true;  // the solver's witnesses and wrong key lists
  bool windows = true;      // lambda_min and the lambda windows (bisection)
  int sample_shapes = 2;    // per-shape certificates at random (shape, offset) pairs, besides the boundary ones
  std::int64_t sample_max_tokens = 50'000'000;  // samples above this N are skipped (and reported so)
  std::uint64_t seed = 1;
};

// One per-shape certificate on the whole claim's model: it must be proven wherever the whole
// claim is, with every margin at least the whole claim's (its enclosures use fewer unmatched keys).
struct ShapeSample {
  std::int64_t n = 0, m = 0, l = 0, s1 = 0, s2 = 0;
  std::string padding, why;  // why: "boundary" or "random"
  bool skipped = false;      // N above sample_max_tokens
  bool proven = false;
  std::array<double, 3> margin{};
  bool agrees = false;       // proven and every margin >= the whole claim's
  double seconds = 0;
};

struct LambdaWindow {
  bool empty = true;
  double lo = 0, hi = 0;  // hi = +infinity when no upper end was found below 1e12
};

struct ConfirmedCounterexample {
  std::int64_t n = 0, m = 0, l = 0, s1 = 0, s2 = 0;
  std::string padding, problem;
  std::int64_t position = 0;  // 1-based token whose prediction is wrong
  std::string expected, got;
  std::string engine;         // "dense" or "row"
  std::string command;        // a verify_construction command that reproduces it
};

struct FailingRange {
  std::string what;    // e.g. "l = 2^P1 - 1 = 1023"
  ShapeRange range;
  std::string reason;
  std::optional<ConfirmedCounterexample> counterexample;
};

struct WholeClaimResult {
  int P1 = 0, P2 = 0;
  double lambda = 0;
  ShapeRange admitted, claimed;           // admitted: the paper's dimension formula; claimed: proven
  std::array<std::int64_t, 4> n_max{};    // largest n at (theorem, m = 1), (theorem, m = m_hi), (minimal, m = 1), (minimal, m = m_hi)
  std::string pairs_covered;              // (shape, offset) pairs of the claimed range, exact
  double pairs_covered_approx = 0;
  std::int64_t n_tokens_max = 0;          // N of the largest claimed shape (the u bound of parts 2-3)
  std::int64_t classes = 0, groups = 0;   // the class union in closed form (class_groups)
  std::int64_t boxes = 0;                 // the boxes parts 2-3 checked (class_box, split in m)
  std::array<double, 3> margin{};         // real, float64, float32: exact minimum over the claimed range
  std::array<bool, 3> precision_ok{};
  double lambda_min = 0;                  // real arithmetic (bisection)
  std::array<LambdaWindow, 3> windows;    // real, float64, float32
  SmtReport smt;
  std::vector<FailingRange> failing;      // admitted shape ranges that fail
  std::vector<ShapeSample> samples;       // per-shape certificates in the claimed range
  bool samples_agree = true;
  bool proven = false;                    // the claimed range holds at lambda (every part, every precision)
  std::string reason;                     // why not, when !proven
  double seconds_part1 = 0, seconds_classes = 0, seconds_part23 = 0, seconds_windows = 0, seconds_confirm = 0, seconds_samples = 0,
         seconds = 0;
};

// InputError on P1 outside [2, 30], P2 outside [1, 30], P1 + P2 > 60, lambda < 0 (0: the default)
// or not finite, threads outside [1, 256], sample_shapes outside [0, 100000].
void check_whole_claim_options(const WholeClaimOptions& opt);
// Validates (check_whole_claim_options) before building anything.
WholeClaimResult whole_claim(const WholeClaimOptions& opt);

// How far the theorem holds in floating point: for P1 = P2 = P in [P_lo, P_hi], the claimed range's
// largest N, lambda_min and the lambda window of each precision (parts 2-3 only; part 1 is
// independent of lambda and proven by whole_claim).
struct WindowRow {
  int P = 0;
  std::int64_t n_tokens_max = 0;
  double lambda_min = 0;
  std::array<LambdaWindow, 3> windows;
};
// InputError unless 2 <= P_lo <= P_hi <= 30.
void check_window_table_range(int P_lo, int P_hi);
std::vector<WindowRow> lambda_window_table(int P_lo, int P_hi, int threads = 2);

// What verify_construction --whole-claim prints, and its JSON ({"whole_claim": ...} or
// {"lambda_windows_table": [...]}).
nlohmann::json whole_claim_json(const WholeClaimResult& r);
void print_whole_claim(std::ostream& out, const WholeClaimResult& r);
nlohmann::json window_table_json(const std::vector<WindowRow>& rows);
void print_window_table(std::ostream& out, const std::vector<WindowRow>& rows);

}  // namespace manyadd
