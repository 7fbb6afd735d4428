// verify_learned: options, the three stages, the printed summary, the JSON report and the exit code.
#include "manyadd/learned/verify_learned.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <ostream>
#include <streambuf>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/error.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/core/parallel.hpp"
#include "manyadd/core/progress.hpp"
#include "manyadd/core/report.hpp"
#include "manyadd/learned/certify.hpp"

namespace manyadd::learned {

namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

struct Options {
  std::string model, json_path, arithmetic = "fp32", n_range, m_range, csv_path, problem;
  std::int64_t n = 0, m = 0, s1 = 1, s2 = 1, samples = 1000, max_nodes = 1'000'000;
  std::uint64_t seed = 12345;
  double attack_seconds = 10, cert_seconds = 600, bound_radius = 0.1;
  bool certificate = false, require_proof = false, quiet = false;
  bool shrink = true;  // grid cells report the input found, unshrunk (shrinking costs a forward per digit)
  int threads = 2;
};

constexpr std::int64_t kMaxSide = 1000;
constexpr std::int64_t kMaxSamples = 10'000'000;

std::string tokens(const std::vector<std::uint8_t>& t) { return tokens_to_string(t); }

json problem_json(const Instance& inst, const Problem& p) {
  const auto g = inst.greedy(p);
  json j = {{"problem", p.to_string()}, {"sum", reference_sum(p).str()}, {"expected", tokens(g.expected)},
            {"greedy", tokens(g.got)}, {"exact", g.exact}};
  if (g.first_wrong >= 0) {
    j["first_wrong"] = {{"response_index", g.first_wrong},
                        {"expected", std::string(1, token_char(g.expected[std::size_t(g.first_wrong)]))},
                        {"got", std::size_t(g.first_wrong) < g.got.size()
                                    ? std::string(1, token_char(g.got[std::size_t(g.first_wrong)]))
                                    : std::string("(ended)")}};
  }
  return j;
}

// The lines that show one wrong input.
void print_wrong(std::ostream& out, const Instance& inst, const Problem& p, const std::string& model) {
  const auto g = inst.greedy(p);
  out << fmt::format("                input    {}\n", p.to_string());
  out << fmt::format("                sum      {}\n", reference_sum(p).str());
  out << fmt::format("                expected {}\n", tokens(g.expected));
  out << fmt::format("                greedy   {}\n", tokens(g.got));
  if (g.first_wrong >= 0)
    out << fmt::format("                first wrong token: response index {} (expected '{}', got '{}')\n",
                       g.first_wrong, token_char(g.expected[std::size_t(g.first_wrong)]),
                       std::size_t(g.first_wrong) < g.got.size() ? token_char(g.got[std::size_t(g.first_wrong)]) : '-');
  bool full = false;  // some operand has n significant digits: evaluate writes it in this shape too
  for (const auto& op : p.operands) full = full || op[0] != '0';
  out << fmt::format("                reproduce: verify_learned --model {} --n {} --m {} --problem {}\n", model,
                     inst.shape().n, inst.shape().m, p.to_string());
  if (full) out << fmt::format("                       or: evaluate --model {} --problem {}\n", model, p.to_string());
}

// --problem: one input of the shape (operands padded to n digits), its margins and greedy decoding.
int run_problem(const Net& net, const Options& o, std::ostream& out) {
  const Shape shape = Shape::make(o.n, o.m, Padding::minimal);
  const Problem parsed = parse_problem(o.problem);
  if (std::int64_t(parsed.operands.size()) != o.m)
    throw InputError(fmt::format("--problem has {} operands, --m is {}", parsed.operands.size(), o.m));
  const Problem p = padded_problem(shape, parsed.operands);
  const Instance inst(net, shape, o.s1, o.s2);
  const auto pr = inst.probe(p);
  const auto g = inst.greedy(p);
  out << fmt::format("verify_learned  {}  ({})\n", o.model, net.describe());
  out << fmt::format("  problem     TA({}, {}) at offsets s1={} s2={}: smallest teacher-forced margin {:.4f} at row {}; "
                     "greedy decoding {}\n",
                     o.n, o.m, o.s1, o.s2, pr.min_margin, pr.row, g.exact ? "exact" : "WRONG");
  print_wrong(out, inst, p, o.model);
  if (!o.json_path.empty()) {
    json j = problem_json(inst, p);
    j["model"] = o.model, j["shape"] = {{"n", o.n}, {"m", o.m}}, j["offsets"] = {{"s1", o.s1}, {"s2", o.s2}};
    j["margins"] = pr.margins, j["min_margin"] = pr.min_margin, j["row"] = pr.row;
    report::write_json_report(o.json_path, "verify_learned", g.exact ? "pass" : "fail", j);
  }
  return g.exact ? 0 : 1;
}

struct SamplesOutcome {
  bool run = false;
  std::int64_t count = 0, exact = 0;
  double min_margin = std::numeric_limits<double>::infinity();
  std::int64_t row = 0;
  std::vector<Problem> worst;   // the smallest margins, attack starts
  bool wrong = false;
  Problem first_wrong;          // the first wrong sample in draw order
};

SamplesOutcome run_samples(const Instance& inst, const Options& o, int n, int m) {
  SamplesOutcome s;
  if (o.samples <= 0) return s;
  s.run = true, s.count = o.samples;
  Rng rng(evaluate_cell_seed(o.seed, n, m));
  std::vector<Problem> probs;
  probs.reserve(std::size_t(o.samples));
  for (std::int64_t k = 0; k < o.samples; ++k) probs.push_back(sample_TA(rng, n, m));
  std::vector<double> margin(probs.size());
  std::vector<std::int64_t> row(probs.size());
  std::vector<char> exact(probs.size());
  ProgressOptions po;
  po.quiet = o.quiet, po.final_after_s = 2;
  Progress prog("samples", o.samples, "instances", po);
  parallel_for(
      o.threads, o.samples,
      [&](int, std::int64_t k) {
        const Problem p = padded_problem(inst.shape(), probs[std::size_t(k)].operands);
        const auto pr = inst.probe(p);
        margin[std::size_t(k)] = pr.min_margin, row[std::size_t(k)] = pr.row;
        exact[std::size_t(k)] = inst.greedy(p).exact;
        prog.add();
      },
      Schedule::dynamic);
  prog.finish();
  std::vector<std::size_t> order(probs.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return margin[a] < margin[b]; });
  for (std::size_t k = 0; k < order.size() && k < 8; ++k)
    s.worst.push_back(padded_problem(inst.shape(), probs[order[k]].operands));
  for (std::size_t k = 0; k < probs.size(); ++k) {
    s.exact += exact[k];
    if (margin[k] < s.min_margin) s.min_margin = margin[k], s.row = row[k];
    if (!exact[k] && !s.wrong) s.wrong = true, s.first_wrong = padded_problem(inst.shape(), probs[k].operands);
  }
  return s;
}

