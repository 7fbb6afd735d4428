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

namespace {

// The flags of train_grid: every model and train field (cli_common.hpp's ConfigOptions).
const std::vector<FieldDoc>& grid_config_fields() {
  static const std::vector<FieldDoc> f = {
      {"model", "d_emb", "d_emb: the width of tokens, grid cells and context vectors (Table I)"},
      {"model", "d_s2g", "hidden width of Seq2Grid's action FFN_2"},
      {"model", "kernel", "local attention window k (odd)"},
      {"model", "groups", "local attention groups g (base 8, noGroups 1)"},
      {"model", "heads", "local attention heads h"},
      {"model", "d_ffn", "hidden width of the block's FFN_3 (both hidden layers)"},
      {"model", "context_len", "halting context length S_C"},
      {"model", "context_heads", "heads of the context attention"},
      {"model", "d_ctx_ffn", "hidden width of the context FFN_2"},
      {"model", "d_halt", "hidden width of the halting FFN_2"},
      {"model", "alibi", "the context attention's grid ALiBi (true|false)"},
      {"model", "halting", "ponder (PonderNet, the paper's) | fixed (fixedTime: max_steps_train / max_steps_eval steps)"},
      {"model", "max_steps_train", "most recurrent steps in training (fixed: the steps)"},
      {"model", "max_steps_eval", "most recurrent steps at test (fixed: the steps)"},
      {"model", "halt_eps", "PonderNet's epsilon: training stops a sample once its halting mass exceeds 1 - epsilon"},
      {"model", "dropout", "dropout before every linear layer of the FFNs and the decoder"},
      {"model", "norm_eps", "LayerNorm epsilon"},
      {"train", "train_instance", "training problems TERMSxDIGITS (Pi([1, 4], [1, 10]) = 1-4x1-10)"},
      {"train", "term_groups", "term-count groups per step, each with its own grid (theirs: 2)"},
      {"train", "batch", "problems per step, split between the groups"},
      {"train", "extra_rows", "grid rows beyond the group's most terms (the authors' F_H = 0 plus their exclusive bound's 1)"},
      {"train", "extra_cols", "grid columns beyond the most digits (F_W = 2 plus 1, as extra_rows)"},
      {"train", "rand_rows", "R_H: uniform extra rows in [0, rand_rows]"},
      {"train", "rand_cols", "R_W: uniform extra columns in [0, rand_cols]"},
      {"train", "pad_weight", "the PAD class's weight in the cross-entropy"},
      {"train", "regularizer", "halting regularizer: er (Explore-Reinforce, base) | kl (KL to a geometric, ponderReg)"},
      {"train", "beta", "the regularizer's weight (overtraining: 5e-4)"},
      {"train", "kl_lambda_p", "regularizer kl: the geometric prior's parameter (1 / their avg_steps)"},
      {"train", "epochs", "epochs (the paper: 510, then 300 more of overtraining)"},
      {"train", "steps_per_epoch", "optimizer steps per epoch"},
      {"train", "lr", "peak learning rate"},
      {"train", "min_lr", "the cosine's floor (eta_min)"},
      {"train", "lr_period_epochs", "epochs per cosine period (warm restarts)"},
      {"train", "beta1", "AdamW beta1"},
      {"train", "beta2", "AdamW beta2"},
      {"train", "adam_eps", "AdamW epsilon"},
      {"train", "weight_decay", "AdamW weight decay (not on biases, embeddings, rel_emb, q_emb, norms)"},
      {"train", "grad_clip", "global gradient-norm clip (0: none)"},
      {"train", "seed", "initialization, data, dropout and halting draws"},
      {"train", "threads", "threads (the run does not depend on them)"},
      {"train", "log_every", "steps per log.csv row"},
      {"train", "checkpoint_every", "steps per checkpoint (0: at the end only)"},
      {"train", "eval_every", "steps per validation row in eval.csv (0: at the end only)"},
      {"train", "eval_instance", "the validation problems (their validation set: 5-6x11-15)"},
      {"train", "eval_samples", "validation problems"},
      {"train", "cache_mb", "MiB of activations kept from a sample's first run for its backward (the rest run twice; "
                            "the results do not depend on it)"}};
  return f;
}

}  // namespace

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
