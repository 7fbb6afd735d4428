// One problem seen through two models in the browser: a self-contained HTML page (no network: the
// script, the style and the data are inline) that lays the sequence out as the task's structure
// (operands and partial sums in rows, digits aligned by significance, each token's position IDs on
// hover), shows each model's attention per head for a selected query on that layout, the head matching
// of compare_attention, and every response position's predicted token and margin in both models, the
// wrong ones marked. compare_attention --html writes it; the page's script and style are
// learn/src/analysis/attention_page.html, compiled in.
//
// Size: each query row keeps its top_k keys with weight >= min_weight (the rest of its mass is given as
// one number), so TA(10, 10) (252 tokens, 4 + 4 heads) stays below ~1 MB; the page says which keys it
// kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "manyadd/format.hpp"
#include "manyadd/learn/analysis/attention.hpp"

namespace manyadd::learn {

// One model's side of the page.
struct PageModel {
  std::string name;                      // shown as the panel's title
  AttentionMaps maps;                    // per head (T, T), row = query
  std::vector<double> logits;            // (T, vocab) row-major: the prediction at every index
  int vocab = kVocab;
  std::vector<std::string> head_roles;   // per head: the role it plays ("digit_sum", ...), "" for none
};

struct PageOptions {
  int top_k = 24;            // keys kept per query row
  double min_weight = 1e-3;  // keys below this weight are not kept
  void validate() const;     // throws InputError
};

// The layout of a TA sequence (construct's format): for each token its row (0: BOS; 1..m: A_1..A_m;
// m + 1 .. 2m + 1: B_0..B_m) and column (0..l-1: significance l..1, so digits align by significance;
// l: the separator of the row: '+' or '=' after A_i, '>' before B_j), and a label ("A_2[t=3]").
struct PageCell {
  int row = 0, col = 0;
  std::string label;
};
std::vector<PageCell> sequence_layout(const Shape& shape);

// The page's data (the schema the page's script reads): the problem, its tokens, position IDs and
// layout, each model's kept attention, predictions and margins at the response positions, and
// `matching` (compare_attention's report entries, shown as they are).
nlohmann::json attention_page_data(const Problem& p, const Shape& shape, std::int64_t s1, std::int64_t s2,
                                   const std::vector<std::uint8_t>& tokens, const std::vector<std::int32_t>& pos1,
                                   const std::vector<std::int32_t>& pos2, const std::vector<PageModel>& models,
                                   const nlohmann::json& matching, const PageOptions& opt);

// The page: the template with the data inlined (every "</" in it written "<\/", so no data closes the
// script element).
std::string attention_page_html(const nlohmann::json& data);

}  // namespace manyadd::learn
