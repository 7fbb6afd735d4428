// judge(): the one place that turns an engine's predictions into a verdict and an answer.
#include "manyadd/verify.hpp"

#include <algorithm>
#include <array>
#include <limits>

#include <fmt/format.h>

namespace manyadd {

static_assert(kVocab % 2 == 0, "judge() takes the best other logit two at a time");

void predict_from_logits(EngineResult& r) {
  const auto cols = std::size_t(r.logits.cols());
  r.pred.resize(cols);
  const double* x = r.logits.data();  // column-major: kVocab logits per column
  std::uint8_t* out = r.pred.data();
  for (std::size_t c = 0; c < cols; ++c, x += kVocab) {
    int best = 0;
    double top = x[0];
    for (int t = 1; t < kVocab; ++t) {  // branch-free: the winner is data, not control flow
      best = x[t] > top ? t : best;
      top = x[t] > top ? x[t] : top;
    }
    out[c] = std::uint8_t(best);
  }
}

Verdict judge(const EngineResult& r, const std::vector<std::uint8_t>& tokens, const Shape& shape, std::string_view reference) {
  const auto N = std::int64_t(tokens.size());
  const std::size_t count = r.pred.size();
  // Every response row evaluated: rows first .. N - 1 in order (rows are ascending and distinct).
  const bool every_row = r.first + std::int64_t(count) == N &&
                         (r.rows.empty() || (r.rows.front() == r.first && r.rows.back() == N - 1));
  MANYADD_INVARIANT(r.rows.empty() ? r.first + std::int64_t(count) <= N : r.rows.size() == count,
                    fmt::format("{}: {} predictions for {} rows of N = {}", r.engine, count, r.rows.size(), N));
  const bool has_logits = r.logits.size() > 0;
  MANYADD_INVARIANT(!has_logits || (r.logits.rows() == kVocab && std::size_t(r.logits.cols()) == count),
                    r.engine + ": logits do not match the predictions");
  Verdict v;
  double min_margin = r.margins ? r.margins->min : std::numeric_limits<double>::infinity();
  const std::int64_t first_not_positive = r.margins ? r.margins->first_not_positive : -1;
  const double* x = has_logits ? r.logits.data() : nullptr;  // column-major: kVocab logits per row
  for (std::size_t i = 0; i < count; ++i) {
    const std::int64_t j = r.row(i);
    const int expected = j + 1 < N ? tokens[std::size_t(j + 1)] : int(kDollar);
    int got = r.pred[i];
    bool wrong = got != expected;
    if (x) {
      const double* col = x + i * kVocab;
      // the best other logit: two independent running maxima (kVocab is even), the expected token
      // masked by the start value
      std::array<double, kVocab> o;
      std::copy(col, col + kVocab, o.begin());
      o[std::size_t(expected)] = -1e300;
      double even = -1e300, odd = -1e300;
      for (std::size_t t = 0; t < o.size(); t += 2) {
        even = std::max(even, o[t]);
        odd = std::max(odd, o[t + 1]);
      }
      const double other = std::max(even, odd);
      const double margin = col[expected] - other;
      min_margin = std::min(min_margin, margin);
      wrong = !(margin > 0);
      if (wrong && got == expected) {  // a tie: name the rival (the lowest other token at the maximum)
        got = 0;
        for (int t = kVocab - 1; t >= 0; --t)
          if (t != expected && col[t] == other) got = t;
      }
    } else if (j == first_not_positive) {
      wrong = true;
      if (got == expected) got = -1;
    }
    if (wrong && !v.mismatch) {
      v.ok = false;
      v.mismatch = Mismatch{j + 1, expected, got};
    }
  }
  v.min_margin = min_margin;
  // B_m's digits are predicted at N - l - 1 .. N - 2, least significant first: read them backwards.
  if (every_row) {
    std::string a;
    for (std::int64_t k = N - 2; k >= N - shape.l - 1; --k) a += token_char(r.pred[std::size_t(k - r.first)]);
    const auto nz = a.find_first_not_of('0');
    v.answer = nz == std::string::npos ? "0" : a.substr(nz);
    if (!reference.empty() && v.answer != reference) v.ok = false;
  }
  return v;
}

}  // namespace manyadd
