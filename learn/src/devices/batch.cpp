// Packed batches, AdamW, the two CPU devices: see batch.hpp.
#include "manyadd/learn/devices/batch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "cpu_device_base.hpp"
#include "manyadd/core/parallel.hpp"
#include "manyadd/learn/tasks/train_config.hpp"

namespace manyadd::learn {

PackedBatch pack_batch(const std::vector<Example>& exs, const ModelConfig& c) {
  if (exs.empty()) throw InputError("pack_batch: empty batch");
  PackedBatch pb;
  pb.B = int(exs.size());
  pb.offsets.assign(std::size_t(pb.B) + 1, 0);
  std::int64_t R = 0;
  for (int b = 0; b < pb.B; ++b) {
    const Example& e = exs[std::size_t(b)];
    if (e.T() < 1) throw InputError("pack_batch: empty sequence");
    if (int(e.targets.size()) != e.T()) throw InputError("pack_batch: targets and tokens differ in length");
    pb.T = std::max(pb.T, e.T());
    R += e.T();
    if (R > std::numeric_limits<std::int32_t>::max()) throw InputError("pack_batch: more than 2^31 - 1 tokens");
    pb.offsets[std::size_t(b) + 1] = std::int32_t(R);
  }
  const int L = pos_levels(c.pos_mode);
  pb.real_tokens = R;
  pb.tokens.resize(std::size_t(R));
  pb.targets.resize(std::size_t(R));
  for (int lv = 0; lv < L; ++lv) pb.pos[lv].resize(std::size_t(R));
  for (int b = 0; b < pb.B; ++b) {
    const Example& e = exs[std::size_t(b)];
    const int T = e.T();
    const std::size_t o = std::size_t(pb.offsets[std::size_t(b)]);
    for (int t = 0; t < T; ++t) {
      const auto tok = e.tokens[std::size_t(t)];
      if (tok >= c.vocab) throw InputError("pack_batch: token outside the vocabulary");
      pb.tokens[o + std::size_t(t)] = tok;
      const auto tg = e.targets[std::size_t(t)];
      if (tg >= c.vocab) throw InputError("pack_batch: target outside the vocabulary");
      pb.targets[o + std::size_t(t)] = tg;
      if (tg >= 0) ++pb.counted_targets;
    }
    for (int lv = 0; lv < L; ++lv) {
      if (int(e.pos[lv].size()) < T) throw InputError(fmt::format("pack_batch: position IDs of level {} are missing", lv + 1));
      for (int t = 0; t < T; ++t) {
        const auto p = e.pos[lv][std::size_t(t)];
        if (p < 0 || p > c.max_pos(lv))
          throw InputError(fmt::format("pack_batch: position ID {} of level {} outside [0, {}]", p, lv + 1, c.max_pos(lv)));
        pb.pos[lv][o + std::size_t(t)] = p;
      }
    }
  }
  group_rows(pb.tokens.data(), R, c.vocab, pb.readers[0], pb.reader_starts[0]);
  for (int lv = 0; lv < L; ++lv) group_rows(pb.pos[lv].data(), R, c.max_pos(lv) + 1, pb.readers[1 + lv], pb.reader_starts[1 + lv]);
  return pb;
}

std::vector<std::vector<float>> unpack_rows(const PackedBatch& pb, const float* x, int width) {
  std::vector<std::vector<float>> out(std::size_t(pb.B));
  for (int b = 0; b < pb.B; ++b)
    out[std::size_t(b)].assign(x + std::int64_t(pb.offsets[std::size_t(b)]) * width,
                               x + std::int64_t(pb.offsets[std::size_t(b) + 1]) * width);
  return out;
}

BatchView batch_of(const PackedBatch& pb) {
  BatchView x;
  x.B = pb.B, x.T = pb.T;
  x.offsets = pb.offsets.data();
  x.tokens = pb.tokens.data();
  x.targets = pb.targets.data();
  for (int lv = 0; lv < kMaxPosLevels; ++lv) x.pos[lv] = pb.pos[lv].empty() ? nullptr : pb.pos[lv].data();
  return x;
}

BatchView sequence_of(const PackedBatch& pb, int b) {
  const std::int64_t o = pb.offsets[std::size_t(b)];
  BatchView x;
  x.B = 1, x.T = pb.length(b);
  x.tokens = pb.tokens.data() + o;
  x.targets = pb.targets.data() + o;
  for (int lv = 0; lv < kMaxPosLevels; ++lv) x.pos[lv] = pb.pos[lv].empty() ? nullptr : pb.pos[lv].data() + o;
  return x;
}

AdamScalars adam_scalars(const TrainConfig& tc, std::int64_t t, double grad_norm) {
  return adam_scalars(lr_at(tc, t), tc.beta1, tc.beta2, tc.adam_eps, tc.weight_decay, tc.grad_clip, t, grad_norm);
}

AdamScalars adam_scalars(double lr, double beta1, double beta2, double adam_eps, double weight_decay, double grad_clip,
                         std::int64_t t, double grad_norm) {
  AdamScalars s;
  s.clip = (grad_clip > 0 && grad_norm > grad_clip) ? grad_clip / grad_norm : 1.0;
  const double bc1 = 1.0 - std::pow(beta1, double(t)), bc2 = 1.0 - std::pow(beta2, double(t));
  s.b1 = float(beta1), s.b2 = float(beta2), s.eps = float(adam_eps);
  s.step_size = float(lr / bc1), s.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2)), s.wd = float(lr * weight_decay);
  return s;
}