std::string pow10_words(std::int64_t e) { return fmt::format("10^{}", e); }

// What the stages of one cell found so far: its report, the first counterexample, whether there is one.
struct CellState {
  json report;
  json cex = nullptr;
  bool counterexample = false;
  void found(const json& c) {
    counterexample = true;
    if (cex.is_null()) cex = c;
  }
};

// Stage 1: evaluate's random instances of the cell, greedy; returns them (their worst start the attack).
SamplesOutcome stage_samples(const Instance& inst, const Options& o, std::int64_t n, std::int64_t m, CellState& st,
                             std::ostream& out) {
  json& report = st.report;
  const SamplesOutcome smp = run_samples(inst, o, int(n), int(m));
  if (smp.run) {
    out << fmt::format("  samples     {} random (evaluate's cell, seed {}): {} exact under greedy decoding ({:.4f}), "
                       "smallest teacher-forced margin {:.4f} (row {})\n",
                       smp.count, o.seed, smp.exact, double(smp.exact) / double(smp.count), smp.min_margin, smp.row);
    report["samples"] = {{"count", smp.count}, {"seed", o.seed}, {"exact", smp.exact},
                         {"accuracy", double(smp.exact) / double(smp.count)}, {"min_margin", smp.min_margin},
                         {"row", smp.row}};
    if (smp.wrong) {
      const Problem sh = o.shrink ? shrink(inst, smp.first_wrong) : smp.first_wrong;
      out << "              a sample is wrong; shrunk:\n";
      print_wrong(out, inst, sh, o.model);
      json cj = problem_json(inst, sh);
      cj["source"] = "samples";
      cj["found"] = smp.first_wrong.to_string();
      report["samples"]["wrong"] = cj;
      st.found(cj);
    }
  } else {
    out << "  samples     not run (--samples 0)\n";
    report["samples"] = {{"count", 0}};
  }
  return smp;
}

