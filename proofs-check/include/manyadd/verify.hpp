// Judging one instance. One teacher-forced forward pass over the correct sequence decides whether
// greedy decoding solves it: the model is causal, so if every response position predicts the next
// correct token (and '$' after the last), greedy decoding reproduces the whole response by induction.
//
// Every engine (dense double/float, structured limit/finite, CUDA and its CPU twin, the exact row
// engine, the exhaustive enumeration) reports an EngineResult; judge() alone turns one into the
// verdict: the first failing response position, the smallest margin and the answer greedy decoding
// writes. Engines differ only in the margin evidence they can give (see EngineResult).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Dense>

#include "manyadd/format.hpp"
#include "manyadd/structured.hpp"

namespace manyadd {

// An engine's own summary of its margins when it keeps no logits (the structured engine computes
// every margin while streaming and keeps only these two numbers).
struct MarginSummary {
  double min = 0;                         // min over rows of logit[expected] - max other logit
  std::int64_t first_not_positive = -1;   // 0-based query index of the first row with margin <= 0
};

// What one engine says about one teacher-forced sequence.
struct EngineResult {
  std::string engine;                // "structured", "dense", "dense-float32", "cuda", "row", ...
  std::int64_t first = 0;            // 0-based index of the first response position ('=')
  std::vector<std::int64_t> rows;    // 0-based query indices evaluated, ascending, distinct; empty: first, first + 1, ...
  std::vector<std::uint8_t> pred;    // per evaluated row: the argmax (lowest index on ties)
  // Margin evidence, as the engine can give it (at most one of the two; neither: predictions only).
  Eigen::MatrixXd logits;                // (kVocab, rows): dense, row engine, exhaustive
  std::optional<MarginSummary> margins;  // structured
  // Extra per-row data for the cross-check.
  std::vector<std::array<double, 4>> heads;        // head outputs per evaluated row (row engine)
  std::vector<std::int64_t> interval_rows;         // rows of `intervals` (structured, finite mode)
  std::vector<std::array<Interval, 4>> intervals;  // finite-lambda head intervals at interval_rows

  std::int64_t row(std::size_t i) const { return rows.empty() ? first + std::int64_t(i) : rows[i]; }
};

struct Mismatch {
  std::int64_t position = 0;  // 1-based index (paper numbering) of the token whose prediction failed
  int expected = 0;           // token id at position + 1 ('$' after the last)
  int got = -1;               // the prediction; in a tie (margin 0, argmax = expected) the rival when
                              // the engine gives logits, else -1 ("tie")
};

struct Verdict {
  bool ok = true;                    // every evaluated row right, and the answer equals the reference
  double min_margin = 0;             // over evaluated rows; +infinity when the engine gives no margins
  std::optional<Mismatch> mismatch;  // the first failing row
  std::string answer;                // b_m as greedy decoding writes it; empty when not every row was evaluated
};
using InstanceResult = Verdict;

// A row fails when its margin is not positive (a tie counts: argmax would be ambiguous) or, for an
// engine without margins, when its prediction differs from the next token. With a non-empty
// `reference` (the sum in decimal) the answer must also equal it.
Verdict judge(const EngineResult& r, const std::vector<std::uint8_t>& tokens, const Shape& shape,
              std::string_view reference = {});

// pred[i] = argmax of logits column i (lowest index on ties).
void predict_from_logits(EngineResult& r);

// A (kVocab, N) logit matrix of a whole sequence (any Eigen scalar) as an EngineResult.
template <typename Logits>
EngineResult result_from_logits(std::string engine, const Logits& logits, std::int64_t first) {
  EngineResult r;
  r.engine = std::move(engine);
  r.first = first;
  r.logits = logits.rightCols(logits.cols() - first).template cast<double>();
  predict_from_logits(r);
  return r;
}

// The verdict on a (kVocab, N) logit matrix of `tokens` (no reference: the predictions alone).
template <typename Logits>
InstanceResult check_instance(const std::vector<std::uint8_t>& tokens, const Shape& shape, const Logits& logits) {
  return judge(result_from_logits("logits", logits, shape.eq_index()), tokens, shape);
}

}  // namespace manyadd
