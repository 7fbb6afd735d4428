// The learned transformer: layout, init, the one forward/backward (a batch of sequences; a single
// sequence is a batch of one), greedy KV-cache decoding on the same forward.
#include "manyadd/learn/decoder/model.hpp"

#include <algorithm>
#include <random>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/safetensors.hpp"
#include "manyadd/learn/decoder/layers.hpp"
#include "manyadd/model.hpp"  // construct/: hypercube(), Theorem 4.1's position code

namespace manyadd::learn {

Layout Layout::make(const ModelConfig& c) {
  c.validate();
  Layout L;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape) { return L.add(name, std::move(shape)); };
  const std::int64_t C = c.d_model, D = std::int64_t(c.n_heads) * c.d_head, F = c.d_ff;
  L.wte = add("tok_emb.weight", {c.vocab, C});
  for (int lv = 0; lv < pos_tables(c.pos_mode); ++lv) {
    L.wpe[lv] = add(fmt::format("pos_emb.{}.weight", lv), {c.max_pos(lv) + 1, C});
    L.tensors.back().trainable = !pos_code_frozen(c.pos_codes[lv]);
  }
  if (c.pos_mode == PosMode::fire) {
    const std::int64_t H = c.fire_width;
    L.fire_w1 = add("fire.mlp.0.weight", {H, 1});
    L.fire_w2 = add("fire.mlp.2.weight", {H, H});
    L.fire_w3 = add("fire.mlp.4.weight", {c.n_heads, H});
    L.fire_c = add("fire.c", {1});
    L.fire_L_sqrt = add("fire.L_sqrt", {1});
  }
  if (c.pos_mode == PosMode::coupled_rel)
    L.rel_bias = add("rel_bias.weight", {c.n_layers, c.n_heads, pos_levels(c.pos_mode), c.rel_buckets()});
  if (c.rel_value)
    L.rel_value = add("rel_value.weight", {c.n_layers, c.n_heads, pos_levels(c.pos_mode), c.rel_buckets(), c.d_head});
  for (int b = 0; b < c.n_layers; ++b) {
    Block k;
    if (L.rel_bias >= 0)
      k.rel_bias = L.rel_bias + std::int64_t(b) * c.n_heads * pos_levels(c.pos_mode) * c.rel_buckets();
    if (L.rel_value >= 0)
      k.rel_value = L.rel_value + std::int64_t(b) * c.n_heads * pos_levels(c.pos_mode) * c.rel_buckets() * c.d_head;
    const std::string p = fmt::format("layers.{}.", b);
    k.attn_norm1 = add(p + "attn_norm1.weight", {C});
    k.wq = add(p + "attn.q.weight", {D, C});
    k.wk = add(p + "attn.k.weight", {D, C});
    k.wv = add(p + "attn.v.weight", {D, C});
    k.wo = add(p + "attn.o.weight", {C, D});
    k.attn_norm2 = add(p + "attn_norm2.weight", {C});
    k.ffn_norm1 = add(p + "ffn_norm1.weight", {C});
    k.wi = add(p + "ffn.wi.weight", {2 * F, C});
    k.wo_ff = add(p + "ffn.wo.weight", {C, F});
    k.ffn_norm2 = add(p + "ffn_norm2.weight", {C});
    L.blocks.push_back(k);
  }
  L.final_norm = add("final_norm.weight", {C});
  if (c.final_norm == NormKind::layer) L.final_norm_bias = add("final_norm.bias", {C});
  if (!c.tie_readout) L.lm_head = add("lm_head.weight", {c.vocab, C});
  return L;
}

std::int64_t Layout::add(const std::string& name, std::vector<std::int64_t> shape) {
  TensorSpec t;
  t.name = name;
  t.shape = std::move(shape);
  t.size = 1;
  for (auto d : t.shape) t.size *= d;
  t.offset = total;
  total += t.size;
  tensors.push_back(t);
  return t.offset;
}

std::vector<ParamSegment> Layout::trainable_segments() const {
  std::vector<ParamSegment> segs;
  for (const auto& t : tensors) {
    if (!t.trainable || t.size == 0) continue;
    if (!segs.empty() && segs.back().offset + segs.back().size == t.offset && segs.back().decay == t.decay)
      segs.back().size += t.size;
    else
      segs.push_back({t.offset, t.size, t.decay});
  }
  return segs;
}

const TensorSpec& Layout::find(const std::string& name) const {
  for (auto& t : tensors)
    if (t.name == name) return t;
  throw InputError(fmt::format("no tensor named '{}'", name));
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
// The std of a matrix or table under a scheme (names as Layout::make writes them). T5: HuggingFace's
// T5PreTrainedModel._init_weights with initializer_factor 1 (the Mesh TensorFlow scheme that lets T5
// skip the 1/sqrt(d_head) of the scores); tables N(0, 1) as torch.nn.Embedding's default.
double init_std_of(const ModelConfig& c, const std::string& name) {
  // FIRE's MLP: the authors' init in either scheme (custom_t5_decoder_only.py: net[0] N(0, factor),
  // net[2] and net[4] N(0, factor d_fire^-1/2), factor = initializer_factor = 1).
  if (name == "fire.mlp.0.weight") return 1.0;
  if (name == "fire.mlp.2.weight" || name == "fire.mlp.4.weight") return 1.0 / std::sqrt(double(c.fire_width));
  if (c.init == InitScheme::normal) return double(c.init_std);
  const double C = c.d_model, HS = c.d_head, D = double(c.n_heads) * c.d_head, F = c.d_ff;
  if (ends_with(name, "attn.q.weight")) return 1.0 / std::sqrt(C * HS);
  if (ends_with(name, "attn.k.weight") || ends_with(name, "attn.v.weight")) return 1.0 / std::sqrt(C);
  if (ends_with(name, "attn.o.weight")) return 1.0 / std::sqrt(D);
  if (ends_with(name, "ffn.wi.weight")) return 1.0 / std::sqrt(C);
  if (ends_with(name, "ffn.wo.weight")) return 1.0 / std::sqrt(F);
  if (name == "rel_bias.weight") return 1.0 / std::sqrt(C);  // HF T5's relative_attention_bias: factor d_model^-1/2
  return 1.0;  // tok_emb, pos_emb.*, an untied lm_head
}
}  // namespace

