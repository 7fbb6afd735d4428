// evaluate: exact match of a trained model on the paper's grid TA(i, j) (Sec. 4.2: i = 1..30 digits,
// j = 2..30 operands, 1000 samples per cell), at offsets 1; CSV + PNG heatmap (the paper's axes, the
// training region outlined). Exit codes: 0 done, 1 a failed check (--require, or teacher-forced and
// greedy verdicts disagree under --mode both, or --problem answered wrongly), 2 bad usage or input, 3 internal
// error.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/cli.hpp"
#include "manyadd/learn/cli_common.hpp"
#include "manyadd/learn/cuda_device.hpp"
#include "manyadd/learn/data.hpp"
#include "manyadd/learn/eval.hpp"
#include "manyadd/learn/io.hpp"
#include "manyadd/learn/plot.hpp"

using namespace manyadd;
using namespace manyadd::learn;

int main(int argc, char** argv) {
  CLI::App app{
      "Evaluate a model directory written by `train` on the grid TA(i, j): exact match of the whole\n"
      "response (scratchpad and final EOS) per cell, offsets s1 = s2 = 1. Cells whose position IDs exceed\n"
      "the model's max_pos are reported as NA (grey in the heatmap).",
      "evaluate"};
  std::string model, csv, png, json_path, mode_s = "teacher", device = "cpu", precision_s = "fp32";
  int n_min = 1, n_max = 30, m_min = 2, m_max = 30, threads = 2;
  std::int64_t samples = 1000;
  std::uint64_t seed = 12345;
  double require = -1;
  std::string problem;
  std::int64_t s1 = 1, s2 = 1;
  cli::add_string(app, "--model", model, "model directory (config.json + model.safetensors)")->required();
  cli::add_int(app, "--n-min", n_min, "smallest operand length i");
  cli::add_int(app, "--n-max", n_max, "largest operand length i");
  cli::add_int(app, "--m-min", m_min, "smallest operand count j");
  cli::add_int(app, "--m-max", m_max, "largest operand count j");
  cli::add_int(app, "--samples", samples, "TA samples per cell (the paper: 1000)", 1);
  cli::add_seed(app, seed, "seed of the test samples (each cell seeded from (seed, i, j))");
  cli::add_threads(app, threads);
  cli::add_string(app, "--mode", mode_s,
                  "teacher (one forward per instance) | greedy (KV-cache decoding) | both (teacher verdicts, greedy "
                  "checked to agree) (default teacher)");
  cli::add_output(app, "--csv", csv, "CSV output (default MODEL/grid.csv): n,m,samples,exact,accuracy");
  cli::add_output(app, "--png", png, "PNG heatmap output (default MODEL/grid.png)");
  cli::add_real(app, "--require", require,
                "fail (exit 1) if any evaluated cell inside the training region has accuracy below this; < 0 = off");
  cli::add_json(app, json_path, "JSON report");
  cli::add_device(app, device, "cpu | cuda (grid, teacher-forced only, packed batches on a GPU; exit 2 without a device)");
  cli::add_string(app, "--precision", precision_s,
                  "fp32 | bf16: the forward's arithmetic (bf16: the rounding points of bf16 training, as the authors "
                  "evaluate under autocast) (default fp32)");
  cli::add_string(app, "--problem", problem,
                  "instead of the grid: one problem, e.g. 57+48+96; prints the expected response, the teacher-forced "
                  "predictions and the greedy output (JSON adds tokens, position IDs and response logits); exit 1 if "
                  "the greedy answer is wrong");
  cli::add_int(app, "--s1", s1, "with --problem: level-1 position offset");
  cli::add_int(app, "--s2", s2, "with --problem: level-2 position offset");
  app.footer(cli::exit_codes_footer(true));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("evaluate", std::cerr, [&] {
    if (n_min < 1 || n_max < n_min || n_max > 10000) throw InputError("need 1 <= --n-min <= --n-max <= 10000");
    if (m_min < 2 || m_max < m_min || m_max > 10000) throw InputError("need 2 <= --m-min <= --m-max <= 10000");
    EvalMode mode;
    if (mode_s == "teacher") mode = EvalMode::teacher;
    else if (mode_s == "greedy") mode = EvalMode::greedy;
    else if (mode_s == "both") mode = EvalMode::both;
    else throw InputError(fmt::format("--mode '{}' unknown (teacher|greedy|both)", mode_s));
    if (device == "cuda" && mode != EvalMode::teacher)
      throw InputError("--device cuda evaluates teacher-forced only (--mode teacher); greedy decoding runs on the CPU");
    if (device == "cuda" && !problem.empty()) throw InputError("--problem runs on the CPU only (drop --device cuda)");
    const Precision prec = parse_precision(precision_s);
    if (problem.empty())  // a cell's samples are held at once
      check_samples_fit(samples, n_max, m_max, fmt::format("--samples {} per cell up to TA({}, {})", samples, n_max, m_max));
    const LoadedModel lm = load_model_dir(model);
    const ModelView<float> view{lm.cfg, lm.lay, lm.params.data(), prec};
    std::unique_ptr<TrainDevice> dev;
    if (device == "cuda") {
      dev = make_cuda_device(lm.cfg, prec);  // InputError -> exit 2
      const std::vector<float> zeros(lm.params.size(), 0.f);
      dev->set_state(lm.params, zeros, zeros);
    }
    if (!problem.empty()) {
      const Problem p = parse_problem(problem);
      if (p.operands.size() < 2) throw InputError("--problem needs at least two operands");
      const Shape sh = shape_of(p);
      const Example ex = make_example(p, lm.cfg, s1, s2);
      Acts<float> a;
      std::vector<std::uint8_t> tf, gr;
      const bool ok_tf = teacher_forced_correct(a, view, ex, &tf);
      const bool ok_gr = greedy_correct(view, ex, &gr);
      const std::vector<std::uint8_t> expected(ex.tokens.begin() + sh.eq_index() + 1, ex.tokens.end());
      std::vector<std::uint8_t> exp_eos = expected;
      exp_eos.push_back(kDollar);
      std::printf("problem  %s  (n=%d, m=%d, l=%d, N=%lld, sum %s)\n", p.to_string().c_str(), sh.n, sh.m, sh.l,
                  static_cast<long long>(sh.N()), reference_sum(p).str().c_str());
      std::printf("query    %s\n", tokens_to_string(std::vector<std::uint8_t>(ex.tokens.begin(),
                                                                              ex.tokens.begin() + sh.eq_index() + 1)).c_str());
      std::printf("expected %s\nteacher  %s  (%s)\ngreedy   %s  (%s)\n", tokens_to_string(exp_eos).c_str(),
                  tokens_to_string(tf).c_str(), ok_tf ? "exact" : "wrong", tokens_to_string(gr).c_str(),
                  ok_gr ? "exact" : "wrong");
      if (!json_path.empty()) {
        nlohmann::json logits = nlohmann::json::array();
        for (std::int64_t k = sh.eq_index(); k < sh.N(); ++k)
          logits.push_back(std::vector<float>(a.logits.begin() + k * lm.cfg.vocab, a.logits.begin() + (k + 1) * lm.cfg.vocab));
        nlohmann::json rep = {{"problem", p.to_string()}, {"tokens", tokens_to_string(ex.tokens)},
                              {"pos1", ex.pos[0]}, {"pos2", ex.pos[1]}, {"expected", tokens_to_string(exp_eos)},
                              {"teacher", tokens_to_string(tf)}, {"greedy", tokens_to_string(gr)},
                              {"teacher_exact", ok_tf}, {"greedy_exact", ok_gr}, {"logits_from_eq", logits}};
        atomic_write(json_path, rep.dump() + "\n");
      }
      return ok_gr ? 0 : 1;
    }
    int train_n = 0, train_m = 0;
    if (lm.config_json.contains("train") && lm.config_json["train"].is_object()) {  // the training region, if known
      const auto& t = lm.config_json["train"];
      if (t.contains("train_n") && t["train_n"].is_number_integer()) train_n = t["train_n"].get<int>();
      if (t.contains("train_m") && t["train_m"].is_number_integer()) train_m = t["train_m"].get<int>();
    }
    if (csv.empty()) csv = model + "/grid.csv";
    if (png.empty()) png = model + "/grid.png";
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<double>> acc;
    std::string csv_text = "n,m,samples,exact,accuracy\n";
    nlohmann::json cells = nlohmann::json::array();
    std::int64_t disagree = 0;
    double worst_in = 2;
    for (int i = n_min; i <= n_max; ++i) {
      acc.emplace_back();
      for (int j = m_min; j <= m_max; ++j) {
        const auto r = eval_cell(view, i, j, samples, seed, threads, mode, dev.get());
        const double a = r.fits ? r.accuracy() : NAN;
        acc.back().push_back(a);
        disagree += r.disagree;
        if (r.fits && i <= train_n && j <= train_m) worst_in = std::min(worst_in, a);
        csv_text += r.fits ? fmt::format("{},{},{},{},{:.4f}\n", i, j, r.samples, r.exact, a)
                           : fmt::format("{},{},0,0,NA\n", i, j);
        cells.push_back({{"n", i}, {"m", j}, {"samples", r.samples}, {"exact", r.exact},
                         {"accuracy", r.fits ? nlohmann::json(a) : nlohmann::json(nullptr)}});
      }
      std::string row;
      for (double a : acc.back()) row += std::isnan(a) ? "   NA" : fmt::format(" {:4.0f}", 100 * a);
      std::fprintf(stderr, "n=%2d:%s\n", i, row.c_str());
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    atomic_write(csv, csv_text);
    write_heatmap_png(png, acc, n_min, m_min, train_n, train_m);
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
                            {"train_n", train_n},   {"train_m", train_m}, {"cells", cells},
                            {"disagreements", disagree}, {"min_in_distribution", worst_in <= 1 ? nlohmann::json(worst_in) : nlohmann::json(nullptr)},
                            {"seconds", secs},      {"failed", failed}};
      atomic_write(json_path, rep.dump(2) + "\n");
    }
    std::printf("evaluated %d x %d cells x %lld samples in %.1f s; %s, %s\n", n_max - n_min + 1, m_max - m_min + 1,
                static_cast<long long>(samples), secs, csv.c_str(), png.c_str());
    return failed ? 1 : 0;
  });
}
