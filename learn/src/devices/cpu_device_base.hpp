// What the CPU devices share (batch.cpp's CpuDevice and PackedCpuDevice, cpu_fast_device.cpp's fast
// device): the weights and Adam moments, the step (global norm, clipping, AdamW over the trainable
// segments only: frozen position codes take no step; weight decay where a segment's flag says), and the
// argmax of logits rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "manyadd/core/error.hpp"
#include "manyadd/learn/devices/batch.hpp"

namespace manyadd::learn::detail {

inline double squared_norm(const std::vector<float>& g) {
  double ss = 0;
  for (float x : g) ss += double(x) * double(x);
  return ss;
}
// Lowest index on ties.
inline void argmax_rows(const float* logits, std::int64_t rows, int V, std::uint8_t* out) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* z = logits + i * V;
    out[i] = std::uint8_t(std::max_element(z, z + V) - z);
  }
}

class CpuDeviceBase : public TrainDevice {
 public:
  CpuDeviceBase(const ModelConfig& c, Precision p)
      : c_(c), lay_(Layout::make(c)), segs_(lay_.trainable_segments()), prec_(p) {
    if (c.rel_value && p != Precision::fp32)
      throw InputError("model.rel_value runs in fp32 only (its term has no bf16 rounding points): use precision fp32");
  }
  Precision precision() const override { return prec_; }
  void set_state(const std::vector<float>& p, const std::vector<float>& m, const std::vector<float>& v) override {
    p_ = p, m_ = m, v_ = v;
  }
  void get_state(std::vector<float>& p, std::vector<float>& m, std::vector<float>& v) override { p = p_, m = m_, v = v_; }
  StepResult step(const PackedBatch& pb, float loss_scale, const TrainConfig& tc, std::int64_t t) override {
    StepResult r;
    r.loss_sum = forward_backward(pb, loss_scale, g_);
    r.grad_norm = std::sqrt(squared_norm(g_));
    // AdamW (decoupled weight decay; 0 by default as the reference) after global-norm clipping, decayed
    // only where a segment's decay flag is set. Frozen position codes (model.pos_codes) are outside the
    // segments: never stepped, never decayed.
    const AdamScalars s = adam_scalars(tc, t, r.grad_norm);
    adamw_segments(p_.data(), m_.data(), v_.data(), g_.data(), segs_, s);
    return r;
  }
  double gradient(const PackedBatch& pb, float loss_scale, std::vector<float>& grads) override {
    return forward_backward(pb, loss_scale, grads);
  }
  void set_attn_entropy(double lambda) override {
    if (lambda != 0 && (c_.n_layers != 1 || prec_ != Precision::fp32))
      throw InputError(fmt::format("train.attn_entropy applies to one-layer models in fp32 (the model has {} layers, "
                                   "precision {})",
                                   c_.n_layers, precision_name(prec_)));
    attn_entropy_ = lambda;
  }

 protected:
  ModelConfig c_;
  Layout lay_;
  std::vector<ParamSegment> segs_;  // the trainable parameters
  Precision prec_;
  std::vector<float> p_, m_, v_, g_;
  ModelView<float> view() const { return {c_, lay_, p_.data(), prec_}; }
  double attn_entropy_ = 0;  // set_attn_entropy
  // The entropy term's weight per (loss row, head) of a batch whose loss is scaled by loss_scale: the
  // objective's mean over the batch's loss rows and the heads, in the float both CPU devices use.
  float entropy_weight(float loss_scale) const {
    return float(attn_entropy_ * double(loss_scale) / double(c_.n_heads));
  }
  // The batch's loss sum; grads (resized to the parameters) receives the gradient of loss_scale * loss.
  virtual double forward_backward(const PackedBatch& pb, float loss_scale, std::vector<float>& grads) = 0;
};

}  // namespace manyadd::learn::detail