// Stage 2: the adversarial search, from the structured starts and the samples' worst.
void stage_attack(const Instance& inst, const Options& o, const SamplesOutcome& smp, CellState& st, std::ostream& out) {
  if (o.attack_seconds <= 0) {
    out << "  attack      not run (--attack-seconds 0)\n";
    st.report["attack"] = {{"seconds", 0}};
    return;
  }
  AttackOptions ao;
  ao.seconds = o.attack_seconds, ao.seed = o.seed, ao.threads = o.threads, ao.starts = smp.worst;
  ao.shrink = o.shrink;
  const AttackResult ar = attack(inst, ao);
  json aj = {{"seconds", ar.seconds}, {"budget_seconds", o.attack_seconds}, {"evaluations", ar.evaluations},
             {"min_margin", ar.best_margin}, {"row", ar.best_row}, {"worst_input", ar.best.to_string()},
             {"structured_starts", structured_starts(inst.shape()).size()}, {"found", ar.found}};
  if (ar.found) {
    out << fmt::format("  attack      COUNTEREXAMPLE after {:.1f} s, {} forwards (teacher-forced margin {:.4f} at row "
                       "{}; shrunk from {})\n",
                       ar.seconds, ar.evaluations, ar.cex.margin, ar.cex.row, ar.cex.found.to_string());
    print_wrong(out, inst, ar.cex.problem, o.model);
    json cj = problem_json(inst, ar.cex.problem);
    cj["source"] = "attack", cj["found"] = ar.cex.found.to_string(), cj["margin"] = ar.cex.margin,
    cj["row"] = ar.cex.row;
    aj["counterexample"] = cj;
    st.found(cj);
  } else {
    out << fmt::format("  attack      {:.1f} s, {} forwards: no wrong input; smallest teacher-forced margin {:.4f} "
                       "at row {} ({})\n",
                       ar.seconds, ar.evaluations, ar.best_margin, ar.best_row, ar.best.to_string());
  }
  st.report["attack"] = aj;
}

// The certificate's rows as JSON, with their totals.
struct RowTotals {
  std::int64_t proven = 0, leaves = 0, bounded = 0, pruned = 0;
  double min_bound = std::numeric_limits<double>::infinity();
  const RowResult* first_open = nullptr;
};
json rows_json(const CertResult& cr, RowTotals& t) {
  json rows = json::array();
  for (const auto& r : cr.rows) {
    t.proven += r.status == RowStatus::proven;
    t.leaves += r.leaves, t.bounded += r.bounded, t.pruned += r.pruned;
    if (r.status == RowStatus::proven) t.min_bound = std::min(t.min_bound, r.min_bound);
    if (r.status != RowStatus::proven && !t.first_open) t.first_open = &r;
    json rj = {{"row", r.row}, {"status", row_status_name(r.status)}, {"nodes", r.nodes}, {"leaves", r.leaves},
               {"bounded", r.bounded}, {"pruned", r.pruned}};
    if (r.status == RowStatus::proven) rj["min_bound"] = r.min_bound;
    if (std::isfinite(r.min_exact)) rj["min_exact"] = r.min_exact;
    if (!r.why.empty()) rj["why"] = r.why;
    if (r.status == RowStatus::failing) rj["witness"] = r.witness.to_string(), rj["exact_margin"] = r.witness_margin;
    rows.push_back(rj);
  }
  return rows;
}

