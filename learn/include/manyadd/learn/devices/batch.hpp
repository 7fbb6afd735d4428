// Batched training for devices: a batch of examples of different lengths packed into one varlen
// layout (their real tokens concatenated), the AdamW update shared by every trainer, and the interface a device implements
// (TrainDevice) with its two reference CPU implementations: CpuDevice (the default trainer: threads over
// sequences, one sequence at a time) and PackedCpuDevice (the whole packed batch at once, the CPU twin
// of the CUDA device in cuda_device.cpp, which mirrors model_forward/model_backward pass by pass). The
// fast CPU device is in cpu_fast.hpp.
//
// Layout (varlen, as FlashAttention's cu_seqlens): sequence b occupies rows [offsets[b], offsets[b + 1])
// of every (R, ...) buffer, R = the batch's real tokens; no padding. Every row-wise pass (embedding,
// norms, matrix products, GEGLU, loss) runs on the R real rows, attention on each sequence's own rows
// (causal within it), so every row equals the forward of its sequence alone. Before this layout the
// batch was padded to (B, T) (T the longest sequence): on the paper's SA(10, 10) batches of 400 that
// computed 2.09x the real rows (mean length 120.5, longest 252).
// Shape legend: B sequences, T the longest sequence, R rows (real tokens), C d_model, NH heads, HS d_head,
// F d_ff, V vocabulary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "manyadd/learn/decoder/model.hpp"

