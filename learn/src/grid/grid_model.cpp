// The grid universal transformer: see grid_model.hpp. The numbered passes of sample_forward are the
// paper's stages; sample_backward walks them in reverse.
#include "manyadd/learn/grid/grid_model.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/error.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/devices/cpu_fast_kernels.hpp"
#include "manyadd/learn/devices/cpu_gemm.hpp"

namespace manyadd::learn::grid {

char token_char(int tok) {
  if (tok >= 0 && tok <= 9) return char('0' + tok);
  if (tok == kPlus) return '+';
  if (tok == kEq) return '=';
  if (tok == kPad) return '_';
  throw InputError(fmt::format("token {} is outside the grid model's vocabulary (0-{})", tok, kVocab - 1));
}

Halting parse_halting(const std::string& s) {
  if (s == "ponder") return Halting::ponder;
  if (s == "fixed") return Halting::fixed;
  throw InputError(fmt::format("halting '{}' unknown (ponder|fixed)", s));
}
const char* halting_name(Halting h) { return h == Halting::fixed ? "fixed" : "ponder"; }

void GridConfig::validate() const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw InputError("model." + msg);
  };
  need(vocab == kVocab, fmt::format("vocab must be {} (0-9 + = PAD; got {})", kVocab, vocab));
  need(d_emb >= 1 && d_emb <= 4096, fmt::format("d_emb must be in [1, 4096] (got {})", d_emb));
  need(d_s2g >= 1 && d_s2g <= 65536, fmt::format("d_s2g must be in [1, 65536] (got {})", d_s2g));
  need(kernel >= 1 && kernel <= 15 && kernel % 2 == 1, fmt::format("kernel must be odd, in [1, 15] (got {})", kernel));
  need(groups >= 1 && d_emb % groups == 0, fmt::format("groups must divide d_emb = {} (got {})", d_emb, groups));
  need(heads >= 1 && d_emb % heads == 0, fmt::format("heads must divide d_emb = {} (got {})", d_emb, heads));
  need(d_ffn >= 1 && d_ffn <= 65536, fmt::format("d_ffn must be in [1, 65536] (got {})", d_ffn));
  need(context_len >= 1 && context_len <= 256, fmt::format("context_len must be in [1, 256] (got {})", context_len));
  need(context_heads >= 1 && d_emb % context_heads == 0,
       fmt::format("context_heads must divide d_emb = {} (got {})", d_emb, context_heads));
  need(d_ctx_ffn >= 1 && d_ctx_ffn <= 65536, fmt::format("d_ctx_ffn must be in [1, 65536] (got {})", d_ctx_ffn));
  need(d_halt >= 1 && d_halt <= 65536, fmt::format("d_halt must be in [1, 65536] (got {})", d_halt));
  need(max_steps_train >= 0 && max_steps_train <= 10000,
       fmt::format("max_steps_train must be in [0, 10000] (got {})", max_steps_train));
  need(max_steps_eval >= 0 && max_steps_eval <= 10000,
       fmt::format("max_steps_eval must be in [0, 10000] (got {})", max_steps_eval));
  need(halt_eps > 0 && halt_eps < 1, fmt::format("halt_eps must be in (0, 1) (got {})", halt_eps));
  need(dropout >= 0 && dropout < 1, fmt::format("dropout must be in [0, 1) (got {})", dropout));
  need(norm_eps > 0 && norm_eps < 1, fmt::format("norm_eps must be in (0, 1) (got {})", norm_eps));
}

void to_json(nlohmann::json& j, const GridConfig& c) {
  j = nlohmann::json{{"vocab", c.vocab},
                     {"d_emb", c.d_emb},
                     {"d_s2g", c.d_s2g},
                     {"kernel", c.kernel},
                     {"groups", c.groups},
                     {"heads", c.heads},
                     {"d_ffn", c.d_ffn},
                     {"context_len", c.context_len},
                     {"context_heads", c.context_heads},
                     {"d_ctx_ffn", c.d_ctx_ffn},
                     {"d_halt", c.d_halt},
                     {"alibi", c.alibi},
                     {"halting", halting_name(c.halting)},
                     {"max_steps_train", c.max_steps_train},
                     {"max_steps_eval", c.max_steps_eval},
                     {"halt_eps", c.halt_eps},
                     {"dropout", c.dropout},
                     {"norm_eps", c.norm_eps}};
}

void check_config_fields(const nlohmann::json& j, const nlohmann::json& defaults, const std::string& section) {
  if (!j.is_object()) throw InputError(fmt::format("the {} section must be a JSON object", section));
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!defaults.contains(it.key())) throw InputError(fmt::format("{}: unknown field '{}'", section, it.key()));
    const auto& d = defaults.at(it.key());
    const auto& v = it.value();
    const bool ok = d.is_boolean()                                     ? v.is_boolean()
                    : d.is_string()                                    ? v.is_string()
                    : d.is_number_unsigned()                           ? v.is_number_unsigned()
                    : d.is_number_integer()                            ? v.is_number_integer()
                                                                       : v.is_number();
    if (!ok)
      throw InputError(fmt::format("{}.{} must be {}", section, it.key(),
                                   d.is_boolean()           ? "true or false"
                                   : d.is_string()          ? "a string"
                                   : d.is_number_unsigned() ? "an integer >= 0"
                                   : d.is_number_integer()  ? "an integer"
                                                            : "a number"));
    // an unsigned value above 2^63 would wrap to a negative int64: compare it as it was written
    if (!d.is_number_unsigned() && d.is_number_integer() &&
        (v.is_number_unsigned() ? v.get<std::uint64_t>() > 1'000'000'000
                                : v.get<std::int64_t>() < -1'000'000'000 || v.get<std::int64_t>() > 1'000'000'000))
      throw InputError(fmt::format("{}.{} out of range (got {})", section, it.key(), v.dump()));
  }
}

