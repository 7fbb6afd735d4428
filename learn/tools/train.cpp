// train: trains the learned transformer on SA(n, m) and writes a model directory
// (config.json, model.safetensors, checkpoint.safetensors, log.csv, eval.csv).
// Exit codes: 0 trained, 2 bad usage or input, 3 internal error (message on stderr).
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/cli.hpp"
#include "manyadd/learn/cli_common.hpp"
#include "manyadd/learn/cuda_device.hpp"
#include "manyadd/learn/io.hpp"
#include "manyadd/learn/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;

int main(int argc, char** argv) {
  CLI::App app{
      "Train the learned transformer (paper 000, Sec. 4 / Appendix B) on SA(n, m) with the scratchpad and\n"
      "bi-level Position Coupling format. Configuration = defaults, then --config FILE ({\"model\": {...},\n"
      "\"train\": {...}} with the fields below), then flags. With --resume the base is OUT/config.json and\n"
      "training continues bit for bit from OUT/checkpoint.safetensors.",
      "train"};
  std::string config_path, out, json_path, device = "cpu";
  bool resume = false, allow_precision_change = false;
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
                  "cpu: deterministic for (seed, threads) | cuda: the same batches on a GPU, in the run's precision, "
                  "every model option (d_head <= 512); exit 2 without a device. Not part of the config: a run may "
                  "be resumed on the other device");
  const ConfigOptions flags(app);
  app.footer(cli::exit_codes_footer(false));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("train", std::cerr, [&] {
    nlohmann::json cfg = {{"model", nlohmann::json::object()}, {"train", nlohmann::json::object()}};
    auto merge = [&](const nlohmann::json& src, const std::string& what) {
      if (!src.is_object()) throw InputError(fmt::format("{} must be a JSON object", what));
      for (auto it = src.begin(); it != src.end(); ++it) {
        if (it.key() != "model" && it.key() != "train") continue;  // config.json carries extra sections
        if (!it.value().is_object()) throw InputError(fmt::format("{}: \"{}\" must be an object", what, it.key()));
        for (auto f = it.value().begin(); f != it.value().end(); ++f) cfg[it.key()][f.key()] = f.value();
      }
    };
    if (resume) merge(read_json_file(out + "/config.json"), out + "/config.json");
    if (!config_path.empty()) merge(read_json_file(config_path), config_path);
    merge(flags.given(), "the flags");
    ModelConfig mc;
    TrainConfig tc;
    // config.json written by train holds the descriptive "vocabulary" key; from_json accepts it.
    from_json(cfg["model"], mc);
    from_json(cfg["train"], tc);
    check_run_fits(mc, tc);  // before the data set, the weights or any step
    std::shared_ptr<TrainDevice> dev;
    if (device == "cuda") dev = make_cuda_device(mc, tc.precision_value());  // InputError -> exit 2
    const auto report = run_training(mc, tc, out, resume, stop_after, [](const std::string& s) {
      std::fprintf(stderr, "%s\n", s.c_str());
      std::fflush(stderr);
    }, dev, max_seconds, allow_precision_change);
    if (!json_path.empty()) atomic_write(json_path, report.dump(2) + "\n");
    std::printf("trained %lld steps in %.1f s (%.0f tokens/s); model in %s\n",
                static_cast<long long>(report["steps"].get<std::int64_t>()), report["seconds"].get<double>(),
                report["tokens_per_s"].get<double>(), out.c_str());
    return 0;
  });
}