namespace manyadd::learn {

struct PackedBatch {
  int B = 0, T = 0;                     // sequences, the longest sequence's length
  std::vector<std::int32_t> offsets;    // (B + 1) first row of each sequence; offsets[B] = R
  std::vector<std::uint8_t> tokens;     // (R) token ids
  std::vector<std::int32_t> pos[kMaxPosLevels];  // (R) per level (empty for unused levels)
  std::vector<std::int32_t> targets;    // (R) next token on counted rows, -1 elsewhere
  std::int64_t real_tokens = 0;         // R
  std::int64_t counted_targets = 0;     // rows with target >= 0
  // For the embedding's backward on a device (kernels' embedding_backward): table k (0 the token table
  // with vocab rows, 1 + lv position level lv's table) row r is read by the rows readers[k][i],
  // reader_starts[k][r] <= i < reader_starts[k][r + 1], in increasing order (group_rows).
  std::vector<std::int32_t> readers[1 + kMaxPosLevels], reader_starts[1 + kMaxPosLevels];
  std::int64_t rows() const { return real_tokens; }
  int length(int b) const { return offsets[std::size_t(b) + 1] - offsets[std::size_t(b)]; }
};

// The rows 0..R-1 grouped by their value ids[t] in [0, values) (a stable counting sort): rows (R) holds
// the rows of value 0, then of value 1, ..., each group in increasing order; starts (values + 1) where each
// group starts. ids must lie in [0, values).
template <class I>
void group_rows(const I* ids, std::int64_t R, int values, std::vector<std::int32_t>& rows,
                std::vector<std::int32_t>& starts) {
  starts.assign(std::size_t(values) + 1, 0);
  for (std::int64_t t = 0; t < R; ++t) ++starts[std::size_t(ids[t]) + 1];
  for (int v = 0; v < values; ++v) starts[std::size_t(v) + 1] += starts[std::size_t(v)];
  std::vector<std::int32_t> next(starts.begin(), starts.end() - 1);
  rows.resize(std::size_t(R));
  for (std::int64_t t = 0; t < R; ++t) rows[std::size_t(next[std::size_t(ids[t])]++)] = std::int32_t(t);
}

// Packs examples in order; validates every token and position ID against the model (InputError).
PackedBatch pack_batch(const std::vector<Example>& exs, const ModelConfig& c);
// The per-sequence slices of an (R, width) buffer: result[b] is (len_b, width).
std::vector<std::vector<float>> unpack_rows(const PackedBatch& pb, const float* x, int width);
// An (R, width) buffer padded to (B, T, width), `fill` after each sequence's rows: the layout the
// PyTorch twin (bench/torch_twin.py) and the authors' trainer compute on.
template <class V>
std::vector<V> padded_rows(const PackedBatch& pb, const V* x, int width, V fill) {
  std::vector<V> out(std::size_t(pb.B) * std::size_t(pb.T) * std::size_t(width), fill);
  for (int b = 0; b < pb.B; ++b)
    std::copy(x + std::int64_t(pb.offsets[std::size_t(b)]) * width,
              x + std::int64_t(pb.offsets[std::size_t(b) + 1]) * width,
              out.begin() + std::int64_t(b) * pb.T * width);
  return out;
}
// The whole batch as model_forward's input (varlen), and sequence b alone (its rows, a batch of one).
BatchView batch_of(const PackedBatch& pb);
BatchView sequence_of(const PackedBatch& pb, int b);

// ---- AdamW with global-norm clipping (learn/src/runs/train.cpp's update, shared with the devices) ----------
// The step's scalars are computed once in double, exactly as the CPU trainer always did.
struct AdamScalars {
  double clip = 1;           // multiplier of the gradient (min(1, grad_clip / norm), 1 when off)
  float b1 = 0, b2 = 0, eps = 0, step_size = 0, inv_sqrt_bc2 = 0, wd = 0;
};
struct TrainConfig;
AdamScalars adam_scalars(const TrainConfig& tc, std::int64_t t, double grad_norm);
// The same from the numbers themselves (lr: the schedule's value at step t, 1-based).
AdamScalars adam_scalars(double lr, double beta1, double beta2, double adam_eps, double weight_decay, double grad_clip,
                         std::int64_t t, double grad_norm);
// p, m, v, g (n): g' = float(double(g) clip); m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;
// p -= step_size m / (sqrt(v) inv_sqrt_bc2 + eps) + wd p     (float arithmetic, no contraction)
void adamw_update(float* p, float* m, float* v, const float* g, std::int64_t n, const AdamScalars& s);
// adamw_update on every segment of the flat buffers, with weight decay only where the segment decays.
void adamw_segments(float* p, float* m, float* v, const float* g, const std::vector<ParamSegment>& segs,
                    const AdamScalars& s);

// ---- a device that computes a batch's loss and gradient and applies the optimizer ----------------
// Trainer (train.hpp) keeps the data, the sampling order, the schedule and the checkpoints; it packs
// each step's batch on the host and hands it to its device (the CPU trainer unless another is attached).
// The arithmetic precision is a property of the device (fixed when it is made): every step, gradient and
// prediction of a device runs in its precision(), and Trainer refuses a device whose precision is not
// the run's (TrainConfig::precision).
class TrainDevice {
 public:
  virtual ~TrainDevice() = default;
  virtual std::string name() const = 0;
  virtual Precision precision() const = 0;
  // Weights and Adam moments (layout order), e.g. after initialization or a resume.
  virtual void set_state(const std::vector<float>& p, const std::vector<float>& m, const std::vector<float>& v) = 0;
  virtual void get_state(std::vector<float>& p, std::vector<float>& m, std::vector<float>& v) = 0;
  struct StepResult {
    double loss_sum = 0;   // sum of the losses at counted targets
    double grad_norm = 0;  // global gradient norm before clipping
  };
  // Forward, backward of loss_scale * loss_sum, global norm, clipping and AdamW at step t.
  virtual StepResult step(const PackedBatch& pb, float loss_scale, const TrainConfig& tc, std::int64_t t) = 0;
  // Deferred statistics: step_async runs (or, on an asynchronous device, launches) the same step and
  // keeps its StepResult; take_results returns the kept results in step order and forgets them (the
  // one host synchronization of the steps since the last call). The results are step()'s bit for bit.
  // By default step_async is step() with its result kept (the CPU devices); the CUDA device launches
  // and returns, so the host prepares the next batch while the device computes.
  virtual void step_async(const PackedBatch& pb, float loss_scale, const TrainConfig& tc, std::int64_t t) {
    kept_.push_back(step(pb, loss_scale, tc, t));
  }
  virtual std::vector<StepResult> take_results() {
    std::vector<StepResult> r;
    r.swap(kept_);
    return r;
  }
  // Forward and backward only (no update): the gradient of loss_scale * loss_sum in layout order. For
  // checking a device against its twin tensor by tensor; returns the loss sum.
  virtual double gradient(const PackedBatch& pb, float loss_scale, std::vector<float>& grads) = 0;
  // train.attn_entropy (train_config.hpp): the weight of the attention entropy term in every later step()
  // and gradient() (0: none, the default). The CPU devices compute it for one-layer models in fp32; a
  // device or model it is not defined for refuses a nonzero weight (InputError), so no run silently trains
  // without it.
  virtual void set_attn_entropy(double lambda);
  // Teacher-forced argmax of every row (lowest index on ties), (R). A device may leave the rows without a
  // target (pb.targets -1: the prompt's, which no verdict reads) uncomputed: the fast CPU device
  // (cpu_fast.hpp) marks them 255.
  virtual void predict(const PackedBatch& pb, std::vector<std::uint8_t>& argmax) = 0;

 private:
  std::vector<StepResult> kept_;  // step_async's results not yet taken (the default implementation)
};

// The CPU trainer (the default device): the batch's sequences split over `threads` threads in fixed
// contiguous blocks, each thread running model_forward/model_backward on one sequence at a time into its
// own gradient buffer; the buffers are reduced in thread order. A run is a deterministic function of
// (config, threads). fp32 or bf16 (the same forward/backward with its rounding points). Named "cpu".
std::unique_ptr<TrainDevice> make_cpu_device(const ModelConfig& c, int threads, Precision p = Precision::fp32);
// The CPU twin of the CUDA device: model_forward/model_backward on the whole packed batch, one thread,
// in fp32 or with the bf16 rounding points (the twin of bf16 training on the GPU). It runs everything
// the CUDA device runs around its kernels (packing, sync, checkpoints, resume, batched evaluation) on
// machines without a GPU. Named "cpu-packed".
std::unique_ptr<TrainDevice> make_packed_cpu_device(const ModelConfig& c, Precision p = Precision::fp32);

}  // namespace manyadd::learn
