// evaluate: exact match of a trained model on its task's grid (addition: TA(i, j), Sec. 4.2: i = 1..30
// digits, j = 2..30 operands; multiplication: TM(i, j), i, j = 1..30; parity: query lengths 5..100 step
// 5; 1000 samples per cell), at offsets 1; CSV + PNG heatmap (the training region outlined), written where
// --csv/--png say (default grid.csv/grid.png in the current directory: never into the model directory).
// Progress (cells, ETA) and the rows of the grid on stderr unless --quiet. Exit codes: 0 done, 1 a failed check (--require, or teacher-forced and
// greedy verdicts disagree under --mode both, or --problem answered wrongly), 2 bad usage or input, 3 internal
// error.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/progress.hpp"
#include "manyadd/core/report.hpp"
#include "manyadd/learn/cli/cli_common.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/grid/grid_train.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/analysis/plot.hpp"
#include "manyadd/learn/tasks/task.hpp"
#include "manyadd/learn/runs/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;

namespace {
// The options (main declares them).
struct Args {
  std::string model, csv = "grid.csv", png = "grid.png", json_path, mode_s = "teacher", device = "auto",
                     precision_s = "fp32", task_s, problem;
  int n_min = 0, n_max = 0, n_step = 0, m_min = 0, m_max = 0, threads = 2;
  std::int64_t samples = 1000, s1 = 1, s2 = 1, s3 = 1;
  std::vector<std::string> instances;  // --instance / --table: the grid model's problem instances
  std::uint64_t seed = 12345;
  double require = -1;
  bool quiet = false;
};

// --problem: one problem's expected response, teacher-forced predictions and greedy output (and the
// JSON report); exit 0 when the greedy answer is right, 1 when not.
int run_problem(const Args& a, const LoadedModel& lm, const Task& tk, const ModelView<float>& view) {
  const Problem p = tk.parse(a.problem);
  const Written w = tk.write(p);
  const Example ex = make_example(tk, p, lm.cfg, Offsets{a.s1, a.s2, a.s3});
  Acts<float> acts;
  std::vector<std::uint8_t> tf, gr;
  bool answer_tf = false;
  const bool ok_tf = teacher_forced_correct(acts, view, ex, &tf, &answer_tf);
  const bool ok_gr = greedy_correct(view, ex, &gr);
  std::vector<std::uint8_t> exp_eos(ex.tokens.begin() + w.eq + 1, ex.tokens.end());
  exp_eos.push_back(kDollar);
  // The greedy answer read back in the task's format (when the output is one).
  std::string greedy_answer = "(not a well-formed sequence)";
  std::vector<std::uint8_t> whole(ex.tokens.begin(), ex.tokens.begin() + w.eq + 1);
  whole.insert(whole.end(), gr.begin(), gr.end());
  if (!whole.empty() && whole.back() == kDollar) whole.pop_back();
  try {
    const Reading rd = tk.read(whole);
    greedy_answer = rd.answer + (rd.consistent ? "" : " (scratchpad inconsistent: " + rd.why + ")");
  } catch (const InputError&) {
  }
  std::printf("problem  %s  (%s: %s, T=%lld, answer %s)\n", tk.to_string(p).c_str(), tk.name(),
              tk.shape_words(p).c_str(), static_cast<long long>(w.T()), tk.reference_answer(p).c_str());
  std::printf("query    %s\n",
              tokens_to_string(std::vector<std::uint8_t>(ex.tokens.begin(), ex.tokens.begin() + w.eq + 1)).c_str());
  std::printf("expected %s\nteacher  %s  (%s; answer tokens %s)\ngreedy   %s  (%s; answer %s)\n",
              tokens_to_string(exp_eos).c_str(), tokens_to_string(tf).c_str(), ok_tf ? "exact" : "wrong",
              answer_tf ? "right" : "wrong", tokens_to_string(gr).c_str(), ok_gr ? "exact" : "wrong",
              greedy_answer.c_str());
  if (!a.json_path.empty()) {
    nlohmann::json logits = nlohmann::json::array();
    for (std::int64_t k = w.eq; k < w.T(); ++k)
      logits.push_back(std::vector<float>(acts.logits.begin() + k * lm.cfg.vocab, acts.logits.begin() + (k + 1) * lm.cfg.vocab));
    nlohmann::json rep = {{"problem", tk.to_string(p)}, {"tokens", tokens_to_string(ex.tokens)},
                          {"pos1", ex.pos[0]}, {"pos2", ex.pos[1]}, {"expected", tokens_to_string(exp_eos)},
                          {"teacher", tokens_to_string(tf)}, {"greedy", tokens_to_string(gr)},
                          {"teacher_exact", ok_tf}, {"greedy_exact", ok_gr}, {"logits_from_eq", logits}};
    if (tk.kind() != TaskKind::addition) {
      rep["task"] = tk.name();
      rep["pos3"] = ex.pos[2];
      rep["answer"] = tk.reference_answer(p);
      rep["teacher_answer_exact"] = answer_tf;
      rep["greedy_answer"] = greedy_answer;
    }
    report::write_json_report(a.json_path, "evaluate", ok_gr ? "pass" : "fail", rep);
  }
  return ok_gr ? 0 : 1;
}

// --instance / --table: the grid universal transformer's problem instances (the side-by-side table),
// greedy decoding; CSV, JSON and a table on stdout. NA where an instance needs IDs beyond max_pos.
int run_instances(const Args& a, const std::vector<grid::Instance>& insts, const ModelView<float>& view) {
  std::string csv = "instance,samples,answer_exact,answer_accuracy,char_accuracy,exact,accuracy,seconds\n";
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-12s %8s %10s %10s %10s %9s\n", "instance", "samples", "seq(ans)", "char", "exact", "seconds");
  for (const grid::Instance& inst : insts) {
    const auto t0 = std::chrono::steady_clock::now();
    const InstanceCounts r = eval_decoder_instance(view, inst.terms_lo, inst.terms_hi, inst.digits_lo, inst.digits_hi,
                                                   a.samples, a.seed, a.threads);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r.fits) {
      std::printf("%-12s %8s %10s %10s %10s %9s   (position IDs beyond max_pos)\n", inst.name().c_str(), "NA", "NA", "NA",
                  "NA", "-");
      csv += fmt::format("{},0,,,,,,\n", inst.name());
      rows.push_back({{"instance", inst.name()}, {"fits", false}});
      continue;
    }
    const double acc = double(r.exact) / double(r.samples);
    std::printf("%-12s %8lld %10.4f %10.4f %10.4f %9.1f\n", inst.name().c_str(), static_cast<long long>(r.samples),
                r.answer_accuracy(), r.char_accuracy(), acc, sec);
    std::fflush(stdout);
    csv += fmt::format("{},{},{},{:.6f},{:.6f},{},{:.6f},{:.2f}\n", inst.name(), r.samples, r.answer_exact,
                       r.answer_accuracy(), r.char_accuracy(), r.exact, acc, sec);
    rows.push_back({{"instance", inst.name()}, {"fits", true}, {"samples", r.samples}, {"answer_exact", r.answer_exact},
                    {"char_correct", r.char_correct}, {"char_valid", r.char_valid}, {"exact", r.exact},
                    {"answer_accuracy", r.answer_accuracy()}, {"char_accuracy", r.char_accuracy()},
                    {"accuracy", acc}, {"seconds", sec}});
  }
  atomic_write(a.csv, csv);
  if (!a.json_path.empty())
    report::write_json_report(a.json_path, "evaluate", "done",
                              {{"model", a.model}, {"seed", a.seed}, {"mode", "greedy"}, {"instances", rows}});
  return 0;
}