void from_json(const nlohmann::json& j, GridConfig& c) {
  check_config_fields(j, GridConfig{}, "model");
  auto geti = [&](const char* k, int& v) {
    if (j.contains(k)) v = int(j[k].get<std::int64_t>());
  };
  auto getd = [&](const char* k, double& v) {
    if (j.contains(k)) v = j[k].get<double>();
  };
  geti("vocab", c.vocab);
  geti("d_emb", c.d_emb);
  geti("d_s2g", c.d_s2g);
  geti("kernel", c.kernel);
  geti("groups", c.groups);
  geti("heads", c.heads);
  geti("d_ffn", c.d_ffn);
  geti("context_len", c.context_len);
  geti("context_heads", c.context_heads);
  geti("d_ctx_ffn", c.d_ctx_ffn);
  geti("d_halt", c.d_halt);
  if (j.contains("alibi")) c.alibi = j["alibi"].get<bool>();
  if (j.contains("halting")) c.halting = parse_halting(j["halting"].get<std::string>());
  geti("max_steps_train", c.max_steps_train);
  geti("max_steps_eval", c.max_steps_eval);
  getd("halt_eps", c.halt_eps);
  getd("dropout", c.dropout);
  getd("norm_eps", c.norm_eps);
  c.validate();
}

nlohmann::json grid_architecture_description(const GridConfig& c) {
  nlohmann::json d;
  d["model"] = "grid universal transformer (paper 003, Cognolato and Testolin; tag-cat)";
  d["input"] = "tokens 0-9 + = PAD (vocabulary 13), the problem 'a+b+...=' padded with PAD after '='";
  d["embedding"] = fmt::format("embedding.weight ({} x {}), no position information", c.vocab, c.d_emb);
  d["seq2grid"] = fmt::format(
      "actions (TLU, NLP, NOP) = softmax(FFN_2(x_t)), hidden {} with SiLU; the grid (H x W x {}) built mirrored: "
      "a token enters the top row at its right end (Eq. 3)",
      c.d_s2g, c.d_emb);
  d["block"] = fmt::format(
      "G' = LN(G + LocalAttn(G)), G_next = LN(G' + FFN_3(G')); local attention over the {}x{} window, {} groups "
      "(grouped q/k/v projections without bias), {} heads, scores (q + s).(k + r_uv) unscaled, cells outside the "
      "grid k = v = 0 and not masked; FFN_3 hidden {} twice with SiLU; dropout {} before every linear layer of the "
      "FFNs and the decoder (not in the attention)",
      c.kernel, c.kernel, c.groups, c.heads, c.d_ffn, c.dropout);
  if (c.halting == Halting::ponder)
    d["halting"] = fmt::format(
        "PonderNet: a context of {} learned vectors attends to the flattened grid ({} heads{}), then FFN_2 "
        "(hidden {}); lambda_n = sigmoid(FFN_2(concat context), hidden {}); training stops a sample once the "
        "halting distribution's mass before step n exceeds 1 - {} (at most {} steps), test halts with "
        "probability lambda_n at every step (at most {})",
        c.context_len, c.context_heads, c.alibi ? ", grid-row ALiBi" : "", c.d_ctx_ffn, c.d_halt, c.halt_eps,
        c.max_steps_train, c.max_steps_eval);
  else
    d["halting"] = fmt::format("fixed: {} steps in training, {} at test", c.max_steps_train, c.max_steps_eval);
  d["readout"] = "logits = decoder(top row of the final grid): one token per column, the sum right-aligned";
  return d;
}

