// Evaluation on the paper's protocol (Sec. 4.2): exact match of the whole response (scratchpad
// included, plus the final EOS) on a task's test cell (addition: TA(n, m)) at offsets 1; and, beside
// it, the exact match of the final answer's tokens alone (parity's Figure 3 metric: the answer token,
// the one before EOS). Teacher-forced (one forward per instance) and true greedy decoding with a
// key/value cache.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "manyadd/core/parallel.hpp"
#include "manyadd/learn/decoder/model.hpp"
#include "manyadd/learn/tasks/task.hpp"

namespace manyadd::learn {

class TrainDevice;  // batch.hpp

// Teacher-forced prediction: argmax at every counted target position (response tokens + EOS).
// Returns true iff all equal the targets; pred (if given) receives the argmax tokens in order;
// answer_ok (if given) whether the predictions of the answer's tokens alone (ex.answer_begin ..
// answer_end, predicted at the rows before them) are right. `a` receives the forward's activations
// (logits, attention).
bool teacher_forced_correct(Acts<float>& a, const ModelView<float>& model, const Example& ex,
                            std::vector<std::uint8_t>* pred = nullptr, bool* answer_ok = nullptr);
// The same verdicts from the argmax of every row of the example (a device's predictions).
bool argmax_correct(const std::uint8_t* argmax, const Example& ex, bool* answer_ok = nullptr);
// Greedy decoding from the query (up to and including '='), at most response_len tokens, stopping
// at EOS. Returns true iff the generated tokens equal the targets; out receives them.
bool greedy_correct(const ModelView<float>& model, const Example& ex, std::vector<std::uint8_t>* out = nullptr);

// Samples of TA(n, m) for one cell: a generator seeded from (seed, n, m) so cells are independent
// of which other cells are evaluated.
std::uint64_t cell_seed(std::uint64_t seed, int n, int m);

// both: teacher-forced verdict counted, greedy run too and every disagreement counted.
enum class EvalMode { teacher, greedy, both };
struct CellResult {
  std::int64_t samples = 0, exact = 0;
  std::int64_t answer_exact = 0;  // instances whose final answer tokens alone are right (teacher-forced)
  std::int64_t disagree = 0;  // EvalMode::both: instances where teacher-forced and greedy verdicts differ
  bool fits = true;  // false when the shape needs position IDs beyond the model's max_pos
  double accuracy() const { return samples ? double(exact) / double(samples) : 0.0; }
  double answer_accuracy() const { return samples ? double(answer_exact) / double(samples) : 0.0; }
};
// With `dev` (teacher mode only) the forward passes run there in packed batches, with the device's
// weights (model.params unused); the samples and the verdict rule are the same.
// Cell (i, j) of a task's grid (one-axis tasks: j = 1), its samples drawn by task.sample_cell from a
// generator seeded with cell_seed(seed, i, j); fits = false when the cell's extent needs position IDs
// beyond the model's max_pos.
CellResult eval_cell(const ModelView<float>& model, const Task& task, int i, int j, std::int64_t samples,
                     std::uint64_t seed, int threads, EvalMode mode, TrainDevice* dev = nullptr);
// Addition's cell TA(n, m).
CellResult eval_cell(const ModelView<float>& model, int n, int m, std::int64_t samples, std::uint64_t seed,
                     int threads, EvalMode mode, TrainDevice* dev = nullptr);

// The grid universal transformer's problem instances (grid_train.hpp: Pi([terms], [digits]), every term's
// digits uniform, leading zeros kept) on a decoder of the addition task, for the side-by-side table:
// problems drawn by grid::sample_problem from Rng(seed, instance), written in the task's format (operands
// zero-padded to the longest; one-term problems as they are), greedy decoding at offsets 1. Counts:
// the whole response exact (this project's metric), the answer alone (read back from the generated
// sequence, leading zeros dropped) equal to the sum (the grid's sequence accuracy), and the grid's
// character accuracy on the answer: the answer and the sum right-aligned, a column valid where either
// has a digit, correct where both have the same (a sequence that cannot be read back answers nothing).
// fits = false (nothing run) when the instance's largest problem needs position IDs beyond max_pos.
struct InstanceCounts {
  std::int64_t samples = 0, exact = 0, answer_exact = 0, char_correct = 0, char_valid = 0;
  bool fits = true;
  double answer_accuracy() const { return samples ? double(answer_exact) / double(samples) : 0.0; }
  double char_accuracy() const { return char_valid ? double(char_correct) / double(char_valid) : 0.0; }
};
// The grid metric's counts for one answer (digits, no leading zeros; empty: nothing answered).
void count_answer_chars(const std::string& answer, const std::string& sum, std::int64_t& correct, std::int64_t& valid);
InstanceCounts eval_decoder_instance(const ModelView<float>& model, int terms_lo, int terms_hi, int digits_lo,
                                     int digits_hi, std::int64_t samples, std::uint64_t seed, int threads);

}  // namespace manyadd::learn