// Stage 3: the certificate (one-layer models); returns whether every input is proven.
bool stage_certificate(const OneLayer& w, const Instance& inst, const Options& o, CellState& st, std::ostream& out) {
  if (!o.certificate) {
    out << "  certificate not run (--certificate to run it; one-layer models)\n";
    st.report["certificate"] = {{"status", "not_run"}};
    return false;
  }
  const DigitVars dv(inst.shape());
  CertOptions co;
  co.max_nodes = o.max_nodes, co.seconds = o.cert_seconds, co.threads = o.threads, co.bound_radius = o.bound_radius;
  co.fp32 = o.arithmetic == "fp32";
  ProgressOptions po;
  po.quiet = o.quiet, po.final_after_s = 2;
  const CertResult cr = certify_shape(w, dv, inst.positions(), co, po);
  RowTotals t;
  json cj = {{"rows", rows_json(cr, t)},
             {"arithmetic", o.arithmetic},
             {"nodes", cr.nodes},
             {"seconds", cr.seconds},
             {"fp32", {{"score_error", cr.fp32.score_error},
                       {"softmax_relative", cr.fp32.softmax_rel},
                       {"attention_error", cr.fp32.attn_error}}},
             {"slack", kSlack},
             {"budget", {{"max_nodes_per_row", o.max_nodes}, {"seconds", o.cert_seconds},
                         {"bound_radius", o.bound_radius}}}};
  std::string status = "unknown";
  if (cr.status == RowStatus::proven) {
    status = "proven";
    double min_exact = std::numeric_limits<double>::infinity();
    for (const auto& r : cr.rows) min_exact = std::min(min_exact, r.min_exact);
    out << fmt::format("  certificate PROVEN for every input{}: {} rows, {} nodes ({} inputs evaluated one by one, {} "
                       "sets bounded, {} pruned), smallest margin of an input evaluated {:.4f}, smallest certified "
                       "lower bound {:.4f} ({:.1f} s)\n",
                       o.arithmetic == "fp32" ? " (fp32 forward, rounding bounded)" : " IN REAL ARITHMETIC (not fp32)",
                       cr.rows.size(), cr.nodes, t.leaves, t.bounded, t.pruned, min_exact, t.min_bound, cr.seconds);
    cj["min_bound"] = t.min_bound;
    if (std::isfinite(min_exact)) cj["min_exact"] = min_exact;
  } else if (cr.status == RowStatus::failing) {
    const RowResult* f = nullptr;
    for (const auto& r : cr.rows)
      if (r.status == RowStatus::failing && !f) f = &r;
    if (!inst.greedy(f->witness).exact) {
      status = "counterexample";
      const Problem sh = o.shrink ? shrink(inst, f->witness) : f->witness;
      out << fmt::format("  certificate COUNTEREXAMPLE at row {} (exact margin {:.4f}); {} of {} rows proven ({:.1f} s); "
                         "shrunk:\n",
                         f->row, f->witness_margin, t.proven, cr.rows.size(), cr.seconds);
      print_wrong(out, inst, sh, o.model);
      json wj = problem_json(inst, sh);
      wj["source"] = "certificate", wj["found"] = f->witness.to_string(), wj["row"] = f->row;
      cj["counterexample"] = wj;
      st.found(wj);
    } else {
      out << fmt::format("  certificate UNKNOWN: row {}'s input {} has exact margin {:.3g}, not above its fp32 rounding "
                         "bound (greedy decoding is right on it; --arithmetic real proves the real-number model); {} of {} "
                         "rows proven ({:.1f} s)\n",
                         f->row, f->witness.to_string(), f->witness_margin, t.proven, cr.rows.size(), cr.seconds);
    }
  } else {
    out << fmt::format("  certificate UNKNOWN: {} of {} rows proven, first open row {} ({}; {} nodes) ({:.1f} s)\n",
                       t.proven, cr.rows.size(), t.first_open->row, t.first_open->why, t.first_open->nodes, cr.seconds);
  }
  cj["status"] = status, cj["rows_proven"] = t.proven;
  st.report["certificate"] = cj;
  return status == "proven";
}