// The training region config.json records (train_n = 0: none), read as far as it is integers.
TrainConfig training_region(const nlohmann::json& config_json) {
  TrainConfig region;
  region.train_n = region.train_m = 0;
  if (config_json.contains("train") && config_json["train"].is_object()) {
    const auto& t = config_json["train"];
    if (t.contains("train_n") && t["train_n"].is_number_integer()) region.train_n = t["train_n"].get<int>();
    if (t.contains("train_m") && t["train_m"].is_number_integer()) region.train_m = t["train_m"].get<int>();
  }
  return region;
}

// The evaluated grid: accuracy per row and column (NaN: the cell does not fit the model), the CSV text,
// the JSON cells, the greedy disagreements, the worst in-distribution accuracy (2: none) and the time.
struct Grid {
  std::vector<std::vector<double>> acc;
  std::vector<int> rows, cols;
  std::string csv_text;
  nlohmann::json cells = nlohmann::json::array();
  std::int64_t disagree = 0;
  double worst_in = 2, secs = 0;
};

Grid eval_grid(const Args& a, const Task& tk, const GridAxis& a0, const GridAxis& a1, const TrainConfig& region,
               const ModelView<float>& view, EvalMode mode, TrainDevice* dev) {
  const bool two = tk.two_axes();
  Grid g;
  const bool addition = tk.kind() == TaskKind::addition;  // its CSV and JSON as they always were
  const auto t0 = std::chrono::steady_clock::now();
  for (int j = a.m_min; j <= a.m_max; ++j) g.cols.push_back(j);
  g.csv_text = two ? "n,m,samples,exact,accuracy" : "n,samples,exact,accuracy";
  g.csv_text += addition ? "\n" : ",answer_exact,answer_accuracy\n";
  ProgressOptions popt;
  popt.quiet = a.quiet;
  const std::int64_t n_rows = (a.n_max - a.n_min) / a.n_step + 1;
  Progress prog("evaluate", n_rows * std::int64_t(g.cols.size()), "cells", popt);
  prog.message(two ? fmt::format("exact match (%) per cell: one row per {} = {}..{}, columns {} = {}..{}", a0.csv, a.n_min,
                                 a.n_max, a1.csv, a.m_min, a.m_max)
                   : fmt::format("exact match (%) per {} = {}..{} step {}: whole response, answer token", a0.csv,
                                 a.n_min, a.n_max, a.n_step));
  for (int i = a.n_min; i <= a.n_max; i += a.n_step) {
    g.rows.push_back(i);
    g.acc.emplace_back();
    std::vector<double> answers;
    for (int j = a.m_min; j <= a.m_max; ++j) {
      const auto r = eval_cell(view, tk, i, j, a.samples, a.seed, a.threads, mode, dev);
      const double x = r.fits ? r.accuracy() : NAN, aa = r.fits ? r.answer_accuracy() : NAN;
      g.acc.back().push_back(x);
      answers.push_back(aa);
      g.disagree += r.disagree;
      if (r.fits && tk.in_training_region(region, i, j)) g.worst_in = std::min(g.worst_in, x);
      const std::string key = two ? fmt::format("{},{}", i, j) : fmt::format("{}", i);
      g.csv_text += r.fits ? fmt::format("{},{},{},{:.4f}", key, r.samples, r.exact, x) : fmt::format("{},0,0,NA", key);
      if (!addition) g.csv_text += r.fits ? fmt::format(",{},{:.4f}", r.answer_exact, aa) : ",0,NA";
      g.csv_text += "\n";
      nlohmann::json cell = {{"n", i}, {"m", j}, {"samples", r.samples}, {"exact", r.exact},
                             {"accuracy", r.fits ? nlohmann::json(x) : nlohmann::json(nullptr)}};
      if (!addition) {
        cell["answer_exact"] = r.answer_exact;
        cell["answer_accuracy"] = r.fits ? nlohmann::json(aa) : nlohmann::json(nullptr);
      }
      if (!two) cell.erase("m");
      g.cells.push_back(cell);
      prog.add();
    }
    if (!two) g.acc.back().push_back(answers[0]);  // one-axis tasks: column 2 = the answer-token metric
    std::string row;
    for (double v : g.acc.back()) row += std::isnan(v) ? "   NA" : fmt::format(" {:4.0f}", 100 * v);
    prog.message(fmt::format("{}={:2d}:{}", a0.csv, i, row));
  }
  prog.finish();
  g.secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return g;
}

