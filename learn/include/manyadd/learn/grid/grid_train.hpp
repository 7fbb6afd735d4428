// Data, loss, training and evaluation of the grid universal transformer (grid_model.hpp) on the
// protocol of paper 003, Sec. IV, with the authors' code (tag-cat) deciding where the paper is silent
// (learn/README.md, "The grid universal transformer", lists each such choice with its file and line).
//
// Data (tasks/math/addition/generators.py, BatchedSumSeqDataset): a problem of Pi([N1, N2], [D1, D2])
// has N terms, N uniform in [N1, N2], each term's digit count uniform in [D1, D2] and each digit uniform
// in 0-9 (leading zeros included); the input is 'a+b+...=' padded with PAD after '=' to the batch's
// longest, the target the sum's digits right-aligned in the grid's W columns, PAD before them. A
// training step draws `groups` groups of term counts ([1, 2] and [3, 4] for [1, 4] in 2 groups: their
// _get_ranges), 64 + 64 problems, each group with its own grid H = N + extra_rows + U[0, rand_rows],
// W = D + extra_cols + U[0, rand_cols] (N, D: the group's largest term count and digit count).
//
// Loss of a group (tagcat/train.py, train_net; pondernet.py; losses.py):
//   task = sum_n sum_{b running at n} p_{b,n} ce_{b,n} / D_n ,  D_n = sum_{b running at n} sum_w weight(y_bw)
//   reg  = beta mean_b R(p_b)        (R: Explore-Reinforce with a_b, or KL to a geometric prior)
// ce_{b,n} = sum_w weight(y_bw) CE(read-out of G_n at column w), weight 1/10 for PAD; "running at n":
// N_b >= n. (Halting fixed: task = sum_b ce_b / sum_b sum_w weight(y_bw), no reg.) a_b is the sample's
// character accuracy in a second, evaluation-mode run on the same batch (their training loop does the
// same). The step's loss is the mean over the groups; AdamW, global-norm clipping, cosine annealing with
// warm restarts per epoch (CosineAnnealingWarmRestarts(T_0 = 30 epochs, eta_min)).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "manyadd/core/progress.hpp"
#include "manyadd/format.hpp"
#include "manyadd/learn/grid/grid_loss.hpp"
#include "manyadd/learn/grid/grid_model.hpp"
#include "manyadd/learn/tasks/grid_problems.hpp"

namespace manyadd::learn::grid {



struct GridTrainConfig {
  std::string train_instance = "1-4x1-10";  // Pi([1, 4], [1, 10])
  int term_groups = 2;                       // term-count groups per step
  int batch = 128;                           // problems per step, split evenly between the groups
  int extra_rows = 1, extra_cols = 3, rand_rows = 3, rand_cols = 3;  // GridSizeRule
  double pad_weight = 0.1;
  std::string regularizer = "er";  // er | kl
  double beta = 0.05;
  double kl_lambda_p = 0.1;
  std::int64_t epochs = 510;
  int steps_per_epoch = 10;
  double lr = 1e-3, min_lr = 5e-5;
  int lr_period_epochs = 30;
  double beta1 = 0.9, beta2 = 0.999, adam_eps = 1e-8, weight_decay = 0.1, grad_clip = 10;
  std::uint64_t seed = 1;
  int threads = 2;
  std::int64_t log_every = 10;          // steps
  std::int64_t checkpoint_every = 100;  // steps; 0: at the end only
  std::int64_t eval_every = 300;        // steps; 0: at the end only
  std::string eval_instance = "5-6x11-15";  // their validation_dataset
  std::int64_t eval_samples = 128;
  std::int64_t cache_mb = 2048;  // memory for the activations the backward reuses (results do not depend on it)
  std::int64_t steps() const { return epochs * steps_per_epoch; }
  GridSizeRule grid_rule() const { return {extra_rows, extra_cols, rand_rows, rand_cols}; }
  LossOptions loss_options() const;
  void validate() const;  // throws InputError
};
void to_json(nlohmann::json& j, const GridTrainConfig& c);
void from_json(const nlohmann::json& j, GridTrainConfig& c);  // throws InputError

// Learning rate of step t (1-based): cosine annealing with warm restarts per epoch,
// eta_min + (lr - eta_min) (1 + cos(pi (e mod P) / P)) / 2 with e = (t - 1) / steps_per_epoch.
double grid_lr_at(const GridTrainConfig& c, std::int64_t t);

struct GridStepStats {
  double loss = 0, task = 0, reg = 0, grad_norm = 0, lr = 0;
  double train_acc = 0;            // mean a_b (character accuracy of the evaluation-mode runs)
  double steps_train = 0, steps_eval = 0;  // mean N_b in the training and the evaluation-mode runs
  std::int64_t cell_steps = 0;     // grid cells times recurrent steps of the training forwards
};

class GridTrainer {
 public:
  GridTrainer(const GridConfig& mc, const GridTrainConfig& tc);
  GridStepStats step();
  std::int64_t steps_done() const { return step_; }
  const std::vector<float>& params() const { return params_; }
  std::vector<float>& params() { return params_; }
  GridView<float> view() const { return {mc_, lay_, params_.data(), fast_}; }
  void set_fast(bool fast) { fast_ = fast; }  // the linear layers' products on oneDNN (GridView::fast)
  const GridConfig& model_config() const { return mc_; }
  const GridTrainConfig& train_config() const { return tc_; }
  const GridLayout& layout() const { return lay_; }
  // The groups' batches of step t (1-based): a function of (seed, t) alone.
  std::vector<GridBatch> batches(std::int64_t t) const;
  // A model directory: config.json, model.safetensors, checkpoint.safetensors (run_files.hpp).
  void save(const std::string& dir, const std::map<std::string, std::string>& run_state = {}) const;
  void load_checkpoint(const std::string& dir);  // the model configuration must match
  const std::map<std::string, std::string>& run_state() const { return run_state_; }