// One cell: the three stages, printed to `out` (a discarding stream in grid mode); the report's body with
// "exit" (0 or 1) for the caller.
json run_cell(const Net& net, const Options& o, std::int64_t n, std::int64_t m, std::ostream& out) {
  const Shape shape = Shape::make(n, m, Padding::minimal);
  OneLayer w;
  if (o.certificate) w = net.one_layer();  // refuses what the certificate does not cover, before any work
  // the forward's attention holds T x T scores per head; the samples are held as strings
  cli::check_fits_memory(double(shape.N()) * double(shape.N()) * 4.0 * 8 * double(o.threads),
                         "the forward of TA(--n, --m) on --threads threads");
  // (a string of n digits with its heap block and the vector slot: n + 96 bytes; a problem 128 more)
  cli::check_fits_memory(double(o.samples) * (double(m) * double(n + 96) + 128), "--samples instances of TA(--n, --m)");
  const Instance inst(net, shape, o.s1, o.s2);
  const auto t0 = clock_type::now();
  out << fmt::format("verify_learned  {}  ({})\n", o.model, net.describe());
  out << fmt::format("  shape       TA({}, {}): l={} N={}, offsets s1={} s2={}, {} inputs (operands of at most {} digits)\n",
                     n, m, shape.l, shape.N(), o.s1, o.s2, pow10_words(n * m), n);
  CellState st;
  st.report = {{"model", o.model},
               {"architecture", net.describe()},
               {"shape", {{"n", n}, {"m", m}, {"l", shape.l}, {"N", shape.N()}, {"padding", "minimal"}}},
               {"offsets", {{"s1", o.s1}, {"s2", o.s2}}},
               {"forward", "learn's fp32 reference (--device cpu)"}};
  const SamplesOutcome smp = stage_samples(inst, o, n, m, st, out);
  stage_attack(inst, o, smp, st, out);
  const bool proven = stage_certificate(w, inst, o, st, out);
  const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::string verdict;
  int code = 0;
  if (st.counterexample) verdict = "COUNTEREXAMPLE", code = 1;
  else if (proven) verdict = "PROVEN";
  else verdict = "NO COUNTEREXAMPLE FOUND (not proven)", code = o.require_proof ? 1 : 0;
  out << fmt::format("  result      {}  ({:.1f} s)\n", verdict, secs);
  st.report["result"] = st.counterexample ? "counterexample" : proven ? "proven" : "not_proven";
  st.report["counterexample"] = st.cex;
  st.report["seconds"] = secs;
  st.report["exit"] = code;
  return st.report;
}

// "A-B" or "A" -> [lo, hi] within [1, kMaxSide].
void parse_range(const std::string& text, const char* option, std::int64_t& lo, std::int64_t& hi) {
  const auto dash = text.find('-');
  lo = cli::parse_int(text.substr(0, dash), option, 1, kMaxSide);
  hi = dash == std::string::npos ? lo : cli::parse_int(text.substr(dash + 1), option, 1, kMaxSide);
  if (hi < lo) throw InputError(fmt::format("{} '{}': the range is empty", option, text));
}