// The heatmap PNG: addition's as it always was; other tasks with their axes, parity's two columns.
void write_grid_png(const Args& a, const Task& tk, const Grid& g, const GridAxis& a0, const GridAxis& a1,
                    const TrainConfig& region) {
  const bool two = tk.two_axes();
  if (tk.kind() == TaskKind::addition) {
    write_heatmap_png(a.png, g.acc, a.n_min, a.m_min, region.train_n, region.train_m);
  } else {
    HeatmapAxes ax;
    ax.rows = g.rows;
    ax.ytitle = a0.title;
    if (two) {
      ax.xtitle = a1.title, ax.cols = g.cols;
      ax.col_lo = a1.min_value, ax.col_hi = region.train_m;
    } else {  // parity: column 1 the whole response, column 2 the answer token
      ax.xtitle = "1 WHOLE RESPONSE 2 ANSWER TOKEN", ax.cols = {1, 2};
      ax.col_lo = 1, ax.col_hi = region.train_n > 0 ? 2 : 0;
    }
    ax.row_lo = a0.min_value, ax.row_hi = region.train_n;
    write_png(a.png, heatmap_image(g.acc, ax));
  }
}

// The checks (--mode both's agreement, --require), the JSON report and the summary line; the exit code.
int grid_verdict(const Args& a, const Task& tk, const Grid& g, const TrainConfig& region, EvalMode mode) {
  const bool two = tk.two_axes(), addition = tk.kind() == TaskKind::addition;
  bool failed = false;
  if (mode == EvalMode::both && g.disagree > 0) {
    std::fprintf(stderr, "evaluate: teacher-forced and greedy verdicts disagree on %lld instances\n",
                 static_cast<long long>(g.disagree));
    failed = true;
  }
  if (a.require >= 0 && g.worst_in <= 1 && g.worst_in < a.require) {
    std::fprintf(stderr, "evaluate: an in-distribution cell has accuracy %.4f < --require %.4f\n", g.worst_in, a.require);
    failed = true;
  }
  if (!a.json_path.empty()) {
    nlohmann::json rep = {{"model", a.model},       {"mode", a.mode_s},     {"device", a.device},  {"samples", a.samples},
                          {"precision", a.precision_s},
                          {"seed", a.seed},         {"n_range", {a.n_min, a.n_max}}, {"m_range", {a.m_min, a.m_max}},
                          {"train_n", region.train_n},   {"train_m", region.train_m}, {"cells", g.cells},
                          {"disagreements", g.disagree}, {"min_in_distribution", g.worst_in <= 1 ? nlohmann::json(g.worst_in) : nlohmann::json(nullptr)},
                          {"seconds", g.secs},      {"failed", failed}};
    if (!addition) {
      rep["task"] = tk.name();
      rep["n_step"] = a.n_step;
      if (!two) rep.erase("m_range");
      rep["metrics"] = {{"accuracy", "teacher-forced exact match of the whole response (scratchpad and EOS)"},
                        {"answer_accuracy", "teacher-forced exact match of the final answer's tokens alone"}};
    }
    const bool checks = a.require >= 0 || mode == EvalMode::both;  // the verdict is the exit code's
    report::write_json_report(a.json_path, "evaluate", failed ? "fail" : checks ? "pass" : "done", rep);
  }
  std::printf("evaluated %d x %d cells x %lld samples in %.1f s; %s, %s\n", int(g.rows.size()), int(g.cols.size()),
              static_cast<long long>(a.samples), g.secs, a.csv.c_str(), a.png.c_str());
  return failed ? 1 : 0;
}
// The options whose presence matters (a flag given at its default is still given), and --table's text.
struct Flags {
  CLI::Option *nmin = nullptr, *nmax = nullptr, *nstep = nullptr, *mmin = nullptr, *mmax = nullptr;
  CLI::Option *samples = nullptr, *seed = nullptr, *mode = nullptr, *csv = nullptr, *png = nullptr;
  CLI::Option *require = nullptr, *problem = nullptr, *s1 = nullptr, *s2 = nullptr, *s3 = nullptr;
  std::string table;
};