GridLayout GridLayout::make(const GridConfig& c) {
  c.validate();
  GridLayout g;
  Layout& L = g.lay;
  const std::int64_t C = c.d_emb, D = c.d_s2g, CG = C / c.groups, K = c.kernel, F = c.d_ffn, V = c.vocab;
  g.emb = L.add("embedding.weight", {V, C});
  g.s2g_w1 = L.add("s2g.fc1.weight", {D, C});
  g.s2g_b1 = L.add("s2g.fc1.bias", {D});
  g.s2g_w2 = L.add("s2g.fc2.weight", {3, D});
  g.s2g_b2 = L.add("s2g.fc2.bias", {3});
  g.wq = L.add("ut.attn.query.weight", {C, CG});
  g.wk = L.add("ut.attn.key.weight", {C, CG});
  g.wv = L.add("ut.attn.value.weight", {C, CG});
  g.rel = L.add("ut.attn.rel_emb", {K, K, C});
  g.qe = L.add("ut.attn.q_emb", {C});
  g.n1_w = L.add("ut.norm1.weight", {C});
  g.n1_b = L.add("ut.norm1.bias", {C});
  g.f1_w = L.add("ut.ffn.0.weight", {F, C});
  g.f1_b = L.add("ut.ffn.0.bias", {F});
  g.f2_w = L.add("ut.ffn.1.weight", {F, F});
  g.f2_b = L.add("ut.ffn.1.bias", {F});
  g.f3_w = L.add("ut.ffn.2.weight", {C, F});
  g.f3_b = L.add("ut.ffn.2.bias", {C});
  g.n2_w = L.add("ut.norm2.weight", {C});
  g.n2_b = L.add("ut.norm2.bias", {C});
  if (c.halting == Halting::ponder) {
    const std::int64_t SC = c.context_len, FC = c.d_ctx_ffn, FH = c.d_halt;
    g.ctx0 = L.add("ctx.start", {SC, C});
    g.in_w = L.add("ctx.attn.in_proj_weight", {3 * C, C});
    g.in_b = L.add("ctx.attn.in_proj_bias", {3 * C});
    g.out_w = L.add("ctx.attn.out_proj.weight", {C, C});
    g.out_b = L.add("ctx.attn.out_proj.bias", {C});
    g.cn1_w = L.add("ctx.norm1.weight", {C});
    g.cn1_b = L.add("ctx.norm1.bias", {C});
    g.cf1_w = L.add("ctx.ffn.0.weight", {FC, C});
    g.cf1_b = L.add("ctx.ffn.0.bias", {FC});
    g.cf2_w = L.add("ctx.ffn.1.weight", {C, FC});
    g.cf2_b = L.add("ctx.ffn.1.bias", {C});
    g.cn2_w = L.add("ctx.norm2.weight", {C});
    g.cn2_b = L.add("ctx.norm2.bias", {C});
    g.h1_w = L.add("halt.0.weight", {FH, SC * C});
    g.h1_b = L.add("halt.0.bias", {FH});
    g.h2_w = L.add("halt.1.weight", {1, FH});
    g.h2_b = L.add("halt.1.bias", {1});
  }
  g.dec_w = L.add("decoder.weight", {V, C});
  g.dec_b = L.add("decoder.bias", {V});
  // Weight decay as the authors' optimizer groups (tagcat/factory.py, build_optimizer): none for a
  // parameter whose name contains 'bias', 'embedding', 'rel_emb', 'q_emb' or 'norm'; the starting
  // context (their 'starting_context', our ctx.start) matches none and decays.
  for (TensorSpec& t : L.tensors) {
    bool nd = false;
    for (const char* s : {"bias", "embedding", "rel_emb", "q_emb", "norm"}) nd = nd || t.name.find(s) != std::string::npos;
    t.decay = !nd;
  }
  return g;
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

template <class S>
std::vector<S> grid_init_params(const GridConfig& c, const GridLayout& L, std::uint64_t seed) {
  std::vector<S> p(std::size_t(L.lay.total), S(0));
  Rng rng(seed);
  auto uniform = [&](double bound) {
    return bound * (2.0 * double(rng.uniform(0, (1ull << 53) - 1)) / double(1ull << 53) - 1.0);
  };
  const double C = c.d_emb;
  for (const TensorSpec& t : L.lay.tensors) {
    S* w = p.data() + t.offset;
    const std::string& n = t.name;
    auto fill = [&](auto draw) {
      for (std::int64_t i = 0; i < t.size; ++i) w[i] = S(draw());
    };
    if (n.find("norm") != std::string::npos) {  // LayerNorm: weight 1, bias 0
      fill([&] { return ends_with(n, ".bias") ? 0.0 : 1.0; });
    } else if (n == "embedding.weight" || n == "ut.attn.rel_emb" || n == "ut.attn.q_emb" || n == "ctx.start") {
      fill([&] { return standard_normal(rng); });
    } else if (n == "ut.attn.query.weight" || n == "ut.attn.key.weight" || n == "ut.attn.value.weight") {
      const double sd = std::sqrt(2.0 / C);  // kaiming_normal_(mode='fan_out', nonlinearity='relu'), fan_out = C
      fill([&] { return sd * standard_normal(rng); });
    } else if (n == "ctx.attn.in_proj_weight") {
      const double b = std::sqrt(6.0 / (C + 3 * C));  // xavier_uniform_ on (3C, C)
      fill([&] { return uniform(b); });
    } else if (n == "ctx.attn.in_proj_bias" || n == "ctx.attn.out_proj.bias") {
      fill([] { return 0.0; });
    } else {  // nn.Linear: weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)); out_proj's weight too
      const std::string wname = ends_with(n, ".bias") ? n.substr(0, n.size() - 4) + "weight" : n;
      const double fan_in = double(L.lay.find(wname).shape.back());
      fill([&] { return uniform(1.0 / std::sqrt(fan_in)); });
    }
  }
  return p;
}

void fast_matmul_forward(float* out, const float* inp, const float* w, int R, int C, int OC) {
  cpu_gemm::gemm(false, true, R, OC, C, inp, C, w, C, 0.f, out, OC, cpu_gemm::Elem::f32);
}
void fast_matmul_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int R, int C,
                          int OC) {
  cpu_gemm::gemm(false, false, R, C, OC, dout, OC, w, C, 1.f, dinp, C, cpu_gemm::Elem::f32);
  cpu_gemm::gemm(true, false, OC, C, R, dout, OC, inp, C, 1.f, dw, C, cpu_gemm::Elem::f32);
}
void fast_dropout_mask(float* mask, std::int64_t n, std::uint64_t state, std::uint64_t cut, float keep) {
  cpu_fast::kernels().dropout_mask(mask, n, state, cut, keep);
}
void fast_silu_forward(float* out, const float* inp, std::int64_t n) { cpu_fast::kernels().silu_forward(out, inp, n); }
void fast_silu_backward(float* dinp, const float* dout, const float* inp, std::int64_t n) {
  cpu_fast::kernels().silu_backward(dinp, dout, inp, n);
}
void fast_local_attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                                  const float* rel, const float* qe, int H, int W, int C, int K) {
  cpu_fast::kernels().local_attention_c1_forward(out, att, q, k, v, rel, qe, H, W, C, K);
}
void fast_local_attention_backward(float* dq, float* dk, float* dv, float* drel, float* dqe, const float* dout,
                                   const float* att, const float* q, const float* k, const float* v, const float* rel,
                                   const float* qe, int H, int W, int C, int K) {
  cpu_fast::kernels().local_attention_c1_backward(dq, dk, dv, drel, dqe, dout, att, q, k, v, rel, qe, H, W, C, K);
}
const std::string& fast_products_unavailable() { return cpu_gemm::unavailable(); }
void require_fast_products() { cpu_gemm::require("--device cpu-fast"); }

