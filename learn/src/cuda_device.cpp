// The CUDA training device (learn::TrainDevice): weights, gradients, Adam moments and activations live
// on the GPU; each step uploads the host-packed batch (learn/batch.hpp), runs learn::model_forward /
// model_backward on the whole batch pass by pass (same numbers in the comments), reduces the
// loss and the global gradient norm in a fixed order, and applies AdamW with the scalars the CPU
// trainer computes (learn::adam_scalars). Matrix products: cuBLAS SGEMM (fp32, default math mode: no
// TF32), run-to-run reproducible on one GPU model (cuBLAS guarantees bitwise-identical results for a
// toolkit version, architecture and SM count, single stream); every other reduction is ours and fixed
// order (kernels/src/train.cu). So a resumed CUDA run equals the uninterrupted CUDA run bit for bit on
// the same GPU model and toolkit. Its GPU tests passed on an H100 at commit 896f091. Without CUDA in the
// build only make_cuda_device's refusal is compiled.
#include "manyadd/learn/cuda_device.hpp"

#include "manyadd/kernels/device.hpp"

#if MANYADD_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "manyadd/kernels/blas.hpp"
#include "manyadd/kernels/train.hpp"
#include "manyadd/learn/train.hpp"

namespace manyadd::learn {
namespace {
namespace K = manyadd::kernels::train;
using kernels::DeviceBuffer;
template <class T>
using Buf = DeviceBuffer<T>;

struct BlockActs {  // one block's activations, (R, ...) as learn::Acts::Block (Tk = T), lse instead of att
  Buf<float> n1, r1, q, k, v, ao, lse, proj, res1, x1, r2, n3, r3, h, g, fo, res2, x2, r4;
};

class CudaDevice final : public TrainDevice {
 public:
  explicit CudaDevice(const ModelConfig& c) : c_(c), lay_(Layout::make(c)) {
    c_.validate();
    check_cuda_supports(c_, Precision::fp32);
    n_ = std::size_t(lay_.total);
    params_.resize(n_), grads_.resize(n_), m_.resize(n_), v_.resize(n_);
    red_.resize(K::reduce_scratch_doubles());
  }
  std::string name() const override { return "cuda"; }
  Precision precision() const override { return Precision::fp32; }

  void set_state(const std::vector<float>& p, const std::vector<float>& m, const std::vector<float>& v) override {
    if (p.size() != n_ || m.size() != n_ || v.size() != n_) throw std::logic_error("CudaDevice::set_state: sizes");
    params_.upload(p.data(), n_), m_.upload(m.data(), n_), v_.upload(v.data(), n_);
  }
  void get_state(std::vector<float>& p, std::vector<float>& m, std::vector<float>& v) override {
    p.resize(n_), m.resize(n_), v.resize(n_);
    params_.download(p.data(), n_), m_.download(m.data(), n_), v_.download(v.data(), n_);
  }

  StepResult step(const PackedBatch& pb, float loss_scale, const TrainConfig& tc, std::int64_t t) override {
    StepResult r;
    r.loss_sum = forward(pb);
    grads_.zero();
    backward(pb, loss_scale);
    r.grad_norm = std::sqrt(K::reduce_sum(grads_, std::int64_t(n_), true, red_));
    const AdamScalars s = adam_scalars(tc, t, r.grad_norm);
    K::adamw_update(params_, m_, v_, grads_, std::int64_t(n_), s.clip, s.b1, s.b2, s.eps, s.step_size, s.inv_sqrt_bc2,
                    s.wd);
    kernels::synchronize();
    return r;
  }

  double gradient(const PackedBatch& pb, float loss_scale, std::vector<float>& grads) override {
    const double loss = forward(pb);
    grads_.zero();
    backward(pb, loss_scale);
    grads.resize(n_);
    grads_.download(grads.data(), n_);
    return loss;
  }

  void predict(const PackedBatch& pb, std::vector<std::uint8_t>& argmax) override {
    forward(pb);
    const std::size_t R = std::size_t(pb.rows()), V = std::size_t(c_.vocab);
    host_logits_.resize(R * V);
    logits_.download(host_logits_.data(), R * V);
    argmax.resize(R);
    for (std::size_t i = 0; i < R; ++i) {
      const float* z = host_logits_.data() + i * V;
      argmax[i] = std::uint8_t(std::max_element(z, z + V) - z);  // lowest index on ties, as the CPU
    }
  }

 private:
  ModelConfig c_;
  Layout lay_;
  std::size_t n_ = 0;
  kernels::Blas blas_;
  Buf<float> params_, grads_, m_, v_;
  Buf<double> red_;
  // batch
  Buf<std::uint8_t> tok_;
  Buf<std::int32_t> pos0_, pos1_, tgt_;
  Buf<float> x0_, xf_, rf_, logits_, probs_, losses_;
  std::vector<BlockActs> blocks_;
  Buf<float> dlogits_, dxf_, dx_, dres_, dn_, dh_, dg_, dao_, dq_, dk_, dv_, attscr_, normscr_;
  std::vector<float> host_logits_;

