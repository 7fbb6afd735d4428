// Verifying one instance: one teacher-forced forward pass over the correct sequence decides
// whether greedy decoding solves it (construction-notes.md: the model is causal, so if every
// response position predicts the next correct token, and '$' after the last, greedy decoding
// reproduces the whole response by induction).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "manyadd/format.hpp"

namespace manyadd {

struct Mismatch {
  std::int64_t position = 0;  // 1-based index (paper numbering) of the token whose prediction failed
  int expected = 0, got = 0;  // token ids; expected is the token at position + 1 ('$' after the last)
};

struct InstanceResult {
  bool ok = true;
  double min_margin = 0;             // min over response positions of logit[expected] - max other
  std::optional<Mismatch> mismatch;  // the first failing response position
  std::string answer;                // b_m read from the predictions (what greedy decoding outputs)
};

// Checks the predictions at every response position k >= eq_index of a (14, N) logit matrix.
// A tie for the maximum counts as a failure (margin 0): argmax would be ambiguous.
template <typename Logits>
InstanceResult check_instance(const std::vector<std::uint8_t>& tokens, const Shape& shape, const Logits& logits) {
  InstanceResult r;
  const auto N = std::int64_t(tokens.size());
  r.min_margin = 1e300;
  std::string answer_rev;
  for (std::int64_t k = shape.eq_index(); k < N; ++k) {
    const int expected = k + 1 < N ? tokens[std::size_t(k + 1)] : int(kDollar);
    double best_other = -1e300;
    int argmax = 0, other = 0;
    double best = -1e300;
    for (int t = 0; t < kVocab; ++t) {
      const double v = double(logits(t, k));
      if (v > best) {
        best = v;
        argmax = t;
      }
      if (t != expected && v > best_other) {
        best_other = v;
        other = t;
      }
    }
    const double margin = double(logits(expected, k)) - best_other;
    r.min_margin = std::min(r.min_margin, margin);
    if (k >= N - shape.l - 1 && k < N - 1) answer_rev += token_char(argmax);  // predictions of B_m's digits
    if (!(margin > 0) && !r.mismatch) {
      r.ok = false;
      r.mismatch = Mismatch{k + 1, expected, argmax == expected ? other : argmax};  // a tie names the rival
    }
  }
  // B_m as greedy decoding writes it (reversed, padded): the answer a user reads.
  std::string a(answer_rev.rbegin(), answer_rev.rend());
  const auto i = a.find_first_not_of('0');
  r.answer = i == std::string::npos ? "0" : a.substr(i);
  return r;
}

}  // namespace manyadd
