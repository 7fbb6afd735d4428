// The attention page's data and HTML: see attention_page.hpp.
#include "manyadd/learn/analysis/attention_page.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "manyadd/core/error.hpp"

// The page's script and style (attention_page.html), compiled in by learn/CMakeLists.txt.
extern "C" const char manyadd_attention_page_html[];

namespace manyadd::learn {

namespace {
double round_to(double v, double q) { return std::round(v / q) * q; }
}  // namespace

void PageOptions::validate() const {
  if (top_k < 1 || top_k > 4096) throw InputError(fmt::format("top_k must be in [1, 4096] (got {})", top_k));
  if (!(min_weight >= 0 && min_weight < 1)) throw InputError(fmt::format("min_weight must be in [0, 1) (got {})", min_weight));
}

std::vector<PageCell> sequence_layout(const Shape& shape) {
  const int m = shape.m, l = shape.l;
  std::vector<PageCell> cells(std::size_t(shape.N()));
  cells[0] = {0, l, "BOS '$'"};
  std::size_t k = 1;
  for (int i = 1; i <= m; ++i) {  // A_i: l digits, most significant first, then '+' or '='
    for (int j = 0; j < l; ++j) cells[k++] = {i, j, fmt::format("A_{}[t={}]", i, l - j)};
    cells[k++] = {i, l, i < m ? fmt::format("'+' after A_{}", i) : fmt::format("'=' after A_{}", m)};
  }
  for (int b = 0; b <= m; ++b) {  // B_b: '>' first (b >= 1), then l digits, least significant first
    if (b > 0) cells[k++] = {m + 1 + b, l, fmt::format("'>' before B_{}", b)};
    for (int t = 1; t <= l; ++t) cells[k++] = {m + 1 + b, l - t, fmt::format("B_{}[t={}]", b, t)};
  }
  MANYADD_INVARIANT(k == cells.size(), "sequence_layout covers the sequence");
  return cells;
}

namespace {

nlohmann::json page_model(const PageModel& pm, const std::vector<std::uint8_t>& tokens, std::int64_t eq,
                          const PageOptions& opt) {
  const int T = pm.maps.T;
  MANYADD_INVARIANT(T == int(tokens.size()), "attention maps of the sequence's length");
  MANYADD_INVARIANT(pm.logits.size() == std::size_t(T) * std::size_t(pm.vocab), "logits (T, vocab)");
  nlohmann::json heads = nlohmann::json::array();
  std::vector<std::int32_t> order;
  for (int h = 0; h < pm.maps.heads(); ++h) {
    const auto& A = pm.maps.maps[std::size_t(h)];
    nlohmann::json keys = nlohmann::json::array(), weights = nlohmann::json::array(), rest = nlohmann::json::array();
    for (int q = 0; q < T; ++q) {
      const float* row = A.data() + std::size_t(q) * std::size_t(T);
      order.resize(std::size_t(q) + 1);
      std::iota(order.begin(), order.end(), 0);
      const std::size_t kept = std::min(order.size(), std::size_t(opt.top_k));
      std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(kept), order.end(),
                        [&](std::int32_t a, std::int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      nlohmann::json kq = nlohmann::json::array(), wq = nlohmann::json::array();
      double listed = 0;
      for (std::size_t r = 0; r < kept && row[order[r]] >= opt.min_weight; ++r) {
        kq.push_back(order[r]);
        wq.push_back(float(round_to(row[order[r]], 1e-4)));
        listed += row[order[r]];
      }
      double total = 0;
      for (int k = 0; k <= q; ++k) total += row[k];
      keys.push_back(std::move(kq));
      weights.push_back(std::move(wq));
      rest.push_back(float(round_to(std::max(0.0, total - listed), 1e-4)));
    }
    heads.push_back({{"name", pm.maps.names[std::size_t(h)]},
                     {"role", h < int(pm.head_roles.size()) ? pm.head_roles[std::size_t(h)] : std::string()},
                     {"keys", std::move(keys)}, {"weights", std::move(weights)}, {"rest", std::move(rest)}});
  }
  // Teacher-forced predictions at the response positions: index j predicts token j + 1 ('$' after the last).
  nlohmann::json preds = nlohmann::json::array();
  for (std::int64_t j = eq; j < T; ++j) {
    const int want = j + 1 < T ? int(tokens[std::size_t(j + 1)]) : int(kDollar);
    const double* z = pm.logits.data() + std::size_t(j) * std::size_t(pm.vocab);
    int best = 0;
    for (int v = 1; v < pm.vocab; ++v)
      if (z[v] > z[best]) best = v;
    double other = -INFINITY;  // the best logit of another token than the wanted one
    for (int v = 0; v < pm.vocab; ++v)
      if (v != want) other = std::max(other, z[v]);
    preds.push_back({{"index", j}, {"expected", std::string(1, token_char(want))},
                     {"predicted", std::string(1, token_char(best))}, {"margin", z[want] - other}});
  }
  return {{"name", pm.name}, {"heads", std::move(heads)}, {"predictions", std::move(preds)}};
}

}  // namespace

nlohmann::json attention_page_data(const Problem& p, const Shape& shape, std::int64_t s1, std::int64_t s2,
                                   const std::vector<std::uint8_t>& tokens, const std::vector<std::int32_t>& pos1,
                                   const std::vector<std::int32_t>& pos2, const std::vector<PageModel>& models,
                                   const nlohmann::json& matching, const PageOptions& opt) {
  opt.validate();
  MANYADD_INVARIANT(std::int64_t(tokens.size()) == shape.N(), "tokens of the shape's length");
  const auto cells = sequence_layout(shape);
  nlohmann::json toks = nlohmann::json::array(), layout = nlohmann::json::array();
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    toks.push_back(std::string(1, token_char(tokens[k])));
    layout.push_back({cells[k].row, cells[k].col, cells[k].label});
  }
  nlohmann::json ms = nlohmann::json::array();
  for (const auto& pm : models) ms.push_back(page_model(pm, tokens, shape.eq_index(), opt));
  return {{"format", "manyadd attention page 1"},
          {"problem", p.to_string()},
          {"n", shape.n}, {"m", shape.m}, {"l", shape.l}, {"N", shape.N()}, {"eq_index", shape.eq_index()},
          {"s1", s1}, {"s2", s2},
          {"tokens", std::move(toks)}, {"pos1", pos1}, {"pos2", pos2}, {"layout", std::move(layout)},
          {"kept", {{"top_k", opt.top_k}, {"min_weight", opt.min_weight}}},
          {"models", std::move(ms)}, {"matching", matching}};
}

std::string attention_page_html(const nlohmann::json& data) {
  std::string js = data.dump();
  std::string safe;
  safe.reserve(js.size() + 64);
  for (std::size_t i = 0; i < js.size(); ++i) {
    if (js[i] == '<' && i + 1 < js.size() && js[i + 1] == '/') {
      safe += "<\\/";
      ++i;
    } else {
      safe += js[i];
    }
  }
  const std::string page = manyadd_attention_page_html;
  const std::string marker = "/*MANYADD_PAGE_DATA*/null";
  const auto at = page.find(marker);
  MANYADD_INVARIANT(at != std::string::npos, "the page template has its data marker");
  return page.substr(0, at) + safe + page.substr(at + marker.size());
}

}  // namespace manyadd::learn
