// compare_attention: which learned head plays which constructed head's role, in numbers.
// On the same TA(n, m) instances and offsets, the learned model's averaged attention per head is
// scored against each head of the constructed model of Theorem 4.1 (construct/, minimal padding as
// the learned format): the share of the non-BOS attention on the constructed head's matched keys,
// the BOS mass, a Jensen-Shannon divergence, the chance level; then a best one-to-one matching.
// Definitions: learn/include/manyadd/learn/analysis/attention.hpp and learn/README.md.
//   compare_attention --learned DIR --n 11 --m 11 --samples 1000          one shape: table, PNGs, JSON
//   compare_attention --learned DIR --grid --samples 20                   per TA cell: alignment | accuracy
// Files go to --out (default compare_TA<n>x<m> or compare_grid in the current directory); with --grid,
// progress (cells, ETA) on stderr unless --quiet.
// `--learned constructed` compares the construction with itself (a sanity check: every matched share
// is 1 up to the finite lambda). Exit codes: 0 done, 2 bad usage or input, 3 internal error.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/learn/analysis/attention.hpp"
#include "manyadd/learn/analysis/attention_page.hpp"
#include "manyadd/core/cli.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/core/progress.hpp"
#include "manyadd/core/report.hpp"
#include "manyadd/learn/cli/cli_common.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/analysis/plot.hpp"
#include "manyadd/learn/tasks/task.hpp"

using namespace manyadd;
using namespace manyadd::learn;

