// The certificate: for a shape (n, m), offsets (s1, s2) and a model, a proof that greedy decoding
// is correct for EVERY digit input of the shape, in three parts.
//  1. Structure. For every response position and head, the matched keys (top score) follow from
//     position IDs alone; we compute them with the structured stream (no digits) and check what
//     the proof needs: head 1 at the query predicting B_i's digit t+1 matches exactly A_i[t+1] and
//     B_{i-1}[t+1] (x = 3); head 2 exactly A_i[t] and B_{i-1}[t] (or only separators at t = 0);
//     B_0's queries match only separators. Heads 3-4 need nothing: their counts enter part 2.
//  2. Local tables. Each response position is reduced to a class (its kind, its head-3/4 counts,
//     its worst unmatched counts); each class is checked for every local digit configuration
//     (S = a_i[t+1] + b_{i-1}[t+1], S' = a_i[t] + b_{i-1}[t], carry c into significance t) with
//     the finite-lambda head intervals, exactly, in rational arithmetic: the feed-forward layer
//     splits into groups of hidden units reading disjoint inputs (checked), so the minimum margin
//     over the input box is a sum of 1-D piecewise-linear minima (end points and kinks).
//  3. Floating point. The same check with the head intervals widened by a rounding-error model
//     of the dense engine's float64 / float32 arithmetic and the FFN/readout rounding subtracted
//     (see certificate.cpp for every bound and its assumptions); on request (CertOptions::kernel)
//     also of the CUDA program: the tensor-core attention kernel's float32 arithmetic
//     (kernel_rounding.hpp) and the host's double FFN + readout, precision "float32-cuda".
// The digit configurations over-approximate the reachable ones (all S, S' in 0..18, both carries),
// so "proven" is sound; a failure is reported with the position, the configuration and the margin,
// and the CLI then searches for a concrete instance that the dense or row engine confirms.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/multiprecision/gmp.hpp>

#include "manyadd/kernel_rounding.hpp"
#include "manyadd/model.hpp"

