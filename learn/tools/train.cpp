// train: trains the learned transformer on a task (--task; addition: SA(n, m)) and writes a model directory
// (config.json, model.safetensors, checkpoint.safetensors, log.csv, eval.csv). Progress (steps, rate,
// ETA to --stop-after or --max-seconds, the last loss) on stderr unless --quiet; the summary on stdout.
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
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/tasks/task.hpp"
#include "manyadd/learn/runs/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;

int main(int argc, char** argv) {
  CLI::App app{
      "Train the learned transformer (paper 000, Sec. 4 / Appendix B) on a task: --task addition (SA(n, m),\n"
      "scratchpad and bi-level Position Coupling; the default), addition-noscratch, addition-2op, parity,\n"
      "parity-noscratch, multiplication (SM(n, m), two-stage scratchpad, tri-level coupling: --pos-mode\n"
      "coupled3), multiplication-noscratch (learn/README.md, Tasks). The model's vocabulary is the task's\n"
      "(15 tokens with '*' for multiplication) unless the configuration states one. Configuration =\n"
      "defaults, then --config FILE ({\"model\": {...}, \"train\": {...}} with the fields below), then\n"
      "flags. With --resume the base is OUT/config.json and training continues bit for bit from\n"
      "OUT/checkpoint.safetensors.",
      "train"};
  std::string config_path, out, json_path, device = "auto";
  bool resume = false, allow_precision_change = false, quiet = false;
  std::int64_t stop_after = 0;
  double max_seconds = 0;
  cli::add_string(app, "--config", config_path, "JSON config file: {\"model\": {...}, \"train\": {...}}");
  cli::add_string(app, "--out", out, "model directory to write (created if missing)")->required();
  app.add_flag("--resume", resume, "continue the run in --out from its checkpoint");
  app.add_flag("--allow-precision-change", allow_precision_change,
               "with --resume: continue a checkpoint trained in another precision (--precision) than the run's");
  cli::add_int(app, "--stop-after", stop_after, "stop (with a checkpoint) after this many total steps; 0 = run all", 0);
  cli::add_real(app, "--max-seconds", max_seconds,
                "also stop (with a checkpoint) after the first step ending past this wall time; 0 = no limit", 0);
  cli::add_json(app, json_path, "write a JSON report (steps, loss, tokens/s, accuracy) to this file");
  cli::add_device(app, device,
                  "auto: cpu-fast where it runs the model, else cpu (one line says why); never a GPU | "
                  "cpu: the reference, deterministic for (seed, threads) | cpu-fast: the same batches on the fast CPU "
                  "device (oneDNN products, fused attention, bf16 on AVX-512 BF16; within the reference's derived "
                  "bounds, deterministic for (seed, threads); no pos_mode fire) | cuda: the same batches on a GPU, in "
                  "the run's precision, every model option (d_head <= 512); exit 2 without a device. Not part of the "
                  "config: a run may be resumed on another device");
  cli::add_quiet(app, quiet);
  const ConfigOptions flags(app);
  app.footer(cli::exit_codes_footer(false));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("train", std::cerr, [&] {
    check_output_dir_name(out);  // a name no directory here can have: before anything is read or built
    nlohmann::json cfg = {{"model", nlohmann::json::object()}, {"train", nlohmann::json::object()}};
    auto merge = [&](const nlohmann::json& src, const std::string& what) { merge_config_sections(cfg, src, what); };
    if (resume) merge(read_json_file(out + "/config.json"), out + "/config.json");
    if (!config_path.empty()) merge(read_json_file(config_path), config_path);
    merge(flags.given(), "the flags");
    ModelConfig mc;
    TrainConfig tc;
    from_json(cfg["train"], tc);
    // The vocabulary follows the task unless the configuration states one (Task::check_model refuses
    // one too small). config.json written by train holds the descriptive "vocabulary" key; from_json
    // accepts it.
    if (!cfg["model"].contains("vocab")) cfg["model"]["vocab"] = task_named(tc.task).vocab();
    from_json(cfg["model"], mc);
    check_run_fits(mc, tc, device == "cuda");  // before the data set, the weights or any step
    std::shared_ptr<TrainDevice> dev;
    std::string why;
    dev = make_device_auto(device, mc, tc.threads, tc.precision_value(), why);  // InputError -> exit 2
    if (!quiet && !why.empty()) std::fprintf(stderr, "train: device auto: cpu, the reference (%s)\n", why.c_str());
    if (const std::string note = device_note(device, tc.precision_value()); !quiet && !note.empty())
      std::fprintf(stderr, "train: %s\n", note.c_str());
    ProgressOptions progress;
    progress.quiet = quiet;
    const auto report = run_training(mc, tc, out, resume, stop_after, progress, dev, max_seconds, allow_precision_change);
    if (!json_path.empty()) report::write_json_report(json_path, "train", "done", report);
    std::printf("trained %lld steps in %.1f s (%.0f tokens/s); model in %s\n",
                static_cast<long long>(report["steps"].get<std::int64_t>()), report["seconds"].get<double>(),
                report["tokens_per_s"].get<double>(), out.c_str());
    return 0;
  });
}