namespace {

struct Args {
  std::string learned, out, json_path, task, html, problem, counterexample;
  int top_k = 24;
  int n = 11, m = 11, threads = 2;
  int n_min = 1, n_max = 30, m_min = 2, m_max = 30;
  bool grid = false, quiet = false;
  double lambda = 0;
  std::int64_t samples = 1000, s1 = 1, s2 = 1;
  std::uint64_t seed = 12345;
};

bool self_mode(const Args& a) { return a.learned == "constructed"; }

// --counterexample: the problem (its operands zero-padded to the shape's n), shape and offsets of a
// verify_learned JSON report's counterexample (a grid report: its first refuted cell's).
void take_counterexample(Args& a) {
  const nlohmann::json rep = read_json_file(a.counterexample);
  const std::string what = fmt::format("--counterexample {}", a.counterexample);
  if (!rep.is_object() || !rep.contains("manyadd") || !rep["manyadd"].is_object() ||
      rep["manyadd"].value("tool", std::string()) != "verify_learned")
    throw InputError(fmt::format("{}: not a verify_learned report", what));
  std::string problem;
  std::int64_t n = 0;
  try {
    if (rep.contains("cells")) {
      for (const auto& c : rep.at("cells"))
        if (c.contains("counterexample")) {
          problem = c.at("counterexample").get<std::string>();
          n = c.at("n").get<std::int64_t>();
          break;
        }
    } else if (rep.contains("counterexample") && rep["counterexample"].is_object()) {
      problem = rep["counterexample"].at("problem").get<std::string>();
      n = rep.at("shape").at("n").get<std::int64_t>();
      if (rep.contains("offsets")) {
        a.s1 = rep["offsets"].value("s1", std::int64_t(1));
        a.s2 = rep["offsets"].value("s2", std::int64_t(1));
      }
    }
  } catch (const nlohmann::json::exception&) {
    throw InputError(fmt::format("{}: a counterexample without its problem, shape or offsets", what));
  }
  if (problem.empty()) throw InputError(fmt::format("{}: the report has no counterexample", what));
  Problem p = parse_problem(problem);
  if (n < p.max_digits() || n > 1000) throw InputError(fmt::format("{}: shape n = {} does not hold {}", what, n, problem));
  for (auto& o : p.operands) o.insert(0, std::size_t(n) - o.size(), '0');
  a.problem.clear();
  for (const auto& o : p.operands) a.problem += (a.problem.empty() ? "" : "+") + o;
}

// One shape: the learned (or constructed) maps, the constructed maps and matches, the comparison.
struct ShapeRun {
  Shape shape;
  ConstructedSetup cs;
  std::vector<Problem> probs;
  AttentionMaps learned, constructed;
  MatchedKeys M;
  Comparison cmp;
  std::int64_t exact = -1;  // learned exact matches (teacher-forced) on the same instances; -1 in self mode
};

ShapeRun run_shape(const Args& a, const LoadedModel* lm, int n, int m) {
  ShapeRun r;
  r.shape = Shape::make(n, m, Padding::minimal);
  r.cs = constructed_setup(n, m, a.s1, a.s2, a.lambda);
  Rng rng(cell_seed(a.seed, n, m));  // the same instances as evaluate and dump_attention
  for (std::int64_t i = 0; i < a.samples; ++i) r.probs.push_back(sample_TA(rng, n, m));
  r.constructed = constructed_attention(r.cs, r.probs[0], a.s1, a.s2);
  r.M = constructed_matches(r.cs, a.s1, a.s2);
  if (lm) r.learned = learned_attention(*lm, r.probs, a.s1, a.s2, a.threads, &r.exact);
  else r.learned = r.constructed;
  r.cmp = compare_maps(r.learned, r.constructed, r.shape.eq_index(), r.M, r.shape.l + 1);
  return r;
}

Image vstack(const std::vector<Image>& rows) {
  int w = 0, h = 0;
  for (const auto& im : rows) w = std::max(w, im.w), h += im.h;
  Image out(w, h);
  int y = 0;
  for (const auto& im : rows) out.blit(im, 0, y), y += im.h;
  return out;
}

std::string pct(double v) { return std::isnan(v) ? "NA" : fmt::format("{:.1f}%", 100 * v); }

// --html: the page of one problem (--problem, else the first sample) through both models, with the
// matching of the samples' averaged maps.
void write_page(const Args& a, const LoadedModel* lm, const ShapeRun& r, const nlohmann::json& matching) {
  const Problem p = a.problem.empty() ? r.probs[0] : parse_problem(a.problem);
  std::vector<std::int32_t> p1, p2;
  position_ids_for(r.shape, PosMode::coupled, a.s1, a.s2, p1, p2);
  std::vector<PageModel> models;
  if (lm) {
    PageModel L;
    L.name = fmt::format("learned: {}", a.learned);
    L.maps = learned_attention(*lm, {p}, a.s1, a.s2, 1);
    L.logits = learned_logits(*lm, p, a.s1, a.s2);
    L.vocab = lm->cfg.vocab;
    L.head_roles.assign(std::size_t(L.maps.heads()), "");
    for (auto [g, h] : r.cmp.matching) L.head_roles[std::size_t(g)] = kConstructedHeadNames[std::size_t(h)];
    models.push_back(std::move(L));
  }
  PageModel C;
  C.name = fmt::format("constructed: Theorem 4.1 (P1 = {}, P2 = {}, lambda = {:g})", r.cs.P1, r.cs.P2, r.cs.lambda);
  C.maps = constructed_attention(r.cs, p, a.s1, a.s2);
  C.logits = constructed_logits(r.cs, p, a.s1, a.s2);
  for (const char* h : kConstructedHeadNames) C.head_roles.push_back(h);
  models.push_back(std::move(C));
  PageOptions po;
  po.top_k = a.top_k;
  const nlohmann::json data = attention_page_data(p, r.shape, a.s1, a.s2, build_sequence(p, r.shape), p1, p2, models,
                                                  matching, po);
  atomic_write(a.html, attention_page_html(data));
  std::printf("wrote %s (%s)\n", a.html.c_str(), p.to_string().c_str());
}

int run_single(const Args& a, const LoadedModel* lm) {
  const ShapeRun r = run_shape(a, lm, a.n, a.m);
  const auto& c = r.cmp;
  const int G = r.learned.heads(), T = r.learned.T;
  make_output_dir(a.out);
  // Both models' maps in dump_attention's format.
  std::vector<std::int32_t> p1, p2;
  position_ids_for(r.shape, PosMode::coupled, a.s1, a.s2, p1, p2);
  const auto toks = build_sequence(r.probs[0], r.shape);
  write_attention_dir(a.out + "/constructed", r.constructed, r.shape, a.s1, a.s2, a.samples, toks, p1, p2,
                      {{"model", "constructed"}, {"P1", std::to_string(r.cs.P1)}, {"P2", std::to_string(r.cs.P2)},
                       {"lambda", fmt::format("{}", r.cs.lambda)}});
  if (lm) {
    const Example ex = make_example(r.probs[0], lm->cfg, a.s1, a.s2);
    write_attention_dir(a.out + "/learned", r.learned, r.shape, a.s1, a.s2, a.samples, toks, ex.pos[0], ex.pos[1],
                        {{"model", a.learned}});
  }
  // Side by side, one row per matched pair: constructed head | learned head (same axes, < 0.01 black).
  const int scale = T < 64 ? 6 : T < 256 ? 2 : 1;
  std::vector<Image> rows;
  for (std::size_t k = 0; k < c.matching.size(); ++k) {
    const auto [g, h] = c.matching[k];
    const std::string ct = fmt::format("CONSTRUCTED HEAD {} ({})", h + 1, kConstructedHeadNames[std::size_t(h)]);
    const std::string lt = fmt::format("{} {}  SHARE {:.3f}", lm ? "LEARNED" : "SELF", r.learned.names[std::size_t(g)],
                                       c.share[std::size_t(g)][std::size_t(h)]);
    Image row = side_by_side({{ct, attention_image(r.constructed.maps[std::size_t(h)], T, scale)},
                              {lt, attention_image(r.learned.maps[std::size_t(g)], T, scale)}});
    write_png(fmt::format("{}/side_by_side_{}.png", a.out, kConstructedHeadNames[std::size_t(h)]), row);
    rows.push_back(std::move(row));
  }
  write_png(a.out + "/side_by_side.png", vstack(rows));

  // The table.
  std::printf("compare_attention: %s vs the constructed model (P1 = %d, P2 = %d, lambda = %g) on %lld samples of "
              "TA(%d, %d), N = %d, offsets (%lld, %lld), %lld response rows\n",
              lm ? a.learned.c_str() : "the constructed model", r.cs.P1, r.cs.P2, r.cs.lambda,
              static_cast<long long>(a.samples), a.n, a.m, T, static_cast<long long>(a.s1),
              static_cast<long long>(a.s2), static_cast<long long>(T - c.eq_index));
  if (r.exact >= 0)
    std::printf("learned model's exact match on these instances (teacher-forced): %lld / %lld = %s\n",
                static_cast<long long>(r.exact), static_cast<long long>(a.samples),
                pct(double(r.exact) / double(a.samples)).c_str());
  std::printf("\nshare of each learned head's non-BOS attention on the constructed head's matched keys "
              "(JS divergence in bits in brackets)\n");
  std::printf("%-18s", "head");
  for (int h = 0; h < 4; ++h) std::printf(" %20s", fmt::format("{} {}", h + 1, kConstructedHeadNames[std::size_t(h)]).c_str());
  std::printf(" %8s\n", "BOS");
  for (int g = 0; g < G; ++g) {
    std::printf("%-18s", r.learned.names[std::size_t(g)].c_str());
    for (int h = 0; h < 4; ++h)
      std::printf(" %20s", fmt::format("{:.3f} [{:.2f}]", c.share[std::size_t(g)][std::size_t(h)],
                                       c.js[std::size_t(g)][std::size_t(h)]).c_str());
    std::printf(" %8.3f\n", c.bos_learned[std::size_t(g)]);
  }
  std::printf("%-18s", "chance (uniform)");
  for (int h = 0; h < 4; ++h) std::printf(" %20.4f", c.chance[std::size_t(h)]);
  std::printf("\n%-18s", "constructed BOS");
  for (int h = 0; h < 4; ++h) std::printf(" %20.3f", c.bos_constructed[std::size_t(h)]);
  std::printf("\n%-18s", "rows with keys");
  for (int h = 0; h < 4; ++h) std::printf(" %20lld", static_cast<long long>(c.rows[std::size_t(h)]));
  std::printf("\n\nbest one-to-one matching (smallest summed JS divergence):\n");
  for (auto [g, h] : c.matching) {
    const double s = c.share[std::size_t(g)][std::size_t(h)], ch = c.chance[std::size_t(h)];
    std::printf("  constructed head %d (%-9s) <- %-16s share %.3f (%.0fx chance), JS %.3f bits, BOS %.3f (constructed %.3f)\n",
                h + 1, kConstructedHeadNames[std::size_t(h)], r.learned.names[std::size_t(g)].c_str(), s,
                ch > 0 ? s / ch : 0.0, c.js[std::size_t(g)][std::size_t(h)], c.bos_learned[std::size_t(g)],
                c.bos_constructed[std::size_t(h)]);
  }
  std::printf("share of each matched pair by partial sum B_0 .. B_%d (rows '=' or '>' + the digits of B_k):\n", a.m);
  for (std::size_t k = 0; k < c.matching.size(); ++k) {
    std::printf("  %-9s", kConstructedHeadNames[std::size_t(c.matching[k].second)]);
    for (double v : c.matched_block_share[k]) std::printf(std::isnan(v) ? "    --" : " %5.2f", v);
    std::printf("\n");
  }
  std::printf("mean matched share %.3f\nwrote %s/{side_by_side*.png, constructed/, %scompare.json}\n",
              c.mean_matched_share, a.out.c_str(), lm ? "learned/, " : "");

  nlohmann::json heads = nlohmann::json::array();
  for (int g = 0; g < G; ++g) {
    nlohmann::json row = {{"name", r.learned.names[std::size_t(g)]}, {"bos", c.bos_learned[std::size_t(g)]}};
    for (int h = 0; h < 4; ++h)
      row["vs"][kConstructedHeadNames[std::size_t(h)]] = {{"share", c.share[std::size_t(g)][std::size_t(h)]},
                                                          {"js_bits", c.js[std::size_t(g)][std::size_t(h)]}};
    heads.push_back(row);
  }
  nlohmann::json cons = nlohmann::json::array(), matching = nlohmann::json::array();
  for (int h = 0; h < 4; ++h)
    cons.push_back({{"head", h + 1}, {"name", kConstructedHeadNames[std::size_t(h)]},
                    {"chance", c.chance[std::size_t(h)]}, {"bos", c.bos_constructed[std::size_t(h)]},
                    {"rows_with_keys", c.rows[std::size_t(h)]}});
  for (std::size_t k = 0; k < c.matching.size(); ++k) {
    const auto [g, h] = c.matching[k];
    nlohmann::json rs = nlohmann::json::array(), bs = nlohmann::json::array();
    for (double v : c.matched_row_share[k]) rs.push_back(std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v));
    for (double v : c.matched_block_share[k]) bs.push_back(std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v));
    matching.push_back({{"learned", r.learned.names[std::size_t(g)]}, {"constructed", kConstructedHeadNames[std::size_t(h)]},
                        {"share", c.share[std::size_t(g)][std::size_t(h)]}, {"js_bits", c.js[std::size_t(g)][std::size_t(h)]},
                        {"chance", c.chance[std::size_t(h)]}, {"block_share", bs}, {"row_share", rs}});
  }
  nlohmann::json rep = {
      {"learned", a.learned}, {"n", a.n}, {"m", a.m}, {"l", r.shape.l}, {"N", T}, {"eq_index", c.eq_index},
      {"s1", a.s1}, {"s2", a.s2}, {"samples", a.samples}, {"seed", a.seed},
      {"constructed", {{"P1", r.cs.P1}, {"P2", r.cs.P2}, {"lambda", r.cs.lambda}, {"heads", cons}}},
      {"learned_heads", heads}, {"matching", matching}, {"mean_matched_share", c.mean_matched_share},
      {"learned_exact", r.exact >= 0 ? nlohmann::json(r.exact) : nlohmann::json(nullptr)},
      {"example_tokens", tokens_to_string(toks)}};
  report::write_json_report(a.out + "/compare.json", "compare_attention", "done", rep);
  if (!a.html.empty()) write_page(a, lm, r, matching);
  if (!a.json_path.empty()) report::write_json_report(a.json_path, "compare_attention", "done", rep);
  return 0;
}

