// A run's recipe: the task and its training distribution, the training set's size and seeds, the
// optimizer (AdamW) and its schedule, the precision, and how often the loop logs, evaluates and
// checkpoints. It sits in the tasks room because the tasks draw their training sets from it
// (Task::sample_train) and the training devices read the optimizer's part (batch.hpp adam_scalars);
// the loop that runs it is runs/train.hpp.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "manyadd/learn/decoder/model.hpp"

namespace manyadd::learn {

struct TrainConfig {
  std::string task = "addition";         // task.hpp's names; config.json without one is addition
  int train_n = 5, train_m = 5;          // the task's training distribution: SA(n, m), SM(n, m), parity 1..n
  std::int64_t train_size = 500'000;     // problems in the fixed training set (paper: 500,000)
  std::int64_t steps = 10'000;
  int batch = 64;
  double lr = 1e-3;
  double warmup_frac = 0.01, min_lr_frac = 0.1;
  // false: step t (1-based) trains at the schedule's value at t (warm-up lr/W, 2 lr/W, .., lr).
  // true: at its value at t - 1, the convention of PyTorch's LambdaLR that the authors' scheduler uses:
  // the warm-up starts from 0 (the first step runs at lr 0, its Adam moments still update).
  bool warmup_from_zero = false;
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8, weight_decay = 0.0, grad_clip = 1.0;
  std::uint64_t seed = 1;         // initialization and per-sample position offsets
  std::int64_t data_seed = -1;    // training set and its sampling order; -1 = seed (the earlier runs)
  // The addition tasks: each training problem replaced by a hard one (hard_data.hpp: carry cascades,
  // maximal partial sums) with this probability, from a stream of its own; 0 = the paper's data.
  double hard_fraction = 0;
  // A penalty on attention that spreads: the objective is the mean loss plus attn_entropy times the mean,
  // over the rows a loss reads and the heads, of the attention weights' entropy (nats). 0 = the paper's
  // objective. One-layer models in fp32 on the CPU devices (cpu, cpu-packed, cpu-fast); others refuse it.
  double attn_entropy = 0;
  std::string precision = "fp32"; // fp32 | bf16 (learn::Precision); a checkpoint records it
  int threads = 2;
  std::int64_t log_every = 50;
  std::int64_t eval_every = 1000;        // 0 = never (except at the end)
  std::int64_t eval_samples = 100;       // per in-distribution TA cell during training
  std::int64_t checkpoint_every = 1000;  // 0 = only at the end
  void validate() const;                 // throws InputError
  std::uint64_t data_seed_value() const { return data_seed < 0 ? seed : std::uint64_t(data_seed); }
  Precision precision_value() const { return parse_precision(precision); }
};
void to_json(nlohmann::json& j, const TrainConfig& c);
void from_json(const nlohmann::json& j, TrainConfig& c);  // throws InputError on unknown/bad fields

// Learning rate at step t (1-based).
double lr_at(const TrainConfig& c, std::int64_t t);

}  // namespace manyadd::learn