// Every option, bound to a and f (both outlive the parse).
void add_options(CLI::App& app, Args& a, Flags& f) {
  cli::add_string(app, "--model", a.model, "model directory (config.json + model.safetensors)")->required();
  cli::add_string(app, "--task", a.task_s,
                  "the task the model was trained on (config.json's train.task; addition when absent): another is "
                  "refused (" + task_names() + ")");
  f.nmin = cli::add_int(app, "--n-min", a.n_min, "smallest row value n (default: the task's grid)", -1'000'000, 1'000'000, false);
  f.nmax = cli::add_int(app, "--n-max", a.n_max, "largest row value n (default: the task's grid)", -1'000'000, 1'000'000, false);
  f.nstep = cli::add_int(app, "--n-step", a.n_step, "step between rows (default: the task's grid; parity 5)", 1,
                               1'000'000, false);
  f.mmin = cli::add_int(app, "--m-min", a.m_min, "smallest column value m (default: the task's grid)", -1'000'000,
                              1'000'000, false);
  f.mmax = cli::add_int(app, "--m-max", a.m_max, "largest column value m (default: the task's grid)", -1'000'000,
                              1'000'000, false);
  f.samples = cli::add_int(app, "--samples", a.samples, "samples per cell (the paper: 1000)", 1);
  f.seed = cli::add_seed(app, a.seed, "seed of the test samples (each cell seeded from (seed, n, m))");
  cli::add_threads(app, a.threads);
  f.mode = cli::add_string(app, "--mode", a.mode_s,
                                 "teacher (one forward per instance) | greedy (KV-cache decoding) | both (teacher "
                                 "verdicts, greedy checked to agree) (default teacher)");
  f.csv = cli::add_output(app, "--csv", a.csv,
                                "CSV output (default grid.csv in the current directory; never into --model): "
                                "n,m,samples,exact,accuracy (addition); other tasks add answer_exact,answer_accuracy, "
                                "and parity has no m column");
  f.png = cli::add_output(app, "--png", a.png, "PNG heatmap output (default grid.png in the current directory)");
  f.require = cli::add_real(app, "--require", a.require,
                                  "fail (exit 1) if any evaluated cell inside the training region has accuracy (a "
                                  "fraction) below this; -1 = off",
                                  -1, 1);
  cli::add_json(app, a.json_path, "JSON report");
  cli::add_device(app, a.device,
                  "auto: cpu-fast for a teacher-forced grid where it runs the model, else cpu (greedy decoding, "
                  "--problem and --instance run on cpu); never a GPU | cpu: the reference | cpu-fast (grid, teacher-forced only: packed batches on the fast CPU device, --threads; "
                  "attention streamed over rows, no T x T buffer) | cuda (grid, teacher-forced only, packed batches on "
                  "a GPU; exit 2 without a device)");
  cli::add_string(app, "--precision", a.precision_s,
                  "fp32 | bf16: the forward's arithmetic (bf16: the rounding points of bf16 training, as the authors "
                  "evaluate under autocast) (default fp32)");
  f.problem = cli::add_string(app, "--problem", a.problem,
                  "instead of the grid: one problem in the task's notation (57+48+96, 0101, 37*925; spaces "
                  "ignored); prints the expected response, the teacher-forced predictions and the greedy output "
                  "(JSON adds tokens, position IDs and response logits); exit 1 if the greedy answer is wrong. Takes "
                  "none of the grid's options (--csv, --png, --n-*, --m-*, --samples, --seed, --mode, --require)");
  const std::int64_t kMaxOffset = std::numeric_limits<std::int64_t>::max();
  f.s1 = cli::add_int(app, "--s1", a.s1, "with --problem: level-1 position offset (at most what max_pos1 allows)",
                            1, kMaxOffset);
  f.s2 = cli::add_int(app, "--s2", a.s2, "with --problem: level-2 position offset (at most what max_pos2 allows)",
                            1, kMaxOffset);
  f.s3 = cli::add_int(app, "--s3", a.s3,
                            "with --problem: level-3 position offset (coupled3; at most what max_pos3 allows)", 1,
                            kMaxOffset);
  app.add_option("--instance", a.instances,
                 "instead of the grid: the grid universal transformer's problem instance TERMSxDIGITS (each N or LO-HI; "
                 "repeatable): problems with every term's digits uniform (leading zeros kept), greedy decoding; "
                 "prints and writes (--csv, --json) the answer's exact match, the grid model's character accuracy "
                 "and the whole response's exact match");
  cli::add_string(app, "--table", f.table, "instead of the grid: the instances of evaluate_grid's --table (iii | "
                  "iv-digits | iv-terms | terms)");
}

