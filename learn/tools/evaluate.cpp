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
#include "manyadd/learn/cli_common.hpp"
#include "manyadd/learn/data.hpp"
#include "manyadd/learn/eval.hpp"
#include "manyadd/learn/io.hpp"
#include "manyadd/learn/plot.hpp"
#include "manyadd/learn/task.hpp"
#include "manyadd/learn/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;

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
  std::string model, csv, png, json_path, mode_s = "teacher", device = "cpu", precision_s = "fp32", task_s;
  int n_min = 0, n_max = 0, n_step = 0, m_min = 0, m_max = 0, threads = 2;
  std::int64_t samples = 1000;
  std::uint64_t seed = 12345;
  double require = -1;
  bool quiet = false;
  std::string problem;
  std::int64_t s1 = 1, s2 = 1, s3 = 1;
  cli::add_string(app, "--model", model, "model directory (config.json + model.safetensors)")->required();
  cli::add_string(app, "--task", task_s,
                  "the task the model was trained on (config.json's train.task; addition when absent): another is "
                  "refused (" + task_names() + ")");
  auto* o_nmin = cli::add_int(app, "--n-min", n_min, "smallest row value n (default: the task's grid)", -1'000'000, 1'000'000, false);
  auto* o_nmax = cli::add_int(app, "--n-max", n_max, "largest row value n (default: the task's grid)", -1'000'000, 1'000'000, false);
  auto* o_nstep = cli::add_int(app, "--n-step", n_step, "step between rows (default: the task's grid; parity 5)", 1,
                               1'000'000, false);
  auto* o_mmin = cli::add_int(app, "--m-min", m_min, "smallest column value m (default: the task's grid)", -1'000'000,
                              1'000'000, false);
  auto* o_mmax = cli::add_int(app, "--m-max", m_max, "largest column value m (default: the task's grid)", -1'000'000,
                              1'000'000, false);
  cli::add_int(app, "--samples", samples, "samples per cell (the paper: 1000)", 1);
  cli::add_seed(app, seed, "seed of the test samples (each cell seeded from (seed, n, m))");
  cli::add_threads(app, threads);
  cli::add_string(app, "--mode", mode_s,
                  "teacher (one forward per instance) | greedy (KV-cache decoding) | both (teacher verdicts, greedy "
                  "checked to agree) (default teacher)");
  csv = "grid.csv", png = "grid.png";
  cli::add_output(app, "--csv", csv,
                  "CSV output (default grid.csv in the current directory; never into --model): "
                  "n,m,samples,exact,accuracy (addition); other tasks add answer_exact,answer_accuracy, and parity has "
                  "no m column");
  cli::add_output(app, "--png", png, "PNG heatmap output (default grid.png in the current directory)");
  cli::add_real(app, "--require", require,
                "fail (exit 1) if any evaluated cell inside the training region has accuracy below this; < 0 = off");
  cli::add_json(app, json_path, "JSON report");
  cli::add_device(app, device,
                  "cpu | cpu-fast (grid, teacher-forced only: packed batches on the fast CPU device, --threads; "
                  "attention streamed over rows, no T x T buffer) | cuda (grid, teacher-forced only, packed batches on "
                  "a GPU; exit 2 without a device)");
  cli::add_string(app, "--precision", precision_s,
                  "fp32 | bf16: the forward's arithmetic (bf16: the rounding points of bf16 training, as the authors "
                  "evaluate under autocast) (default fp32)");
  cli::add_string(app, "--problem", problem,
                  "instead of the grid: one problem in the task's notation (57+48+96, 0101, 37*925); prints the "
                  "expected response, the teacher-forced predictions and the greedy output (JSON adds tokens, "
                  "position IDs and response logits); exit 1 if the greedy answer is wrong");
  const std::int64_t kMaxOffset = std::numeric_limits<std::int64_t>::max();
  cli::add_int(app, "--s1", s1, "with --problem: level-1 position offset (at most what max_pos1 allows)", 1, kMaxOffset);
  cli::add_int(app, "--s2", s2, "with --problem: level-2 position offset (at most what max_pos2 allows)", 1, kMaxOffset);
  cli::add_int(app, "--s3", s3, "with --problem: level-3 position offset (coupled3; at most what max_pos3 allows)", 1,
               kMaxOffset);
  cli::add_quiet(app, quiet);
  app.footer(cli::exit_codes_footer(true));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("evaluate", std::cerr, [&] {
    if (!task_s.empty()) parse_task(task_s);  // a misspelt name before the model is read
    EvalMode mode;
    if (mode_s == "teacher") mode = EvalMode::teacher;
    else if (mode_s == "greedy") mode = EvalMode::greedy;
    else if (mode_s == "both") mode = EvalMode::both;
    else throw InputError(fmt::format("--mode '{}' unknown (teacher|greedy|both)", mode_s));
    if (device != "cpu" && mode != EvalMode::teacher)
      throw InputError(fmt::format("--device {} evaluates teacher-forced only (--mode teacher); greedy decoding runs on "
                                   "the CPU", device));
    if (device != "cpu" && !problem.empty())
      throw InputError(fmt::format("--problem runs on the CPU only (drop --device {})", device));
    const Precision prec = parse_precision(precision_s);
    const LoadedModel lm = load_model_dir(model);
    const Task& tk = task_of_model(lm.config_json, task_s, model);
    tk.check_model(lm.cfg);
    // The grid: the task's axes, narrowed by the flags.
    const bool two = tk.two_axes();
    const GridAxis a0 = tk.axis(0);
    const GridAxis a1 = two ? tk.axis(1) : GridAxis{"m", "", 1, 1, 1, 1, 1};
    if (!two && (o_mmin->count() || o_mmax->count()))
      throw InputError(fmt::format("task {} has one axis (n, the query length): drop --m-min/--m-max", tk.name()));
    if (!o_nmin->count()) n_min = a0.lo;
    if (!o_nmax->count()) n_max = o_nmin->count() ? std::max(n_min, a0.hi) : a0.hi;
    if (!o_nstep->count()) n_step = a0.step;
    if (!o_mmin->count()) m_min = a1.lo;
    if (!o_mmax->count()) m_max = o_mmin->count() ? std::max(m_min, a1.hi) : a1.hi;
    if (n_min < a0.min_value || n_max < n_min || n_max > a0.max_value)
      throw InputError(fmt::format("need {} <= --n-min <= --n-max <= {}", a0.min_value, a0.max_value));
    if (m_min < a1.min_value || m_max < m_min || m_max > a1.max_value)
      throw InputError(fmt::format("need {} <= --m-min <= --m-max <= {}", a1.min_value, a1.max_value));
    if (problem.empty())  // a cell's samples are held at once
      check_samples_fit(samples, tk, n_max, m_max,
                        fmt::format("--samples {} per cell up to {}", samples,
                                    tk.kind() == TaskKind::addition ? fmt::format("TA({}, {})", n_max, m_max)
                                                                    : fmt::format("{} cell ({}, {})", tk.name(), n_max, m_max)));
    const ModelView<float> view{lm.cfg, lm.lay, lm.params.data(), prec};
    const std::shared_ptr<TrainDevice> dev = make_named_device(device, lm.cfg, threads, prec);  // InputError -> exit 2
    if (const std::string note = device_note(device, prec); !quiet && !note.empty())
      std::fprintf(stderr, "evaluate: %s\n", note.c_str());
    if (dev) {
      const std::vector<float> zeros(lm.params.size(), 0.f);
      dev->set_state(lm.params, zeros, zeros);
    }
    if (!problem.empty()) {
      const Problem p = tk.parse(problem);
      const Written w = tk.write(p);
      const Example ex = make_example(tk, p, lm.cfg, Offsets{s1, s2, s3});
      Acts<float> a;
      std::vector<std::uint8_t> tf, gr;
      bool answer_tf = false;
      const bool ok_tf = teacher_forced_correct(a, view, ex, &tf, &answer_tf);
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
      if (!json_path.empty()) {
        nlohmann::json logits = nlohmann::json::array();
        for (std::int64_t k = w.eq; k < w.T(); ++k)
          logits.push_back(std::vector<float>(a.logits.begin() + k * lm.cfg.vocab, a.logits.begin() + (k + 1) * lm.cfg.vocab));
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
        report::write_json_report(json_path, "evaluate", ok_gr ? "pass" : "fail", rep);
      }
      return ok_gr ? 0 : 1;
    }
    TrainConfig region;  // the training region, if known (train_n = 0: none)
    region.train_n = region.train_m = 0;
    if (lm.config_json.contains("train") && lm.config_json["train"].is_object()) {
      const auto& t = lm.config_json["train"];
      if (t.contains("train_n") && t["train_n"].is_number_integer()) region.train_n = t["train_n"].get<int>();
      if (t.contains("train_m") && t["train_m"].is_number_integer()) region.train_m = t["train_m"].get<int>();
    }
    const bool addition = tk.kind() == TaskKind::addition;  // its CSV and JSON as they always were
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<double>> acc;
    std::vector<int> rows, cols;
    for (int j = m_min; j <= m_max; ++j) cols.push_back(j);
    std::string csv_text = two ? "n,m,samples,exact,accuracy" : "n,samples,exact,accuracy";
    csv_text += addition ? "\n" : ",answer_exact,answer_accuracy\n";
    nlohmann::json cells = nlohmann::json::array();
    std::int64_t disagree = 0;
    double worst_in = 2;
    ProgressOptions popt;
    popt.quiet = quiet;
    const std::int64_t n_rows = (n_max - n_min) / n_step + 1;
    Progress prog("evaluate", n_rows * std::int64_t(cols.size()), "cells", popt);
    prog.message(two ? fmt::format("exact match (%) per cell: one row per {} = {}..{}, columns {} = {}..{}", a0.csv, n_min,
                                   n_max, a1.csv, m_min, m_max)
                     : fmt::format("exact match (%) per {} = {}..{} step {}: whole response, answer token", a0.csv,
                                   n_min, n_max, n_step));
    for (int i = n_min; i <= n_max; i += n_step) {
      rows.push_back(i);
      acc.emplace_back();
      std::vector<double> answers;
      for (int j = m_min; j <= m_max; ++j) {
        const auto r = eval_cell(view, tk, i, j, samples, seed, threads, mode, dev.get());
        const double a = r.fits ? r.accuracy() : NAN, aa = r.fits ? r.answer_accuracy() : NAN;
        acc.back().push_back(a);
        answers.push_back(aa);
        disagree += r.disagree;
        if (r.fits && tk.in_training_region(region, i, j)) worst_in = std::min(worst_in, a);
        const std::string key = two ? fmt::format("{},{}", i, j) : fmt::format("{}", i);
        csv_text += r.fits ? fmt::format("{},{},{},{:.4f}", key, r.samples, r.exact, a) : fmt::format("{},0,0,NA", key);
        if (!addition) csv_text += r.fits ? fmt::format(",{},{:.4f}", r.answer_exact, aa) : ",0,NA";
        csv_text += "\n";
        nlohmann::json cell = {{"n", i}, {"m", j}, {"samples", r.samples}, {"exact", r.exact},
                               {"accuracy", r.fits ? nlohmann::json(a) : nlohmann::json(nullptr)}};
        if (!addition) {
          cell["answer_exact"] = r.answer_exact;
          cell["answer_accuracy"] = r.fits ? nlohmann::json(aa) : nlohmann::json(nullptr);
        }
        if (!two) cell.erase("m");
        cells.push_back(cell);
        prog.add();
      }
      if (!two) acc.back().push_back(answers[0]);  // one-axis tasks: column 2 = the answer-token metric
      std::string row;
      for (double a : acc.back()) row += std::isnan(a) ? "   NA" : fmt::format(" {:4.0f}", 100 * a);
      prog.message(fmt::format("{}={:2d}:{}", a0.csv, i, row));
    }
    prog.finish();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    atomic_write(csv, csv_text);
    if (addition) {
      write_heatmap_png(png, acc, n_min, m_min, region.train_n, region.train_m);
    } else {
      HeatmapAxes ax;
      ax.rows = rows;
      ax.ytitle = a0.title;
      if (two) {
        ax.xtitle = a1.title, ax.cols = cols;
        ax.col_lo = a1.min_value, ax.col_hi = region.train_m;
      } else {  // parity: column 1 the whole response, column 2 the answer token
        ax.xtitle = "1 WHOLE RESPONSE 2 ANSWER TOKEN", ax.cols = {1, 2};
        ax.col_lo = 1, ax.col_hi = region.train_n > 0 ? 2 : 0;
      }
      ax.row_lo = a0.min_value, ax.row_hi = region.train_n;
      write_png(png, heatmap_image(acc, ax));
    }
    bool failed = false;
    if (mode == EvalMode::both && disagree > 0) {
      std::fprintf(stderr, "evaluate: teacher-forced and greedy verdicts disagree on %lld instances\n",
                   static_cast<long long>(disagree));
      failed = true;
    }
    if (require >= 0 && worst_in <= 1 && worst_in < require) {
      std::fprintf(stderr, "evaluate: an in-distribution cell has accuracy %.4f < --require %.4f\n", worst_in, require);
      failed = true;
    }
    if (!json_path.empty()) {
      nlohmann::json rep = {{"model", model},       {"mode", mode_s},     {"device", device},  {"samples", samples},
                            {"precision", precision_s},
                            {"seed", seed},         {"n_range", {n_min, n_max}}, {"m_range", {m_min, m_max}},
                            {"train_n", region.train_n},   {"train_m", region.train_m}, {"cells", cells},
                            {"disagreements", disagree}, {"min_in_distribution", worst_in <= 1 ? nlohmann::json(worst_in) : nlohmann::json(nullptr)},
                            {"seconds", secs},      {"failed", failed}};
      if (!addition) {
        rep["task"] = tk.name();
        rep["n_step"] = n_step;
        if (!two) rep.erase("m_range");
        rep["metrics"] = {{"accuracy", "teacher-forced exact match of the whole response (scratchpad and EOS)"},
                          {"answer_accuracy", "teacher-forced exact match of the final answer's tokens alone"}};
      }
      const bool checks = require >= 0 || mode == EvalMode::both;  // the verdict is the exit code's
      report::write_json_report(json_path, "evaluate", failed ? "fail" : checks ? "pass" : "done", rep);
    }
    std::printf("evaluated %d x %d cells x %lld samples in %.1f s; %s, %s\n", int(rows.size()), int(cols.size()),
                static_cast<long long>(samples), secs, csv.c_str(), png.c_str());
    return failed ? 1 : 0;
  });
}
