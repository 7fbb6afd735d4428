// Field table of the train configuration: see cli_common.hpp.
#include "manyadd/learn/cli_common.hpp"

namespace manyadd::learn {

const std::vector<FieldDoc>& config_fields() {
  static const std::vector<FieldDoc> f = {
      {"model", "n_layers", "transformer blocks (default 1)"},
      {"model", "n_heads", "attention heads per block (default 4)"},
      {"model", "d_model", "residual width (default 64)"},
      {"model", "d_head", "width of each head's query/key/value (default 16)"},
      {"model", "d_ff", "GEGLU hidden width (default 256)"},
      {"model", "max_pos1", "largest position ID of level 1 (significance; or index for absolute) (default 20)"},
      {"model", "max_pos2", "largest position ID of level 2 (operand index; coupled only) (default 20)"},
      {"model", "pos_mode", "coupled | digits | absolute | none (default coupled)"},
      {"model", "norm_eps", "RMSNorm epsilon (default 1e-6)"},
      {"model", "init_std", "std of the normal initialization of matrices and embeddings (default 0.02)"},
      {"train", "train_n", "training set SA(n, m): at most n digits per operand (default 5)"},
      {"train", "train_m", "training set SA(n, m): 2..m operands (default 5)"},
      {"train", "train_size", "problems in the fixed training set (default 500000, as the paper)"},
      {"train", "steps", "optimizer steps (default 10000)"},
      {"train", "batch", "sequences per step (default 64)"},
      {"train", "lr", "peak learning rate (default 1e-3)"},
      {"train", "warmup_frac", "linear warm-up over this fraction of the steps (default 0.01)"},
      {"train", "min_lr_frac", "cosine decay ends at this fraction of lr (default 0.1)"},
      {"train", "beta1", "AdamW beta1 (default 0.9)"},
      {"train", "beta2", "AdamW beta2 (default 0.95)"},
      {"train", "adam_eps", "AdamW epsilon (default 1e-8)"},
      {"train", "weight_decay", "AdamW decoupled weight decay (default 0)"},
      {"train", "grad_clip", "global gradient-norm clip, 0 = off (default 1.0)"},
      {"train", "seed", "seed of data, offsets, initialization (default 1)"},
      {"train", "threads", "worker threads over the batch; part of the run's identity (default 2)"},
      {"train", "log_every", "progress line and log.csv row every this many steps (default 50)"},
      {"train", "eval_every", "in-distribution evaluation every this many steps, 0 = only at the end (default 1000)"},
      {"train", "eval_samples", "TA samples per in-distribution cell in those evaluations (default 100)"},
      {"train", "checkpoint_every", "checkpoint every this many steps, 0 = only at the end (default 1000)"},
  };
  return f;
}

}  // namespace manyadd::learn