// A null stream: the cells' own lines in grid mode.
struct NullBuf : std::streambuf {
  int overflow(int c) override { return c; }
};

// --n-range / --m-range: every cell of the rectangle that fits the model, one line and one CSV row each
// (counterexamples as found, not shrunk: `--problem` on one of them shows it);
// the largest shapes proven and the smallest refuted (no proven cell dominated by a refuted one is implied:
// each cell is its own claim).
int run_grid(const Net& net, const Options& o, std::ostream& out) {
  std::int64_t n0, n1, m0, m1;
  parse_range(o.n_range, "--n-range", n0, n1);
  parse_range(o.m_range, "--m-range", m0, m1);
  if ((n1 - n0 + 1) * (m1 - m0 + 1) > 10000) throw InputError("--n-range x --m-range: at most 10000 cells");
  if (o.certificate) (void)net.one_layer();
  out << fmt::format("verify_learned  {}  ({})  grid TA([{}, {}], [{}, {}]): samples {}, attack {} s, certificate {}\n",
                     o.model, net.describe(), n0, n1, m0, m1, o.samples, o.attack_seconds,
                     o.certificate ? fmt::format("{} s ({})", o.cert_seconds, o.arithmetic) : std::string("off"));
  std::string csv = "n,m,fits,samples,exact,accuracy,sample_min_margin,attack_evaluations,attack_min_margin,"
                    "counterexample_source,counterexample,certificate,rows_proven,rows,seconds\n";
  json cells = json::array();
  NullBuf nb;
  std::ostream quiet(&nb);
  Options co = o;
  co.quiet = true, co.shrink = false;
  std::int64_t refuted = 0, proven = 0, ran = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> proven_cells, refuted_cells;
  for (std::int64_t n = n0; n <= n1; ++n)
    for (std::int64_t m = m0; m <= m1; ++m) {
      const Shape shape = Shape::make(n, m, Padding::minimal);
      if (net.max_offset1(shape) < o.s1 || net.max_offset2(shape) < o.s2) {
        csv += fmt::format("{},{},0,,,,,,,,,,,,\n", n, m);
        continue;
      }
      const json r = run_cell(net, co, n, m, quiet);
      ++ran;
      const json& s = r["samples"];
      const json& a = r["attack"];
      const json& c = r["certificate"];
      const std::string cert = c.value("status", std::string("not_run"));
      std::string src, cex;
      if (!r["counterexample"].is_null()) src = r["counterexample"]["source"], cex = r["counterexample"]["problem"];
      const bool is_proven = r["result"] == "proven", is_refuted = r["result"] == "counterexample";
      refuted += is_refuted, proven += is_proven;
      if (is_proven) proven_cells.push_back({n, m});
      if (is_refuted) refuted_cells.push_back({n, m});
      const std::int64_t cnt = s.value("count", std::int64_t(0));
      csv += fmt::format("{},{},1,{},{},{},{},{},{},{},{},{},{},{},{:.2f}\n", n, m, cnt,
                         cnt ? fmt::format("{}", s["exact"].get<std::int64_t>()) : std::string(),
                         cnt ? fmt::format("{:.4f}", s["accuracy"].get<double>()) : std::string(),
                         cnt ? fmt::format("{:.4f}", s["min_margin"].get<double>()) : std::string(),
                         a.value("evaluations", std::int64_t(0)),
                         a.contains("min_margin") ? fmt::format("{:.4f}", a["min_margin"].get<double>()) : std::string(),
                         src, cex, cert, c.value("rows_proven", std::int64_t(0)),
                         c.contains("rows") ? c["rows"].size() : 0, r["seconds"].get<double>());
      out << fmt::format("  TA({:2}, {:2})  samples {:>9}  attack {:>10}  certificate {:<14}  {}\n", n, m,
                         cnt ? fmt::format("{:.3f}", s["accuracy"].get<double>()) : std::string("-"),
                         a.contains("min_margin") ? fmt::format("{:.2f}", a["min_margin"].get<double>()) : std::string("-"),
                         cert, r["result"].get<std::string>())
          << std::flush;  // a line per cell as it ends, also into a file
      json cell = {{"n", n}, {"m", m}, {"result", r["result"]}, {"certificate", cert}};
      if (cnt) cell["accuracy"] = s["accuracy"];
      if (!cex.empty()) cell["counterexample"] = cex, cell["source"] = src;
      cells.push_back(cell);
    }
  // Pareto fronts: proven cells no other proven cell dominates (n' >= n, m' >= m), refuted cells that dominate
  // no other refuted cell.
  auto front = [](const std::vector<std::pair<std::int64_t, std::int64_t>>& v, bool largest) {
    std::vector<std::pair<std::int64_t, std::int64_t>> f;
    for (const auto& a : v) {
      bool dominated = false;
      for (const auto& b : v)
        if (a != b && (largest ? (b.first >= a.first && b.second >= a.second) : (b.first <= a.first && b.second <= a.second)))
          dominated = true;
      if (!dominated) f.push_back(a);
    }
    return f;
  };
  auto words = [](const std::vector<std::pair<std::int64_t, std::int64_t>>& f) {
    std::string s;
    for (const auto& c : f) s += fmt::format("{}TA({}, {})", s.empty() ? "" : ", ", c.first, c.second);
    return s.empty() ? std::string("none") : s;
  };
  const auto pf = front(proven_cells, true), rf = front(refuted_cells, false);
  out << fmt::format("  cells       {} run: {} proven, {} with a confirmed counterexample, {} open\n", ran, proven, refuted,
                     ran - proven - refuted);
  out << fmt::format("  largest proven   {}\n  smallest refuted {}\n", words(pf), words(rf));
  if (!o.csv_path.empty()) atomic_write(o.csv_path, csv);
  if (!o.json_path.empty()) {
    json j = {{"model", o.model}, {"architecture", net.describe()}, {"cells", cells},
              {"n_range", {n0, n1}}, {"m_range", {m0, m1}},
              {"budget", {{"samples", o.samples}, {"attack_seconds", o.attack_seconds},
                          {"certificate_seconds", o.certificate ? o.cert_seconds : 0.0}}}};
    json jp = json::array(), jr = json::array();
    for (const auto& c : pf) jp.push_back({c.first, c.second});
    for (const auto& c : rf) jr.push_back({c.first, c.second});
    j["largest_proven"] = jp, j["smallest_refuted"] = jr;
    report::write_json_report(o.json_path, "verify_learned", refuted ? "fail" : "pass", j);
  }
  return refuted ? 1 : (o.require_proof && proven < ran ? 1 : 0);
}

