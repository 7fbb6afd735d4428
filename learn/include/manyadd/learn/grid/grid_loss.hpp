// The grid universal transformer's batches (grids sized as the authors' GridSizeHandler), the loss of a
// group of them with its gradient, and evaluation-mode runs of a batch: the protocol in grid_train.hpp's
// opening comment, the model in grid_model.hpp.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "manyadd/core/progress.hpp"
#include "manyadd/format.hpp"
#include "manyadd/learn/grid/grid_model.hpp"
#include "manyadd/learn/tasks/grid_problems.hpp"

namespace manyadd::learn::grid {

constexpr int kBlock = 4;  // samples per gradient buffer: fixed, so the sum is the same on any thread count

std::vector<std::uint8_t> problem_tokens(const Problem& p);  // 'a+b+...=' as grid tokens

// The grid of a batch of Pi([.., N], [.., D]): H = N + extra_rows + U[0, rand_rows], W = D + extra_cols +
// U[0, rand_cols]. The authors' GridSizeHandler takes the exclusive bounds N + 1 and D + 1 with
// F_H = 0, F_W = 2 (seq2grid.py, decide_grid_size; generators.py passes n_range[1], s_range[1]): the
// defaults extra_rows 1, extra_cols 3 are the same grids.
struct GridSizeRule {
  int extra_rows = 1, extra_cols = 3, rand_rows = 3, rand_cols = 3;
};
std::pair<int, int> draw_grid_size(const Instance& inst, const GridSizeRule& rule, Rng& rng);

// Problems with one grid.
struct GridBatch {
  int B = 0, S = 0, H = 0, W = 0;
  std::vector<std::uint8_t> tokens;   // (B, S), PAD after '='
  std::vector<std::int32_t> targets;  // (B, W), the sum right-aligned, PAD before
  std::vector<Problem> problems;
  GridInput input(int b) const;
};
// InputError when a sum has more digits than W.
GridBatch make_batch(std::vector<Problem> problems, int H, int W);

// The training distribution split by term count into `groups` instances (generators.py, _get_ranges).
std::vector<Instance> training_groups(const Instance& train, int groups);

// The loss of one group and, with grads, its gradient times `scale` (accumulated into grads).
struct LossOptions {
  Regularizer reg = Regularizer::er;
  double beta = 0.05;
  double kl_lambda_p = 0.1;  // KL: the geometric prior's parameter (their avg_steps 10: 1/10)
  double pad_weight = 0.1;
};
struct GroupResult {
  double task = 0, reg = 0;  // reg: beta times the mean regularizer
  std::vector<int> steps;    // N_b
  std::int64_t cell_steps = 0;  // sum over samples of H W (N_b + 1): the work of one forward
};
// One workspace per thread (sample_forward's activations), reused between calls.
// cache_bytes: the first run of a sample keeps its activations for the backward while their total stays
// below this (the rest run again); the results are the same either way.
template <class S>
struct Workspaces {
  std::vector<SampleActs<S>> acts;
  std::vector<std::vector<S>> block_grads;
  std::vector<SampleActs<S>> kept;  // (B) the first runs' activations
  double cache_bytes = 2e9;
};
// acc (B): each sample's a for the ER regularizer. key: the group's stream (sample b's is
// seed_mix(key, b)). The samples run on `threads` threads; the gradient is summed in blocks of fixed
// samples in a fixed order, so the result does not depend on the thread count.
template <class S>
GroupResult group_loss(S* grads, const GridView<S>& m, const GridBatch& batch, const std::vector<double>& acc,
                       const LossOptions& o, std::uint64_t key, S scale, int threads, Workspaces<S>& ws);

// Evaluation-mode runs of a batch (no dropout; Bernoulli halting from key, or greedy): each sample's
// prediction, character accuracy, and steps.
struct BatchEval {
  std::vector<std::pair<int, int>> matches;  // (correct, valid) per sample
  std::vector<int> steps;
  std::vector<std::vector<std::uint8_t>> preds;
  // per sample: the weight of the argmax actions' grid in Seq2Grid's soft mixture, the product over the
  // tokens of the largest action probability (Eq. 3 is linear in the grid, so the soft grid is the
  // expectation of the hard grids over the action sequences; 1 with --hard-actions)
  std::vector<double> argmax_weight;
  std::int64_t cell_steps = 0;
};
// progress (if given) counts the samples as they finish.
// iv: the interventions at test every sample's run takes (RunOptions::test).
BatchEval eval_batch(const GridView<float>& m, const GridBatch& batch, std::uint64_t key, bool greedy, int max_steps,
                     int threads, std::vector<SampleActs<float>>& ws, Progress* progress = nullptr,
                     Interventions iv = {});

}  // namespace manyadd::learn::grid
