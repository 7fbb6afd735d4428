// A run's recipe (train_config.hpp): its checks, its JSON form and the learning-rate schedule.
#include "manyadd/learn/tasks/train_config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "manyadd/core/error.hpp"
#include "manyadd/learn/tasks/task.hpp"

namespace manyadd::learn {

void TrainConfig::validate() const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw InputError(msg);
  };
  need(train_n >= 1 && train_n <= 1000, fmt::format("train.train_n must be in [1, 1000] (got {})", train_n));
  need(train_m >= 1 && train_m <= 1000, fmt::format("train.train_m must be in [1, 1000] (got {})", train_m));
  need(train_size >= 1 && train_size <= 100'000'000, fmt::format("train.train_size must be in [1, 1e8] (got {})", train_size));
  need(steps >= 1, fmt::format("train.steps must be >= 1 (got {})", steps));
  need(batch >= 1 && batch <= 1'000'000, fmt::format("train.batch must be in [1, 1e6] (got {})", batch));
  need(lr > 0 && lr < 10, fmt::format("train.lr must be in (0, 10) (got {})", lr));
  need(warmup_frac >= 0 && warmup_frac <= 1, "train.warmup_frac must be in [0, 1]");
  need(min_lr_frac >= 0 && min_lr_frac <= 1, "train.min_lr_frac must be in [0, 1]");
  need(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "train.beta1 and train.beta2 must be in [0, 1)");
  need(adam_eps > 0, "train.adam_eps must be > 0");
  need(weight_decay >= 0, "train.weight_decay must be >= 0");
  need(grad_clip >= 0, "train.grad_clip must be >= 0 (0 = no clipping)");
  need(threads >= 1 && threads <= 256, fmt::format("train.threads must be in [1, 256] (got {})", threads));
  need(log_every >= 1, "train.log_every must be >= 1");
  need(eval_every >= 0 && checkpoint_every >= 0, "train.eval_every and train.checkpoint_every must be >= 0");
  need(eval_samples >= 1, "train.eval_samples must be >= 1");
  need(data_seed >= -1, fmt::format("train.data_seed must be >= 0, or -1 for the seed (got {})", data_seed));
  need(hard_fraction >= 0 && hard_fraction <= 1, fmt::format("train.hard_fraction must be in [0, 1] (got {})", hard_fraction));
  need(hard_fraction == 0 || task_named(task).has_hard_data(),
       fmt::format("train.hard_fraction applies to the addition tasks with a scratchpad of partial sums (task is {})", task));
  need(std::isfinite(attn_entropy) && attn_entropy >= 0 && attn_entropy <= 100,
       fmt::format("train.attn_entropy must be in [0, 100] (got {})", attn_entropy));
  need(attn_entropy == 0 || precision == "fp32",
       "train.attn_entropy runs in fp32 only (its gradient has no bf16 rounding points): use precision fp32");
  need(precision == "fp32" || precision == "bf16", fmt::format("train.precision '{}' unknown (fp32|bf16)", precision));
  task_named(task).check_train(*this);  // the task's own ranges (addition: at least 2 operands)
}

void to_json(nlohmann::json& j, const TrainConfig& c) {
  j = nlohmann::json{{"train_n", c.train_n},     {"train_m", c.train_m},         {"train_size", c.train_size},
                     {"steps", c.steps},         {"batch", c.batch},             {"lr", c.lr},
                     {"warmup_frac", c.warmup_frac}, {"min_lr_frac", c.min_lr_frac}, {"beta1", c.beta1},
                     {"beta2", c.beta2},         {"adam_eps", c.adam_eps},       {"weight_decay", c.weight_decay},
                     {"grad_clip", c.grad_clip}, {"seed", c.seed},               {"threads", c.threads},
                     {"log_every", c.log_every}, {"eval_every", c.eval_every},   {"eval_samples", c.eval_samples},
                     {"checkpoint_every", c.checkpoint_every}, {"warmup_from_zero", c.warmup_from_zero},
                     {"data_seed", c.data_seed}, {"precision", c.precision}, {"task", c.task},
                     {"hard_fraction", c.hard_fraction}, {"attn_entropy", c.attn_entropy}};
}