int run(const Options& o, std::ostream& out) {
  // Validate before anything large: the shape, the model, the offsets.
  const bool grid = !o.n_range.empty() || !o.m_range.empty();
  if (grid && (o.n_range.empty() || o.m_range.empty() || o.n != 0 || o.m != 0))
    throw InputError("give either --n and --m (one shape) or --n-range and --m-range (a rectangle of shapes)");
  if (!grid && (o.n < 1 || o.n > kMaxSide || o.m < 1 || o.m > kMaxSide))
    throw InputError(fmt::format("--n and --m must be in [1, {}] (got {} and {})", kMaxSide, o.n, o.m));
  if (o.samples < 0 || o.samples > kMaxSamples)
    throw InputError(fmt::format("--samples must be in [0, {}] (got {})", kMaxSamples, o.samples));
  if (!grid && !o.csv_path.empty()) throw InputError("--csv writes the grid's table: it needs --n-range and --m-range");
  if (!o.problem.empty() && grid) throw InputError("--problem takes --n and --m (its shape), not ranges");
  const Net net = Net::load(o.model);
  if (grid) return run_grid(net, o, out);
  if (!o.problem.empty()) return run_problem(net, o, out);
  const json r = run_cell(net, o, o.n, o.m, out);
  const int code = r["exit"].get<int>();
  if (!o.json_path.empty()) report::write_json_report(o.json_path, "verify_learned", code == 0 ? "pass" : "fail", r);
  return code;
}

}  // namespace

