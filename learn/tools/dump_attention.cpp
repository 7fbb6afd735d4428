// dump_attention: post-softmax attention of a trained model averaged over K samples of one test cell
// of its task at fixed offsets (addition: TA(n, m); the paper's Figure 7 uses TA(11, 11), 1000
// samples; multiplication TM(n, m); parity n bits), per layer and head; written as
// OUT/attention.safetensors (tensors "layers.<l>.head.<h>", shape (N, N)) and one PNG per head
// (values below 0.01 black). `--constructed` dumps the constructed model of Theorem 4.1 (construct/,
// built for TA(n, m) with minimal padding, dense engine) on the same instances in the same format.
// Exit codes: 0 done, 2 bad usage or input, 3 internal error.
#include <cstdio>
#include <iostream>
#include <limits>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/report.hpp"
#include "manyadd/learn/cli/cli_common.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/analysis/attention.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/analysis/plot.hpp"
#include "manyadd/learn/tasks/task.hpp"

using namespace manyadd;
using namespace manyadd::learn;

int main(int argc, char** argv) {
  CLI::App app{"Average post-softmax attention maps of a trained (or the constructed) model over samples of one test "
               "cell of its task (addition: TA(n, m)).",
               "dump_attention"};
  std::string model, out, json_path, task_s;
  bool constructed = false;
  int n = 11, m = 11, threads = 2;
  double lambda = 0;
  std::int64_t samples = 1000, s1 = 1, s2 = 1, s3 = 1;
  std::uint64_t seed = 12345;
  auto* o_model = cli::add_string(app, "--model", model, "model directory (config.json + model.safetensors)");
  auto* o_cons = app.add_flag("--constructed", constructed,
                              "dump the constructed model (Theorem 4.1, dims for TA(n, m)) instead of --model");
  o_model->excludes(o_cons);
  cli::add_string(app, "--task", task_s,
                  "the model's task (config.json's train.task; addition when absent): another is refused (" +
                      task_names() + ")");
  cli::add_real(app, "--lambda", lambda, "attention scale of the constructed model; 0 = construct's default for N", 0);
  cli::add_string(app, "--out", out, "output directory (created if missing)")->required();
  cli::add_int(app, "--n", n, "the cell's row value: digits per operand (Figure 7: 11), the first factor's digits, "
                              "or the parity query's length (the task's range is checked: addition up to 1000, "
                              "addition-2op up to 100000)", 1, 100'000);
  auto* o_m = cli::add_int(app, "--m", m, "the cell's column value: operand count, or the second operand's digits "
                                          "(parity: none; addition: at least 2)", 1, 100'000);
  cli::add_int(app, "--samples", samples, "samples averaged", 1, 100'000'000);
  const std::int64_t kMaxOffset = std::numeric_limits<std::int64_t>::max();
  cli::add_int(app, "--s1", s1, "level-1 position offset (at most what the model's max_pos1 allows)", 1, kMaxOffset);
  cli::add_int(app, "--s2", s2, "level-2 position offset (at most what the model's max_pos2 allows)", 1, kMaxOffset);
  cli::add_int(app, "--s3", s3, "level-3 position offset (coupled3; at most what max_pos3 allows)", 1, kMaxOffset);
  cli::add_seed(app, seed, "seed of the samples");
  cli::add_threads(app, threads);
  cli::add_json(app, json_path, "JSON report");
  app.footer(cli::exit_codes_footer(false));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("dump_attention", std::cerr, [&] {
    if (!constructed && model.empty()) throw InputError("give --model DIR or --constructed");
    if (!task_s.empty()) parse_task(task_s);
    LoadedModel lm;
    const Task* tk = &task(TaskKind::addition);
    if (!constructed) {
      lm = load_model_dir(model);
      tk = &task_of_model(lm.config_json, task_s, model);
      tk->check_model(lm.cfg);
    } else if (!task_s.empty() && parse_task(task_s) != TaskKind::addition) {
      throw InputError("--constructed is the constructed model of Theorem 4.1, which adds: --task addition only");
    }
    if (tk->kind() != TaskKind::addition) {
      const GridAxis a0 = tk->axis(0);
      if (!tk->two_axes() && o_m->count())
        throw InputError(fmt::format("task {} has one axis (--n, the query length): drop --m", tk->name()));
      if (!tk->two_axes()) m = 1;
      const GridAxis a1 = tk->two_axes() ? tk->axis(1) : GridAxis{"m", "", 1, 1, 1, 1, 1};
      if (n < a0.min_value || n > a0.max_value || m < a1.min_value || m > a1.max_value)
        throw InputError(tk->two_axes() ? fmt::format("need {} <= --n <= {} and {} <= --m <= {}", a0.min_value,
                                                      a0.max_value, a1.min_value, a1.max_value)
                                        : fmt::format("need {} <= --n <= {}", a0.min_value, a0.max_value));
      const Task::Extent ext = tk->extent(n, m);
      if (ext.T > 20000)
        throw InputError(fmt::format("cell ({}, {}) of {} has up to {} tokens: above the 20,000 a dense (T, T) map "
                                     "per head allows", n, m, tk->name(), ext.T));
      check_samples_fit(samples, *tk, n, m, fmt::format("--samples {} of {} cell ({}, {})", samples, tk->name(), n, m));
      // The cell's instances in the evaluator's order; those of another length than the first (addition-2op:
      // a final carry or not) are skipped, so that the maps average aligned positions.
      Rng rng(cell_seed(seed, n, m));
      std::vector<Problem> probs;
      std::int64_t skipped = 0;
      std::int64_t T0 = -1;
      while (std::int64_t(probs.size()) < samples) {
        Problem p = tk->sample_cell(rng, n, m);
        const std::int64_t T = tk->write(p).T();
        if (T0 < 0) T0 = T;
        if (T != T0) {
          if (++skipped > 100 * samples) throw InputError("too few samples of one length in this cell");
          continue;
        }
        probs.push_back(std::move(p));
      }
      const Offsets off{s1, s2, s3};
      std::int64_t exact = 0;
      const AttentionMaps maps = learned_attention(
          lm, samples, [&](std::int64_t i) { return make_example(*tk, probs[std::size_t(i)], lm.cfg, off); }, threads,
          &exact);
      const Example first = make_example(*tk, probs[0], lm.cfg, off);
      std::map<std::string, std::string> meta = {
          {"task", tk->name()},          {"n", std::to_string(n)},          {"m", std::to_string(m)},
          {"T", std::to_string(first.T())}, {"s1", std::to_string(s1)},     {"s2", std::to_string(s2)},
          {"s3", std::to_string(s3)},    {"samples", std::to_string(samples)},
          {"example_tokens", tokens_to_string(first.tokens)}, {"model", model}};
      for (int lv = 0; lv < kMaxPosLevels; ++lv)
        meta[fmt::format("pos{}", lv + 1)] = nlohmann::json(first.pos[lv]).dump();
      write_attention_dir(out, maps, meta);
      if (!json_path.empty()) {
        nlohmann::json rep = {{"model", model}, {"task", tk->name()}, {"n", n}, {"m", m}, {"T", maps.T},
                              {"s1", s1}, {"s2", s2}, {"s3", s3}, {"samples", samples},
                              {"skipped_other_lengths", skipped}, {"teacher_forced_exact", exact},
                              {"heads", maps.heads()}, {"out", out}};
        if (!tk->two_axes()) rep.erase("m");
        report::write_json_report(json_path, "dump_attention", "done", rep);
      }
      std::printf("averaged attention over %lld samples of %s cell (%d, %d) (T = %d): %s/attention.safetensors + %d "
                  "PNGs\n",
                  static_cast<long long>(samples), tk->name(), n, m, maps.T, out.c_str(), maps.heads());
      return 0;
    }
    if (n < 1 || m < 2 || n > 1000 || m > 1000) throw InputError("need 1 <= --n <= 1000 and 2 <= --m <= 1000");
    const Shape shape = Shape::make(n, m, Padding::minimal);
    if (shape.N() > 20000) throw InputError(fmt::format("TA({}, {}) has N = {} tokens: above the 20,000 a dense (N, N) "
                                                        "map per head allows", n, m, shape.N()));
    check_samples_fit(samples, n, m, fmt::format("--samples {} of TA({}, {})", samples, n, m));
    Rng rng(cell_seed(seed, n, m));
    std::vector<Problem> probs;
    for (std::int64_t i = 0; i < samples; ++i) probs.push_back(sample_TA(rng, n, m));
    AttentionMaps maps;
    std::vector<std::int32_t> p1, p2;
    std::map<std::string, std::string> extra;
    if (constructed) {
      const ConstructedSetup cs = constructed_setup(n, m, s1, s2, lambda);
      // The constructed scores read positions only: one instance gives the map of every instance.
      maps = constructed_attention(cs, probs[0], s1, s2);
      position_ids_for(shape, PosMode::coupled, s1, s2, p1, p2);
      extra = {{"model", "constructed"}, {"P1", std::to_string(cs.P1)}, {"P2", std::to_string(cs.P2)},
               {"lambda", fmt::format("{}", cs.lambda)}};
    } else {
      maps = learned_attention(lm, probs, s1, s2, threads);
      const Example first = make_example(probs[0], lm.cfg, s1, s2);
      p1 = first.pos[0], p2 = first.pos[1];
      extra = {{"model", model}};
    }
    write_attention_dir(out, maps, shape, s1, s2, samples, build_sequence(probs[0], shape), p1, p2, extra);
    if (!json_path.empty()) {
      nlohmann::json rep = {{"model", constructed ? std::string("constructed") : model}, {"n", n}, {"m", m},
                            {"l", shape.l}, {"N", maps.T}, {"s1", s1}, {"s2", s2}, {"samples", samples},
                            {"heads", maps.heads()}, {"out", out}};
      report::write_json_report(json_path, "dump_attention", "done", rep);
    }
    std::printf("averaged attention over %lld samples of TA(%d, %d) (N = %d): %s/attention.safetensors + %d PNGs\n",
                static_cast<long long>(samples), n, m, maps.T, out.c_str(), maps.heads());
    return 0;
  });
}