namespace {
template <class S>
S* zeroed(std::vector<S>& v, std::size_t n) {
  v.assign(n, S(0));
  return v.data();
}
template <class S>
S* sized(std::vector<S>& v, std::size_t n) {
  v.resize(n);
  return v.data();
}

// The dropout sites of one recurrent step, each its own stream: the block's FFN layers (kUt + l), the
// context FFN's (kCtx + l), the decoder's; kHalt: the Bernoulli draw of evaluation-mode halting.
enum Site : std::uint64_t { kUt = 1, kCtx = 4, kDec = 6, kHalt = 7 };

template <class S>
struct Streams {
  std::uint64_t key;
  double p;  // 0: no dropout
  // The mask of `site` at recurrent step n into buf (n entries), or null when there is no dropout.
  S* mask(std::vector<S>& buf, std::size_t count, int n, std::uint64_t site) const {
    if (p <= 0) {
      buf.clear();
      return nullptr;
    }
    DropoutStream ds(seed_mix(key, std::uint64_t(n), site));
    dropout_mask(sized(buf, count), std::int64_t(count), p, ds);
    return buf.data();
  }
  // An FFN's masks: layer l of step n at site base + l.
  auto ffn(int n, std::uint64_t base) const {
    return [this, n, base](int l, std::vector<S>& buf, std::size_t count) { return mask(buf, count, n, base + l); };
  }
};
template <class S>
S* no_dropout(int, std::vector<S>& buf, std::size_t) {
  buf.clear();
  return nullptr;
}

// The FFNs of the model as FfnLayer lists (the parameters read from m, the grads' at the same offsets).
template <class S>
std::vector<FfnLayer<S>> s2g_ffn(const GridView<S>& m) {
  const GridLayout& L = m.L;
  const int C = m.cfg.d_emb, D = m.cfg.d_s2g;
  return {{m.at(L.s2g_w1), m.at(L.s2g_b1), C, D, m.fast}, {m.at(L.s2g_w2), m.at(L.s2g_b2), D, 3, m.fast}};
}
template <class S>
std::vector<FfnLayer<S>> ut_ffn(const GridView<S>& m) {
  const GridLayout& L = m.L;
  const int C = m.cfg.d_emb, F = m.cfg.d_ffn;
  return {{m.at(L.f1_w), m.at(L.f1_b), C, F, m.fast},
          {m.at(L.f2_w), m.at(L.f2_b), F, F, m.fast},
          {m.at(L.f3_w), m.at(L.f3_b), F, C, m.fast}};
}
template <class S>
std::vector<FfnLayer<S>> ctx_ffn(const GridView<S>& m) {
  const GridLayout& L = m.L;
  const int C = m.cfg.d_emb, FC = m.cfg.d_ctx_ffn;
  return {{m.at(L.cf1_w), m.at(L.cf1_b), C, FC, m.fast}, {m.at(L.cf2_w), m.at(L.cf2_b), FC, C, m.fast}};
}
template <class S>
std::vector<FfnLayer<S>> halt_ffn(const GridView<S>& m) {
  const GridLayout& L = m.L;
  const int SCC = m.cfg.context_len * m.cfg.d_emb, FH = m.cfg.d_halt;
  return {{m.at(L.h1_w), m.at(L.h1_b), SCC, FH, m.fast}, {m.at(L.h2_w), m.at(L.h2_b), FH, 1, m.fast}};
}
template <class S>
std::vector<FfnLayer<S>> dec_ffn(const GridView<S>& m) {
  return {{m.at(m.L.dec_w), m.at(m.L.dec_b), m.cfg.d_emb, m.cfg.vocab, m.fast}};
}

// ---- Eq. 5: one application of the block ---------------------------------------------------------------
template <class S>
void ut_forward(S* out, typename SampleActs<S>::Ut& u, std::vector<S>& tmp, const GridView<S>& m, const S* in, int H,
                int W, const Streams<S>& st, int n) {
  const GridConfig& c = m.cfg;
  const GridLayout& L = m.L;
  const int C = c.d_emb, HW = H * W;
  const std::size_t nC = std::size_t(HW) * C;
  // 1. q, k, v: the grouped projections (Eq. 6)
  grouped_linear_forward(sized(u.q, nC), in, m.at(L.wq), HW, C, c.groups, m.fast);
  grouped_linear_forward(sized(u.k, nC), in, m.at(L.wk), HW, C, c.groups, m.fast);
  grouped_linear_forward(sized(u.v, nC), in, m.at(L.wv), HW, C, c.groups, m.fast);
  // 2. local attention (Eq. 7) into res1, then res1 = G + y and G' = LN(res1)
  local_attention_forward(sized(u.res1, nC), sized(u.att, std::size_t(HW) * c.heads * c.kernel * c.kernel), u.q.data(),
                          u.k.data(), u.v.data(), m.at(L.rel), m.at(L.qe), H, W, C, c.heads, c.kernel, m.fast);
  for (std::size_t e = 0; e < nC; ++e) u.res1[e] += in[e];
  layernorm_forward(sized(u.x1, nC), sized(u.m1, HW), sized(u.r1, HW), u.res1.data(), m.at(L.n1_w), m.at(L.n1_b), HW,
                    C, S(c.norm_eps));
  // 3. FFN_3^ut (Eq. 1; tag-cat transformer.py, TransformerLikeConv.step), then G_next = LN(G' + FFN(G'))
  ffn_forward(sized(u.res2, nC), u.ffn, tmp, u.x1.data(), ut_ffn(m), HW, st.ffn(n, kUt));
  for (std::size_t e = 0; e < nC; ++e) u.res2[e] += u.x1[e];
  layernorm_forward(out, sized(u.m2, HW), sized(u.r2, HW), u.res2.data(), m.at(L.n2_w), m.at(L.n2_b), HW, C,
                    S(c.norm_eps));
}

// ---- Eq. 13-14: one step of the halting transformer; returns lambda_n -----------------------------------
template <class S>
S ctx_forward(S* cout, typename SampleActs<S>::Ctx& x, std::vector<S>& tmp, const GridView<S>& m, const S* cin,
              const S* grid, int H, int W, const Streams<S>& st, int n) {
  const GridConfig& c = m.cfg;
  const GridLayout& L = m.L;
  const int C = c.d_emb, SC = c.context_len, T = H * W;
  const std::size_t nS = std::size_t(SC) * C, nT = std::size_t(T) * C;
  const S* wi = m.at(L.in_w);
  const S* bi = m.at(L.in_b);
  // 1. q from the context, k and v from the flattened grid (MultiheadAttention's in_proj)
  linear_forward(sized(x.q, nS), cin, wi, bi, SC, C, C, m.fast);
  linear_forward(sized(x.k, nT), grid, wi + std::int64_t(C) * C, bi + C, T, C, C, m.fast);
  linear_forward(sized(x.v, nT), grid, wi + 2 * std::int64_t(C) * C, bi + 2 * C, T, C, C, m.fast);
  // 2. attention with the grid ALiBi (Eq. 13), out_proj, residual and LN
  std::vector<S> slopes;
  if (c.alibi)
    for (double s : alibi_slopes(c.context_heads)) slopes.push_back(S(s));
  context_attention_forward(sized(x.o, nS), sized(x.att, std::size_t(c.context_heads) * SC * T), x.q.data(), x.k.data(),
                            x.v.data(), c.alibi ? slopes.data() : nullptr, SC, T, W, C, c.context_heads);
  linear_forward(sized(x.res1, nS), x.o.data(), m.at(L.out_w), m.at(L.out_b), SC, C, C, m.fast);
  for (std::size_t e = 0; e < nS; ++e) x.res1[e] += cin[e];
  layernorm_forward(sized(x.x1, nS), sized(x.m1, SC), sized(x.r1, SC), x.res1.data(), m.at(L.cn1_w), m.at(L.cn1_b), SC,
                    C, S(c.norm_eps));
  // 3. FFN_2^ctx (tag-cat pondernet.py, PonderNetModule.step), residual and LN
  ffn_forward(sized(x.res2, nS), x.ffn, tmp, x.x1.data(), ctx_ffn(m), SC, st.ffn(n, kCtx));
  for (std::size_t e = 0; e < nS; ++e) x.res2[e] += x.x1[e];
  layernorm_forward(cout, sized(x.m2, SC), sized(x.r2, SC), x.res2.data(), m.at(L.cn2_w), m.at(L.cn2_b), SC, C,
                    S(c.norm_eps));
  // 4. lambda_n = sigmoid(FFN_2^halt(concat C_{n+1})) (no dropout there: PonderNetModule.lambdas)
  ffn_forward(&x.hlogit, x.halt, tmp, cout, halt_ffn(m), 1, no_dropout<S>);
  return sigmoid(x.hlogit);
}

// ---- the read-out of the top row; returns the weighted cross-entropy sum (0 without a target) -----------
template <class S>
S dec_forward(typename SampleActs<S>::Dec& d, std::vector<S>& tmp, const GridView<S>& m, const S* top, int W,
              const std::int32_t* target, double pad_weight, const Streams<S>& st, int n) {
  const int V = m.cfg.vocab;
  ffn_forward(sized(d.logits, std::size_t(W) * V), d.lin, tmp, top, dec_ffn(m), W, st.ffn(n, kDec));
  if (!target) return S(0);
  crossentropy_forward(sized(d.losses, W), sized(d.probs, std::size_t(W) * V), d.logits.data(), target, W, V);
  S ce = 0;
  for (int w = 0; w < W; ++w) ce += (target[w] == kPad ? S(pad_weight) : S(1)) * d.losses[std::size_t(w)];
  return ce;
}
}  // namespace

