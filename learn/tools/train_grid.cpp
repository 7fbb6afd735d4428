// train_grid: trains the grid universal transformer of paper 003 (Cognolato and Testolin; Seq2Grid, local
// attention, PonderNet halting) on the authors' protocol and writes a model directory (config.json,
// model.safetensors, checkpoint.safetensors, log.csv, eval.csv). A tool of its own beside `train`: the
// model family shares learn/'s machinery (layers, AdamW, checkpoints, safetensors, progress) but none of
// the decoder's configuration (position modes, task formats, sequence batches), so `train`'s flags would
// not apply to it. Progress on stderr unless --quiet; the summary on stdout.
// Exit codes: 0 trained, 2 bad usage or input, 3 internal error (message on stderr).
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/core/progress.hpp"
#include "manyadd/core/report.hpp"
#include "manyadd/learn/cli/cli_common.hpp"
#include "manyadd/learn/grid/grid_train.hpp"

using namespace manyadd;
using namespace manyadd::learn;
using namespace manyadd::learn::grid;

int main(int argc, char** argv) {
  CLI::App app{
      "Train the grid universal transformer (paper 003, Cognolato and Testolin; learn/README.md, \"The grid\n"
      "universal transformer\") on Pi([1, 4], [1, 10]) with their protocol: 2 groups of 64 problems per step,\n"
      "PAD weighted 1/10, PonderNet with the Explore-Reinforce regularizer (beta 0.05), AdamW (0.9, 0.999,\n"
      "weight decay 0.1 except biases, embeddings and norms), cosine 1e-3 -> 5e-5 with warm restarts every\n"
      "30 epochs, clip 10, 510 epochs of 10 steps. The noGroups variant: --groups 1; the overtraining phase:\n"
      "--resume --epochs 810 --beta 5e-4. Configuration = defaults, then --config FILE ({\"model\": {...},\n"
      "\"train\": {...}}), then flags; with --resume the base is OUT/config.json and training continues bit\n"
      "for bit from OUT/checkpoint.safetensors (on any thread count).",
      "train_grid"};
  std::string config_path, out, json_path;
  bool resume = false, quiet = false;
  std::int64_t stop_after = 0;
  double max_seconds = 0;
  std::string device = "auto";
  cli::add_device(app, device,
                  "auto: cpu-fast where oneDNN loads, else cpu (one line says why) | cpu (Eigen products: the reference) | cpu-fast (the linear layers' products on oneDNN, AVX-512 "
                  "where the CPU has it: the same run up to fp32 rounding, bit for bit at any thread count). Not "
                  "part of the config: a run may continue on the other device (run.devices in the checkpoint "
                  "records which steps ran where)",
                  /*cuda=*/false);
  cli::add_string(app, "--config", config_path, "JSON config file: {\"model\": {...}, \"train\": {...}}");
  cli::add_string(app, "--out", out, "model directory to write (created if missing)")->required();
  app.add_flag("--resume", resume, "continue the run in --out from its checkpoint");
  cli::add_int(app, "--stop-after", stop_after, "stop (with a checkpoint) after this many total steps; 0 = run all", 0);
  cli::add_real(app, "--max-seconds", max_seconds,
                "also stop (with a checkpoint) after the first step ending past this wall time; 0 = no limit", 0);
  cli::add_json(app, json_path, "write a JSON report (steps, loss, cells/s, validation) to this file");
  cli::add_quiet(app, quiet);
  const ConfigOptions flags(app, grid_config_fields(),
                            {{"model", nlohmann::json(GridConfig{})}, {"train", nlohmann::json(GridTrainConfig{})}});
  app.footer(cli::exit_codes_footer(false));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("train_grid", std::cerr, [&] {
    check_output_dir_name(out);  // a name no directory here can have: before anything is read or built
    nlohmann::json cfg = {{"model", nlohmann::json::object()}, {"train", nlohmann::json::object()}};
    auto merge = [&](const nlohmann::json& src, const std::string& what) { merge_config_sections(cfg, src, what); };
    if (resume) merge(read_json_file(out + "/config.json"), out + "/config.json");
    if (!config_path.empty()) merge(read_json_file(config_path), config_path);
    merge(flags.given(), "the flags");
    GridConfig mc;
    GridTrainConfig tc;
    from_json(cfg["model"], mc);
    from_json(cfg["train"], tc);
    check_grid_run_fits(mc, tc);  // before any allocation of the run
    ProgressOptions progress;
    progress.quiet = quiet;
    std::string why;
    device = resolve_device_auto(device, why);
    if (!quiet && !why.empty()) std::fprintf(stderr, "train_grid: device auto: cpu, the reference (%s)\n", why.c_str());
    const auto report = run_grid_training(mc, tc, out, resume, stop_after, max_seconds, progress, device == "cpu-fast");
    if (!json_path.empty()) report::write_json_report(json_path, "train_grid", "done", report);
    std::printf("trained %lld steps in %.1f s (%.0f cell-steps/s); model in %s\n",
                static_cast<long long>(report["steps"].get<std::int64_t>()), report["seconds"].get<double>(),
                report["cell_steps_per_s"].get<double>(), out.c_str());
    return 0;
  });
}
