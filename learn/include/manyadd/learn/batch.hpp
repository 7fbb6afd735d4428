// Batched training for devices: a batch of examples of different lengths packed into one padded
// (B, T) layout, the AdamW update shared by every trainer, and the interface a device implements
// (TrainDevice) with its two CPU implementations: CpuDevice (the default trainer: threads over
// sequences, one sequence at a time) and PackedCpuDevice (the whole packed batch at once, the CPU twin
// of the CUDA device in cuda_device.cpp, which mirrors model_forward/model_backward pass by pass).
//
// Layout: sequence b occupies rows [b T, b T + len_b) of every (B T, ...) buffer; rows len_b..T-1 are
// padding (token 0, position IDs 0, target -1). Padding sits *after* the real tokens, so with the causal
// mask no real query ever sees a padded key: every real row equals the forward of its sequence alone,
// and padded rows carry no loss, hence exactly zero gradient (see model_backward).
// Shape legend: B sequences, T padded length, R = B T rows, C d_model, NH heads, HS d_head, F d_ff,
// V vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "manyadd/learn/model.hpp"

namespace manyadd::learn {

struct PackedBatch {
  int B = 0, T = 0;                     // sequences, padded length (the batch's longest)
  std::vector<std::int32_t> lengths;    // (B) true lengths
  std::vector<std::uint8_t> tokens;     // (B, T) token ids, 0 on padding
  std::vector<std::int32_t> pos[2];     // (B, T) per level (empty for unused levels), 0 on padding
  std::vector<std::int32_t> targets;    // (B, T) next token on counted rows, -1 elsewhere (padding too)
  std::int64_t real_tokens = 0;         // sum of lengths
  std::int64_t counted_targets = 0;     // rows with target >= 0
  std::int64_t rows() const { return std::int64_t(B) * T; }
};

// Packs examples in order; validates every token and position ID against the model (InputError).
PackedBatch pack_batch(const std::vector<Example>& exs, const ModelConfig& c);
// The per-sequence slices of a (B T, width) buffer: result[b] is (len_b, width), padding dropped.
std::vector<std::vector<float>> unpack_rows(const PackedBatch& pb, const float* x, int width);
// The whole padded batch as model_forward's input, and sequence b alone (its len_b rows, a batch of one).
BatchView batch_of(const PackedBatch& pb);
BatchView sequence_of(const PackedBatch& pb, int b);

// ---- AdamW with global-norm clipping (learn/train.cpp's update, shared with the devices) ----------
// The step's scalars are computed once in double, exactly as the CPU trainer always did.
struct AdamScalars {
  double clip = 1;           // multiplier of the gradient (min(1, grad_clip / norm), 1 when off)
  float b1 = 0, b2 = 0, eps = 0, step_size = 0, inv_sqrt_bc2 = 0, wd = 0;
};
struct TrainConfig;
AdamScalars adam_scalars(const TrainConfig& tc, std::int64_t t, double grad_norm);
// p, m, v, g (n): g' = float(double(g) clip); m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;
// p -= step_size m / (sqrt(v) inv_sqrt_bc2 + eps) + wd p     (float arithmetic, no contraction)
void adamw_update(float* p, float* m, float* v, const float* g, std::int64_t n, const AdamScalars& s);

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
  // Teacher-forced argmax of every real row (lowest index on ties), (B T); padded rows unspecified.
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
