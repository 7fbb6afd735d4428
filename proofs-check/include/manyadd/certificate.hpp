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
//     (see certificate.cpp for every bound and its assumptions).
// The digit configurations over-approximate the reachable ones (all S, S' in 0..18, both carries),
// so "proven" is sound; a failure is reported with the position, the configuration and the margin,
// and the CLI then searches for a concrete instance that the dense or row engine confirms.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "manyadd/model.hpp"

namespace manyadd {

struct CertFailure {
  std::int64_t position = -1;  // 0-based query index (its prediction is the one at risk)
  std::string part;            // "structure" | "local" | "float64" | "float32"
  std::string reason;
  int S = -1, S2 = -1, carry = -1;  // the local configuration, when part 2/3 failed
  double margin = 0;
};

struct PrecisionMargin {
  std::string precision;  // "real", "float64", "float32"
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
};

// Certifies one shape at many offsets: the configuration tables (which depend on the model and
// the shape, not on the offsets) are built once. run() may be called from several threads.
class Certifier {
 public:
  Certifier(const ConstructedModel& M, const Shape& shape, const CertOptions& opt = {});
  ~Certifier();
  CertResult run(std::int64_t s1, std::int64_t s2) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

CertResult certify(const ConstructedModel& M, const Shape& shape, std::int64_t s1, std::int64_t s2,
                   const CertOptions& opt = {});

// An upper bound of e^{-2 lambda} as a double (MPFR, rounded up).
double exp_neg2_upper(double lambda);

}  // namespace manyadd
