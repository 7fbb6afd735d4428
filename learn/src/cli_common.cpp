// Configuration fields as options: see cli_common.hpp.
#include "manyadd/learn/cli_common.hpp"

#include <fmt/format.h>

#include "manyadd/core/cli.hpp"
#include "manyadd/learn/train.hpp"

namespace manyadd::learn {

const std::vector<FieldDoc>& config_fields() {
  static const std::vector<FieldDoc> f = {
      {"model", "n_layers", "transformer blocks"},
      {"model", "n_heads", "attention heads per block"},
      {"model", "d_model", "residual width"},
      {"model", "d_head", "width of each head's query/key/value"},
      {"model", "d_ff", "GEGLU hidden width"},
      {"model", "max_pos1", "largest position ID of level 1 (significance; or index for absolute)"},
      {"model", "max_pos2", "largest position ID of level 2 (operand index; coupled only)"},
      {"model", "pos_mode", "coupled | digits | absolute | none"},
      {"model", "norm_eps", "RMSNorm epsilon"},
      {"model", "init_std", "std of the normal initialization of matrices and embeddings (init normal)"},
      {"model", "attn_scale", "attention scores q.k times 1/sqrt(d_head) (inv_sqrt_dhead) or unscaled (none: T5)"},
      {"model", "init", "initialization: normal (N(0, init_std)) | t5 (the authors' T5 scheme)"},
      {"model", "tie_readout", "true: logits = tok_emb (final_norm(x) d_model^-1/2), no lm_head | false"},
      {"model", "final_norm", "final norm: rms (RMSNorm) | layer (LayerNorm with bias)"},
      {"train", "train_n", "training set SA(n, m): at most n digits per operand"},
      {"train", "train_m", "training set SA(n, m): 2..m operands"},
      {"train", "train_size", "problems in the fixed training set (the paper: 500000)"},
      {"train", "steps", "optimizer steps"},
      {"train", "batch", "sequences per step"},
      {"train", "lr", "peak learning rate"},
      {"train", "warmup_frac", "linear warm-up over this fraction of the steps"},
      {"train", "min_lr_frac", "cosine decay ends at this fraction of lr"},
      {"train", "beta1", "AdamW beta1"},
      {"train", "beta2", "AdamW beta2"},
      {"train", "adam_eps", "AdamW epsilon"},
      {"train", "weight_decay", "AdamW decoupled weight decay"},
      {"train", "grad_clip", "global gradient-norm clip, 0 = off"},
      {"train", "seed", "seed of initialization and position offsets (and of the data when data_seed is -1)"},
      {"train", "data_seed", "seed of the training set and its sampling order; -1 = the seed"},
      {"train", "warmup_from_zero", "true: step t runs at the schedule's value at t - 1 (the first at lr 0) | false"},
      {"train", "precision", "fp32 | bf16 (mixed precision: bf16 matrix-product inputs, fp32 accumulation)"},
      {"train", "threads", "worker threads over the batch; part of the run's identity"},
      {"train", "log_every", "progress line and log.csv row every this many steps"},
      {"train", "eval_every", "in-distribution evaluation every this many steps, 0 = only at the end"},
      {"train", "eval_samples", "TA samples per in-distribution cell in those evaluations"},
      {"train", "checkpoint_every", "checkpoint every this many steps, 0 = only at the end"},
  };
  return f;
}

std::string config_flag(const FieldDoc& f) {
  std::string flag = f.name;
  for (auto& ch : flag)
    if (ch == '_') ch = '-';
  return "--" + flag;
}

ConfigOptions::ConfigOptions(CLI::App& app) {
  const nlohmann::json defaults = {{"model", ModelConfig{}}, {"train", TrainConfig{}}};
  for (const auto& doc : config_fields()) {
    const nlohmann::json& d = defaults.at(doc.section).at(doc.name);
    Field& f = fields_.emplace_back();
    f.doc = &doc;
    f.type = d.type();
    const std::string name = config_flag(doc), help = fmt::format("{}.{}: {}", doc.section, doc.name, doc.help);
    // The defaults are the variables' initial values: add_int/add_uint/add_real print them.
    if (d.is_number_unsigned()) {
      f.u = d.get<std::uint64_t>();
      f.opt = cli::add_uint(app, name, f.u, help);
    } else if (d.is_number_integer()) {
      f.i = d.get<std::int64_t>();
      f.opt = cli::add_int(app, name, f.i, help);
    } else if (d.is_number_float()) {
      f.r = d.get<double>();
      f.opt = cli::add_real(app, name, f.r, help);
    } else if (d.is_boolean()) {  // a value, true or false (checked by given())
      f.s = d.get<bool>() ? "true" : "false";
      f.opt = cli::add_string(app, name, f.s, fmt::format("{} (default {})", help, f.s));
    } else {
      f.s = d.get<std::string>();
      f.opt = cli::add_string(app, name, f.s, fmt::format("{} (default {})", help, f.s));
    }
  }
}

nlohmann::json ConfigOptions::given() const {
  nlohmann::json out = {{"model", nlohmann::json::object()}, {"train", nlohmann::json::object()}};
  for (const Field& f : fields_) {
    if (f.opt->count() == 0) continue;
    nlohmann::json& v = out[f.doc->section][f.doc->name];
    switch (f.type) {
      case nlohmann::json::value_t::number_unsigned: v = f.u; break;
      case nlohmann::json::value_t::number_integer: v = f.i; break;
      case nlohmann::json::value_t::number_float: v = f.r; break;
      case nlohmann::json::value_t::boolean:
        if (f.s != "true" && f.s != "false")
          throw InputError(fmt::format("{} must be true or false (got '{}')", config_flag(*f.doc), f.s));
        v = f.s == "true";
        break;
      default: v = f.s;
    }
  }
  return out;
}

}  // namespace manyadd::learn