  const float* P(std::int64_t off) const { return params_.get() + off; }
  float* G(std::int64_t off) const { return grads_.get() + off; }

  // out (R, OC) = inp (R, C) W^T with W (OC, C), all row-major (cuBLAS sees the column-major transposes).
  void mm_forward(float* out, const float* inp, const float* w, int R, int C, int OC) {
    blas_.linear_forward(out, inp, w, R, C, OC);
  }
  // dinp (R, C) += dout W ; dW (OC, C) += dout^T inp
  void mm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int R, int C, int OC) {
    blas_.linear_backward(dinp, dw, dout, inp, w, R, C, OC);
  }

  void ensure(const PackedBatch& pb) {
    const std::size_t R = std::size_t(pb.rows()), C = std::size_t(c_.d_model),
                      D = std::size_t(c_.n_heads) * std::size_t(c_.d_head), F = std::size_t(c_.d_ff),
                      V = std::size_t(c_.vocab), BHT = R * std::size_t(c_.n_heads);
    tok_.resize(R), pos0_.resize(R), pos1_.resize(R), tgt_.resize(R);
    x0_.resize(R * C), xf_.resize(R * C), rf_.resize(R), logits_.resize(R * V), probs_.resize(R * V), losses_.resize(R);
    if (blocks_.size() != std::size_t(c_.n_layers)) blocks_ = std::vector<BlockActs>(std::size_t(c_.n_layers));
    for (auto& b : blocks_) {
      b.n1.resize(R * C), b.r1.resize(R), b.q.resize(R * D), b.k.resize(R * D), b.v.resize(R * D), b.ao.resize(R * D);
      b.lse.resize(BHT), b.proj.resize(R * C), b.res1.resize(R * C), b.x1.resize(R * C), b.r2.resize(R);
      b.n3.resize(R * C), b.r3.resize(R), b.h.resize(R * 2 * F), b.g.resize(R * F), b.fo.resize(R * C);
      b.res2.resize(R * C), b.x2.resize(R * C), b.r4.resize(R);
    }
    dlogits_.resize(R * V), dxf_.resize(R * C), dx_.resize(R * C), dres_.resize(R * C), dn_.resize(R * C);
    dh_.resize(R * 2 * F), dg_.resize(R * F), dao_.resize(R * D), dq_.resize(R * D), dk_.resize(R * D), dv_.resize(R * D);
    attscr_.resize(BHT), normscr_.resize(K::rmsnorm_scratch_floats(int(R), int(C)));
    tok_.upload(pb.tokens.data(), R);
    tgt_.upload(pb.targets.data(), R);
    if (!pb.pos[0].empty()) pos0_.upload(pb.pos[0].data(), R);
    if (!pb.pos[1].empty()) pos1_.upload(pb.pos[1].data(), R);
  }

  // learn::model_forward on the packed batch, pass by pass. Returns the loss sum (fixed-order double
  // reduction).
  double forward(const PackedBatch& pb) {
    ensure(pb);
    const int B = pb.B, T = pb.T, R = int(pb.rows()), C = c_.d_model, NH = c_.n_heads, HS = c_.d_head, D = NH * HS,
              F = c_.d_ff, V = c_.vocab, L = pos_levels(c_.pos_mode);
    const float eps = c_.norm_eps;
    // 1.
    K::embedding_forward(x0_, tok_, pos0_, pos1_, L, P(lay_.wte), P(lay_.wpe[0]), P(lay_.wpe[1]), R, C);
    const float* x = x0_;
    for (int l = 0; l < c_.n_layers; ++l) {
      auto& b = blocks_[std::size_t(l)];
      const auto& w = lay_.blocks[std::size_t(l)];
      // 2. 3.
      K::rmsnorm_forward(b.n1, b.r1, x, P(w.attn_norm1), R, C, eps);
      mm_forward(b.q, b.n1, P(w.wq), R, C, D);
      mm_forward(b.k, b.n1, P(w.wk), R, C, D);
      mm_forward(b.v, b.n1, P(w.wv), R, C, D);
      // 4.
      K::attention_forward(b.ao, b.lse, b.q, b.k, b.v, B, T, NH, HS);
      // 5.
      mm_forward(b.proj, b.ao, P(w.wo), R, D, C);
      K::residual_forward(b.res1, x, b.proj, std::int64_t(R) * C);
      K::rmsnorm_forward(b.x1, b.r2, b.res1, P(w.attn_norm2), R, C, eps);
      // 6. 7.
      K::rmsnorm_forward(b.n3, b.r3, b.x1, P(w.ffn_norm1), R, C, eps);
      mm_forward(b.h, b.n3, P(w.wi), R, C, 2 * F);
      K::geglu_forward(b.g, b.h, R, F);
      mm_forward(b.fo, b.g, P(w.wo_ff), R, F, C);
      K::residual_forward(b.res2, b.x1, b.fo, std::int64_t(R) * C);
      K::rmsnorm_forward(b.x2, b.r4, b.res2, P(w.ffn_norm2), R, C, eps);
      x = b.x2;
    }
    // 8.
    K::rmsnorm_forward(xf_, rf_, x, P(lay_.final_norm), R, C, eps);
    mm_forward(logits_, xf_, P(lay_.lm_head), R, C, V);
    K::crossentropy_forward(losses_, probs_, logits_, tgt_, R, V);
    return K::reduce_sum(losses_, R, false, red_);
  }