namespace manyadd {

struct CertFailure {
  std::int64_t position = -1;  // 0-based query index (its prediction is the one at risk)
  std::string part;            // "structure" | "local" | "float64" | "float32" | "float32-cuda"
  std::string reason;
  int S = -1, S2 = -1, carry = -1;  // the local configuration, when part 2/3 failed
  double margin = 0;
};

struct PrecisionMargin {
  std::string precision;  // "real", "float64", "float32", "float32-cuda"
  double min_margin = 0;  // exact (rational) minimum, rounded to double for the report
  bool proven = false;
};

struct CertResult {
  bool proven = false;     // all parts, all precisions asked
  double min_margin = 0;   // real-arithmetic minimum margin at the model's lambda
  double lambda_min = 0;   // smallest common lambda for which parts 1-2 hold (bisection, 1e-3 rel.)
  std::int64_t positions = 0, classes = 0;
  std::vector<PrecisionMargin> margins;
  std::optional<CertFailure> failure;  // the first failure (smallest position)
  std::vector<std::int64_t> risky_positions;  // positions whose class failed (up to 16), for search
  double seconds = 0;
};

struct CertOptions {
  bool floating_point = true;  // part 3 (float64 and float32)
  bool lambda_min = true;      // compute lambda_min
  bool share_offsets = true;   // one structure pass per wrap case, not per offset pair (see run())
  // part 3 also for the CUDA program (precision "float32-cuda"): the tensor-core attention kernel's
  // rounding model (kernel_rounding.hpp) and the host's double FFN + readout
  bool kernel = false;
  // the kernel's rounding model per head; empty: kernel_rounding(M, h, qkv_plan(M).D) (tests pass a
  // widened one)
  std::optional<std::array<KernelRounding, 4>> kernel_model{};
};

// Certifies one shape at many offsets: the configuration tables (which depend on the model and
// the shape, not on the offsets) are built once. run() may be called from several threads.
class Certifier {
 public:
  Certifier(const ConstructedModel& M, const Shape& shape, const CertOptions& opt = {});
  ~Certifier();
  // The certificate at (s1, s2). Offset pairs of one wrap case share one structure pass and its
  // result (CertOptions::share_offsets; certificate.cpp says why that is sound).
  CertResult run(std::int64_t s1, std::int64_t s2) const;
  std::int64_t structure_passes() const;  // structure passes run so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

CertResult certify(const ConstructedModel& M, const Shape& shape, std::int64_t s1, std::int64_t s2,
                   const CertOptions& opt = {});

// An upper bound of e^{-2 lambda} as a double (MPFR, rounded up).
double exp_neg2_upper(double lambda);

// ---- The certificate's parts as building blocks (the whole claim, whole_claim.hpp, joins them) ----

// What a response position predicts: a digit of B_i (i >= 1) at significance t + 1 >= 3, = 2, = 1
// (the query is the separator before B_i), a digit of B_0, or '>' / '$' (the query is a most
// significant digit).
enum PositionKind : int { kDigitT2 = 0, kDigitT1, kDigitSep, kDigitB0, kMsd, kPositionKinds };
const char* position_kind_name(int kind);

// Part 1's output for one shape and offset pair: its classes of response positions. A class is
// (kind, expected token for kMsd, x3, x4) with x3, x4 the matched keys of heads 3 and 4, BOS
// included, and the most unmatched keys of heads 3-4 over its positions.
struct ResponseClass {
  int kind = 0, expect = -1;
  std::int64_t x3 = 0, x4 = 0, u3 = 0, u4 = 0;
  std::int64_t first = -1, count = 0;  // first 0-based position, number of positions
};
struct ResponseStructure {
  std::vector<ResponseClass> classes;  // sorted by (kind, expect, x3, x4)
  std::int64_t u1 = 0, u2 = 0, positions = 0;
  std::optional<CertFailure> failure;  // heads 1-2 do not match what part 2 needs
};
ResponseStructure response_structure(const Shape& shape, std::int64_t s1, std::int64_t s2, int P1, int P2);

// A group of classes: one kind and expected token, one x4, and x3 over an arithmetic progression
// x3_lo, x3_lo + x3_step, ..., x3_hi. Parts 2-3 check one enclosure valid for every x3 of the
// group (head_enclosure with x_hi), then split the group when it fails.
struct ClassGroup {
  int kind = 0, expect = -1;
  std::int64_t x3_lo = 1, x3_hi = 1, x3_step = 1, x4 = 1;
  std::string origin;  // where in the closed form the group comes from
  std::int64_t size() const { return x3_hi < x3_lo ? 0 : (x3_hi - x3_lo) / x3_step + 1; }
};

// A box of classes: one kind and expected token, x3 in [x3_lo, x3_hi], x4 in [x4_lo, x4_hi]. Its
// enclosures hold every class inside it, so a per-shape certificate, which takes one hull over a
// shape's classes of one kind, has margins at least a box's that holds them.
struct ClassBox {
  int kind = 0, expect = -1;
  std::int64_t x3_lo = 1, x3_hi = 1, x4_lo = 1, x4_hi = 1;
};

// Parts 2-3 for classes whose unmatched-key counts are all at most `ubound`, at the model's
// lambda. Every head's enclosure only widens as u grows (head_enclosure), so one check at the
// largest count covers every shape with fewer tokens.
class ClassCertifier {
 public:
  ClassCertifier(const ConstructedModel& M, std::int64_t ubound, bool floating_point = true);
  ~ClassCertifier();
  struct Verdict {
    std::array<double, 3> margin{};  // real, float64, float32: exact minimum margin, rounded to double
    std::array<bool, 3> ok{};        // margin > 0 (floating point: after the FFN/readout rounding)
    int failing_group = -1;          // which group fails (real arithmetic first)
    std::int64_t failing_x3 = -1;    // its smallest failing x3 (-1: only a hull over several fails)
    std::string reason;              // what fails there
  };
  // Exact (rational) margins of a set of groups, merged as the per-shape certifier merges a
  // shape's classes (one hull per kind and expected token), so that every shape's certificate has
  // margins at least these; when a merged hull fails, group by group. Failing groups are split
  // down to single classes to name the first failing one.
  Verdict check(const std::vector<ClassGroup>& gs) const;
  Verdict check(const ClassGroup& g) const;
  // Whether every group holds at scale lambda (every head) in precision p (0 real, 1 float64,
  // 2 float32), in double with outward-rounded exponentials: for bisecting lambda windows (a
  // report; the proof is check() at the model's lambda).
  bool holds(const std::vector<ClassGroup>& gs, double lambda, int precision) const;
  // One box: exact margins at the model's lambda (real, float64, float32), or the margin in double
  // at scale lambda in one precision (for bisection).
  std::array<double, 3> box_margins(const ClassBox& b, std::array<bool, 3>& ok) const;
  double box_margin_at(const ClassBox& b, double lambda, int precision) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The enclosure of a head's output that parts 2-3 use, exactly: vsum = summed value of the x
// matched keys (BOS included), u unmatched keys with values in [0, vmax]; precision 0 real, 1
// float64, 2 float32 (the dense engine's program with the model's own lambda_h and d_qk), 3
// float32-cuda (the tensor-core kernel's program, kernel_rounding.hpp). With
// x_hi > x: one enclosure for every matched count in [x, x_hi] (what a class group's hull uses; in
// floating point the enclosure is not monotone in x, so this is not the x and x_hi ends' hull).
// Every enclosure widens as u grows: lo never rises, hi never falls.
struct ExactInterval {
  boost::multiprecision::mpq_rational lo, hi;
};
ExactInterval head_enclosure(const ConstructedModel& M, int head, int precision, std::int64_t vsum, std::int64_t x,
                             std::int64_t u, int vmax, std::int64_t x_hi = 0);

// The enclosure parts 2-3 use for head 1 or 2 (head 0 or 1) where part 1 bounds only its matched
// count, by head12_max_keys() keys (BOS, value 0, included): at the query of a most significant
// digit (the '>' / '$' prediction; the other keys' values in [0, 27]) or where the head matches
// separators only (separators_only: B_0's digits, head 2 at a separator). Floating point: the hull
// of head_enclosure over those counts and sums, so a computed average may exceed 27 by the
// rounding the precision's model allows; real arithmetic: within [0, 27].
ExactInterval unpinned_head_enclosure(const ConstructedModel& M, int head, int precision, std::int64_t u, bool separators_only);
// The most keys head 1 or 2 matches at any query, BOS included (closed::max_matched_keys); part 1
// of the per-shape certificate fails where a query exceeds it.
std::int64_t head12_max_keys();

}  // namespace manyadd