// The flags' combinations (InputError before the model is read); the evaluation mode and the parsed
// --instance/--table instances.
EvalMode check_flags(Args& a, const Flags& f, std::vector<grid::Instance>& insts) {
  if (!a.task_s.empty()) parse_task(a.task_s);  // a misspelt name before the model is read
  EvalMode mode = EvalMode::teacher;
  if (a.mode_s == "teacher") mode = EvalMode::teacher;
  else if (a.mode_s == "greedy") mode = EvalMode::greedy;
  else if (a.mode_s == "both") mode = EvalMode::both;
  else throw InputError(fmt::format("--mode '{}' unknown (teacher|greedy|both)", a.mode_s));
  // auto: the CPU's reference wherever only it runs (greedy decoding, --problem, --instance); explicit names
  // that cannot run there are refused
  const bool explicit_device = a.device != "auto";
  if (!explicit_device && (mode != EvalMode::teacher || !a.problem.empty() || !a.instances.empty() || !f.table.empty())) a.device = "cpu";
  if (a.device != "cpu" && mode != EvalMode::teacher)
    throw InputError(fmt::format("--device {} evaluates teacher-forced only (--mode teacher); greedy decoding runs on "
                                 "the CPU", a.device));
  if (a.device != "cpu" && !a.problem.empty())
    throw InputError(fmt::format("--problem runs on the CPU only (drop --device {})", a.device));
  if (f.problem->count() && a.problem.find_first_not_of(' ') == std::string::npos)  // not the grid by mistake
    throw InputError("--problem is empty: give a problem in the task's notation (e.g. 57+48+96)");
  if (!a.problem.empty())  // what a grid reads would be silently ignored: refused instead
    for (const CLI::Option* o : {f.csv, f.png, f.nmin, f.nmax, f.nstep, f.mmin, f.mmax, f.samples, f.seed, f.mode,
                                 f.require})
      if (o->count())
        throw InputError(fmt::format("--problem evaluates one problem and writes no grid: {} applies to the grid "
                                     "(drop it)", o->get_name()));
  if (a.problem.empty())  // and the offsets of --problem without one
    for (const CLI::Option* o : {f.s1, f.s2, f.s3})
      if (o->count())
        throw InputError(fmt::format("{} is an offset of --problem (the grid is evaluated at offsets 1): give "
                                     "--problem or drop it", o->get_name()));
  if (!f.table.empty())
    for (const auto& t : grid::paper_table(f.table)) a.instances.push_back(t);
  for (const auto& t : a.instances) insts.push_back(grid::Instance::parse(t));
  if (!a.instances.empty() && (!a.problem.empty() || (explicit_device && a.device != "cpu") || f.nmin->count() || f.nmax->count() ||
                               f.nstep->count() || f.mmin->count() || f.mmax->count() || a.png != "grid.png"))
    throw InputError("--instance/--table run greedy decoding on the CPU and take none of --problem, --device, "
                     "--n-*, --m-*, --png");
  return mode;
}