double standard_normal(Rng& rng) {
  const double u1 = (double(rng.uniform(1, (1ull << 53))) ) / double(1ull << 53);
  const double u2 = double(rng.uniform(0, (1ull << 53) - 1)) / double(1ull << 53);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

template <class S>
std::vector<S> init_params(const ModelConfig& c, const Layout& lay, std::uint64_t seed) {
  std::vector<S> p(std::size_t(lay.total), S(0));
  Rng rng(seed);
  auto normal = [&]() { return standard_normal(rng); };
  for (auto& t : lay.tensors) {
    if (t.name == "fire.c" || t.name == "fire.L_sqrt") {  // the authors' c0 = 0.1, L0_sqrt = 16; no draw
      p[std::size_t(t.offset)] = S(t.name == "fire.c" ? 0.1 : 16.0);
      continue;
    }
    if (t.name == "rel_value.weight") continue;  // 0: the model without the term, every other draw unchanged
    if (t.shape.size() == 1) {  // norm weights 1, LayerNorm bias 0; no draw
      const S v = ends_with(t.name, ".bias") ? S(0) : S(1);
      for (std::int64_t i = 0; i < t.size; ++i) p[std::size_t(t.offset + i)] = v;
      continue;
    }
    const double sd = init_std_of(c, t.name);
    for (std::int64_t i = 0; i < t.size; ++i) p[std::size_t(t.offset + i)] = S(sd * normal());
  }
  // Position codes: the tables took a learned table's draws above (every other tensor is the learned
  // run's); frozen rescales them, hypercube and shuffled replace them.
  for (int lv = 0; lv < pos_tables(c.pos_mode); ++lv) {
    S* w = p.data() + lay.wpe[lv];
    const std::int64_t n = std::int64_t(c.max_pos(lv) + 1) * c.d_model;
    if (c.pos_codes[lv] == PosCode::frozen) {
      const double r = double(c.pos_code_scale) / init_std_of(c, fmt::format("pos_emb.{}.weight", lv));
      for (std::int64_t i = 0; i < n; ++i) w[i] = S(double(w[i]) * r);
    } else if (pos_code_is_vertex(c.pos_codes[lv])) {
      const auto tab = pos_code_table(c, lv, seed);
      for (std::int64_t i = 0; i < n; ++i) w[i] = S(tab[std::size_t(i)]);
    }
  }
  return p;
}

template <class S>
void Acts<S>::resize(const ModelConfig& c, const BatchView& x, int Tk_) {
  B = x.B, T = x.T, Tk = Tk_, R = x.rows();
  const std::size_t C = std::size_t(c.d_model), D = std::size_t(c.n_heads) * c.d_head, F = std::size_t(c.d_ff);
  const int past = Tk_ - x.T;  // > 0 only for a uniform batch of one
  const std::size_t r = std::size_t(R), rk = std::size_t(R) + std::size_t(past);
  std::size_t att = 0;  // each sequence's (len, len + past) score matrix per head
  for (int s = 0; s < x.B; ++s) att += std::size_t(x.length(s)) * std::size_t(x.length(s) + past);
  x0.resize(r * C);
  blocks.resize(std::size_t(c.n_layers));
  for (auto& b : blocks) {
    b.xin.resize(c.input_injection ? r * C : 0);
    b.n1.resize(r * C), b.r1.resize(r);
    b.q.resize(r * D), b.k.resize(rk * D), b.v.resize(rk * D);
    b.att.resize(std::size_t(c.n_heads) * att);
    b.ao.resize(r * D);
    b.proj.resize(r * C), b.res1.resize(r * C);
    b.x1.resize(r * C), b.r2.resize(r);
    b.n3.resize(r * C), b.r3.resize(r);
    b.h.resize(r * 2 * F), b.g.resize(r * F);
    b.fo.resize(r * C), b.res2.resize(r * C);
    b.x2.resize(r * C), b.r4.resize(r);
  }
  xf.resize(r * C), rf.resize(r), mf.resize(r);
  logits.resize(r * std::size_t(c.vocab)), probs.resize(r * std::size_t(c.vocab));
  losses.resize(r);
}

template <class S>
void GradScratch<S>::resize(const ModelConfig& c, std::int64_t R, int T) {
  const std::size_t C = std::size_t(c.d_model), D = std::size_t(c.n_heads) * c.d_head, F = std::size_t(c.d_ff);
  const std::size_t r = std::size_t(R);
  dlogits.resize(r * std::size_t(c.vocab));
  dxf.resize(r * C), dx.resize(r * C), dres.resize(r * C), dn.resize(r * C);
  dh.resize(r * 2 * F), dg.resize(r * F);
  dao.resize(r * D), dq.resize(r * D), dk.resize(r * D), dv.resize(r * D);
  datt.resize(std::size_t(T) * std::size_t(T));
  dx0.resize(c.input_injection ? r * C : 0);
}

BatchView batch_of(const Example& ex) {
  const int T = ex.T();
  if (T < 1) throw InputError("empty sequence");
  if (int(ex.targets.size()) != T) throw InputError("targets and tokens differ in length");
  BatchView x;
  x.B = 1, x.T = T;
  x.tokens = ex.tokens.data();
  x.targets = ex.targets.data();
  for (int lv = 0; lv < kMaxPosLevels; ++lv) {
    if (ex.pos[lv].empty()) continue;  // a level the model does not use (model_forward checks)
    if (int(ex.pos[lv].size()) < T) throw InputError(fmt::format("position IDs of level {} are missing", lv + 1));
    x.pos[lv] = ex.pos[lv].data();
  }
  return x;
}

namespace {
// Every token and position ID of the rows against the model: a bad ID would read outside a table.
void check_rows(const ModelConfig& c, const BatchView& x) {
  if (x.B < 1 || x.T < 1) throw InputError("empty batch");
  if (x.offsets) {  // varlen: sequences of 1..T rows, in order from row 0
    if (x.offsets[0] != 0) throw InputError("varlen batch: the first sequence must start at row 0");
    for (int s = 0; s < x.B; ++s)
      if (x.length(s) < 1 || x.length(s) > x.T)
        throw InputError(fmt::format("varlen batch: sequence {} has {} rows (must be 1..{})", s, x.length(s), x.T));
  }
  const std::int64_t R = x.rows();
  for (std::int64_t i = 0; i < R; ++i)
    if (x.tokens[i] >= c.vocab) throw InputError("token outside the vocabulary");
  for (int lv = 0; lv < pos_levels(c.pos_mode); ++lv) {
    if (!x.pos[lv]) throw InputError(fmt::format("position IDs of level {} are missing", lv + 1));
    for (std::int64_t i = 0; i < R; ++i)
      if (x.pos[lv][i] < 0 || x.pos[lv][i] > c.max_pos(lv))
        throw InputError(fmt::format("position ID {} of level {} outside [0, {}]: the model's max_pos{} is too small "
                                     "for this shape",
                                     x.pos[lv][i], lv + 1, c.max_pos(lv), lv + 1));
  }
}
template <class S>
void zero(std::vector<S>& v) {
  std::fill(v.begin(), v.end(), S(0));
}

// The bf16 rounding of mixed precision, in place. Float only: bf16 emulation rounds floats (core's
// float_to_bf16); a double forward is the finite-difference reference and has no bf16 mode.
template <class S>
void round_bf16_inplace(S* p, std::int64_t n) {
  if constexpr (std::is_same_v<S, float>) {
    for (std::int64_t i = 0; i < n; ++i) p[i] = round_bf16(p[i]);
  } else {
    (void)p, (void)n;
    throw InvariantError("bf16 precision runs in float only");
  }
}

// How one forward/backward computes: the precision and, in bf16, the rounded weights of the products.
template <class S>
struct Ctx {
  bool bf16;
  const S* wg;  // matrix-product weights: the parameters (fp32) or Acts::wgemm (bf16)
  S att_scale;
  const S* fire_bias = nullptr;                      // pos_mode fire: (NH, T, Tk), every sequence and layer
  const std::vector<S>* rope_cos = nullptr;          // pos_mode rope: this call's tables
  const std::vector<S>* rope_sin = nullptr;
  std::vector<S>* rel_bias = nullptr;                // pos_mode coupled_rel: the per-sequence bias scratch
  S attn_entropy_w = 0;                              // backward: model_backward's entropy weight
  const S* params = nullptr;                         // the parameters (fp32/double: the gains)
  const S* W(std::int64_t off) const { return wg + off; }
  void round(std::vector<S>& v, std::int64_t n) const {
    if (bf16) round_bf16_inplace(v.data(), n);
  }
};
template <class S>
Ctx<S> context(const Acts<S>& a, const ModelView<S>& m) {
  const bool bf16 = m.precision == Precision::bf16;
  Ctx<S> ctx{bf16, bf16 ? a.wgemm.data() : m.params,
             score_scale<S>(m.cfg.attn_scale, m.cfg.d_head)};
  if (m.cfg.pos_mode == PosMode::fire) ctx.fire_bias = a.fire_bias.data();
  if (m.cfg.pos_mode == PosMode::rope) ctx.rope_cos = &a.rope_cos, ctx.rope_sin = &a.rope_sin;
  if (m.cfg.pos_mode == PosMode::coupled_rel) ctx.rel_bias = const_cast<std::vector<S>*>(&a.rel_bias);
  ctx.params = m.params;
  return ctx;
}
// bf16: the weights every matrix product reads, rounded once per forward (the tables and norm weights
// are copied unrounded: the embedding lookup and the norms read fp32 values; a tied readout reads the
// token table through this copy, rounded, while the embedding reads it from the parameters).
template <class S>
void round_gemm_weights(std::vector<S>& wg, const ModelView<S>& m) {
  const Layout& lay = m.lay;
  const ModelConfig& c = m.cfg;
  wg.assign(m.params, m.params + lay.total);
  auto rnd = [&](std::int64_t off, std::int64_t n) { round_bf16_inplace(wg.data() + off, n); };
  const std::int64_t C = c.d_model, D = std::int64_t(c.n_heads) * c.d_head, F = c.d_ff;
  for (const auto& w : lay.blocks) {
    rnd(w.wq, D * C), rnd(w.wk, D * C), rnd(w.wv, D * C), rnd(w.wo, C * D);
    rnd(w.wi, 2 * F * C), rnd(w.wo_ff, C * F);
  }
  rnd(lay.readout(), std::int64_t(c.vocab) * C);
}

// Sequence s's position IDs per level, pointers into the batch's (with a cache: into the whole sequence's,
// so that the cached keys sit at negative indices): what coupled_rel's bias and rel_value read.
struct SeqIds {
  const std::int32_t* p[kMaxPosLevels] = {};
  SeqIds(const ModelConfig& c, const BatchView& xb, int s) {
    for (int lv = 0; lv < pos_levels(c.pos_mode); ++lv) p[lv] = xb.pos[lv] ? xb.pos[lv] + xb.begin(s) : nullptr;
  }
};

// Passes 2-7 of one block on the rows of xb, input x (positions past..past+T-1 of each sequence;
// past > 0 only for a batch of one); writes the block's activations, its output is b.x2. bf16 rounding points (ctx.round): n1,
// q, k, v, the attention weights inside attention_forward (before they multiply v), ao, n3, h, g; proj and
// fo stay fp32 (they are only added to the fp32 residual, so rounding them would lose accuracy for nothing:
// the GPU writes or fuses them in fp32). RoPE turns q and k before their rounding (the rotation reads the
// fp32 products); FIRE's bias is fp32, added to the fp32 scores before the softmax (layers.hpp).
template <class S>
void block_forward(typename Acts<S>::Block& b, const S* x, const ModelView<S>& m, const Ctx<S>& ctx,
                   const Layout::Block& w, const BatchView& xb, int past) {
  const ModelConfig& c = m.cfg;
  const int R = int(xb.rows()), C = c.d_model, NH = c.n_heads, HS = c.d_head, D = NH * HS, F = c.d_ff;
  const S eps = S(c.norm_eps);
  const std::int64_t RC = std::int64_t(R) * C, RD = std::int64_t(R) * D;
  // 2. n1 = Norm1(x)
  rmsnorm_forward(b.n1.data(), b.r1.data(), x, m.at(w.attn_norm1), R, C, eps);
  ctx.round(b.n1, RC);
  // 3. q, k, v = n1 Wq^T, n1 Wk^T, n1 Wv^T   (k, v at key rows past.. : past > 0 only for B = 1)
  matmul_forward(b.q.data(), b.n1.data(), ctx.W(w.wq), R, C, D);
  matmul_forward(b.k.data() + std::int64_t(past) * D, b.n1.data(), ctx.W(w.wk), R, C, D);
  matmul_forward(b.v.data() + std::int64_t(past) * D, b.n1.data(), ctx.W(w.wv), R, C, D);
  if (ctx.rope_cos)  // 3'. RoPE: q, k of each sequence's row t turned by position past + t (the cached keys are
                     //     turned already)
    for (int s = 0; s < xb.B; ++s) {
      const std::int64_t o = xb.begin(s) * D;
      rope_rotate(b.q.data() + o, *ctx.rope_cos, *ctx.rope_sin, xb.length(s), NH, HS, +1);
      rope_rotate(b.k.data() + std::int64_t(past) * D + o, *ctx.rope_cos, *ctx.rope_sin, xb.length(s), NH, HS, +1);
    }
  if (ctx.bf16) {
    round_bf16_inplace(b.q.data(), RD);
    round_bf16_inplace(b.k.data() + std::int64_t(past) * D, RD);  // the cached rows are rounded already
    round_bf16_inplace(b.v.data() + std::int64_t(past) * D, RD);
  }
  // 4. ao = causal softmax(scale q k^T [+ FIRE bias]) v per head, one sequence at a time on its own rows
  //    (scores and softmax in fp32; bf16: the weights rounded before they multiply v, layers.hpp); its key
  //    rows start where its query rows do (past > 0: one sequence); FIRE: its block is the top-left corner
  //    of the batch's (NH, T, T + past) bias
  //    coupled_rel: the sequence's own (NH, T, Tk) bias from its IDs (layers.hpp, coupled_rel_bias)
  std::int64_t att_at = 0;
  for (int s = 0; s < xb.B; ++s) {
    const std::int64_t o = xb.begin(s) * D;
    const int T = xb.length(s), Tk = T + past;
    const SeqIds ids(c, xb, s);
    const S* bias = ctx.fire_bias;
    int bias_rows = xb.T, bias_cols = xb.T + past;
    if (ctx.rel_bias) {
      ctx.rel_bias->resize(std::size_t(NH) * std::size_t(T) * std::size_t(Tk));
      coupled_rel_bias(ctx.rel_bias->data(), ctx.params + w.rel_bias, ids.p, pos_levels(c.pos_mode), T, past, NH,
                       c.rel_window, c.rel_far, c.rel_far_norm, c.rel_far_mask);
      bias = ctx.rel_bias->data(), bias_rows = T, bias_cols = Tk;
    }
    attention_forward(b.ao.data() + o, b.att.data() + att_at, b.q.data() + o, b.k.data() + o, b.v.data() + o, T, Tk,
                      NH, HS, ctx.att_scale, bias, bias_rows, bias_cols, ctx.bf16);
    if (w.rel_value >= 0) {  // 4'. rel_value: each key's relative-position value, weighted as the key (fp32)
      coupled_rel_value(b.ao.data() + o, b.att.data() + att_at, ctx.params + w.rel_value, ids.p, pos_levels(c.pos_mode), T,
                        past, NH, HS, c.rel_window, c.rel_far);
    }
    att_at += std::int64_t(NH) * T * Tk;
  }
  ctx.round(b.ao, RD);
  // 5. proj = ao Wo^T ; res1 = x + proj ; x1 = Norm2(res1)
  matmul_forward(b.proj.data(), b.ao.data(), ctx.W(w.wo), R, D, C);
  residual_forward(b.res1.data(), x, b.proj.data(), RC);
  rmsnorm_forward(b.x1.data(), b.r2.data(), b.res1.data(), m.at(w.attn_norm2), R, C, eps);
  // 6. n3 = Norm1'(x1) ; h = n3 Wi^T ; g = geglu(h) ; fo = g Wo'^T
  rmsnorm_forward(b.n3.data(), b.r3.data(), b.x1.data(), m.at(w.ffn_norm1), R, C, eps);
  ctx.round(b.n3, RC);
  matmul_forward(b.h.data(), b.n3.data(), ctx.W(w.wi), R, C, 2 * F);
  ctx.round(b.h, std::int64_t(R) * 2 * F);
  geglu_forward(b.g.data(), b.h.data(), R, F);
  ctx.round(b.g, std::int64_t(R) * F);
  matmul_forward(b.fo.data(), b.g.data(), ctx.W(w.wo_ff), R, F, C);
  // 7. res2 = x1 + fo ; x2 = Norm2'(res2)
  residual_forward(b.res2.data(), b.x1.data(), b.fo.data(), RC);
  rmsnorm_forward(b.x2.data(), b.r4.data(), b.res2.data(), m.at(w.ffn_norm2), R, C, eps);
}

// Passes 7..2 of one block in reverse (no cache); g.dx holds d(block output) on entry and d(block input
// x) on exit. Accumulates into the block's parameter gradients in G. bf16 rounding points: the output
// gradient of each product before the product reads it (dres for the FFN and attention outputs, dh,
// dao, inside attention_backward P before P^T dout and dS before dS k and dS^T q, dq, dk, dv: RoPE turns
// dq and dk back before their rounding); the gradients the products write (dg, dn), the residual gradient,
// FIRE's d bias (the unrounded dS) and every parameter gradient stay fp32.
template <class S>
void block_backward(S* G, GradScratch<S>& g, const typename Acts<S>::Block& b, const S* x, const ModelView<S>& m,
                    const Ctx<S>& ctx, const Layout::Block& w, const BatchView& xb) {
  const ModelConfig& c = m.cfg;
  const int R = int(xb.rows()), C = c.d_model, NH = c.n_heads, HS = c.d_head, D = NH * HS, F = c.d_ff;
  const std::int64_t RC = std::int64_t(R) * C, RD = std::int64_t(R) * D;
  // The residual gradient as a product's input: itself in fp32, a rounded copy in bf16.
  auto dres_in = [&]() -> const S* {
    if (!ctx.bf16) return g.dres.data();
    g.dres16.assign(g.dres.begin(), g.dres.begin() + RC);
    round_bf16_inplace(g.dres16.data(), RC);
    return g.dres16.data();
  };
  // 7. x2 = Norm2'(res2) ; res2 = x1 + fo   (dres = d res2, flows to x1 and fo)
  zero(g.dres);
  rmsnorm_backward(g.dres.data(), G + w.ffn_norm2, g.dx.data(), b.res2.data(), m.at(w.ffn_norm2), b.r4.data(), R, C);
  // 6. fo = g Wo'^T ; g = geglu(h) ; h = n3 Wi^T ; n3 = Norm1'(x1)
  zero(g.dg);
  matmul_backward(g.dg.data(), G + w.wo_ff, dres_in(), b.g.data(), ctx.W(w.wo_ff), R, F, C);
  zero(g.dh);
  geglu_backward(g.dh.data(), g.dg.data(), b.h.data(), R, F);
  ctx.round(g.dh, std::int64_t(R) * 2 * F);
  zero(g.dn);
  matmul_backward(g.dn.data(), G + w.wi, g.dh.data(), b.n3.data(), ctx.W(w.wi), R, C, 2 * F);
  //    d x1 = dres (residual) + Norm1' backward; dx is reused as d x1
  std::copy(g.dres.begin(), g.dres.end(), g.dx.begin());
  rmsnorm_backward(g.dx.data(), G + w.ffn_norm1, g.dn.data(), b.x1.data(), m.at(w.ffn_norm1), b.r3.data(), R, C);
  // 5. proj = ao Wo^T ; res1 = x + proj ; x1 = Norm2(res1)
  zero(g.dres);
  rmsnorm_backward(g.dres.data(), G + w.attn_norm2, g.dx.data(), b.res1.data(), m.at(w.attn_norm2), b.r2.data(), R, C);
  zero(g.dao);
  matmul_backward(g.dao.data(), G + w.wo, dres_in(), b.ao.data(), ctx.W(w.wo), R, D, C);
  ctx.round(g.dao, RD);
  // 4. ao = causal softmax(scale q k^T [+ FIRE bias]) v per head, one sequence at a time (FIRE: d bias summed
  //    over the sequences and, through g.dfire_bias, the layers)
  zero(g.dq), zero(g.dk), zero(g.dv);
  //    coupled_rel: each sequence's d bias (its own scratch) summed into the layer's gains by bucket
  S* dbias = ctx.fire_bias ? g.dfire_bias.data() : nullptr;
  std::int64_t att_at = 0;
  for (int s = 0; s < xb.B; ++s) {
    const std::int64_t o = xb.begin(s) * D;
    const int T = xb.length(s);
    const SeqIds ids(c, xb, s);
    int bias_T = xb.T;
    if (ctx.rel_bias) {
      g.drel_bias.assign(std::size_t(NH) * std::size_t(T) * std::size_t(T), S(0));
      dbias = g.drel_bias.data(), bias_T = T;
    }
    const S* dp_add = nullptr;
    if (w.rel_value >= 0) {  // 4'. rel_value: d r, and its term of d P
      g.drel_value_p.resize(std::size_t(NH) * std::size_t(T) * std::size_t(T));
      coupled_rel_value_backward(G + w.rel_value, g.drel_value_p.data(), g.dao.data() + o, b.att.data() + att_at,
                                 ctx.params + w.rel_value, ids.p, pos_levels(c.pos_mode), T, NH, HS, c.rel_window, c.rel_far);
      dp_add = g.drel_value_p.data();
    }
    attention_backward(g.dq.data() + o, g.dk.data() + o, g.dv.data() + o, g.datt.data(), g.dao.data() + o,
                       b.att.data() + att_at, b.q.data() + o, b.k.data() + o, b.v.data() + o, T, NH, HS,
                       ctx.att_scale, dbias, bias_T, ctx.bf16 ? b.ao.data() + o : nullptr, ctx.attn_entropy_w,
                       ctx.attn_entropy_w != S(0) ? xb.targets + xb.begin(s) : nullptr, dp_add);
    if (ctx.rel_bias) {
      coupled_rel_bias_backward(G + w.rel_bias, g.drel_bias.data(), ids.p, pos_levels(c.pos_mode), T, NH, c.rel_window, c.rel_far);
    }
    att_at += std::int64_t(NH) * T * T;
    if (ctx.rope_cos) {  // 3'. RoPE: the rotation is orthogonal, d(before) = R^T d(after)
      rope_rotate(g.dq.data() + o, *ctx.rope_cos, *ctx.rope_sin, T, NH, HS, -1);
      rope_rotate(g.dk.data() + o, *ctx.rope_cos, *ctx.rope_sin, T, NH, HS, -1);
    }
  }
  ctx.round(g.dq, RD), ctx.round(g.dk, RD), ctx.round(g.dv, RD);
  // 3. q, k, v = n1 Wq^T, n1 Wk^T, n1 Wv^T
  zero(g.dn);
  matmul_backward(g.dn.data(), G + w.wq, g.dq.data(), b.n1.data(), ctx.W(w.wq), R, C, D);
  matmul_backward(g.dn.data(), G + w.wk, g.dk.data(), b.n1.data(), ctx.W(w.wk), R, C, D);
  matmul_backward(g.dn.data(), G + w.wv, g.dv.data(), b.n1.data(), ctx.W(w.wv), R, C, D);
  // 2. n1 = Norm1(x)   (d x = dres (residual) + Norm1 backward)
  std::copy(g.dres.begin(), g.dres.end(), g.dx.begin());
  rmsnorm_backward(g.dx.data(), G + w.attn_norm1, g.dn.data(), x, m.at(w.attn_norm1), b.r1.data(), R, C);
}

// 0. FIRE's bias for the rows past..past+T-1 against keys 0..past+T-1 (layers.hpp): the distinct pairs'
// normalized distances, the MLP once per pair, the bias (NH, T, Tk) every layer adds. fp32 in either
// precision (a bias, as the scores; its MLP is not one of the rounded products).
template <class S>
void fire_forward(Acts<S>& a, const ModelView<S>& m, int past, int T) {
  const ModelConfig& c = m.cfg;
  const Layout& lay = m.lay;
  const int H = c.fire_width, NH = c.n_heads, Tk = past + T;
  const S Ls = *m.at(lay.fire_L_sqrt);
  fire_pairs(a.fire, past, T, double(Ls * Ls), c.fire_threshold == FireThreshold::max);
  const std::int64_t P = a.fire.pairs();
  a.fire_u.resize(std::size_t(P)), a.fire_h1.resize(std::size_t(P * H)), a.fire_h2.resize(std::size_t(P * H));
  a.fire_out.resize(std::size_t(P * NH));
  fire_distances(a.fire_u.data(), a.fire, *m.at(lay.fire_c));
  fire_mlp_forward(a.fire_out.data(), a.fire_h1.data(), a.fire_h2.data(), a.fire_u.data(), m.at(lay.fire_w1),
                   m.at(lay.fire_w2), m.at(lay.fire_w3), P, H, NH);
  a.fire_bias.resize(std::size_t(NH) * std::size_t(T) * std::size_t(Tk));
  fire_bias_scatter(a.fire_bias.data(), a.fire_out.data(), a.fire, past, T, Tk, NH);
}
template <class S>
void fire_backward(S* G, GradScratch<S>& g, const Acts<S>& a, const ModelView<S>& m, int T) {
  const ModelConfig& c = m.cfg;
  const Layout& lay = m.lay;
  const int H = c.fire_width, NH = c.n_heads;
  const std::int64_t P = a.fire.pairs();
  g.dfire_out.resize(std::size_t(P * NH)), g.dfire_u.resize(std::size_t(P)), g.dfire_h.resize(std::size_t(2 * P * H));
  fire_bias_gather(g.dfire_out.data(), g.dfire_bias.data(), a.fire, T, NH);
  fire_mlp_backward(g.dfire_u.data(), G + lay.fire_w1, G + lay.fire_w2, G + lay.fire_w3, g.dfire_h.data(),
                    g.dfire_out.data(), a.fire_h1.data(), a.fire_h2.data(), a.fire_u.data(), m.at(lay.fire_w1),
                    m.at(lay.fire_w2), m.at(lay.fire_w3), P, H, NH);
  fire_distances_backward(G + lay.fire_c, G + lay.fire_L_sqrt, g.dfire_u.data(), a.fire, *m.at(lay.fire_c),
                          *m.at(lay.fire_L_sqrt));
}

// The readout's input: xf itself (fp32, untied), xf d_model^-1/2 (tied: the T5 readout), rounded in bf16.
template <class S>
S readout_scale(const ModelConfig& c) {
  return S(1) / std::sqrt(S(c.d_model));
}
}  // namespace

// Forward, pass 8 and the loss (bf16 rounding points: the readout input xr; logits and loss fp32).
template <class S>
S model_forward(Acts<S>& a, const ModelView<S>& m, const BatchView& x, int past) {
  const ModelConfig& c = m.cfg;
  const Layout& lay = m.lay;
  check_rows(c, x);
  if (past < 0 || (past > 0 && (x.B != 1 || x.offsets)))
    throw InvariantError("model_forward: cached keys need a uniform batch of one");
  if (c.rel_value && m.precision == Precision::bf16)
    throw InputError("model.rel_value runs in fp32 only (its term has no bf16 rounding points): use precision fp32");
  const int R = int(x.rows()), C = c.d_model, V = c.vocab;
  const std::int64_t RC = std::int64_t(R) * C;
  const S eps = S(c.norm_eps);
  a.resize(c, x, past + x.T);
  if (m.precision == Precision::bf16) round_gemm_weights(a.wgemm, m);
  else a.wgemm.clear();  // marks the activations as fp32 ones (model_backward checks)
  if (c.pos_mode == PosMode::fire) fire_forward(a, m, past, x.T);
  if (c.pos_mode == PosMode::rope) rope_tables(a.rope_cos, a.rope_sin, past, x.T, c.d_head, kRopeBase);
  const Ctx<S> ctx = context(a, m);
  const S* wpe[kMaxPosLevels] = {m.at(lay.wpe[0]), m.at(lay.wpe[1]), m.at(lay.wpe[2])};
  // 1. x0 = tok_emb[tok] + sum_lv pos_emb_lv[pos_lv]
  embedding_forward(a.x0.data(), x.tokens, x.pos, pos_tables(c.pos_mode), m.at(lay.wte), wpe, R, C);
  const S* h = a.x0.data();
  // 2.-7. the blocks (input injection: block l >= 1 reads xin = its predecessor's output + x0)
  for (int l = 0; l < c.n_layers; ++l) {
    auto& b = a.blocks[std::size_t(l)];
    if (c.input_injection && l > 0) {
      residual_forward(b.xin.data(), h, a.x0.data(), RC);
      h = b.xin.data();
    }
    block_forward(b, h, m, ctx, lay.blocks[std::size_t(l)], x, past);
    h = b.x2.data();
  }
  // 8. xf = final_norm(x) ; xr = xf [* d_model^-1/2 when tied] ; logits = xr W^T (W = lm_head or tok_emb) ;
  //    losses
  if (c.final_norm == NormKind::layer)
    layernorm_forward(a.xf.data(), a.mf.data(), a.rf.data(), h, m.at(lay.final_norm), m.at(lay.final_norm_bias), R, C,
                      eps);
  else
    rmsnorm_forward(a.xf.data(), a.rf.data(), h, m.at(lay.final_norm), R, C, eps);
  const S* xr = a.xf.data();
  if (c.tie_readout || ctx.bf16) {
    a.xr.resize(std::size_t(RC));
    if (c.tie_readout) scale_forward(a.xr.data(), a.xf.data(), readout_scale<S>(c), RC);
    else std::copy(a.xf.begin(), a.xf.begin() + RC, a.xr.begin());
    ctx.round(a.xr, RC);
    xr = a.xr.data();
  }
  matmul_forward(a.logits.data(), xr, ctx.W(lay.readout()), R, C, V);
  if (!x.targets) return S(0);
  return crossentropy_forward(a.losses.data(), a.probs.data(), a.logits.data(), x.targets, R, V);
}

// Backward (bf16 rounding points: dlogits, the readout product's output gradient, and those of
// block_backward; dxr, dxf and the residual gradient fp32).
template <class S>
void model_backward(S* G, GradScratch<S>& g, const Acts<S>& a, const ModelView<S>& m, const BatchView& x,
                    S loss_scale, S attn_entropy_w) {
  if (a.B != x.B || a.T != x.T || a.Tk != x.T || a.R != x.rows() || !x.targets)
    throw InvariantError("model_backward: needs the activations of model_forward on the same batch (no cache)");
  const ModelConfig& c = m.cfg;
  const Layout& lay = m.lay;
  if ((m.precision == Precision::bf16) != !a.wgemm.empty())
    throw InvariantError("model_backward: the forward ran in another precision");
  Ctx<S> ctx = context(a, m);
  if (attn_entropy_w != S(0) && (c.n_layers != 1 || ctx.bf16))
    throw InvariantError("model_backward: the attention entropy term is defined for one-layer models in fp32");
  ctx.attn_entropy_w = attn_entropy_w;
  const int R = int(x.rows()), C = c.d_model, V = c.vocab;
  const std::int64_t RC = std::int64_t(R) * C;
  g.resize(c, R, x.T);
  // 8. xf = final_norm(x) ; xr = xf [* s] ; logits = xr W^T ; losses
  crossentropy_backward(g.dlogits.data(), a.probs.data(), x.targets, loss_scale, R, V);
  ctx.round(g.dlogits, std::int64_t(R) * V);
  const bool has_xr = c.tie_readout || ctx.bf16;
  const S* xr = has_xr ? a.xr.data() : a.xf.data();
  zero(g.dxf);
  if (c.tie_readout) {  // d xr into dn (scratch), then dxf = s d xr
    zero(g.dn);
    matmul_backward(g.dn.data(), G + lay.readout(), g.dlogits.data(), xr, ctx.W(lay.readout()), R, C, V);
    scale_backward(g.dxf.data(), g.dn.data(), readout_scale<S>(c), RC);
  } else {
    matmul_backward(g.dxf.data(), G + lay.readout(), g.dlogits.data(), xr, ctx.W(lay.readout()), R, C, V);
  }
  zero(g.dx);  // gradient w.r.t. the current block output
  const S* xlast = a.blocks.back().x2.data();
  if (c.final_norm == NormKind::layer)
    layernorm_backward(g.dx.data(), G + lay.final_norm, G + lay.final_norm_bias, g.dxf.data(), xlast,
                       m.at(lay.final_norm), a.mf.data(), a.rf.data(), R, C);
  else
    rmsnorm_backward(g.dx.data(), G + lay.final_norm, g.dxf.data(), xlast, m.at(lay.final_norm), a.rf.data(), R, C);
  // 7.-2. the blocks, last first (input injection: d xin flows to the previous output and to x0)
  if (c.pos_mode == PosMode::fire) g.dfire_bias.assign(std::size_t(c.n_heads) * std::size_t(x.T) * std::size_t(x.T), S(0));
  if (c.input_injection) zero(g.dx0);
  for (int l = c.n_layers - 1; l >= 0; --l) {
    const bool inj = c.input_injection && l > 0;
    const S* in = l == 0 ? a.x0.data() : inj ? a.blocks[std::size_t(l)].xin.data() : a.blocks[std::size_t(l - 1)].x2.data();
    block_backward(G, g, a.blocks[std::size_t(l)], in, m, ctx, lay.blocks[std::size_t(l)], x);
    if (inj)
      for (std::int64_t i = 0; i < RC; ++i) g.dx0[std::size_t(i)] += g.dx[std::size_t(i)];
  }
  if (c.input_injection)
    for (std::int64_t i = 0; i < RC; ++i) g.dx[std::size_t(i)] += g.dx0[std::size_t(i)];
  // 1. x0 = tok_emb[tok] + sum_lv pos_emb_lv[pos_lv]
  // a frozen position code (PosCode) is a constant: no gradient is accumulated into its table
  S* dwpe[kMaxPosLevels] = {nullptr, nullptr, nullptr};
  for (int lv = 0; lv < pos_tables(c.pos_mode); ++lv)
    if (!pos_code_frozen(c.pos_codes[lv])) dwpe[lv] = G + lay.wpe[lv];
  embedding_backward(G + lay.wte, dwpe, g.dx.data(), x.tokens, x.pos, pos_tables(c.pos_mode), R, C);
  // 0. FIRE: the bias's gradient, summed over sequences and layers, through the MLP to its weights, c, L_sqrt
  if (c.pos_mode == PosMode::fire) fire_backward(G, g, a, m, x.T);
}

std::vector<std::uint8_t> KvDecoder::greedy(const std::vector<std::uint8_t>& prefix,
                                            const std::vector<std::int32_t> pos[kMaxPosLevels], int max_new) const {
  const int Lv = pos_levels(m.cfg.pos_mode), P = int(prefix.size()), total = P + max_new, V = m.cfg.vocab;
  if (prefix.empty()) throw InputError("greedy decoding needs a non-empty prefix");
  for (int lv = 0; lv < Lv; ++lv)
    if (int(pos[lv].size()) < total - 1) throw InputError("greedy decoding: position IDs shorter than the output");
  std::vector<std::uint8_t> out;
  if (max_new < 1) return out;
  Acts<float> a;  // its keys/values are the cache
  auto rows = [&](const std::uint8_t* tok, int t, int n) {  // positions t..t+n-1
    BatchView x;
    x.B = 1, x.T = n, x.tokens = tok;
    for (int lv = 0; lv < Lv; ++lv) x.pos[lv] = pos[lv].data() + t;
    return x;
  };
  auto argmax = [&](int row) {  // lowest index on ties, as the teacher-forced evaluation
    const float* z = a.logits.data() + std::int64_t(row) * V;
    return std::uint8_t(std::max_element(z, z + V) - z);
  };
  // The prompt in one pass, then one token per pass against the cached keys/values.
  model_forward(a, m, rows(prefix.data(), 0, P));
  std::uint8_t tok = argmax(P - 1);
  out.push_back(tok);
  for (int t = P; t + 1 < total && tok != kDollar; ++t) {
    model_forward(a, m, rows(&tok, t, 1), t);
    tok = argmax(0);
    out.push_back(tok);
  }
  return out;
}

template std::vector<float> init_params<float>(const ModelConfig&, const Layout&, std::uint64_t);
template std::vector<double> init_params<double>(const ModelConfig&, const Layout&, std::uint64_t);
template struct Acts<float>;
template struct Acts<double>;
template struct GradScratch<float>;
template struct GradScratch<double>;
template float model_forward<float>(Acts<float>&, const ModelView<float>&, const BatchView&, int);
template double model_forward<double>(Acts<double>&, const ModelView<double>&, const BatchView&, int);
template void model_backward<float>(float*, GradScratch<float>&, const Acts<float>&, const ModelView<float>&,
                                    const BatchView&, float, float);
template void model_backward<double>(double*, GradScratch<double>&, const Acts<double>&, const ModelView<double>&,
                                     const BatchView&, double, double);

}  // namespace manyadd::learn