int verify_learned_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  Options o;
  CLI::App app{
      "verify_learned: a trained decoder's worst case on TA(n, m) at fixed offsets -- random samples (evaluate's\n"
      "cell), an adversarial search for the input with the smallest teacher-forced margin, and for one-layer\n"
      "models a certificate over every one of the 10^(n m) inputs (PROVEN, a counterexample, or UNKNOWN).\n"
      "Every forward is learn's fp32 reference; a wrong input is confirmed by greedy decoding and shrunk."};
  app.set_version_flag("--version", report::version());
  cli::add_string(app, "--model", o.model, "model directory (config.json + model.safetensors) of an addition decoder")
      ->required();
  cli::add_int(app, "--n", o.n, fmt::format("digits per operand, in [1, {}]", kMaxSide), 0, kMaxSide + 1, false);
  cli::add_int(app, "--m", o.m, fmt::format("number of operands, in [1, {}]", kMaxSide), 0, kMaxSide + 1, false);
  cli::add_string(app, "--n-range", o.n_range, "instead of --n/--m: a rectangle of shapes, digits LO-HI (every cell that fits "
                                                "the model; one line and one CSV row each)");
  cli::add_string(app, "--m-range", o.m_range, "with --n-range: operands LO-HI");
  cli::add_output(app, "--csv", o.csv_path, "with the ranges: the grid's table (one row per cell)");
  cli::add_string(app, "--problem", o.problem,
                  "instead of the stages: one input of TA(--n, --m) (operands padded to n digits, e.g. a counterexample "
                  "this tool printed): its margins and greedy decoding; exit 1 when wrong");
  cli::add_int(app, "--s1", o.s1, "level-1 position offset (evaluation: 1)", 1, 1'000'000);
  cli::add_int(app, "--s2", o.s2, "level-2 position offset (evaluation: 1)", 1, 1'000'000);
  cli::add_int(app, "--samples", o.samples, "random instances (evaluate's draw of the cell); 0 skips", 0, kMaxSamples);
  cli::add_seed(app, o.seed, "seed of the samples (evaluate's --seed) and of the attack");
  cli::add_real(app, "--attack-seconds", o.attack_seconds, "the attack's time budget; 0 skips it", 0, 86400);
  app.add_flag("--certificate", o.certificate, "run the certificate (one-layer models)");
  cli::add_real(app, "--cert-seconds", o.cert_seconds, "the certificate's time budget (0: none)", 0, 7 * 86400);
  cli::add_int(app, "--max-nodes", o.max_nodes, "the certificate's node budget per row", 1, std::int64_t(1) << 40);
  cli::add_real(app, "--bound-radius", o.bound_radius,
                "bound a node only when its estimated attention box radius (L2) is below this", 0, 1e6);
  cli::add_string(app, "--arithmetic", o.arithmetic,
                  "what the certificate proves: fp32 (the model's fp32 forward, every rounding bounded) or real (the "
                  "model's function in exact arithmetic; a weaker claim, printed as such) (default fp32)")
      ->check(CLI::IsMember({"fp32", "real"}));
  app.add_flag("--require-proof", o.require_proof, "exit 1 unless the certificate proves the shape");
  cli::add_threads(app, o.threads);
  cli::add_json(app, o.json_path);
  cli::add_quiet(app, o.quiet);
  app.footer(cli::exit_codes_footer(true) +
             "\nExit 1: a confirmed counterexample (samples, attack or certificate), or --require-proof without a proof.");
  const int rc = cli::parse(app, argc, argv, out, err);
  if (rc >= 0) return rc;
  return run(o, out);
}

}  // namespace manyadd::learned