int run_grid(const Args& a, const LoadedModel* lm) {
  const int rows = a.n_max - a.n_min + 1, cols = a.m_max - a.m_min + 1;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  using Grid = std::vector<std::vector<double>>;
  Grid align(std::size_t(rows), std::vector<double>(std::size_t(cols), nan)), acc = align;
  std::array<Grid, 4> fixed;  // share of the reference matching's learned head, per constructed head
  for (auto& g : fixed) g = align;
  // The reference matching: the best one at (--n, --m) (default TA(11, 11), Figure 7's shape). Per
  // cell the best matching may change roles (a head that stops following one pattern can score
  // better on another); the fixed one shows where each role, as found at the reference, stops.
  const ShapeRun ref = run_shape(a, lm, a.n, a.m);
  std::array<int, 4> ref_head{-1, -1, -1, -1};
  for (auto [g, h] : ref.cmp.matching) ref_head[std::size_t(h)] = g;
  ProgressOptions popt;
  popt.quiet = a.quiet;
  Progress prog("compare_attention --grid", std::int64_t(rows) * cols, "cells", popt);
  std::string refline = fmt::format("compare_attention --grid: reference matching at TA({}, {}):", a.n, a.m);
  for (int h = 0; h < 4; ++h)
    refline += fmt::format(" {} <- {}", kConstructedHeadNames[std::size_t(h)],
                           ref_head[std::size_t(h)] >= 0 ? ref.learned.names[std::size_t(ref_head[std::size_t(h)])] : "none");
  prog.message(refline);
  make_output_dir(a.out);
  std::string csv = "n,m,N,samples,accuracy,mean_matched_share";
  for (auto* nm : kConstructedHeadNames) csv += fmt::format(",{0}_learned,{0}_share,{0}_chance,{0}_fixed_share", nm);
  csv += "\n";
  nlohmann::json cells = nlohmann::json::array();
  auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  auto str = [](double v) { return std::isnan(v) ? std::string("NA") : fmt::format("{:.6f}", v); };
  for (int n = a.n_min; n <= a.n_max; ++n) {
    for (int m = a.m_min; m <= a.m_max; ++m) {
      const Shape shape = Shape::make(n, m, Padding::minimal);
      if (lm && (!shape_fits(lm->cfg, shape) || a.s1 > max_offset1(lm->cfg, shape) ||
                 a.s2 > max_offset2(lm->cfg, shape))) {  // position IDs beyond the model's tables: NA
        csv += fmt::format("{},{},{},0,NA,NA", n, m, shape.N());
        for (int k = 0; k < 16; ++k) csv += ",NA";
        csv += "\n";
        prog.add();
        continue;
      }
      const ShapeRun r = run_shape(a, lm, n, m);
      const auto& c = r.cmp;
      const std::size_t i = std::size_t(n - a.n_min), j = std::size_t(m - a.m_min);
      const double accv = r.exact >= 0 ? double(r.exact) / double(a.samples) : nan;
      align[i][j] = c.mean_matched_share;
      acc[i][j] = accv;
      std::string line = fmt::format("{},{},{},{},{},{:.6f}", n, m, shape.N(), a.samples, str(accv), c.mean_matched_share);
      nlohmann::json cell = {{"n", n}, {"m", m}, {"N", shape.N()}, {"samples", a.samples}, {"accuracy", num(accv)},
                             {"mean_matched_share", c.mean_matched_share}};
      for (int h = 0; h < 4; ++h) {
        int g = -1;
        for (auto [gg, hh] : c.matching)
          if (hh == h) g = gg;
        const double sh = g >= 0 ? c.share[std::size_t(g)][std::size_t(h)] : nan;
        const int gf = ref_head[std::size_t(h)];
        const double fs = gf >= 0 ? c.share[std::size_t(gf)][std::size_t(h)] : nan;
        fixed[std::size_t(h)][i][j] = fs;
        line += fmt::format(",{},{},{:.6f},{}", g >= 0 ? r.learned.names[std::size_t(g)] : std::string("NA"), str(sh),
                            c.chance[std::size_t(h)], str(fs));
        cell["heads"][kConstructedHeadNames[std::size_t(h)]] = {
            {"learned", g >= 0 ? nlohmann::json(r.learned.names[std::size_t(g)]) : nlohmann::json(nullptr)},
            {"share", num(sh)}, {"chance", c.chance[std::size_t(h)]},
            {"fixed_learned", gf >= 0 ? nlohmann::json(r.learned.names[std::size_t(gf)]) : nlohmann::json(nullptr)},
            {"fixed_share", num(fs)}};
      }
      csv += line + "\n";
      cells.push_back(cell);
      prog.add();
      prog.note(fmt::format("TA({}, {}) done", n, m));
    }
  }
  prog.finish();
  int train_n = 0, train_m = 0;
  if (lm && lm->config_json.contains("train")) {
    train_n = lm->config_json["train"].value("train_n", 0);
    train_m = lm->config_json["train"].value("train_m", 0);
  }
  atomic_write(a.out + "/grid_alignment.csv", csv);
  const Image ia = heatmap_image(align, a.n_min, a.m_min, train_n, train_m);
  write_png(a.out + "/grid_alignment.png", ia);
  std::vector<std::pair<std::string, Image>> top = {{"BEST MATCHING PER CELL: MEAN SHARE", ia}};
  if (lm) {
    const Image ic = heatmap_image(acc, a.n_min, a.m_min, train_n, train_m);
    write_png(a.out + "/grid_accuracy.png", ic);
    top.push_back({"EXACT MATCH (SAME INSTANCES)", ic});
  }
  std::vector<std::pair<std::string, Image>> bottom;
  for (int h = 0; h < 4; ++h) {
    const int gf = ref_head[std::size_t(h)];
    if (gf < 0) continue;
    const Image im = heatmap_image(fixed[std::size_t(h)], a.n_min, a.m_min, train_n, train_m);
    write_png(fmt::format("{}/grid_share_{}.png", a.out, kConstructedHeadNames[std::size_t(h)]), im);
    bottom.push_back({fmt::format("{} <- {}", kConstructedHeadNames[std::size_t(h)], ref.learned.names[std::size_t(gf)]), im});
  }
  const Image t = side_by_side(top, fmt::format("{} SAMPLES PER CELL.  0 = PURPLE  1 = YELLOW  GREY = NA", a.samples));
  const Image b = side_by_side(bottom, fmt::format("SHARE OF THE HEAD MATCHED AT TA({}, {}), PER CONSTRUCTED HEAD", a.n, a.m));
  write_png(a.out + "/grid.png", vstack({t, b}));
  nlohmann::json refj = nlohmann::json::object();
  for (int h = 0; h < 4; ++h)
    refj[kConstructedHeadNames[std::size_t(h)]] =
        ref_head[std::size_t(h)] >= 0 ? nlohmann::json(ref.learned.names[std::size_t(ref_head[std::size_t(h)])]) : nlohmann::json(nullptr);
  nlohmann::json rep = {{"learned", a.learned}, {"grid", true}, {"samples", a.samples}, {"seed", a.seed},
                        {"s1", a.s1}, {"s2", a.s2}, {"n_min", a.n_min}, {"n_max", a.n_max}, {"m_min", a.m_min},
                        {"m_max", a.m_max}, {"reference", {{"n", a.n}, {"m", a.m}, {"matching", refj}}},
                        {"cells", cells}};
  report::write_json_report(a.out + "/grid_alignment.json", "compare_attention", "done", rep);
  if (!a.json_path.empty()) report::write_json_report(a.json_path, "compare_attention", "done", rep);
  std::printf("compare_attention --grid: %d x %d cells, %lld samples each: %s/grid.png (alignment | accuracy, and the "
              "share of each head matched at TA(%d, %d)), grid_alignment.{csv,png,json}, grid_share_<head>.png\n",
              rows, cols, static_cast<long long>(a.samples), a.out.c_str(), a.n, a.m);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Compare a learned model's attention, head by head, with the constructed model's (Theorem 4.1).",
               "compare_attention"};
  Args a;
  cli::add_string(app, "--learned", a.learned, "learned model directory, or 'constructed' (the construction vs itself)")
      ->required();
  cli::add_string(app, "--task", a.task,
                  "addition only (the constructed model of Theorem 4.1 adds): any other task is refused, as is a "
                  "learned model trained on one");
  cli::add_int(app, "--n", a.n, "digits per operand (Figure 7: 11); with --grid: the reference shape", 1, 1000);
  cli::add_int(app, "--m", a.m, "operand count; with --grid: the reference shape", 2, 1000);
  cli::add_int(app, "--samples", a.samples, "TA(n, m) samples averaged (per cell with --grid)", 1, 10'000'000);
  cli::add_int(app, "--s1", a.s1, "level-1 position offset", 1, 1'000'000);
  cli::add_int(app, "--s2", a.s2, "level-2 position offset", 1, 1'000'000);
  cli::add_seed(app, a.seed, "seed of the samples (the same instances as evaluate/dump_attention)");
  cli::add_real(app, "--lambda", a.lambda, "constructed model's attention scale; 0 = construct's default for N", 0);
  cli::add_string(app, "--out", a.out,
                  "output directory (default: compare_TA<n>x<m>, or compare_grid, in the current directory; never "
                  "inside the model directory)");
  app.add_flag("--grid", a.grid, "score every TA cell of the grid (--n-min..--n-max x --m-min..--m-max)");
  cli::add_int(app, "--n-min", a.n_min, "grid: smallest operand length", 1, 1000);
  cli::add_int(app, "--n-max", a.n_max, "grid: largest operand length", 1, 1000);
  cli::add_int(app, "--m-min", a.m_min, "grid: smallest operand count", 2, 1000);
  cli::add_int(app, "--m-max", a.m_max, "grid: largest operand count", 2, 1000);
  cli::add_string(app, "--html", a.html,
                  "also write one problem's page here: a self-contained HTML file (no network) with both models' "
                  "attention per head on the task's layout, the head matching and every response position's "
                  "prediction and margin (learn/README.md, \"compare_attention\")");
  cli::add_string(app, "--problem", a.problem,
                  "the page's problem (57+48+96); its shape (n = longest operand, m = operands, minimal padding) "
                  "replaces --n and --m for the whole comparison. Default: the first of the samples");
  cli::add_string(app, "--counterexample", a.counterexample,
                  "the page's problem, shape and offsets from a verify_learned JSON report's counterexample (a grid "
                  "report: its first refuted cell); excludes --problem");
  cli::add_int(app, "--top-k", a.top_k, "the page keeps this many keys per query row (weight >= 0.001)", 1, 4096);
  cli::add_threads(app, a.threads);
  cli::add_json(app, a.json_path, "also write the JSON report here");
  cli::add_quiet(app, a.quiet);
  app.footer(cli::exit_codes_footer(false));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("compare_attention", std::cerr, [&] {
    auto check_nm = [](int n, int m, const char* what) {
      if (n < 1 || m < 2 || n > 1000 || m > 1000)
        throw InputError(fmt::format("{}: need 1 <= n <= 1000 and 2 <= m <= 1000 (got n = {}, m = {})", what, n, m));
      const Shape s = Shape::make(n, m, Padding::minimal);
      if (s.N() > 20000)
        throw InputError(fmt::format("TA({}, {}) has N = {} tokens: the (N, N) maps per head (and the dense constructed "
                                     "pass) are limited to 20,000 tokens", n, m, s.N()));
    };
    if (!a.counterexample.empty()) {
      if (!a.problem.empty()) throw InputError("--counterexample and --problem both name the page's problem: give one");
      take_counterexample(a);
    }
    if (!a.problem.empty()) {  // the problem's shape is the comparison's
      if (a.grid) throw InputError("--problem takes a single shape, not --grid");
      const Problem p = parse_problem(a.problem);
      if (p.operands.size() < 2) throw InputError(fmt::format("--problem '{}': needs at least two operands", a.problem));
      a.n = p.max_digits();
      a.m = int(p.operands.size());
    }
    if (!a.html.empty()) {
      if (a.grid) throw InputError("--html writes one shape's page, not --grid's");
      check_output_path(a.html);
    }
    if (a.grid) {
      if (a.n_min > a.n_max || a.m_min > a.m_max) throw InputError("empty grid: need --n-min <= --n-max, --m-min <= --m-max");
      check_nm(a.n_min, a.m_min, "--n-min/--m-min");
      check_nm(a.n_max, a.m_max, "--n-max/--m-max");
    }
    check_nm(a.n, a.m, "--n/--m");
    auto addition_only = [](const std::string& what) {
      throw InputError(fmt::format("this tool compares with the constructed model of Theorem 4.1, which adds: "
                                   "{} (use dump_attention for the attention maps of other tasks)", what));
    };
    if (!a.task.empty() && parse_task(a.task) != TaskKind::addition) addition_only(fmt::format("--task {}", a.task));
    check_samples_fit(a.samples, std::max(a.n, a.grid ? a.n_max : 1), std::max(a.m, a.grid ? a.m_max : 2),
                      fmt::format("--samples {}", a.samples));
    LoadedModel lm;
    const bool self = self_mode(a);
    if (!self) {
      lm = load_model_dir(a.learned);
      const Task& tk = task_of_model(lm.config_json, "", a.learned);
      if (tk.kind() != TaskKind::addition)
        addition_only(fmt::format("the model in {} was trained on task {}", a.learned, tk.name()));
    }
    if (a.out.empty()) {
      if (self) throw InputError("--learned constructed needs --out DIR");
      a.out = a.grid ? std::string("compare_grid") : fmt::format("compare_TA{}x{}", a.n, a.m);
    }
    if (!self) {  // the single shape, or the grid's reference shape
      const Shape s = Shape::make(a.n, a.m, Padding::minimal);
      if (!shape_fits(lm.cfg, s) || a.s1 > max_offset1(lm.cfg, s) || a.s2 > max_offset2(lm.cfg, s))
        throw InputError(fmt::format("TA({}, {}) at offsets ({}, {}) needs position IDs beyond the model's max_pos "
                                     "({}, {})", a.n, a.m, a.s1, a.s2, lm.cfg.max_pos1, lm.cfg.max_pos2));
    }
    return a.grid ? run_grid(a, self ? nullptr : &lm) : run_single(a, self ? nullptr : &lm);
  });
}
