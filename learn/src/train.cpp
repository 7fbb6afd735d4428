// Training loop, optimizer, checkpoints: see train.hpp.
#include "manyadd/learn/train.hpp"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "manyadd/learn/data.hpp"
#include "manyadd/learn/eval.hpp"
#include "manyadd/learn/io.hpp"

namespace manyadd::learn {

namespace {
std::uint64_t mix(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full ^ c * 0x165667B19E3779F9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
std::string human_seconds(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = std::int64_t(s);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}
}  // namespace

void TrainConfig::validate() const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw InputError(msg);
  };
  need(train_n >= 1 && train_n <= 1000, fmt::format("train.train_n must be in [1, 1000] (got {})", train_n));
  need(train_m >= 2 && train_m <= 1000, fmt::format("train.train_m must be in [2, 1000] (got {})", train_m));
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
  need(precision == "fp32" || precision == "bf16", fmt::format("train.precision '{}' unknown (fp32|bf16)", precision));
}

void to_json(nlohmann::json& j, const TrainConfig& c) {
  j = nlohmann::json{{"train_n", c.train_n},     {"train_m", c.train_m},         {"train_size", c.train_size},
                     {"steps", c.steps},         {"batch", c.batch},             {"lr", c.lr},
                     {"warmup_frac", c.warmup_frac}, {"min_lr_frac", c.min_lr_frac}, {"beta1", c.beta1},
                     {"beta2", c.beta2},         {"adam_eps", c.adam_eps},       {"weight_decay", c.weight_decay},
                     {"grad_clip", c.grad_clip}, {"seed", c.seed},               {"threads", c.threads},
                     {"log_every", c.log_every}, {"eval_every", c.eval_every},   {"eval_samples", c.eval_samples},
                     {"checkpoint_every", c.checkpoint_every}, {"warmup_from_zero", c.warmup_from_zero},
                     {"data_seed", c.data_seed}, {"precision", c.precision}};
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
    const auto x = j[k].get<std::int64_t>();
    using T = std::decay_t<decltype(v)>;
    if (std::is_same<T, int>::value && (x < -1'000'000'000 || x > 1'000'000'000))
      throw InputError(fmt::format("train.{} out of range", k));
    if (std::is_unsigned<T>::value && x < 0) throw InputError(fmt::format("train.{} must be >= 0", k));
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

Trainer::Trainer(const ModelConfig& mc, const TrainConfig& tc) : mc_(mc), tc_(tc), lay_(Layout::make(mc)) {
  tc_.validate();
  params_ = init_params<float>(mc_, lay_, mix(tc_.seed, 0x1417));
  m_.assign(params_.size(), 0.f);
  v_.assign(params_.size(), 0.f);
  dev_ = make_cpu_device(mc_, tc_.threads, tc_.precision_value());
  Rng rng(mix(tc_.data_seed_value(), 0xDA7A));
  data_ = sample_SA(rng, tc_.train_n, tc_.train_m, tc_.train_size);
  // Refuse a model whose position tables cannot hold the largest training shape.
  const Shape big = Shape::make(tc_.train_n, tc_.train_m, Padding::minimal);
  if (!shape_fits(mc_, big))
    throw InputError(fmt::format("max_pos1={} / max_pos2={} cannot hold SA({}, {}) (l = {}, m = {}): need "
                                 "max_pos1 > l{} and max_pos2 > m",
                                 mc_.max_pos1, mc_.max_pos2, tc_.train_n, tc_.train_m, big.l, big.m,
                                 mc_.pos_mode == PosMode::absolute ? " (absolute: >= N - 1)" : ""));
}

std::int64_t Trainer::sample_index(std::int64_t k) {
  const std::int64_t size = std::int64_t(data_.size());
  const std::int64_t epoch = k / size;
  if (epoch != perm_epoch_) {
    perm_.resize(std::size_t(size));
    for (std::int64_t i = 0; i < size; ++i) perm_[std::size_t(i)] = i;
    Rng rng(mix(tc_.data_seed_value(), 0xE90C, std::uint64_t(epoch)));
    for (std::int64_t i = size - 1; i > 0; --i)
      std::swap(perm_[std::size_t(i)], perm_[std::size_t(rng.uniform(0, std::uint64_t(i)))]);
    perm_epoch_ = epoch;
  }
  return perm_[std::size_t(k % size)];
}

void Trainer::attach_device(std::shared_ptr<TrainDevice> dev) {
  if (dev && dev->precision() != tc_.precision_value())
    throw InputError(fmt::format("device '{}' computes in {}, the run in {}", dev->name(),
                                 precision_name(dev->precision()), tc_.precision));
  pull_from_device();
  dev_ = dev ? std::move(dev) : std::shared_ptr<TrainDevice>(make_cpu_device(mc_, tc_.threads, tc_.precision_value()));
  push_to_device_ = true;
}

void Trainer::pull_from_device() const {
  if (!pull_from_device_) return;
  dev_->get_state(params_, m_, v_);
  pull_from_device_ = false;
}

std::vector<Example> Trainer::batch_examples(std::int64_t t) {
  const int B = tc_.batch;
  std::vector<Example> exs;
  exs.reserve(std::size_t(B));
  for (int b = 0; b < B; ++b) {
    const Problem& p = data_[std::size_t(sample_index((t - 1) * B + b))];
    // Offsets depend only on (seed, step, slot): the same with any thread count, device and on resume.
    Rng rng(mix(tc_.seed, std::uint64_t(t), std::uint64_t(b) + 0x0FF5E7));
    exs.push_back(make_train_example(p, mc_, rng));
  }
  return exs;
}

StepStats Trainer::step() {
  const std::int64_t t = step_ + 1;
  const PackedBatch pb = pack_batch(batch_examples(t), mc_);
  StepStats st;
  st.tokens = pb.real_tokens;
  st.targets = pb.counted_targets;
  const float scale = 1.f / float(st.targets);  // loss = mean over the batch's counted targets
  if (push_to_device_) dev_->set_state(params_, m_, v_), push_to_device_ = false;
  const auto r = dev_->step(pb, scale, tc_, t);
  pull_from_device_ = true;
  st.grad_norm = r.grad_norm;
  st.loss = r.loss_sum / double(st.targets);
  step_ = t;
  return st;
}

void Trainer::save(const std::string& dir) const {
  pull_from_device();
  make_output_dir(dir);
  nlohmann::json cfg;
  cfg["model"] = mc_;
  cfg["train"] = tc_;
  cfg["step"] = step_;
  cfg["format"] = {{"vocabulary", "0123456789+=>$"},
                   {"bos_eos", "$"},
                   {"padding", "minimal"},
                   {"sequence", "$ A_1 + ... + A_m = B_0 > B_1 > ... > B_m, operands zero-padded to l, "
                                "partial sums reversed (least significant digit first)"}};
  cfg["architecture"] = architecture_description(mc_);
  cfg["architecture"]["precision"] =
      tc_.precision_value() == Precision::bf16
          ? "trained in bf16 mixed precision (fp32 master weights, Adam moments, gradients and residual stream; bf16 "
            "inputs of every matrix product, fp32 accumulation); the stored weights are fp32"
          : "trained in fp32";
  atomic_write(dir + "/config.json", cfg.dump(2) + "\n");
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", std::to_string(step_)}};
  write_safetensors(dir + "/model.safetensors", params_to_tensors(lay_, params_), meta);
  auto ts = params_to_tensors(lay_, params_);
  auto tm = params_to_tensors(lay_, m_, "adam.m.");
  auto tv = params_to_tensors(lay_, v_, "adam.v.");
  ts.insert(ts.end(), tm.begin(), tm.end());
  ts.insert(ts.end(), tv.begin(), tv.end());
  nlohmann::json mj = mc_;
  write_safetensors(dir + "/checkpoint.safetensors", ts,
                    {{"format", "pt"},
                     {"step", std::to_string(step_)},
                     {"model_config", mj.dump()},
                     {"precision", tc_.precision}});
}

void Trainer::load_checkpoint(const std::string& dir, bool allow_precision_change) {
  const SafetensorsFile ts = read_safetensors(dir + "/checkpoint.safetensors");
  auto meta = ts.metadata;
  // Compared as configurations, not as text: a checkpoint written before a field existed holds that
  // field's default.
  bool same = false;
  if (meta.count("model_config")) {
    try {
      ModelConfig saved;
      from_json(nlohmann::json::parse(meta["model_config"]), saved);
      same = nlohmann::json(saved) == nlohmann::json(mc_);
    } catch (const std::exception&) {
      same = false;
    }
  }
  if (!same)
    throw InputError(fmt::format("'{}/checkpoint.safetensors' was written for another model configuration", dir));
  const std::string saved_prec = meta.count("precision") ? meta["precision"] : std::string("fp32");
  if (saved_prec != tc_.precision && !allow_precision_change)
    throw InputError(fmt::format("'{}/checkpoint.safetensors' was trained in {}; resuming it in {} changes the "
                                 "arithmetic of the run (pass --allow-precision-change to do so)",
                                 dir, saved_prec, tc_.precision));
  std::int64_t s = -1;
  try {
    s = std::stoll(meta.count("step") ? meta["step"] : std::string("x"));
  } catch (const std::exception&) {
    throw InputError(fmt::format("'{}/checkpoint.safetensors' has no valid step", dir));
  }
  if (s < 0) throw InputError(fmt::format("'{}/checkpoint.safetensors' has a negative step", dir));
  tensors_to_params(lay_, ts, params_);
  tensors_to_params(lay_, ts, m_, "adam.m.");
  tensors_to_params(lay_, ts, v_, "adam.v.");
  step_ = s;
  pull_from_device_ = false;
  push_to_device_ = true;
}

Trainer::EvalSummary Trainer::eval_in_distribution(std::int64_t samples) const {
  pull_from_device();
  if (push_to_device_) dev_->set_state(params_, m_, v_), push_to_device_ = false;
  EvalSummary r;
  r.min = 1.0;
  double sum = 0;
  int cells = 0;
  for (int i = 1; i <= tc_.train_n; ++i) {
    r.acc.emplace_back();
    for (int j = 2; j <= tc_.train_m; ++j) {
      const auto c = eval_cell(ModelView<float>{mc_, lay_, params_.data(), tc_.precision_value()}, i, j, samples,
                               tc_.seed + 1, tc_.threads, EvalMode::teacher, dev_.get());
      r.acc.back().push_back(c.accuracy());
      sum += c.accuracy();
      r.min = std::min(r.min, c.accuracy());
      ++cells;
    }
  }
  r.mean = sum / cells;
  return r;
}

nlohmann::json run_training(const ModelConfig& mc, const TrainConfig& tc, const std::string& dir, bool resume,
                            std::int64_t stop_after, const std::function<void(const std::string&)>& log,
                            std::shared_ptr<TrainDevice> device, double max_seconds, bool allow_precision_change) {
  namespace fs = std::filesystem;
  if (!resume && fs::exists(dir + "/checkpoint.safetensors"))
    throw InputError(fmt::format("'{}' already holds a run (checkpoint.safetensors); pass --resume or choose another --out",
                                 dir));
  Trainer tr(mc, tc);
  if (resume) tr.load_checkpoint(dir, allow_precision_change);
  if (device) tr.attach_device(std::move(device));
  make_output_dir(dir);
  // A run killed between checkpoints logged steps the checkpoint does not hold; on resume drop those
  // rows so the CSVs describe exactly one history.
  auto trim = [&](const std::string& path) {
    if (!fs::exists(path)) return;
    std::ifstream in(path);
    std::string line, kept;
    while (std::getline(in, line)) {
      char* end = nullptr;
      const long long st = std::strtoll(line.c_str(), &end, 10);
      if (end == line.c_str() || st <= tr.steps_done()) kept += line + "\n";  // header or an old row
    }
    in.close();
    atomic_write(path, kept);
  };
  if (resume) {
    trim(dir + "/log.csv");
    trim(dir + "/eval.csv");
  }
  std::ofstream csv(dir + "/log.csv", std::ios::app);
  if (!csv) throw InputError(fmt::format("cannot open '{}/log.csv'", dir));
  if (tr.steps_done() == 0) csv << "step,loss,lr,grad_norm,tokens_per_s,elapsed_s\n";
  std::ofstream ecsv(dir + "/eval.csv", std::ios::app);
  if (!ecsv) throw InputError(fmt::format("cannot open '{}/eval.csv'", dir));
  if (tr.steps_done() == 0) ecsv << "step,mean_exact_match,min_exact_match,elapsed_s\n";
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto last = t0;
  const std::int64_t start = tr.steps_done();
  std::int64_t win_tokens = 0, total_tokens = 0, win_n = 0;
  double win_loss = 0, last_loss = NAN;
  nlohmann::json evals = nlohmann::json::array();
  auto do_eval = [&] {
    const auto e = tr.eval_in_distribution(tc.eval_samples);
    const double el = std::chrono::duration<double>(clock::now() - t0).count();
    ecsv << fmt::format("{},{:.4f},{:.4f},{:.1f}\n", tr.steps_done(), e.mean, e.min, el) << std::flush;
    log(fmt::format("eval step {}: in-distribution exact match mean {:.4f} min {:.4f} ({} samples/cell)",
                    tr.steps_done(), e.mean, e.min, tc.eval_samples));
    evals.push_back({{"step", tr.steps_done()}, {"mean", e.mean}, {"min", e.min}});
    return e;
  };
  const std::int64_t end = stop_after > 0 ? std::min(tc.steps, stop_after) : tc.steps;
  while (tr.steps_done() < end) {
    const StepStats st = tr.step();
    const std::int64_t s = tr.steps_done();
    win_loss += st.loss, win_n += 1, win_tokens += st.tokens, total_tokens += st.tokens;
    last_loss = st.loss;
    if (s % tc.log_every == 0 || s == end) {
      const auto now = clock::now();
      const double dt = std::chrono::duration<double>(now - last).count();
      const double el = std::chrono::duration<double>(now - t0).count();
      const double tps = dt > 0 ? double(win_tokens) / dt : 0;
      const double eta = el / double(s - start) * double(tc.steps - s);
      log(fmt::format("step {}/{} loss {:.4f} lr {:.2e} gnorm {:.2f} | {:.0f} tok/s | elapsed {} ETA {}", s, tc.steps,
                      win_loss / double(win_n), lr_at(tc, s), st.grad_norm, tps, human_seconds(el), human_seconds(eta)));
      csv << fmt::format("{},{:.6f},{:.6e},{:.4f},{:.0f},{:.1f}\n", s, win_loss / double(win_n), lr_at(tc, s),
                         st.grad_norm, tps, el)
          << std::flush;
      last = now, win_loss = 0, win_n = 0, win_tokens = 0;
    }
    if (tc.eval_every > 0 && s % tc.eval_every == 0 && s != tc.steps) do_eval();
    if (tc.checkpoint_every > 0 && s % tc.checkpoint_every == 0) tr.save(dir);
    if (max_seconds > 0 && std::chrono::duration<double>(clock::now() - t0).count() >= max_seconds) {
      log(fmt::format("stopping at step {}: --max-seconds {} reached (resume with --resume)", s, max_seconds));
      break;
    }
  }
  tr.save(dir);
  nlohmann::json out;
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  out["steps"] = tr.steps_done();
  out["device"] = tr.device().name();
  out["finished"] = tr.steps_done() >= tc.steps;
  out["final_loss"] = last_loss;
  out["seconds"] = secs;
  out["tokens_per_s"] = secs > 0 ? double(total_tokens) / secs : 0;
  if (tr.steps_done() >= tc.steps) {
    const auto e = do_eval();
    out["in_distribution"] = {{"mean", e.mean}, {"min", e.min}, {"samples_per_cell", tc.eval_samples}, {"acc", e.acc}};
  }
  out["evals"] = evals;
  return out;
}

}  // namespace manyadd::learn
