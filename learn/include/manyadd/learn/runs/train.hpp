// Training: a task's fixed training set (task.hpp; addition: SA(n, m)) with random position offsets, AdamW (betas 0.9/0.95, no weight decay,
// global-norm clipping at 1.0 as the reference implementation), linear warm-up over 1% of the steps
// then cosine decay to 0.1 x lr, periodic evaluation, atomic checksummed checkpoints, bit-identical
// resume; fp32 or bf16 mixed precision (TrainConfig::precision, model.hpp's Precision). The arithmetic of a step runs on a TrainDevice (batch.hpp): by default the CPU trainer,
// which splits the batch over threads in fixed contiguous blocks with one gradient buffer each,
// reduced in thread order, so a run is deterministic for a given (seed, threads).
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "manyadd/core/progress.hpp"
#include "manyadd/learn/devices/batch.hpp"
#include "manyadd/learn/decoder/model.hpp"
#include "manyadd/learn/tasks/task.hpp"
#include "manyadd/learn/tasks/train_config.hpp"

namespace manyadd::learn {


struct StepStats {
  double loss = 0;            // mean loss per counted target
  std::int64_t tokens = 0;    // tokens processed (inputs, all positions)
  std::int64_t targets = 0;   // counted targets
  double grad_norm = 0;       // before clipping
};

class Trainer {
 public:
  Trainer(const ModelConfig& mc, const TrainConfig& tc);
  // One optimizer step (the next one); returns its statistics.
  StepStats step();
  // The next step with deferred statistics (TrainDevice::step_async): returns its tokens and targets at
  // once; finish_steps returns the full StepStats (loss, grad_norm too) of every step launched so since
  // the last call, in step order, equal to what step() returns. run_training reads them once per log
  // line, evaluation or checkpoint, so a GPU runs the steps between without waiting for the host.
  // The packing thread: each step hands the sampling and packing of the next step's batch to a host
  // worker (std::async) before it launches its own on the device, so the next batch is ready when the
  // device is; a batch is a function of its step alone (packed_batch), so the batches and their order
  // are those of packing on the calling thread, whatever the timing.
  StepStats step_async();
  std::vector<StepStats> finish_steps();
  std::int64_t steps_done() const { return step_; }
  const std::vector<float>& params() const {
    pull_from_device();
    return params_;
  }
  std::vector<float>& params() {  // the caller may write: the device gets the weights before its next step
    pull_from_device();
    push_to_device_ = true;
    return params_;
  }
  // The model with the current weights (valid until the next step or write through params()).
  ModelView<float> view() const { return {mc_, lay_, params().data()}; }

  // Runs the steps on another device from now on (nullptr: back to the CPU trainer). The batches, their
  // order and offsets, the schedule and the checkpoints are the host's as before; only the arithmetic
  // moves.
  void attach_device(std::shared_ptr<TrainDevice> dev);
  const TrainDevice& device() const { return *dev_; }
  // The examples of step t (1-based) in batch order, and the same packed: exactly what step t trains on.
  // Safe to call while the packing thread works (the sampling order's cache is locked).
  std::vector<Example> batch_examples(std::int64_t t);
  PackedBatch packed_batch(std::int64_t t) { return pack_batch(batch_examples(t), mc_); }
  const ModelConfig& model_config() const { return mc_; }
  const TrainConfig& train_config() const { return tc_; }
  const Layout& layout() const { return lay_; }
  const Task& task() const { return *task_; }

  // A model directory: config.json, model.safetensors (weights only, PyTorch-loadable) and
  // checkpoint.safetensors (weights + Adam moments + step + precision; what --resume reads). Atomic per
  // file. run_state: the caller's state at this step (run_training's log window), stored in the
  // checkpoint's metadata as "run.<key>", under its checksum, and returned by run_state() on load.
  void save(const std::string& dir, const std::map<std::string, std::string>& run_state = {}) const;
  // Restores weights, moments and step from dir/checkpoint.safetensors; the model config must match,
  // and so must the precision it was trained in (a checkpoint without one is fp32) unless
  // allow_precision_change; the file must hold exactly the tensors of the model and its moments, and
  // its checksum must cover the whole file (a legacy checkpoint, whose step was outside its checksum,
  // is refused).
  void load_checkpoint(const std::string& dir, bool allow_precision_change = false);
  const std::map<std::string, std::string>& run_state() const { return run_state_; }

  // Exact match per in-distribution cell of the task (addition: TA(i, j), i in 1..train_n, j in
  // 2..train_m), teacher-forced.
  struct EvalSummary {
    double mean = 0, min = 0;
    std::vector<std::vector<double>> acc;  // [row][column] over the training cells (addition: [i-1][j-2])
  };
  EvalSummary eval_in_distribution(std::int64_t samples) const;

 private:
  ModelConfig mc_;
  TrainConfig tc_;
  const Task* task_;
  Layout lay_;
  mutable std::vector<float> params_, m_, v_;  // host copy, synced with the device on demand
  std::shared_ptr<TrainDevice> dev_;
  mutable bool pull_from_device_ = false;  // the device holds newer weights/moments than the host
  mutable bool push_to_device_ = true;     // the host holds newer ones than the device
  void pull_from_device() const;
  std::vector<Problem> data_;
  std::int64_t step_ = 0;
  std::vector<StepStats> launched_;  // step_async's steps whose loss and grad_norm are not read yet
  std::map<std::string, std::string> run_state_;  // of the last checkpoint loaded
  std::mutex perm_mutex_;  // perm_epoch_ and perm_: the packing thread and the caller both sample
  std::int64_t perm_epoch_ = -1;
  std::vector<std::int64_t> perm_;
  std::int64_t sample_index(std::int64_t k);  // k-th sample of the run -> index into data_ (perm_mutex_ held)
  // The batch of step ahead_t_ being packed by the packing thread (declared last: destroyed, i.e. waited
  // for, before everything it reads).
  std::int64_t ahead_t_ = 0;
  std::future<PackedBatch> ahead_;
  PackedBatch batch_for_step(std::int64_t t);  // the packed batch of step t: the worker's, or packed here
};

// Runs the whole loop: resumes if asked, reports progress (core/progress.hpp: steps, rate, ETA, the
// last log row's loss; evaluations and warnings as messages) with `progress`'s options (quiet by
// default), evaluates every eval_every steps (appends to dir/eval.csv), appends a row to dir/log.csv
// every log_every steps, checkpoints.
// stop_after > 0 stops (with a checkpoint) after that many total steps, simulating an interruption.
// Returns a JSON summary.
// With `device` the steps (and the periodic evaluations) run there; nullptr = the CPU trainer
// (make_cpu_device with tc.threads).
// max_seconds > 0 also stops (with a checkpoint) after the first step that ends past that wall time:
// pieces of a run that fit a time-limited machine (resume continues bit for bit wherever it stopped).
// allow_precision_change: resume a checkpoint written in another precision (see load_checkpoint).
nlohmann::json run_training(const ModelConfig& mc, const TrainConfig& tc, const std::string& dir, bool resume,
                            std::int64_t stop_after, const ProgressOptions& progress = quiet_progress(),
                            std::shared_ptr<TrainDevice> device = nullptr, double max_seconds = 0,
                            bool allow_precision_change = false);

}  // namespace manyadd::learn