void adamw_update(float* p, float* m, float* v, const float* grad, std::int64_t n, const AdamScalars& s) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = float(double(grad[i]) * s.clip);
    m[i] = s.b1 * m[i] + (1.f - s.b1) * g;
    v[i] = s.b2 * v[i] + (1.f - s.b2) * g * g;
    p[i] -= s.step_size * m[i] / (std::sqrt(v[i]) * s.inv_sqrt_bc2 + s.eps) + s.wd * p[i];
  }
}

void adamw_segments(float* p, float* m, float* v, const float* grad, const std::vector<ParamSegment>& segs,
                    const AdamScalars& s) {
  AdamScalars s0 = s;
  s0.wd = 0;
  for (const ParamSegment& sg : segs)
    adamw_update(p + sg.offset, m + sg.offset, v + sg.offset, grad + sg.offset, sg.size, sg.decay ? s : s0);
}

namespace {
using detail::argmax_rows;
using detail::CpuDeviceBase;

class CpuDevice final : public CpuDeviceBase {
 public:
  CpuDevice(const ModelConfig& c, int threads, Precision p) : CpuDeviceBase(c, p), threads_(threads) {
    if (threads < 1 || threads > 256) throw InputError(fmt::format("threads must be in [1, 256] (got {})", threads));
    acts_.resize(std::size_t(threads)), scr_.resize(std::size_t(threads)), tgrads_.resize(std::size_t(threads));
  }
  std::string name() const override { return "cpu"; }
  void predict(const PackedBatch& pb, std::vector<std::uint8_t>& argmax) override {
    argmax.assign(std::size_t(pb.rows()), 0);
    parallel_for(threads_, pb.B, [&](int w, std::int64_t b) {
      auto& a = acts_[std::size_t(w)];
      model_forward(a, view(), sequence_of(pb, int(b)));
      argmax_rows(a.logits.data(), a.T, c_.vocab, argmax.data() + pb.offsets[std::size_t(b)]);
    });
  }

 private:
  int threads_;
  std::vector<Acts<float>> acts_;  // per thread, reused between steps
  std::vector<GradScratch<float>> scr_;
  std::vector<std::vector<float>> tgrads_;

  double forward_backward(const PackedBatch& pb, float loss_scale, std::vector<float>& grads) override {
    const int B = pb.B, W = std::min(threads_, B);
    std::vector<double> loss_sum(std::size_t(W), 0.0);
    parallel_for(W, W, [&](int, std::int64_t w) {
      auto& G = tgrads_[std::size_t(w)];
      G.assign(p_.size(), 0.f);
      const int lo = int(std::int64_t(B) * w / W), hi = int(std::int64_t(B) * (w + 1) / W);
      for (int b = lo; b < hi; ++b) {  // one sequence at a time: its own length, no padding
        const BatchView x = sequence_of(pb, b);
        loss_sum[std::size_t(w)] += double(model_forward(acts_[std::size_t(w)], view(), x));
        model_backward(G.data(), scr_[std::size_t(w)], acts_[std::size_t(w)], view(), x, loss_scale,
                       entropy_weight(loss_scale));
      }
    });
    // Reduce in thread order (deterministic).
    grads = tgrads_[0];
    for (int w = 1; w < W; ++w)
      for (std::size_t i = 0; i < grads.size(); ++i) grads[i] += tgrads_[std::size_t(w)][i];
    double total = 0;
    for (double l : loss_sum) total += l;
    return total;
  }
};

class PackedCpuDevice final : public CpuDeviceBase {
 public:
  PackedCpuDevice(const ModelConfig& c, Precision p) : CpuDeviceBase(c, p) {}
  std::string name() const override { return "cpu-packed"; }
  void predict(const PackedBatch& pb, std::vector<std::uint8_t>& argmax) override {
    model_forward(a_, view(), batch_of(pb));
    argmax.resize(std::size_t(pb.rows()));
    argmax_rows(a_.logits.data(), pb.rows(), c_.vocab, argmax.data());
  }

 private:
  Acts<float> a_;
  GradScratch<float> scr_;
  double forward_backward(const PackedBatch& pb, float loss_scale, std::vector<float>& grads) override {
    const BatchView x = batch_of(pb);
    const double loss = double(model_forward(a_, view(), x));
    grads.assign(p_.size(), 0.f);
    model_backward(grads.data(), scr_, a_, view(), x, loss_scale, entropy_weight(loss_scale));
    return loss;
  }
};
}  // namespace

void TrainDevice::set_attn_entropy(double lambda) {
  if (lambda != 0)
    throw InputError(fmt::format("train.attn_entropy: the {} device does not compute the attention entropy term "
                                 "(use --device cpu or cpu-fast)",
                                 name()));
}

std::unique_ptr<TrainDevice> make_cpu_device(const ModelConfig& c, int threads, Precision p) {
  return std::make_unique<CpuDevice>(c, threads, p);
}
std::unique_ptr<TrainDevice> make_packed_cpu_device(const ModelConfig& c, Precision p) {
  return std::make_unique<PackedCpuDevice>(c, p);
}

}  // namespace manyadd::learn
