// judge(): the one place that turns an engine's predictions into a verdict and an answer.
#include "manyadd/verify.hpp"

#include <limits>

#include <fmt/format.h>

namespace manyadd {

void predict_from_logits(EngineResult& r) {
  r.pred.resize(std::size_t(r.logits.cols()));
  for (Eigen::Index c = 0; c < r.logits.cols(); ++c) {
    int best = 0;
    for (int t = 1; t < kVocab; ++t)
      if (r.logits(t, c) > r.logits(best, c)) best = t;
    r.pred[std::size_t(c)] = std::uint8_t(best);
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
  v.min_margin = r.margins ? r.margins->min : std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < count; ++i) {
    const std::int64_t j = r.row(i);
    const int expected = j + 1 < N ? tokens[std::size_t(j + 1)] : int(kDollar);
    int got = r.pred[i];
    bool wrong = got != expected;
    if (has_logits) {
      double other = -1e300;
      int rival = 0;
      for (int t = 0; t < kVocab; ++t)
        if (t != expected && r.logits(t, Eigen::Index(i)) > other) {
          other = r.logits(t, Eigen::Index(i));
          rival = t;
        }
      const double margin = r.logits(expected, Eigen::Index(i)) - other;
      v.min_margin = std::min(v.min_margin, margin);
      wrong = !(margin > 0);
      if (got == expected) got = rival;
    } else if (r.margins && j == r.margins->first_not_positive) {
      wrong = true;
      if (got == expected) got = -1;
    }
    if (wrong && !v.mismatch) {
      v.ok = false;
      v.mismatch = Mismatch{j + 1, expected, got};
    }
  }
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
