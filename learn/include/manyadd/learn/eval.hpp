// Evaluation on the paper's protocol (Sec. 4.2): exact match of the whole response (scratchpad
// included, plus the final EOS) on TA(n, m) samples at offsets 1. Teacher-forced (one forward per
// instance) and true greedy decoding with a key/value cache.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "manyadd/core/parallel.hpp"
#include "manyadd/learn/model.hpp"

namespace manyadd::learn {

class TrainDevice;  // batch.hpp

// Teacher-forced prediction: argmax at every counted target position (response tokens + EOS).
// Returns true iff all equal the targets; pred (if given) receives the argmax tokens in order.
// `a` receives the forward's activations (logits, attention).
bool teacher_forced_correct(Acts<float>& a, const ModelView<float>& model, const Example& ex,
                            std::vector<std::uint8_t>* pred = nullptr);
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
  std::int64_t disagree = 0;  // EvalMode::both: instances where teacher-forced and greedy verdicts differ
  bool fits = true;  // false when the shape needs position IDs beyond the model's max_pos
  double accuracy() const { return samples ? double(exact) / double(samples) : 0.0; }
};
// With `dev` (teacher mode only) the forward passes run there in packed batches, with the device's
// weights (model.params unused); the samples and the verdict rule are the same.
CellResult eval_cell(const ModelView<float>& model, int n, int m, std::int64_t samples, std::uint64_t seed,
                     int threads, EvalMode mode, TrainDevice* dev = nullptr);

}  // namespace manyadd::learn