std::pair<int, int> matches(const std::uint8_t* pred, const std::int32_t* target, int W) {
  int correct = 0, valid = 0;
  for (int w = 0; w < W; ++w) {
    const bool v = pred[w] != kPad || target[w] != kPad || w == W - 1;
    valid += v;
    correct += v && int(pred[w]) == target[w];
  }
  return {correct, valid};
}

template <class S>
void sample_forward(SampleActs<S>& a, const GridView<S>& m, const GridInput& in, const RunOptions& opt) {
  const GridConfig& c = m.cfg;
  const GridLayout& L = m.L;
  if (in.S < 1) throw InputError("grid model: empty input sequence");
  if (in.H < 1 || in.W < 1) throw InputError(fmt::format("grid model: grid {} x {} is empty", in.H, in.W));
  for (int t = 0; t < in.S; ++t)
    if (in.tokens[t] >= c.vocab) throw InputError(fmt::format("grid model: token {} outside the vocabulary", int(in.tokens[t])));
  if (in.target)
    for (int w = 0; w < in.W; ++w)
      if (in.target[w] < 0 || in.target[w] >= c.vocab)
        throw InputError(fmt::format("grid model: target {} outside the vocabulary", in.target[w]));
  const bool train = opt.mode == RunMode::train, ponder = c.halting == Halting::ponder, keep = opt.keep;
  const int C = c.d_emb, Sq = in.S, H = in.H, W = in.W, SC = c.context_len;
  const std::size_t HWC = std::size_t(H) * W * C, SCC = std::size_t(SC) * C;
  const int maxn = opt.max_steps >= 0 ? opt.max_steps : train ? c.max_steps_train : c.max_steps_eval;
  const Streams<S> st{opt.key, train ? c.dropout : 0.0};
  a.H = H, a.W = W, a.Sq = Sq, a.pad_weight = opt.pad_weight;
  // 1. embedding (no position information: Sec. III-B1)
  S* x = sized(a.x, std::size_t(Sq) * C);
  for (int t = 0; t < Sq; ++t) std::copy_n(m.at(L.emb) + std::int64_t(in.tokens[t]) * C, C, x + std::int64_t(t) * C);
  // 2. Seq2Grid's actions (Eq. 2): softmax(FFN_2(x_t)), no dropout (tag-cat seq2grid.py, action_decoder)
  ffn_forward(sized(a.s2g_o, std::size_t(Sq) * 3), a.s2g, a.scratch, x, s2g_ffn(m), Sq, no_dropout<S>);
  softmax_rows_forward(sized(a.act, std::size_t(Sq) * 3), a.s2g_o.data(), Sq, 3);
  if (opt.test.hard_actions && !train) {  // an intervention at test: each token's argmax action with weight 1
    for (int t = 0; t < Sq; ++t) {
      S* p = a.act.data() + std::size_t(t) * 3;
      const std::ptrdiff_t k = std::max_element(p, p + 3) - p;
      for (int j = 0; j < 3; ++j) p[j] = S(j == k ? 1 : 0);
    }
  }
  // 3. the grid G_0 (Eq. 3)
  sized(a.grids, keep ? (std::size_t(Sq) + 1) * HWC : HWC);
  seq2grid_forward(a.grids.data(), x, a.act.data(), Sq, H, W, C, keep);
  const S* g0 = a.grids.data() + (keep ? std::size_t(Sq) * HWC : 0);
  // 4. the recurrence (Eq. 4) with its halting (Eq. 9-10, 14)
  const std::size_t slots = keep ? std::size_t(maxn) + 1 : 2;
  sized(a.G, slots * HWC);
  auto G = [&](int n) { return a.G.data() + (keep ? std::size_t(n) : std::size_t(n % 2)) * HWC; };
  std::copy_n(g0, HWC, G(0));
  if (a.ut.size() < (keep ? std::size_t(std::max(maxn, 1)) : 1)) a.ut.resize(keep ? std::size_t(std::max(maxn, 1)) : 1);
  if (a.dec.size() < (keep ? slots : 1)) a.dec.resize(keep ? slots : 1);
  if (ponder) {
    sized(a.Cs, (keep ? slots + 1 : 2) * SCC);
    if (a.ctx.size() < (keep ? slots : 1)) a.ctx.resize(keep ? slots : 1);
    std::copy_n(m.at(L.ctx0), SCC, a.Cs.data());
  }
  auto Cs = [&](int n) { return a.Cs.data() + (keep ? std::size_t(n) : std::size_t(n % 2)) * SCC; };
  auto slot = [&](int n) { return keep ? std::size_t(n) : std::size_t(0); };
  a.lambda.clear(), a.p.clear(), a.ce.clear();
  S sum_p = 0, q = 1;
  for (int n = 0;; ++n) {
    bool halt = n >= maxn;
    if (ponder) {
      const S lambda = ctx_forward(Cs(n + 1), a.ctx[slot(n)], a.scratch, m, Cs(n), G(n), H, W, st, n);
      a.lambda.push_back(lambda);
      if (train) {
        // tag-cat pondernet.py, try_halting_and_loss: halted when the mass before this step exceeds
        // 1 - epsilon; the step it halts at takes the remaining mass.
        halt = halt || sum_p > S(1) - S(c.halt_eps);
        const S pn = halt ? S(1) - sum_p : lambda * q;
        a.p.push_back(pn);
        sum_p += pn, q *= S(1) - lambda;
      } else if (!halt && !opt.test.run_to_max) {
        if (opt.greedy_halt) {
          halt = lambda >= S(0.5);
        } else {  // Bernoulli(lambda_n): one uniform of 53 bits per step from the sample's stream
          DropoutStream ds(seed_mix(opt.key, std::uint64_t(n), kHalt));
          halt = double(ds.next() >> 11) / double(1ull << 53) < double(lambda);
        }
      }
    }
    // The read-out of step n: every step in PonderNet training (the loss is their expectation), the
    // last one otherwise.
    if (train && ponder) {
      a.ce.push_back(dec_forward(a.dec[slot(n)], a.scratch, m, G(n), W, in.target, opt.pad_weight, st, n));
    } else if (halt) {
      a.ce.assign(std::size_t(n) + 1, S(0));
      a.ce[std::size_t(n)] = dec_forward(a.dec[slot(n)], a.scratch, m, G(n), W, in.target, opt.pad_weight, st, n);
    }
    if (halt) {
      a.N = n;
      break;
    }
    ut_forward(G(n + 1), a.ut[slot(n)], a.scratch, m, G(n), H, W, st, n);
  }
  // the prediction: argmax of the last read-out
  const auto& d = a.dec[slot(a.N)];
  a.pred.resize(std::size_t(W));
  for (int w = 0; w < W; ++w) {
    const S* z = d.logits.data() + std::size_t(w) * c.vocab;
    a.pred[std::size_t(w)] = std::uint8_t(std::max_element(z, z + c.vocab) - z);
  }
}

