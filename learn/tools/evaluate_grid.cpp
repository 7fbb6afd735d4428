// evaluate_grid: accuracy of a grid universal transformer (a model directory of train_grid) on problem
// instances Pi([N1, N2], [D1, D2]) with the authors' metrics -- character accuracy over the valid matches
// (PAD-PAD matches not counted) and sequence accuracy -- and the recurrent steps each sample took before
// halting (their Fig. 2). --table iii: Table III's seven instances; iv-digits and iv-terms: Table IV's two
// halves; --problem: one problem, its prediction and steps. Results on stdout (one row per instance),
// in --csv and --json. Progress on stderr unless --quiet.
// Exit codes: 0 done, 1 --problem answered wrongly, 2 bad usage or input, 3 internal error.
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/core/progress.hpp"
#include "manyadd/core/report.hpp"
#include "manyadd/learn/cli/cli_common.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/grid/grid_train.hpp"

using namespace manyadd;
using namespace manyadd::learn;
using namespace manyadd::learn::grid;

namespace {
// What one evaluation reads, after the flags are checked and the model is loaded.
struct Settings {
  std::string model, csv, json_path, problems_csv;
  std::int64_t samples = 0;
  std::uint64_t seed = 0;
  int threads = 1, batch = 1, steps = 0, fixed_steps = -1, rows = 0, cols = 0;
  bool greedy = false, quiet = false, fast = false;
  GridSizeRule rule;
  Interventions iv;
};

// --problem: the prediction, the steps, Seq2Grid's actions and the halting probabilities; 1 if wrong.
int run_problem(const LoadedGridModel& m, const Problem& prob, const Settings& S) {
int dmax = 0;
for (const auto& o : prob.operands) dmax = std::max(dmax, int(o.size()));
const int H = S.rows ? S.rows : int(prob.operands.size()) + S.rule.extra_rows;
const int W = S.cols ? S.cols : dmax + S.rule.extra_cols;
check_grid_eval_fits(m.cfg, int(problem_tokens(prob).size()), H, W, 1);
const GridBatch b = make_batch({prob}, H, W);
std::vector<SampleActs<float>> ws;
const BatchEval e = eval_batch(m.view(S.fast), b, seed_mix(S.seed, 0x9B0B), S.greedy, S.steps, 1, ws, nullptr, S.iv);
std::string pred;
for (auto t : e.preds[0])
  if (t != kPad) pred += grid::token_char(t);
const std::string want = problem_sum(prob);
const bool ok = e.matches[0].first == e.matches[0].second;
std::printf("%s= %s (steps %d, grid %d x %d)%s\n", prob.to_string().c_str(), pred.c_str(), e.steps[0], H, W,
            ok ? "" : fmt::format("  WRONG: the sum is {}", want).c_str());
// Seq2Grid's actions per token (the paper's Fig. 4) and the halting probabilities per step
const SampleActs<float>& a = ws[0];
nlohmann::json actions = nlohmann::json::array(), lambdas = a.lambda;
std::printf("actions (TLU NLP NOP):");
for (int t = 0; t < b.S; ++t) {
  const float* x = a.act.data() + 3 * t;
  std::printf(" %c:%.2f/%.2f/%.2f", grid::token_char(b.tokens[std::size_t(t)]), x[0], x[1], x[2]);
  actions.push_back({{"token", std::string(1, grid::token_char(b.tokens[std::size_t(t)]))}, {"TLU", x[0]},
                     {"NLP", x[1]}, {"NOP", x[2]}});
}
std::printf("\nlambda per step:");
for (float l : a.lambda) std::printf(" %.3f", l);
std::printf("\n");
if (!S.json_path.empty())
  report::write_json_report(S.json_path, "evaluate_grid", ok ? "pass" : "fail",
                            {{"problem", prob.to_string()}, {"prediction", pred}, {"sum", want},
                             {"steps", e.steps[0]}, {"H", H}, {"W", W}, {"actions", actions},
                             {"lambda", lambdas}});
return ok ? 0 : 1;
}

// --instance/--table: one row per instance on stdout, in --csv, --problems-csv and --json.
int run_instances(const LoadedGridModel& m, const std::vector<Instance>& insts, const Settings& S) {
  for (const Instance& in : insts) {
    const auto [H, W] = std::pair<int, int>{in.terms_hi + S.rule.extra_rows + S.rule.rand_rows,
                                            in.digits_hi + S.rule.extra_cols + S.rule.rand_cols};
    check_grid_eval_fits(m.cfg, in.terms_hi * (in.digits_hi + 1), H, W, S.threads);
  }
  if (!S.csv.empty()) check_output_path(S.csv);
  std::unique_ptr<AtomicFile> per_problem;  // streamed: one row per problem, written as the batches finish
  if (!S.problems_csv.empty()) {
    check_output_path(S.problems_csv);
    per_problem = std::make_unique<AtomicFile>(S.problems_csv);
    per_problem->append("instance,index,H,W,steps,correct,valid,exact,argmax_weight,problem,sum,prediction\n");
  }
  nlohmann::json rows_json = nlohmann::json::array();
  std::string csv_text = "instance,samples,char_acc,seq_acc,mean_steps,seconds,steps_hist\n";
  std::printf("%-12s %8s %8s %8s %10s %9s\n", "instance", "samples", "char", "seq", "mean_steps", "seconds");
  for (const Instance& in : insts) {
    ProgressOptions popt;
    popt.quiet = S.quiet;
    popt.final_after_s = 5;
    Progress prog("evaluate_grid " + in.name(), S.samples, "samples", popt);
    std::int64_t index = 0;
    std::function<void(const GridBatch&, const BatchEval&)> rows_of;
    if (per_problem) rows_of = [&](const GridBatch& b, const BatchEval& e) {
      std::string out;
      for (int i = 0; i < b.B; ++i) {
        const auto [c, v] = e.matches[std::size_t(i)];
        std::string pred;
        for (auto t : e.preds[std::size_t(i)]) pred += grid::token_char(t);
        const Problem& p = b.problems[std::size_t(i)];
        out += fmt::format("{},{},{},{},{},{},{},{},{:.6g},{},{},{}\n", in.name(), index++, b.H, b.W,
                           e.steps[std::size_t(i)], c, v, c == v ? 1 : 0, e.argmax_weight[std::size_t(i)],
                           p.to_string(), problem_sum(p), pred);
      }
      per_problem->append(out);
    };
    const InstanceResult r = evaluate_instance(m.view(S.fast), in, S.samples, S.seed, S.rule, S.batch, S.greedy, S.steps, S.threads,
                                               &prog, rows_of, S.iv);
    prog.finish();
    std::printf("%-12s %8lld %8.4f %8.4f %10.2f %9.1f\n", in.name().c_str(), static_cast<long long>(r.samples),
                r.char_acc(), r.seq_acc(), r.mean_steps(), r.seconds);
    std::fflush(stdout);
    std::string hist;
    for (std::size_t k = 0; k < r.steps_hist.size(); ++k)
      if (r.steps_hist[k]) hist += fmt::format("{}{}:{}", hist.empty() ? "" : ";", k, r.steps_hist[k]);
    csv_text += fmt::format("{},{},{:.6f},{:.6f},{:.4f},{:.1f},{}\n", in.name(), r.samples, r.char_acc(), r.seq_acc(),
                            r.mean_steps(), r.seconds, hist);
    rows_json.push_back(r.to_json());
  }
  if (!S.csv.empty()) atomic_write(S.csv, csv_text);
  if (per_problem) per_problem->commit();
  if (!S.json_path.empty())
    report::write_json_report(S.json_path, "evaluate_grid", "done",
                              {{"model", S.model}, {"seed", S.seed}, {"greedy_halt", S.greedy}, {"max_steps", S.steps},
                               {"fixed_steps", S.fixed_steps}, {"hard_actions", S.iv.hard_actions},
                               {"batch", S.batch}, {"instances", rows_json}});
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Evaluate a grid universal transformer (a model directory written by train_grid) on problem instances\n"
      "TERMSxDIGITS (each N or LO-HI: 2x100 is 2 terms of 100 digits, 1-4x1-10 the training distribution):\n"
      "character and sequence accuracy as the authors compute them, and the recurrent steps before halting.\n"
      "Each batch of --batch problems shares one grid, drawn by the model's training rule (H = N + 1 + U[0, 3],\n"
      "W = D + 3 + U[0, 3] by default); halting is sampled (Bernoulli(lambda_n), the authors' test) unless\n"
      "--greedy-halt. Everything is a function of (--seed, instance): any thread count gives the same numbers.",
      "evaluate_grid"};
  std::string model, csv, json_path, table_s, problem, problems_csv;
  std::vector<std::string> instances;
  std::int64_t samples = 1000;
  std::uint64_t seed = 1;
  int threads = 2, batch = 128, max_steps = -1, rows = 0, cols = 0, fixed_steps = -1;
  bool greedy = false, quiet = false, hard_actions = false;
  cli::add_string(app, "--model", model, "model directory (config.json + model.safetensors)")->required();
  app.add_option("--instance", instances, "an instance TERMSxDIGITS (repeatable)");
  cli::add_string(app, "--table", table_s,
                  "iii (Table III: 2x15 2x100 2x602 1-4x1-10 1-5x1-5 5-6x1-10 7-10x1-10) | iv-digits (2x1-1000 ... "
                  "2x4000) | iv-terms (5x5 ... 10x5) | terms (1x5 ... 10x5)");
  auto* o_samples = cli::add_int(app, "--samples", samples, "problems per instance (at least 1000 for a table row)", 1, 100'000'000);
  cli::add_seed(app, seed, "seed of the problems, grids and halting draws");
  cli::add_threads(app, threads);
  std::string device = "auto";
  cli::add_device(app, device,
                  "auto: cpu-fast where oneDNN loads, else cpu (one line says why) | cpu (Eigen products: the reference) | cpu-fast (the linear layers' products on oneDNN, AVX-512 "
                  "where the CPU has it; the same numbers up to fp32 rounding)",
                  /*cuda=*/false);
  auto* o_batch = cli::add_int(app, "--batch", batch, "problems per grid (their test batches: 128)", 1, 1'000'000);
  cli::add_int(app, "--max-steps", max_steps, "most recurrent steps (-1: the model's max_steps_eval)", -1, 10000);
  app.add_flag("--greedy-halt", greedy, "halt when lambda_n >= 1/2 instead of sampling");
  cli::add_int(app, "--fixed-steps", fixed_steps,
               "every problem takes exactly this many recurrent steps, whatever the halting says (an experiment: "
               "what more or fewer steps compute; not the paper's test)",
               -1, 10000);
  app.add_flag("--hard-actions", hard_actions,
               "Seq2Grid's actions one-hot at their argmax instead of the soft mixture (an experiment: what the "
               "mixture's leak costs on long inputs; not the paper's test)");
  auto* o_problem = cli::add_string(app, "--problem", problem,
                                    "one problem, e.g. 57+48+96 (spaces ignored, as evaluate reads one): prints the "
                                    "prediction and the steps; takes none of --csv, --problems-csv, --samples, "
                                    "--batch");
  auto* o_rows = cli::add_int(app, "--rows", rows, "--problem: grid rows H (0: terms + 1)", 0, 100000);
  auto* o_cols = cli::add_int(app, "--cols", cols, "--problem: grid columns W (0: longest operand + 3)", 0, 1000000);
  auto* o_csv = cli::add_output(app, "--csv", csv, "CSV: instance,samples,char_acc,seq_acc,mean_steps,seconds,steps_hist");
  cli::add_output(app, "--problems-csv", problems_csv,
                  "CSV, one row per problem: instance,index,H,W,steps,correct,valid,exact,argmax_weight,problem,sum,"
                  "prediction (correct / valid: the character matches; argmax_weight: the weight of the argmax "
                  "actions' grid in Seq2Grid's soft mixture; prediction: the top row's W tokens, _ = PAD)");
  cli::add_json(app, json_path, "JSON report (every instance with its steps histogram)");
  cli::add_quiet(app, quiet);
  app.footer(cli::exit_codes_footer(true));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("evaluate_grid", std::cerr, [&]() -> int {
    if (!table_s.empty())
      for (const auto& s : paper_table(table_s)) instances.push_back(s);
    if (problem.empty() && instances.empty()) throw InputError("nothing to evaluate: give --instance, --table or --problem");
    if (!problem.empty() && !instances.empty()) throw InputError("--problem and --instance/--table exclude each other");
    if (fixed_steps >= 0 && (max_steps >= 0 || greedy))
      throw InputError("--fixed-steps sets the steps: it excludes --max-steps and --greedy-halt");
    if (o_problem->count() && problem.find_first_not_of(' ') == std::string::npos)
      throw InputError("--problem is empty: give a problem, e.g. 57+48+96");
    if (!problem.empty() && !problems_csv.empty())
      throw InputError("--problems-csv lists the problems of --instance/--table (--problem prints its own)");
    if (!problem.empty())  // what the instances read would be silently ignored: refused instead
      for (const CLI::Option* o : {o_csv, o_samples, o_batch})
        if (o->count())
          throw InputError(fmt::format("--problem evaluates one problem and writes no table: {} applies to "
                                       "--instance/--table (drop it)", o->get_name()));
    if (problem.empty())
      for (const CLI::Option* o : {o_rows, o_cols})
        if (o->count())
          throw InputError(fmt::format("{} sets the grid of --problem (an instance's grids follow the model's "
                                       "rule): give --problem or drop it", o->get_name()));
    std::vector<Instance> insts;
    for (const auto& s : instances) insts.push_back(Instance::parse(s));
    Problem prob;
    if (!problem.empty()) prob = parse_grid_problem(problem);
    std::string why;
    device = resolve_device_auto(device, why);
    if (!quiet && !why.empty()) std::fprintf(stderr, "evaluate_grid: device auto: cpu, the reference (%s)\n", why.c_str());
    const bool fast = device == "cpu-fast";
    if (fast) require_fast_products();
    const LoadedGridModel m = load_grid_model(model);
    GridSizeRule rule;
    if (m.config_json.contains("train")) {
      GridTrainConfig tc;
      from_json(m.config_json["train"], tc);
      rule = tc.grid_rule();
    }
    const int steps = fixed_steps >= 0 ? fixed_steps : max_steps >= 0 ? max_steps : m.cfg.max_steps_eval;
    Interventions iv;
    iv.run_to_max = fixed_steps >= 0;
    iv.hard_actions = hard_actions;
    Settings S;
    S.model = model, S.csv = csv, S.json_path = json_path, S.problems_csv = problems_csv;
    S.samples = samples, S.seed = seed, S.threads = threads, S.batch = batch, S.steps = steps;
    S.fixed_steps = fixed_steps, S.rows = rows, S.cols = cols, S.greedy = greedy, S.quiet = quiet, S.fast = fast;
    S.rule = rule, S.iv = iv;
    return problem.empty() ? run_instances(m, insts, S) : run_problem(m, prob, S);
  });
}