  // learn::model_backward on the packed batch, pass by pass; grads_ must be zero.
  void backward(const PackedBatch& pb, float loss_scale) {
    const int B = pb.B, T = pb.T, R = int(pb.rows()), C = c_.d_model, NH = c_.n_heads, HS = c_.d_head, D = NH * HS,
              F = c_.d_ff, V = c_.vocab, L = pos_levels(c_.pos_mode);
    const std::size_t RC = std::size_t(R) * C * 4;
    // 8.
    K::crossentropy_backward(dlogits_, probs_, tgt_, loss_scale, R, V);
    dxf_.zero(), dx_.zero();
    mm_backward(dxf_, G(lay_.lm_head), dlogits_, xf_, P(lay_.lm_head), R, C, V);
    const float* xlast = c_.n_layers ? blocks_.back().x2.get() : x0_.get();
    K::rmsnorm_backward(dx_, G(lay_.final_norm), normscr_, dxf_, xlast, P(lay_.final_norm), rf_, R, C);
    for (int l = c_.n_layers - 1; l >= 0; --l) {
      auto& b = blocks_[std::size_t(l)];
      const auto& w = lay_.blocks[std::size_t(l)];
      const float* a_in = l == 0 ? x0_.get() : blocks_[std::size_t(l - 1)].x2.get();
      // 7.
      dres_.zero();
      K::rmsnorm_backward(dres_, G(w.ffn_norm2), normscr_, dx_, b.res2, P(w.ffn_norm2), b.r4, R, C);
      // 6.
      dg_.zero();
      mm_backward(dg_, G(w.wo_ff), dres_, b.g, P(w.wo_ff), R, F, C);
      dh_.zero();
      K::geglu_backward(dh_, dg_, b.h, R, F);
      dn_.zero();
      mm_backward(dn_, G(w.wi), dh_, b.n3, P(w.wi), R, C, 2 * F);
      kernels::dev_copy(dx_, dres_, RC);
      K::rmsnorm_backward(dx_, G(w.ffn_norm1), normscr_, dn_, b.x1, P(w.ffn_norm1), b.r3, R, C);
      // 5.
      dres_.zero();
      K::rmsnorm_backward(dres_, G(w.attn_norm2), normscr_, dx_, b.res1, P(w.attn_norm2), b.r2, R, C);
      dao_.zero();
      mm_backward(dao_, G(w.wo), dres_, b.ao, P(w.wo), R, D, C);
      // 4. (written, not accumulated)
      K::attention_backward(dq_, dk_, dv_, attscr_, dao_, b.ao, b.lse, b.q, b.k, b.v, B, T, NH, HS);
      // 3.
      dn_.zero();
      mm_backward(dn_, G(w.wq), dq_, b.n1, P(w.wq), R, C, D);
      mm_backward(dn_, G(w.wk), dk_, b.n1, P(w.wk), R, C, D);
      mm_backward(dn_, G(w.wv), dv_, b.n1, P(w.wv), R, C, D);
      // 2.
      kernels::dev_copy(dx_, dres_, RC);
      K::rmsnorm_backward(dx_, G(w.attn_norm1), normscr_, dn_, a_in, P(w.attn_norm1), b.r1, R, C);
    }
    // 1.
    K::embedding_backward(G(lay_.wte), G(lay_.wpe[0]), G(lay_.wpe[1]), dx_, tok_, pos0_, pos1_, L, R, C, V,
                          c_.max_pos1 + 1, c_.max_pos2 + 1);
  }
};

}  // namespace

}  // namespace manyadd::learn
#endif  // MANYADD_WITH_CUDA

namespace manyadd::learn {

bool cuda_training_available(std::string* why) { return kernels::device_available(why); }

void check_cuda_supports(const ModelConfig& c, Precision p) {
  auto refuse = [](const std::string& what) {
    throw InputError("--device cuda does not support " + what + " yet (the CPU devices do)");
  };
  if (p != Precision::fp32) refuse(std::string("precision ") + precision_name(p));
  if (c.attn_scale != AttnScale::inv_sqrt_dhead) refuse(std::string("attn_scale ") + attn_scale_name(c.attn_scale));
  if (c.tie_readout) refuse("tie_readout true");
  if (c.final_norm != NormKind::rms) refuse(std::string("final_norm ") + norm_kind_name(c.final_norm));
  if (c.d_head > 128) refuse("d_head " + std::to_string(c.d_head) + " (at most 128)");
}

std::unique_ptr<TrainDevice> make_cuda_device(const ModelConfig& c, Precision p) {
  check_cuda_supports(c, p);
  std::string why;
  if (!kernels::device_available(&why)) throw InputError("no CUDA device: " + why);
#if MANYADD_WITH_CUDA
  return std::make_unique<CudaDevice>(c);
#else
  (void)c;
  throw InvariantError("a CUDA device was reported in a build without CUDA");
#endif
}

}  // namespace manyadd::learn