namespace {
// The gradients of an FFN's weights and biases (at the layers' offsets in grads).
template <class S>
struct FfnGrads {
  std::vector<S*> w, b;
};
template <class S>
FfnGrads<S> ffn_grads(S* grads, std::initializer_list<std::pair<std::int64_t, std::int64_t>> offsets) {
  FfnGrads<S> g;
  for (const auto& [w, b] : offsets) g.w.push_back(grads + w), g.b.push_back(grads + b);
  return g;
}

// Reverse of ut_forward: din = dL/dG_n from dout = dL/dG_{n+1} (din overwritten); buffers in tmp.
template <class S>
void ut_backward(S* din, S* grads, const typename SampleActs<S>::Ut& u, std::vector<std::vector<S>>& tmp,
                 const GridView<S>& m, const S* in, const S* dout, int H, int W) {
  const GridConfig& c = m.cfg;
  const GridLayout& L = m.L;
  const int C = c.d_emb, HW = H * W;
  const std::size_t nC = std::size_t(HW) * C;
  if (tmp.size() < 8) tmp.resize(8);
  auto g = [&](std::int64_t o) { return grads + o; };
  // 4. G_next = LN(res2): dres2; res2 = x1 + FFN(x1): dx1 = dres2 + FFN's reverse
  S* dres2 = zeroed(tmp[0], nC);
  layernorm_backward(dres2, g(L.n2_w), g(L.n2_b), dout, u.res2.data(), m.at(L.n2_w), u.m2.data(), u.r2.data(), HW, C);
  S* dx1 = sized(tmp[1], nC);
  std::copy_n(dres2, nC, dx1);
  const FfnGrads<S> fg = ffn_grads(grads, {{L.f1_w, L.f1_b}, {L.f2_w, L.f2_b}, {L.f3_w, L.f3_b}});
  ffn_backward(dx1, fg.w.data(), fg.b.data(), u.ffn, dres2, ut_ffn(m), HW, tmp[2], tmp[3]);
  // 2. G' = LN(res1), res1 = G + y: dres1; dG = dy = dres1
  S* dres1 = zeroed(tmp[0], nC);
  layernorm_backward(dres1, g(L.n1_w), g(L.n1_b), dx1, u.res1.data(), m.at(L.n1_w), u.m1.data(), u.r1.data(), HW, C);
  std::copy_n(dres1, nC, din);
  S* dq = zeroed(tmp[5], nC);
  S* dk = zeroed(tmp[6], nC);
  S* dv = zeroed(tmp[7], nC);
  local_attention_backward(dq, dk, dv, g(L.rel), g(L.qe), dres1, u.att.data(), u.q.data(), u.k.data(), u.v.data(),
                           m.at(L.rel), m.at(L.qe), H, W, C, c.heads, c.kernel, m.fast);
  // 1. the grouped projections
  grouped_linear_backward(din, g(L.wq), dq, in, m.at(L.wq), HW, C, c.groups, m.fast);
  grouped_linear_backward(din, g(L.wk), dk, in, m.at(L.wk), HW, C, c.groups, m.fast);
  grouped_linear_backward(din, g(L.wv), dv, in, m.at(L.wv), HW, C, c.groups, m.fast);
}

// Reverse of ctx_forward: dcin = dL/dC_n (overwritten) and dgrid += dL/dG_n, from dlambda = dL/dlambda_n
// and dcout = dL/dC_{n+1} from the later steps.
template <class S>
void ctx_backward(S* dcin, S* dgrid, S* grads, const typename SampleActs<S>::Ctx& x, std::vector<std::vector<S>>& tmp,
                  const GridView<S>& m, const S* cin, const S* grid, S dlambda, const S* dcout, int H, int W) {
  const GridConfig& c = m.cfg;
  const GridLayout& L = m.L;
  const int C = c.d_emb, SC = c.context_len, T = H * W;
  const std::size_t nS = std::size_t(SC) * C, nT = std::size_t(T) * C;
  if (tmp.size() < 8) tmp.resize(8);
  auto g = [&](std::int64_t o) { return grads + o; };
  // 4. the halting head: lambda = sigmoid(hlogit), hlogit = FFN_2^halt(concat C_{n+1})
  const S lam = sigmoid(x.hlogit);
  const S dlogit = dlambda * lam * (S(1) - lam);
  S* dC1 = sized(tmp[0], nS);  // dL/dC_{n+1}
  std::copy_n(dcout, nS, dC1);
  const FfnGrads<S> hg = ffn_grads(grads, {{L.h1_w, L.h1_b}, {L.h2_w, L.h2_b}});
  ffn_backward(dC1, hg.w.data(), hg.b.data(), x.halt, &dlogit, halt_ffn(m), 1, tmp[2], tmp[3]);
  // 3. C_{n+1} = LN(x1 + FFN(x1))
  S* dres2 = zeroed(tmp[1], nS);
  layernorm_backward(dres2, g(L.cn2_w), g(L.cn2_b), dC1, x.res2.data(), m.at(L.cn2_w), x.m2.data(), x.r2.data(), SC, C);
  S* dx1 = sized(tmp[4], nS);
  std::copy_n(dres2, nS, dx1);
  const FfnGrads<S> fg = ffn_grads(grads, {{L.cf1_w, L.cf1_b}, {L.cf2_w, L.cf2_b}});
  ffn_backward(dx1, fg.w.data(), fg.b.data(), x.ffn, dres2, ctx_ffn(m), SC, tmp[2], tmp[3]);
  // 2. x1 = LN(C_n + out_proj(attention)): dC_n = datt = dres1
  S* dres1 = zeroed(tmp[1], nS);
  layernorm_backward(dres1, g(L.cn1_w), g(L.cn1_b), dx1, x.res1.data(), m.at(L.cn1_w), x.m1.data(), x.r1.data(), SC, C);
  std::copy_n(dres1, nS, dcin);
  S* dO = zeroed(tmp[0], nS);
  linear_backward(dO, g(L.out_w), g(L.out_b), dres1, x.o.data(), m.at(L.out_w), SC, C, C, m.fast);
  S* dq = zeroed(tmp[2], nS);
  S* dk = zeroed(tmp[5], nT);
  S* dv = zeroed(tmp[6], nT);
  S* scr = sized(tmp[7], std::size_t(SC) * T);
  context_attention_backward(dq, dk, dv, scr, dO, x.att.data(), x.q.data(), x.k.data(), x.v.data(), SC, T, C,
                             c.context_heads);
  // 1. the in_proj: q from C_n, k and v from the grid
  const S* wi = m.at(L.in_w);
  linear_backward(dcin, g(L.in_w), g(L.in_b), dq, cin, wi, SC, C, C, m.fast);
  linear_backward(dgrid, g(L.in_w) + std::int64_t(C) * C, g(L.in_b) + C, dk, grid, wi + std::int64_t(C) * C, T, C, C,
                  m.fast);
  linear_backward(dgrid, g(L.in_w) + 2 * std::int64_t(C) * C, g(L.in_b) + 2 * C, dv, grid,
                  wi + 2 * std::int64_t(C) * C, T, C, C, m.fast);
}

// Reverse of dec_forward for the loss coeff * ce: dtop += dL/d(top row).
template <class S>
void dec_backward(S* dtop, S* grads, const typename SampleActs<S>::Dec& d, std::vector<std::vector<S>>& tmp,
                  const GridView<S>& m, const std::int32_t* target, double pad_weight, S coeff, int W) {
  const int V = m.cfg.vocab;
  if (tmp.size() < 8) tmp.resize(8);
  S* dl = sized(tmp[0], std::size_t(W) * V);
  for (int w = 0; w < W; ++w)
    crossentropy_backward(dl + std::int64_t(w) * V, d.probs.data() + std::int64_t(w) * V, target + w,
                          coeff * (target[w] == kPad ? S(pad_weight) : S(1)), 1, V);
  const FfnGrads<S> dg = ffn_grads(grads, {{m.L.dec_w, m.L.dec_b}});
  ffn_backward(dtop, dg.w.data(), dg.b.data(), d.lin, dl, dec_ffn(m), W, tmp[2], tmp[3]);
}
}  // namespace

