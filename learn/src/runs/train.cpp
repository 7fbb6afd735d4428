// Training loop, optimizer, checkpoints: see train.hpp.
#include "manyadd/learn/runs/train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/progress.hpp"

#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/runs/run_files.hpp"

namespace manyadd::learn {


Trainer::Trainer(const ModelConfig& mc, const TrainConfig& tc)
    : mc_(mc), tc_(tc), task_(&task_named(tc.task)), lay_(Layout::make(mc)) {
  tc_.validate();
  task_->check_model(mc_);
  // Refuse a model whose position tables cannot hold the largest training instance.
  const Task::Extent big = task_->extent(tc_.train_n, tc_.train_m);
  if (!fits(mc_, big)) {
    std::string need;
    for (int lv = 0; lv < pos_levels(mc_.pos_mode); ++lv)
      need += fmt::format("{}max_pos{} >= {} (now {})", lv ? ", " : "", lv + 1,
                          1 + (mc_.pos_mode == PosMode::absolute ? big.T - 2 : big.span[std::size_t(lv)]),
                          mc_.max_pos(lv));
    throw InputError(fmt::format("the model's position tables cannot hold the {} training set ({}, {}): need {}",
                                 task_->name(), task_->shape_words(task_->largest(tc_.train_n, tc_.train_m)),
                                 pos_mode_name(mc_.pos_mode), need));
  }
  if (mc_.pos_mode == PosMode::abacus && max_offset(mc_, big, 0) < mc_.abacus_k)
    throw InputError(fmt::format("pos_mode abacus: training offsets up to abacus_k = {} on numbers of up to {} digits "
                                 "need max_pos1 >= {} (now {})",
                                 mc_.abacus_k, big.digit_run, mc_.abacus_k + big.digit_run - 1, mc_.max_pos1));
  params_ = init_params<float>(mc_, lay_, seed_mix(tc_.seed, 0x1417));
  m_.assign(params_.size(), 0.f);
  v_.assign(params_.size(), 0.f);
  dev_ = make_cpu_device(mc_, tc_.threads, tc_.precision_value());
  dev_->set_attn_entropy(tc_.attn_entropy);
  Rng rng(seed_mix(tc_.data_seed_value(), 0xDA7A));
  data_ = task_->sample_train(rng, tc_);
}

std::int64_t Trainer::sample_index(std::int64_t k) {
  const std::int64_t size = std::int64_t(data_.size());
  const std::int64_t epoch = k / size;
  if (epoch != perm_epoch_) {
    perm_.resize(std::size_t(size));
    for (std::int64_t i = 0; i < size; ++i) perm_[std::size_t(i)] = i;
    Rng rng(seed_mix(tc_.data_seed_value(), 0xE90C, std::uint64_t(epoch)));
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
  if (dev) dev->set_attn_entropy(tc_.attn_entropy);
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
  // Abacus: one offset beta per batch (McLeish et al., Sec. 3.1), from (seed, step) alone.
  Rng batch_rng(seed_mix(tc_.seed, std::uint64_t(t), 0xABAC05));
  const Offsets abacus{mc_.pos_mode == PosMode::abacus ? abacus_offset(mc_, batch_rng) : 1, 1, 1};
  std::vector<std::int64_t> picks(static_cast<std::size_t>(B));
  {
    const std::lock_guard<std::mutex> lock(perm_mutex_);
    for (int b = 0; b < B; ++b) picks[std::size_t(b)] = sample_index((t - 1) * B + b);
  }
  for (int b = 0; b < B; ++b) {
    const Problem& p = data_[std::size_t(picks[std::size_t(b)])];
    if (mc_.pos_mode == PosMode::abacus) {
      exs.push_back(make_example(*task_, p, mc_, abacus));
      continue;
    }
    // Offsets depend only on (seed, step, slot): the same with any thread count, device and on resume.
    Rng rng(seed_mix(tc_.seed, std::uint64_t(t), std::uint64_t(b) + 0x0FF5E7));
    exs.push_back(make_train_example(*task_, p, mc_, rng));
  }
  return exs;
}

StepStats Trainer::step() {
  MANYADD_INVARIANT(launched_.empty(), "Trainer::step with deferred steps not finished (finish_steps first)");
  step_async();
  return finish_steps().back();
}

PackedBatch Trainer::batch_for_step(std::int64_t t) {
  if (ahead_.valid()) {
    if (ahead_t_ == t) return ahead_.get();  // waits for the worker; rethrows what it threw
    ahead_.wait();  // another step's (a checkpoint was loaded since): dropped unread
    ahead_ = {};
  }
  return packed_batch(t);
}

StepStats Trainer::step_async() {
  const std::int64_t t = step_ + 1;
  const PackedBatch pb = batch_for_step(t);
  if (t < tc_.steps) {  // the next step's batch, packed while this one computes
    ahead_t_ = t + 1;
    ahead_ = std::async(std::launch::async, [this, next = t + 1] { return packed_batch(next); });
  }
  StepStats st;
  st.tokens = pb.real_tokens;
  st.targets = pb.counted_targets;
  const float scale = 1.f / float(st.targets);  // loss = mean over the batch's counted targets
  if (push_to_device_) dev_->set_state(params_, m_, v_), push_to_device_ = false;
  dev_->step_async(pb, scale, tc_, t);
  pull_from_device_ = true;
  step_ = t;
  st.loss = st.grad_norm = NAN;
  launched_.push_back(st);
  return st;
}

std::vector<StepStats> Trainer::finish_steps() {
  const auto rs = dev_->take_results();
  MANYADD_INVARIANT(rs.size() == launched_.size(), "Trainer::finish_steps: the device lost a step's result");
  std::vector<StepStats> out;
  out.swap(launched_);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].grad_norm = rs[i].grad_norm;
    out[i].loss = rs[i].loss_sum / double(out[i].targets);
  }
  return out;
}