void from_json(const nlohmann::json& j, TrainConfig& c) {
  if (!j.is_object()) throw InputError("train config must be a JSON object");
  nlohmann::json def;
  to_json(def, TrainConfig{});
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!def.contains(it.key())) throw InputError(fmt::format("train config: unknown field '{}'", it.key()));
  auto geti = [&](const char* k, auto& v) {
    if (!j.contains(k)) return;
    if (!j[k].is_number_integer()) throw InputError(fmt::format("train.{} must be an integer", k));
    using T = std::decay_t<decltype(v)>;
    if (j[k].is_number_unsigned()) {  // above 2^63 it would wrap to a negative int64: read it as written
      const auto u = j[k].get<std::uint64_t>();
      const std::uint64_t hi = std::is_same<T, int>::value ? 1'000'000'000
                                                           : std::uint64_t(std::numeric_limits<std::int64_t>::max());
      if (!std::is_unsigned<T>::value && u > hi)
        throw InputError(fmt::format("train.{} out of range (got {})", k, u));
      v = T(u);
      return;
    }
    const auto x = j[k].get<std::int64_t>();
    if (std::is_same<T, int>::value && (x < -1'000'000'000 || x > 1'000'000'000))
      throw InputError(fmt::format("train.{} out of range (got {})", k, x));
    if (std::is_unsigned<T>::value && x < 0) throw InputError(fmt::format("train.{} must be >= 0 (got {})", k, x));
    v = T(x);
  };
  auto getd = [&](const char* k, double& v) {
    if (!j.contains(k)) return;
    if (!j[k].is_number()) throw InputError(fmt::format("train.{} must be a number", k));
    v = j[k].get<double>();
  };
  geti("train_n", c.train_n);
  geti("train_m", c.train_m);
  geti("train_size", c.train_size);
  geti("steps", c.steps);
  geti("batch", c.batch);
  getd("lr", c.lr);
  getd("warmup_frac", c.warmup_frac);
  getd("min_lr_frac", c.min_lr_frac);
  getd("beta1", c.beta1);
  getd("beta2", c.beta2);
  getd("adam_eps", c.adam_eps);
  getd("weight_decay", c.weight_decay);
  getd("grad_clip", c.grad_clip);
  getd("hard_fraction", c.hard_fraction);
  getd("attn_entropy", c.attn_entropy);
  geti("seed", c.seed);
  geti("threads", c.threads);
  geti("log_every", c.log_every);
  geti("eval_every", c.eval_every);
  geti("eval_samples", c.eval_samples);
  geti("checkpoint_every", c.checkpoint_every);
  geti("data_seed", c.data_seed);
  if (j.contains("warmup_from_zero")) {
    if (!j["warmup_from_zero"].is_boolean()) throw InputError("train.warmup_from_zero must be true or false");
    c.warmup_from_zero = j["warmup_from_zero"].get<bool>();
  }
  if (j.contains("precision")) {
    if (!j["precision"].is_string()) throw InputError("train.precision must be a string (fp32|bf16)");
    c.precision = j["precision"].get<std::string>();
  }
  if (j.contains("task")) {
    if (!j["task"].is_string()) throw InputError(fmt::format("train.task must be a string ({})", task_names()));
    c.task = j["task"].get<std::string>();
  }
  c.validate();
}

double lr_at(const TrainConfig& c, std::int64_t t_step) {
  const auto warm = std::max<std::int64_t>(1, std::llround(c.warmup_frac * double(c.steps)));
  // The schedule at index t: t = the step (1-based), or the step - 1 when the warm-up starts from 0.
  // Both branches give lr at t = warm.
  const std::int64_t t = c.warmup_from_zero ? t_step - 1 : t_step;
  if (t <= warm) return c.lr * double(t) / double(warm);
  const double prog = c.steps > warm ? double(t - warm) / double(c.steps - warm) : 1.0;
  const double cosv = 0.5 * (1.0 + std::cos(3.14159265358979323846 * std::min(1.0, prog)));
  return c.lr * (c.min_lr_frac + (1.0 - c.min_lr_frac) * cosv);
}
}  // namespace manyadd::learn