// The grid's axes: the task's, narrowed by the flags (InputError outside the task's range).
void resolve_axes(Args& a, const Flags& f, const Task& tk, GridAxis& a0, GridAxis& a1) {
  const bool two = tk.two_axes();
  if (!two && (f.mmin->count() || f.mmax->count()))
    throw InputError(fmt::format("task {} has one axis (n, the query length): drop --m-min/--m-max", tk.name()));
  if (!f.nmin->count()) a.n_min = a0.lo;
  if (!f.nmax->count()) a.n_max = f.nmin->count() ? std::max(a.n_min, a0.hi) : a0.hi;
  if (!f.nstep->count()) a.n_step = a0.step;
  if (!f.mmin->count()) a.m_min = a1.lo;
  if (!f.mmax->count()) a.m_max = f.mmin->count() ? std::max(a.m_min, a1.hi) : a1.hi;
  if (a.n_min < a0.min_value || a.n_max < a.n_min || a.n_max > a0.max_value)
    throw InputError(fmt::format("need {} <= --n-min <= --n-max <= {}", a0.min_value, a0.max_value));
  if (a.m_min < a1.min_value || a.m_max < a.m_min || a.m_max > a1.max_value)
    throw InputError(fmt::format("need {} <= --m-min <= --m-max <= {}", a1.min_value, a1.max_value));
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Evaluate a model directory written by `train` on its task's grid: exact match of the whole response\n"
      "(scratchpad and final EOS) per cell, teacher-forced, position offsets 1; for every task but addition\n"
      "also the exact match of the final answer's tokens alone (parity: the answer token, the paper's\n"
      "Figure 3 metric). Grids: addition and addition-noscratch TA(n, m), n = 1..30 digits, m = 2..30\n"
      "operands; addition-2op (n, m) digits of the two operands, 1..100; multiplication and\n"
      "multiplication-noscratch TM(n, m), 1..30; parity and parity-noscratch query lengths n = 5..100 step 5.\n"
      "Cells whose position IDs exceed the model's max_pos are reported as NA (grey in the heatmap).",
      "evaluate"};
  Args a;
  Flags f;
  add_options(app, a, f);
  cli::add_quiet(app, a.quiet);
  app.footer(cli::exit_codes_footer(true));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("evaluate", std::cerr, [&] {
    std::vector<grid::Instance> insts;
    const EvalMode mode = check_flags(a, f, insts);
    const Precision prec = parse_precision(a.precision_s);
    const LoadedModel lm = load_model_dir(a.model);
    const Task& tk = task_of_model(lm.config_json, a.task_s, a.model);
    tk.check_model(lm.cfg);
    const bool two = tk.two_axes();
    GridAxis a0 = tk.axis(0), a1 = two ? tk.axis(1) : GridAxis{"m", "", 1, 1, 1, 1, 1};
    resolve_axes(a, f, tk, a0, a1);
    if (!a.instances.empty()) {
      if (tk.kind() != TaskKind::addition) throw InputError("--instance/--table need a model of the addition task");
      for (const grid::Instance& inst : insts) {  // an instance's problems are held at once, as a cell's
        check_samples_fit(a.samples, tk, inst.digits_hi, std::max(2, inst.terms_hi),
                          fmt::format("--samples {} of {}", a.samples, inst.name()));
      }
      return run_instances(a, insts, ModelView<float>{lm.cfg, lm.lay, lm.params.data(), prec});
    }
    if (a.problem.empty())  // a cell's samples are held at once
      check_samples_fit(a.samples, tk, a.n_max, a.m_max,
                        fmt::format("--samples {} per cell up to {}", a.samples,
                                    tk.kind() == TaskKind::addition ? fmt::format("TA({}, {})", a.n_max, a.m_max)
                                                                    : fmt::format("{} cell ({}, {})", tk.name(), a.n_max, a.m_max)));
    const ModelView<float> view{lm.cfg, lm.lay, lm.params.data(), prec};
    std::string why;
    const std::shared_ptr<TrainDevice> dev = make_device_auto(a.device, lm.cfg, a.threads, prec, why);  // InputError -> exit 2
    if (!a.quiet && !why.empty()) std::fprintf(stderr, "evaluate: device auto: cpu, the reference (%s)\n", why.c_str());
    if (const std::string note = device_note(a.device, prec); !a.quiet && !note.empty())
      std::fprintf(stderr, "evaluate: %s\n", note.c_str());
    if (dev) {
      const std::vector<float> zeros(lm.params.size(), 0.f);
      dev->set_state(lm.params, zeros, zeros);
    }
    if (!a.problem.empty()) return run_problem(a, lm, tk, view);
    const TrainConfig region = training_region(lm.config_json);
    const Grid g = eval_grid(a, tk, a0, a1, region, view, mode, dev.get());
    atomic_write(a.csv, g.csv_text);
    write_grid_png(a, tk, g, a0, a1, region);
    return grid_verdict(a, tk, g, region, mode);
  });
}