void Trainer::save(const std::string& dir, const std::map<std::string, std::string>& run_state) const {
  pull_from_device();
  make_output_dir(dir);
  nlohmann::json cfg;
  cfg["model"] = mc_;
  cfg["train"] = tc_;
  cfg["step"] = step_;
  cfg["format"] = task_->describe();
  cfg["format"]["position_ids"] = position_rule(*task_, mc_.pos_mode);
  cfg["architecture"] = architecture_description(mc_);
  cfg["architecture"]["precision"] =
      tc_.precision_value() == Precision::bf16
          ? "trained in bf16 mixed precision (fp32 master weights, Adam moments, gradients and residual stream; bf16 "
            "inputs of every matrix product, fp32 accumulation); the stored weights are fp32"
          : "trained in fp32";
  // the settings a resume changed (train_changes in the run state; config.json's train section is the last
  // piece's), as train_grid's config.json holds them
  if (run_state.count("train_changes")) cfg["run"]["train_changes"] = run_state.at("train_changes");
  atomic_write(dir + "/config.json", cfg.dump(2) + "\n");
  nlohmann::json mj = mc_;
  std::map<std::string, std::string> ckpt_meta;
  for (const auto& [k, v] : run_state) ckpt_meta["run." + k] = v;
  ckpt_meta.insert({{"model_config", mj.dump()}, {"precision", tc_.precision}});
  write_run_checkpoint(dir, lay_, params_, m_, v_, step_, ckpt_meta);
}

void Trainer::load_checkpoint(const std::string& dir, bool allow_precision_change) {
  auto check = [&](const std::map<std::string, std::string>& meta) {
    if (!checkpoint_config_is(meta, mc_))
      throw InputError(fmt::format("'{}/checkpoint.safetensors' was written for another model configuration", dir));
    const std::string saved_prec = meta.count("precision") ? meta.at("precision") : std::string("fp32");
    if (saved_prec != tc_.precision && !allow_precision_change)
      throw InputError(fmt::format("'{}/checkpoint.safetensors' was trained in {}; resuming it in {} changes the "
                                   "arithmetic of the run (pass --allow-precision-change to do so)",
                                   dir, saved_prec, tc_.precision));
  };
  RunCheckpoint c = read_run_checkpoint(dir, lay_, params_, m_, v_, check);
  step_ = c.step;
  run_state_ = std::move(c.run_state);
  pull_from_device_ = false;
  push_to_device_ = true;
}

