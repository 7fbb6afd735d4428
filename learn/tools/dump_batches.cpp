// dump_batches: writes the packed batches that `train` uses at steps k..k+K-1 of a run (its
// config.json: data set, sampling order and offsets are functions of the config alone), so that
// bench/torch_twin.py trains on exactly the same data. With --reference it also writes the C++ CPU
// forward (packed pipeline, fp32) of step k's batch under the run's checkpoint weights (which must be
// at step k - 1): logits and loss, for the twin's correctness check.
// Exit codes: 0 written, 2 bad usage or input, 3 internal error.
//
// Batch file (little endian): "MABATCH1", int32 n_steps, int32 levels, then per step: int64 step,
// int32 B, int32 T, int64 counted_targets, int32 lengths[B], uint8 tokens[B T],
// int32 pos[levels][B T], int32 targets[B T] (-1 = no loss; padding rows are token 0, IDs 0): the
// packed (varlen) batch padded to its longest sequence, the layout the PyTorch twin computes on.
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "manyadd/core/cli.hpp"
#include "manyadd/learn/devices/batch.hpp"
#include "manyadd/learn/cli/cli_common.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/runs/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;

namespace {
template <class T>
void put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <class T>
void put_vec(std::string& s, const std::vector<T>& v) {
  s.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write the packed training batches of steps k..k+K-1 of a run (for bench/torch_twin.py).",
               "dump_batches"};
  std::string run, out, reference;
  std::int64_t from = 1, steps = 1;
  cli::add_string(app, "--run", run, "run directory written by train (its config.json)")->required();
  cli::add_int(app, "--from", from, "first step k (1-based)", 1);
  cli::add_int(app, "--steps", steps, "number of steps K", 1, 100000);
  cli::add_output(app, "--out", out, "batch file to write")->required();
  cli::add_output(app, "--reference", reference,
                  "also write the CPU forward of step k's batch under RUN/checkpoint.safetensors (at step k-1): "
                  "safetensors with logits (B T, V; padding rows 0) and loss_sum, counted_targets");
  app.footer(cli::exit_codes_footer(false));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("dump_batches", std::cerr, [&] {
    // The run's configuration, its model checked against the weights the run wrote (a configuration
    // cannot size the trainer beyond what the run holds), its data set against the machine.
    const LoadedModel lm = load_model_dir(run);
    const auto& cfg = lm.config_json;
    if (!cfg.contains("train")) throw InputError(run + "/config.json has no \"train\" section");
    const ModelConfig mc = lm.cfg;
    TrainConfig tc;
    from_json(cfg["train"], tc);
    check_run_fits(mc, tc);
    Trainer tr(mc, tc);
    const int L = pos_levels(mc.pos_mode);
    std::string bytes = "MABATCH1";
    put(bytes, std::int32_t(steps));
    put(bytes, std::int32_t(L));
    PackedBatch first;
    for (std::int64_t t = from; t < from + steps; ++t) {
      const PackedBatch pb = tr.packed_batch(t);
      if (t == from) first = pb;
      put(bytes, std::int64_t(t));
      put(bytes, std::int32_t(pb.B));
      put(bytes, std::int32_t(pb.T));
      put(bytes, std::int64_t(pb.counted_targets));
      std::vector<std::int32_t> lengths(std::size_t(pb.B));
      for (int b = 0; b < pb.B; ++b) lengths[std::size_t(b)] = pb.length(b);
      put_vec(bytes, lengths);
      put_vec(bytes, padded_rows<std::uint8_t>(pb, pb.tokens.data(), 1, 0));
      for (int lv = 0; lv < L; ++lv) put_vec(bytes, padded_rows<std::int32_t>(pb, pb.pos[lv].data(), 1, 0));
      put_vec(bytes, padded_rows<std::int32_t>(pb, pb.targets.data(), 1, -1));
    }
    atomic_write(out, bytes);
    if (!reference.empty()) {
      tr.load_checkpoint(run);
      if (tr.steps_done() != from - 1)
        throw InputError(fmt::format("--reference needs the checkpoint at step {} (it is at step {})", from - 1,
                                     tr.steps_done()));
      Acts<float> a;
      const float loss = model_forward(a, tr.view(), batch_of(first));
      write_safetensors(reference,
                        {make_tensor("logits", {std::int64_t(first.B) * first.T, mc.vocab},
                                     padded_rows<float>(first, a.logits.data(), mc.vocab, 0.f)),
                         make_tensor("loss_sum", {1}, std::vector<float>{loss}),
                         make_tensor("counted_targets", {1}, std::vector<float>{float(first.counted_targets)})},
                        {{"step", std::to_string(from)}});
    }
    std::printf("wrote %lld batches (steps %lld..%lld) to %s\n", static_cast<long long>(steps),
                static_cast<long long>(from), static_cast<long long>(from + steps - 1), out.c_str());
    return 0;
  });
}