 private:
  GridConfig mc_;
  GridTrainConfig tc_;
  GridLayout lay_;
  std::vector<Instance> groups_;
  std::vector<ParamSegment> segs_;
  std::vector<float> params_, m_, v_, grads_;
  std::int64_t step_ = 0;
  bool fast_ = false;
  Workspaces<float> ws_;
  std::map<std::string, std::string> run_state_;
};

// Accuracy on one instance (the authors' metrics, tagcat/functions/metrics.py): character accuracy =
// correct / valid matches over all samples (a PAD-PAD match is not valid), sequence accuracy = samples
// whose every valid match is correct. Batches of `batch` problems share one grid (drawn as in training,
// seq2grid.py's decide_grid_size at test too); everything is a function of (seed, instance).
struct InstanceResult {
  Instance inst;
  std::int64_t samples = 0, seq_correct = 0, char_correct = 0, char_valid = 0;
  std::vector<std::int64_t> steps_hist;  // samples by recurrent steps taken (index = steps)
  std::int64_t cell_steps = 0;
  double seconds = 0;
  double char_acc() const { return char_valid ? double(char_correct) / double(char_valid) : 0.0; }
  double seq_acc() const { return samples ? double(seq_correct) / double(samples) : 0.0; }
  double mean_steps() const;
  nlohmann::json to_json() const;
};
// each_batch (if given) sees every batch with its results, in order (evaluate_grid --problems-csv).
InstanceResult evaluate_instance(const GridView<float>& m, const Instance& inst, std::int64_t samples,
                                 std::uint64_t seed, const GridSizeRule& rule, int batch, bool greedy, int max_steps,
                                 int threads, Progress* progress = nullptr,
                                 const std::function<void(const GridBatch&, const BatchEval&)>& each_batch = {},
                                 Interventions iv = {});

// The whole training loop (train_grid): resume, progress, log.csv and eval.csv, checkpoints every
// checkpoint_every steps and at the end, --stop-after / --max-seconds pieces that resume bit for bit.
nlohmann::json run_grid_training(const GridConfig& mc, const GridTrainConfig& tc, const std::string& dir, bool resume,
                                 std::int64_t stop_after, double max_seconds,
                                 const ProgressOptions& progress = quiet_progress(), bool fast = false);

// Memory, estimated before the work starts and checked against the machine (core/cli.hpp's
// check_fits_memory: InputError naming the options to reduce). grid_sample_bytes: one sample's run on an
// S-token input and an H x W grid, keeping every activation of `steps` recurrent steps (a backward
// follows) or one step's.
double grid_sample_bytes(const GridConfig& c, int S, int H, int W, bool keep, int steps);
void check_grid_run_fits(const GridConfig& mc, const GridTrainConfig& tc);
void check_grid_eval_fits(const GridConfig& mc, int S, int H, int W, int threads);

// A model directory written by train_grid: config.json ({"model": GridConfig, ...}) + model.safetensors.
struct LoadedGridModel {
  GridConfig cfg;
  GridLayout lay;
  std::vector<float> params;
  nlohmann::json config_json;
  GridView<float> view(bool fast = false) const { return {cfg, lay, params.data(), fast}; }
};
LoadedGridModel load_grid_model(const std::string& dir);  // throws InputError

}  // namespace manyadd::learn::grid