Trainer::EvalSummary Trainer::eval_in_distribution(std::int64_t samples) const {
  pull_from_device();
  if (push_to_device_) dev_->set_state(params_, m_, v_), push_to_device_ = false;
  EvalSummary r;
  r.min = 1.0;
  double sum = 0;
  int cells = 0, row = -1;
  for (const auto& [i, j] : task_->training_cells(tc_)) {
    if (i != row) r.acc.emplace_back(), row = i;
    const auto c = eval_cell(ModelView<float>{mc_, lay_, params_.data(), tc_.precision_value()}, *task_, i, j, samples,
                             tc_.seed + 1, tc_.threads, EvalMode::teacher, dev_.get());
    r.acc.back().push_back(c.accuracy());
    sum += c.accuracy();
    r.min = std::min(r.min, c.accuracy());
    ++cells;
  }
  r.mean = sum / cells;
  return r;
}

namespace {
const char kLogHeader[] = "step,loss,lr,grad_norm,tokens_per_s,elapsed_s";
const char kEvalHeader[] = "step,mean_exact_match,min_exact_match,elapsed_s";
}  // namespace

nlohmann::json run_training(const ModelConfig& mc, const TrainConfig& tc, const std::string& dir, bool resume,
                            std::int64_t stop_after, const ProgressOptions& progress,
                            std::shared_ptr<TrainDevice> device, double max_seconds, bool allow_precision_change) {
  check_output_dir_name(dir);  // before the progress line starts and anything is read
  if (!resume && path_exists(dir + "/checkpoint.safetensors"))
    throw InputError(fmt::format("'{}' already holds a run (checkpoint.safetensors); pass --resume or choose another --out",
                                 dir));
  Trainer tr(mc, tc);
  if (resume) tr.load_checkpoint(dir, allow_precision_change);
  if (device) tr.attach_device(std::move(device));
  // One progress line over the steps this process runs (run_files.hpp, begin_run_piece).
  const RunPiece piece = begin_run_piece(dir, resume, tc.steps, tr.steps_done(), stop_after, max_seconds, progress);
  const std::int64_t end = piece.end;
  Progress prog("train", end, "steps", piece.progress);
  if (end < tc.steps) prog.note(fmt::format("stopping at step {} of {}", end, tc.steps));
  // The state of the log at the checkpoint: the steps and the loss sum of the log window not yet
  // written (a checkpoint between two log rows), so that the rows after a resume are the rows of the
  // uninterrupted run. (Wall-clock columns -- tokens/s, elapsed seconds -- are this process's.)
  std::int64_t win_n = 0;
  double win_loss = 0;
  // The train settings a resume changed, and at which step (run.train_changes; kept only once there is one).
  std::string train_changes =
      resume && tr.run_state().count("train_changes") ? tr.run_state().at("train_changes") : "";
  if (resume) {
    const auto& rs = tr.run_state();
    const std::string what = dir + "/checkpoint.safetensors";
    try {
      if (rs.count("log_window_steps"))
        win_n = cli::parse_int(rs.at("log_window_steps"), "run.log_window_steps", 0, tr.steps_done());
      if (rs.count("log_window_loss")) win_loss = from_bits(rs.at("log_window_loss"), "run.log_window_loss");
    } catch (const InputError& e) {
      throw InputError(fmt::format("'{}': {}", what, e.what()));
    }
    // config.json is the user's to edit (and flags may extend --steps): say what differs from the
    // settings the checkpoint was trained with, which its checksum covers, and keep it with the run.
    const std::string diff = resumed_train_changes(rs, what, tc, {}, [](nlohmann::json& was) {
      // a field the checkpoint's run predates (task, hard_fraction, ...) had its default's meaning then
      nlohmann::json def;
      to_json(def, TrainConfig{});
      for (auto it = def.begin(); it != def.end(); ++it)
        if (!was.contains(it.key())) was[it.key()] = it.value();
    });
    if (!diff.empty()) {
      prog.message("resuming with train settings other than the checkpoint's:" + diff +
                       " the steps from here differ from the run's",
                   true);
      train_changes = add_train_change(train_changes, tr.steps_done(), diff);
    }
  }
  // The logs hold one history: the rows of the steps the checkpoint holds (a new run starts them anew).
  RunLogs logs;
  open_run_logs(logs, dir, kLogHeader, 6, kEvalHeader, 4, tr.steps_done(), resume);
  const std::int64_t last_eval = logs.last_eval;
  std::ofstream &csv = logs.log, &ecsv = logs.eval;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto last = t0;
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  std::int64_t win_tokens = 0, total_tokens = 0;
  double last_loss = NAN;
  nlohmann::json evals = nlohmann::json::array();
  auto do_eval = [&] {
    const auto e = tr.eval_in_distribution(tc.eval_samples);
    if (tr.steps_done() > last_eval)  // a finished run resumed has its final row already
      ecsv << fmt::format("{},{:.4f},{:.4f},{:.1f}\n", tr.steps_done(), e.mean, e.min, elapsed()) << std::flush;
    prog.message(fmt::format("eval step {}: in-distribution exact match mean {:.4f} min {:.4f} ({} samples/cell)",
                    tr.steps_done(), e.mean, e.min, tc.eval_samples));
    evals.push_back({{"step", tr.steps_done()}, {"mean", e.mean}, {"min", e.min}});
    return e;
  };
  auto save = [&] {
    std::map<std::string, std::string> rs = {{"log_window_steps", std::to_string(win_n)},
                                             {"log_window_loss", double_bits(win_loss)},
                                             {"train_config", nlohmann::json(tc).dump()}};
    if (!train_changes.empty()) rs["train_changes"] = train_changes;
    tr.save(dir, rs);
  };
  // The steps run with deferred statistics (Trainer::step_async): their losses enter the log window
  // here, in step order, before every log row, evaluation and checkpoint -- the same sums as step by step.
  double last_gnorm = NAN;
  auto settle = [&] {
    for (const StepStats& st : tr.finish_steps()) {
      win_loss += st.loss, win_n += 1;
      last_loss = st.loss, last_gnorm = st.grad_norm;
    }
  };
  while (tr.steps_done() < end) {
    const StepStats st = tr.step_async();
    const std::int64_t s = tr.steps_done();
    win_tokens += st.tokens, total_tokens += st.tokens;
    const bool log_now = s % tc.log_every == 0 || s == tc.steps;
    const bool eval_now = tc.eval_every > 0 && s % tc.eval_every == 0 && s != tc.steps;
    const bool save_now = tc.checkpoint_every > 0 && s % tc.checkpoint_every == 0;
    if (log_now || eval_now || save_now || s == end) settle();
    if (log_now) {  // the rows of the run, wherever a piece of it stops
      const auto now = clock::now();
      const double dt = std::chrono::duration<double>(now - last).count();
      const double el = elapsed();
      const double tps = dt > 0 ? double(win_tokens) / dt : 0;
      prog.note(fmt::format("loss {:.4f} lr {:.2e} gnorm {:.2f} | {:.0f} tok/s{}", win_loss / double(win_n), lr_at(tc, s),
                            last_gnorm, tps, end < tc.steps ? fmt::format(" | stopping at step {} of {}", end, tc.steps) : ""));
      csv << fmt::format("{},{:.6f},{:.6e},{:.4f},{:.0f},{:.1f}\n", s, win_loss / double(win_n), lr_at(tc, s),
                         last_gnorm, tps, el)
          << std::flush;
      last = now, win_loss = 0, win_n = 0, win_tokens = 0;
    }
    prog.set(s);
    if (eval_now) do_eval();
    if (save_now) save();
    if (max_seconds > 0 && std::chrono::duration<double>(clock::now() - t0).count() >= max_seconds) {
      prog.message(fmt::format("stopping at step {}: --max-seconds {} reached (resume with --resume)", s, max_seconds));
      break;
    }
  }
  settle();
  save();
  prog.finish();
  nlohmann::json out;
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  out["steps"] = tr.steps_done();
  out["device"] = tr.device().name();
  out["finished"] = tr.steps_done() >= tc.steps;
  out["final_loss"] = last_loss;
  out["seconds"] = secs;
  out["tokens_per_s"] = secs > 0 ? double(total_tokens) / secs : 0;
  if (!train_changes.empty()) out["train_changes"] = train_changes;
  if (tr.steps_done() >= tc.steps) {
    const auto e = do_eval();
    out["in_distribution"] = {{"mean", e.mean}, {"min", e.min}, {"samples_per_cell", tc.eval_samples}, {"acc", e.acc}};
  }
  out["evals"] = evals;
  return out;
}

}  // namespace manyadd::learn
