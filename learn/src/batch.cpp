// Packed batches, the packed CPU pipeline, AdamW, the CPU twin device: see batch.hpp.
#include "manyadd/learn/batch.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "manyadd/learn/layers.hpp"
#include "manyadd/learn/train.hpp"

namespace manyadd::learn {

PackedBatch pack_batch(const std::vector<Example>& exs, const ModelConfig& c) {
  if (exs.empty()) throw InputError("pack_batch: empty batch");
  PackedBatch pb;
  pb.B = int(exs.size());
  for (const auto& e : exs) pb.T = std::max(pb.T, e.T());
  const int L = pos_levels(c.pos_mode);
  const std::size_t R = std::size_t(pb.rows());
  pb.tokens.assign(R, 0);
  pb.targets.assign(R, -1);
  for (int lv = 0; lv < L; ++lv) pb.pos[lv].assign(R, 0);
  pb.lengths.resize(std::size_t(pb.B));
  for (int b = 0; b < pb.B; ++b) {
    const Example& e = exs[std::size_t(b)];
    const int T = e.T();
    if (T < 1) throw InputError("pack_batch: empty sequence");
    if (int(e.targets.size()) != T) throw InputError("pack_batch: targets and tokens differ in length");
    pb.lengths[std::size_t(b)] = T;
    pb.real_tokens += T;
    const std::size_t o = std::size_t(b) * std::size_t(pb.T);
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
  return pb;
}

std::vector<std::vector<float>> unpack_rows(const PackedBatch& pb, const float* x, int width) {
  std::vector<std::vector<float>> out(std::size_t(pb.B));
  for (int b = 0; b < pb.B; ++b) {
    const float* s = x + std::int64_t(b) * pb.T * width;
    out[std::size_t(b)].assign(s, s + std::int64_t(pb.lengths[std::size_t(b)]) * width);
  }
  return out;
}

template <class S>
void PackedActs<S>::resize(const ModelConfig& c, int B, int T) {
  const std::size_t C = std::size_t(c.d_model), D = std::size_t(c.n_heads) * c.d_head, F = std::size_t(c.d_ff);
  const std::size_t r = std::size_t(B) * std::size_t(T);
  x0.resize(r * C);
  blocks.resize(std::size_t(c.n_layers));
  for (auto& b : blocks) {
    b.a_in.resize(r * C);
    b.n1.resize(r * C), b.r1.resize(r);
    b.q.resize(r * D), b.k.resize(r * D), b.v.resize(r * D);
    b.att.resize(std::size_t(B) * std::size_t(c.n_heads) * std::size_t(T) * std::size_t(T));
    b.ao.resize(r * D);
    b.proj.resize(r * C), b.res1.resize(r * C);
    b.x1.resize(r * C), b.r2.resize(r);
    b.n3.resize(r * C), b.r3.resize(r);
    b.h.resize(r * 2 * F), b.g.resize(r * F);
    b.fo.resize(r * C), b.res2.resize(r * C);
    b.x2.resize(r * C), b.r4.resize(r);
  }
  xf.resize(r * C), rf.resize(r);
  logits.resize(r * std::size_t(c.vocab)), probs.resize(r * std::size_t(c.vocab));
  losses.resize(r);
}

// The numbered passes are model_forward's (model.cpp) with T -> R for the row-wise ones.
template <class S>
S packed_forward(PackedActs<S>& a, const ModelConfig& c, const Layout& lay, const S* P, const PackedBatch& pb) {
  const int B = pb.B, T = pb.T, R = int(pb.rows()), C = c.d_model, NH = c.n_heads, HS = c.d_head, D = NH * HS,
            F = c.d_ff, V = c.vocab;
  const S eps = S(c.norm_eps);
  a.resize(c, B, T);
  const int L = pos_levels(c.pos_mode);
  const std::int32_t* pos[2] = {pb.pos[0].data(), pb.pos[1].data()};
  const S* wpe[2] = {P + lay.wpe[0], P + lay.wpe[1]};
  // 1. x0 = tok_emb[tok] + sum_lv pos_emb_lv[pos_lv]
  embedding_forward(a.x0.data(), pb.tokens.data(), pos, L, P + lay.wte, wpe, R, C);
  const S* x = a.x0.data();
  const std::int64_t TT = std::int64_t(T) * T, TD = std::int64_t(T) * D;
  for (int l = 0; l < c.n_layers; ++l) {
    auto& b = a.blocks[std::size_t(l)];
    const auto& w = lay.blocks[std::size_t(l)];
    std::copy(x, x + std::int64_t(R) * C, b.a_in.begin());
    // 2. n1 = Norm1(x)   3. q, k, v
    rmsnorm_forward(b.n1.data(), b.r1.data(), x, P + w.attn_norm1, R, C, eps);
    matmul_forward(b.q.data(), b.n1.data(), P + w.wq, R, C, D);
    matmul_forward(b.k.data(), b.n1.data(), P + w.wk, R, C, D);
    matmul_forward(b.v.data(), b.n1.data(), P + w.wv, R, C, D);
    // 4. attention, one sequence at a time over its padded rows
    for (int s = 0; s < B; ++s)
      attention_forward(b.ao.data() + s * TD, b.att.data() + s * NH * TT, b.q.data() + s * TD, b.k.data() + s * TD,
                        b.v.data() + s * TD, T, NH, HS);
    // 5. proj, residual, Norm2
    matmul_forward(b.proj.data(), b.ao.data(), P + w.wo, R, D, C);
    residual_forward(b.res1.data(), x, b.proj.data(), std::int64_t(R) * C);
    rmsnorm_forward(b.x1.data(), b.r2.data(), b.res1.data(), P + w.attn_norm2, R, C, eps);
    // 6. FFN   7. residual, Norm2'
    rmsnorm_forward(b.n3.data(), b.r3.data(), b.x1.data(), P + w.ffn_norm1, R, C, eps);
    matmul_forward(b.h.data(), b.n3.data(), P + w.wi, R, C, 2 * F);
    geglu_forward(b.g.data(), b.h.data(), R, F);
    matmul_forward(b.fo.data(), b.g.data(), P + w.wo_ff, R, F, C);
    residual_forward(b.res2.data(), b.x1.data(), b.fo.data(), std::int64_t(R) * C);
    rmsnorm_forward(b.x2.data(), b.r4.data(), b.res2.data(), P + w.ffn_norm2, R, C, eps);
    x = b.x2.data();
  }
  // 8. final norm, logits, losses on counted rows
  rmsnorm_forward(a.xf.data(), a.rf.data(), x, P + lay.final_norm, R, C, eps);
  matmul_forward(a.logits.data(), a.xf.data(), P + lay.lm_head, R, C, V);
  return crossentropy_forward(a.losses.data(), a.probs.data(), a.logits.data(), pb.targets.data(), R, V);
}

// model_backward (model.cpp) with T -> R. Padded rows: dlogits is 0 there, every row-wise backward maps
// a zero row to a zero row, and in attention a zero dout row gives zero dq/dk/dv contributions, so
// padded rows stay exactly 0 and add nothing to any parameter gradient (embedding: += 0).
template <class S>
void packed_backward(S* G, const PackedActs<S>& a, const ModelConfig& c, const Layout& lay, const S* P,
                     const PackedBatch& pb, S loss_scale) {
  const int B = pb.B, T = pb.T, R = int(pb.rows()), C = c.d_model, NH = c.n_heads, HS = c.d_head, D = NH * HS,
            F = c.d_ff, V = c.vocab;
  const int L = pos_levels(c.pos_mode);
  const std::size_t r = std::size_t(R);
  std::vector<S> dlogits(r * std::size_t(V)), dxf(r * C, S(0)), dx(r * C, S(0)), dres(r * C), dn(r * C),
      dh(r * 2 * F), dg(r * F), dao(r * D), dq(r * D), dk(r * D), dv(r * D), datt(std::size_t(T) * T);
  auto zero = [](std::vector<S>& v) { std::fill(v.begin(), v.end(), S(0)); };
  // 8.
  crossentropy_backward(dlogits.data(), a.probs.data(), pb.targets.data(), loss_scale, R, V);
  matmul_backward(dxf.data(), G + lay.lm_head, dlogits.data(), a.xf.data(), P + lay.lm_head, R, C, V);
  const S* xlast = c.n_layers ? a.blocks.back().x2.data() : a.x0.data();
  rmsnorm_backward(dx.data(), G + lay.final_norm, dxf.data(), xlast, P + lay.final_norm, a.rf.data(), R, C);
  const std::int64_t TT = std::int64_t(T) * T, TD = std::int64_t(T) * D;
  for (int l = c.n_layers - 1; l >= 0; --l) {
    const auto& b = a.blocks[std::size_t(l)];
    const auto& w = lay.blocks[std::size_t(l)];
    // 7.
    zero(dres);
    rmsnorm_backward(dres.data(), G + w.ffn_norm2, dx.data(), b.res2.data(), P + w.ffn_norm2, b.r4.data(), R, C);
    // 6.
    zero(dg);
    matmul_backward(dg.data(), G + w.wo_ff, dres.data(), b.g.data(), P + w.wo_ff, R, F, C);
    zero(dh);
    geglu_backward(dh.data(), dg.data(), b.h.data(), R, F);
    zero(dn);
    matmul_backward(dn.data(), G + w.wi, dh.data(), b.n3.data(), P + w.wi, R, C, 2 * F);
    std::copy(dres.begin(), dres.end(), dx.begin());
    rmsnorm_backward(dx.data(), G + w.ffn_norm1, dn.data(), b.x1.data(), P + w.ffn_norm1, b.r3.data(), R, C);
    // 5.
    zero(dres);
    rmsnorm_backward(dres.data(), G + w.attn_norm2, dx.data(), b.res1.data(), P + w.attn_norm2, b.r2.data(), R, C);
    zero(dao);
    matmul_backward(dao.data(), G + w.wo, dres.data(), b.ao.data(), P + w.wo, R, D, C);
    // 4.
    zero(dq), zero(dk), zero(dv);
    for (int s = 0; s < B; ++s)
      attention_backward(dq.data() + s * TD, dk.data() + s * TD, dv.data() + s * TD, datt.data(), dao.data() + s * TD,
                         b.att.data() + s * NH * TT, b.q.data() + s * TD, b.k.data() + s * TD, b.v.data() + s * TD, T,
                         NH, HS);
    // 3.
    zero(dn);
    matmul_backward(dn.data(), G + w.wq, dq.data(), b.n1.data(), P + w.wq, R, C, D);
    matmul_backward(dn.data(), G + w.wk, dk.data(), b.n1.data(), P + w.wk, R, C, D);
    matmul_backward(dn.data(), G + w.wv, dv.data(), b.n1.data(), P + w.wv, R, C, D);
    // 2.
    std::copy(dres.begin(), dres.end(), dx.begin());
    rmsnorm_backward(dx.data(), G + w.attn_norm1, dn.data(), b.a_in.data(), P + w.attn_norm1, b.r1.data(), R, C);
  }
  // 1.
  const std::int32_t* pos[2] = {pb.pos[0].data(), pb.pos[1].data()};
  S* dwpe[2] = {G + lay.wpe[0], G + lay.wpe[1]};
  embedding_backward(G + lay.wte, dwpe, dx.data(), pb.tokens.data(), pos, L, R, C);
}

AdamScalars adam_scalars(const TrainConfig& tc, std::int64_t t, double grad_norm) {
  AdamScalars s;
  s.clip = (tc.grad_clip > 0 && grad_norm > tc.grad_clip) ? tc.grad_clip / grad_norm : 1.0;
  const double lr = lr_at(tc, t);
  const double bc1 = 1.0 - std::pow(tc.beta1, double(t)), bc2 = 1.0 - std::pow(tc.beta2, double(t));
  s.b1 = float(tc.beta1), s.b2 = float(tc.beta2), s.eps = float(tc.adam_eps);
  s.step_size = float(lr / bc1), s.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2)), s.wd = float(lr * tc.weight_decay);
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

namespace {
class PackedCpuDevice final : public TrainDevice {
 public:
  explicit PackedCpuDevice(const ModelConfig& c) : c_(c), lay_(Layout::make(c)) {}
  std::string name() const override { return "cpu-packed"; }
  void set_state(const std::vector<float>& p, const std::vector<float>& m, const std::vector<float>& v) override {
    p_ = p, m_ = m, v_ = v;
  }
  void get_state(std::vector<float>& p, std::vector<float>& m, std::vector<float>& v) override { p = p_, m = m_, v = v_; }
  StepResult step(const PackedBatch& pb, float loss_scale, const TrainConfig& tc, std::int64_t t) override {
    StepResult r;
    r.loss_sum = double(packed_forward(a_, c_, lay_, p_.data(), pb));
    g_.assign(p_.size(), 0.f);
    packed_backward(g_.data(), a_, c_, lay_, p_.data(), pb, loss_scale);
    double ss = 0;
    for (float g : g_) ss += double(g) * double(g);
    r.grad_norm = std::sqrt(ss);
    adamw_update(p_.data(), m_.data(), v_.data(), g_.data(), std::int64_t(p_.size()), adam_scalars(tc, t, r.grad_norm));
    return r;
  }
  double gradient(const PackedBatch& pb, float loss_scale, std::vector<float>& grads) override {
    const double loss = double(packed_forward(a_, c_, lay_, p_.data(), pb));
    grads.assign(p_.size(), 0.f);
    packed_backward(grads.data(), a_, c_, lay_, p_.data(), pb, loss_scale);
    return loss;
  }
  void predict(const PackedBatch& pb, std::vector<std::uint8_t>& argmax) override {
    packed_forward(a_, c_, lay_, p_.data(), pb);
    argmax.resize(std::size_t(pb.rows()));
    for (std::int64_t i = 0; i < pb.rows(); ++i) {
      const float* z = a_.logits.data() + i * c_.vocab;
      argmax[std::size_t(i)] = std::uint8_t(std::max_element(z, z + c_.vocab) - z);
    }
  }

 private:
  ModelConfig c_;
  Layout lay_;
  std::vector<float> p_, m_, v_, g_;
  PackedActs<float> a_;
};
}  // namespace

std::unique_ptr<TrainDevice> make_packed_cpu_device(const ModelConfig& c) { return std::make_unique<PackedCpuDevice>(c); }

template struct PackedActs<float>;
template struct PackedActs<double>;
template float packed_forward<float>(PackedActs<float>&, const ModelConfig&, const Layout&, const float*, const PackedBatch&);
template double packed_forward<double>(PackedActs<double>&, const ModelConfig&, const Layout&, const double*,
                                       const PackedBatch&);
template void packed_backward<float>(float*, const PackedActs<float>&, const ModelConfig&, const Layout&, const float*,
                                     const PackedBatch&, float);
template void packed_backward<double>(double*, const PackedActs<double>&, const ModelConfig&, const Layout&,
                                      const double*, const PackedBatch&, double);

}  // namespace manyadd::learn