template <class S>
void sample_backward(S* grads, SampleActs<S>& a, const GridView<S>& m, const GridInput& in, const S* cce,
                     const S* cp) {
  const GridConfig& c = m.cfg;
  const GridLayout& L = m.L;
  MANYADD_INVARIANT(in.target, "sample_backward needs the target");
  MANYADD_INVARIANT(a.G.size() >= (std::size_t(a.N) + 1) * std::size_t(in.H) * in.W * c.d_emb,
                    "sample_backward needs a forward with keep = true");
  const bool ponder = c.halting == Halting::ponder;
  const int C = c.d_emb, Sq = a.Sq, H = a.H, W = a.W, N = a.N, SC = c.context_len;
  const std::size_t HWC = std::size_t(H) * W * C, SCC = std::size_t(SC) * C;
  static thread_local std::vector<std::vector<S>> tmp;
  std::vector<S> dG(HWC, S(0)), dGp(HWC, S(0)), dCn1(ponder ? SCC : 0, S(0)), dCn(SCC);
  std::vector<S> dlam(std::size_t(N) + 1, S(0));
  if (ponder) halting_distribution_backward(dlam.data(), cp, a.lambda.data(), N);
  const S* G0 = a.G.data();
  for (int n = N; n >= 0; --n) {
    const S* Gn = G0 + std::size_t(n) * HWC;
    if (cce[n] != S(0)) dec_backward(dG.data(), grads, a.dec[std::size_t(n)], tmp, m, in.target, a.pad_weight, cce[n], W);
    if (ponder) {
      ctx_backward(dCn.data(), dG.data(), grads, a.ctx[std::size_t(n)], tmp, m, a.Cs.data() + std::size_t(n) * SCC, Gn,
                   dlam[std::size_t(n)], dCn1.data(), H, W);
      dCn1.swap(dCn);
    }
    if (n > 0) {
      ut_backward(dGp.data(), grads, a.ut[std::size_t(n - 1)], tmp, m, G0 + std::size_t(n - 1) * HWC, dG.data(), H, W);
      dG.swap(dGp);
    }
  }
  if (ponder)
    for (std::size_t e = 0; e < SCC; ++e) grads[L.ctx0 + std::int64_t(e)] += dCn1[e];
  // 3. Seq2Grid reversed, then Eq. 2's FFN and the embedding
  if (tmp.size() < 8) tmp.resize(8);
  std::vector<S> dx(std::size_t(Sq) * C, S(0)), dact(std::size_t(Sq) * 3, S(0)), scr(HWC);
  seq2grid_backward(dx.data(), dact.data(), dG.data(), scr.data(), a.grids.data(), a.x.data(), a.act.data(), Sq, H, W, C);
  std::vector<S> dO(std::size_t(Sq) * 3, S(0));
  softmax_rows_backward(dO.data(), dact.data(), a.act.data(), Sq, 3);
  const FfnGrads<S> sg = ffn_grads(grads, {{L.s2g_w1, L.s2g_b1}, {L.s2g_w2, L.s2g_b2}});
  ffn_backward(dx.data(), sg.w.data(), sg.b.data(), a.s2g, dO.data(), s2g_ffn(m), Sq, tmp[2], tmp[3]);
  for (int t = 0; t < Sq; ++t)
    for (int e = 0; e < C; ++e) grads[L.emb + std::int64_t(in.tokens[t]) * C + e] += dx[std::size_t(t) * C + e];
}

template <class S>
std::size_t SampleActs<S>::bytes() const {
  std::size_t n = 0;
  auto add = [&](const auto&... vs) { ((n += vs.capacity()), ...); };
  auto add_ffn = [&](const FfnActs<S>& f) {
    for (const auto* group : {&f.in, &f.mask, &f.z})
      for (const auto& v : *group) n += v.capacity();
  };
  add(x, s2g_o, act, grids, G, Cs, lambda, p, ce, scratch);
  add_ffn(s2g);
  for (const Ut& u : ut) add(u.q, u.k, u.v, u.att, u.res1, u.m1, u.r1, u.x1, u.res2, u.m2, u.r2), add_ffn(u.ffn);
  for (const Ctx& c : ctx)
    add(c.q, c.k, c.v, c.att, c.o, c.res1, c.m1, c.r1, c.x1, c.res2, c.m2, c.r2), add_ffn(c.ffn), add_ffn(c.halt);
  for (const Dec& d : dec) add(d.logits, d.probs, d.losses), add_ffn(d.lin);
  return n * sizeof(S) + pred.capacity();
}

template <class S>
void SampleActs<S>::release() {
  *this = SampleActs<S>();
}

template struct SampleActs<float>;
template struct SampleActs<double>;
template std::vector<float> grid_init_params<float>(const GridConfig&, const GridLayout&, std::uint64_t);
template std::vector<double> grid_init_params<double>(const GridConfig&, const GridLayout&, std::uint64_t);
template void sample_forward<float>(SampleActs<float>&, const GridView<float>&, const GridInput&, const RunOptions&);
template void sample_forward<double>(SampleActs<double>&, const GridView<double>&, const GridInput&, const RunOptions&);
template void sample_backward<float>(float*, SampleActs<float>&, const GridView<float>&, const GridInput&, const float*,
                                     const float*);
template void sample_backward<double>(double*, SampleActs<double>&, const GridView<double>&, const GridInput&,
                                      const double*, const double*);

}  // namespace manyadd::learn::grid
