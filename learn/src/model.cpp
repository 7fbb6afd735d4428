// The learned transformer: layout, init, forward/backward of one sequence, greedy KV-cache decoding.
#include "manyadd/learn/model.hpp"

#include <algorithm>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/learn/layers.hpp"

namespace manyadd::learn {

PosMode parse_pos_mode(const std::string& s) {
  if (s == "coupled") return PosMode::coupled;
  if (s == "digits") return PosMode::digits;
  if (s == "absolute") return PosMode::absolute;
  if (s == "none") return PosMode::none;
  throw InputError(fmt::format("position mode '{}' unknown (coupled|digits|absolute|none)", s));
}
const char* pos_mode_name(PosMode m) {
  switch (m) {
    case PosMode::coupled: return "coupled";
    case PosMode::digits: return "digits";
    case PosMode::absolute: return "absolute";
    case PosMode::none: return "none";
  }
  return "?";
}
int pos_levels(PosMode m) { return m == PosMode::coupled ? 2 : m == PosMode::none ? 0 : 1; }

void ModelConfig::validate() const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw InputError(msg);
  };
  need(vocab == kVocab, fmt::format("model.vocab must be {} (got {})", kVocab, vocab));
  need(n_layers >= 1 && n_layers <= 64, fmt::format("model.n_layers must be in [1, 64] (got {})", n_layers));
  need(n_heads >= 1 && n_heads <= 64, fmt::format("model.n_heads must be in [1, 64] (got {})", n_heads));
  need(d_model >= 1 && d_model <= 8192, fmt::format("model.d_model must be in [1, 8192] (got {})", d_model));
  need(d_head >= 1 && d_head <= 1024, fmt::format("model.d_head must be in [1, 1024] (got {})", d_head));
  need(d_ff >= 1 && d_ff <= 65536, fmt::format("model.d_ff must be in [1, 65536] (got {})", d_ff));
  need(max_pos1 >= 2 && max_pos1 <= 1'000'000, fmt::format("model.max_pos1 must be in [2, 1e6] (got {})", max_pos1));
  need(max_pos2 >= 2 && max_pos2 <= 1'000'000, fmt::format("model.max_pos2 must be in [2, 1e6] (got {})", max_pos2));
  need(norm_eps > 0 && norm_eps < 1, fmt::format("model.norm_eps must be in (0, 1) (got {})", norm_eps));
  need(init_std > 0 && init_std < 10, fmt::format("model.init_std must be in (0, 10) (got {})", init_std));
}

void to_json(nlohmann::json& j, const ModelConfig& c) {
  j = nlohmann::json{{"vocab", c.vocab},
                     {"vocabulary", "0123456789+=>$"},
                     {"n_layers", c.n_layers},
                     {"n_heads", c.n_heads},
                     {"d_model", c.d_model},
                     {"d_head", c.d_head},
                     {"d_ff", c.d_ff},
                     {"max_pos1", c.max_pos1},
                     {"max_pos2", c.max_pos2},
                     {"pos_mode", pos_mode_name(c.pos_mode)},
                     {"norm_eps", c.norm_eps},
                     {"init_std", c.init_std}};
}

void from_json(const nlohmann::json& j, ModelConfig& c) {
  if (!j.is_object()) throw InputError("model config must be a JSON object");
  auto geti = [&](const char* k, int& v) {
    if (!j.contains(k)) return;
    if (!j[k].is_number_integer()) throw InputError(fmt::format("model.{} must be an integer", k));
    const auto x = j[k].get<std::int64_t>();
    if (x < -1'000'000'000 || x > 1'000'000'000) throw InputError(fmt::format("model.{} out of range", k));
    v = int(x);
  };
  auto getf = [&](const char* k, float& v) {
    if (!j.contains(k)) return;
    if (!j[k].is_number()) throw InputError(fmt::format("model.{} must be a number", k));
    v = j[k].get<float>();
  };
  static const char* known[] = {"vocab", "vocabulary", "n_layers", "n_heads", "d_model", "d_head", "d_ff",
                                "max_pos1", "max_pos2", "pos_mode", "norm_eps", "init_std", "architecture"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return it.key() == k; }) == std::end(known))
      throw InputError(fmt::format("model config: unknown field '{}'", it.key()));
  geti("vocab", c.vocab);
  geti("n_layers", c.n_layers);
  geti("n_heads", c.n_heads);
  geti("d_model", c.d_model);
  geti("d_head", c.d_head);
  geti("d_ff", c.d_ff);
  geti("max_pos1", c.max_pos1);
  geti("max_pos2", c.max_pos2);
  if (j.contains("pos_mode")) {
    if (!j["pos_mode"].is_string()) throw InputError("model.pos_mode must be a string");
    c.pos_mode = parse_pos_mode(j["pos_mode"].get<std::string>());
  }
  getf("norm_eps", c.norm_eps);
  getf("init_std", c.init_std);
  c.validate();
}

Layout Layout::make(const ModelConfig& c) {
  c.validate();
  Layout L;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape) {
    TensorSpec t;
    t.name = name;
    t.shape = std::move(shape);
    t.size = 1;
    for (auto d : t.shape) t.size *= d;
    t.offset = L.total;
    L.total += t.size;
    L.tensors.push_back(t);
    return t.offset;
  };
  const std::int64_t C = c.d_model, D = std::int64_t(c.n_heads) * c.d_head, F = c.d_ff;
  L.wte = add("tok_emb.weight", {c.vocab, C});
  for (int lv = 0; lv < pos_levels(c.pos_mode); ++lv)
    L.wpe[lv] = add(fmt::format("pos_emb.{}.weight", lv), {c.max_pos(lv) + 1, C});
  for (int b = 0; b < c.n_layers; ++b) {
    Block k;
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
  L.lm_head = add("lm_head.weight", {c.vocab, C});
  return L;
}

const TensorSpec& Layout::find(const std::string& name) const {
  for (auto& t : tensors)
    if (t.name == name) return t;
  throw InputError(fmt::format("no tensor named '{}'", name));
}

template <class S>
std::vector<S> init_params(const ModelConfig& c, const Layout& lay, std::uint64_t seed) {
  std::vector<S> p(std::size_t(lay.total), S(0));
  Rng rng(seed);
  // Box-Muller on our own uniform draws so a seed gives the same weights with every standard library.
  auto normal = [&]() {
    const double u1 = (double(rng.uniform(1, (1ull << 53))) ) / double(1ull << 53);
    const double u2 = double(rng.uniform(0, (1ull << 53) - 1)) / double(1ull << 53);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  };
  for (auto& t : lay.tensors) {
    const bool is_norm = t.shape.size() == 1;
    for (std::int64_t i = 0; i < t.size; ++i)
      p[std::size_t(t.offset + i)] = is_norm ? S(1) : S(double(c.init_std) * normal());
  }
  return p;
}

template <class S>
void Acts<S>::resize(const ModelConfig& c, int T_) {
  T = T_;
  const std::size_t C = std::size_t(c.d_model), D = std::size_t(c.n_heads) * c.d_head, F = std::size_t(c.d_ff);
  const std::size_t t = std::size_t(T_);
  x0.resize(t * C);
  blocks.resize(std::size_t(c.n_layers));
  for (auto& b : blocks) {
    b.a_in.resize(t * C);
    b.n1.resize(t * C), b.r1.resize(t);
    b.q.resize(t * D), b.k.resize(t * D), b.v.resize(t * D);
    b.att.resize(std::size_t(c.n_heads) * t * t);
    b.ao.resize(t * D);
    b.proj.resize(t * C), b.res1.resize(t * C);
    b.x1.resize(t * C), b.r2.resize(t);
    b.n3.resize(t * C), b.r3.resize(t);
    b.h.resize(t * 2 * F), b.g.resize(t * F);
    b.fo.resize(t * C), b.res2.resize(t * C);
    b.x2.resize(t * C), b.r4.resize(t);
  }
  xf.resize(t * C), rf.resize(t);
  logits.resize(t * std::size_t(c.vocab)), probs.resize(t * std::size_t(c.vocab));
  losses.resize(t);
}

template <class S>
void GradScratch<S>::resize(const ModelConfig& c, int T) {
  const std::size_t C = std::size_t(c.d_model), D = std::size_t(c.n_heads) * c.d_head, F = std::size_t(c.d_ff);
  const std::size_t t = std::size_t(T);
  dlogits.resize(t * std::size_t(c.vocab));
  dxf.resize(t * C), dx.resize(t * C), dres.resize(t * C), dn.resize(t * C);
  dh.resize(t * 2 * F), dg.resize(t * F);
  dao.resize(t * D), dq.resize(t * D), dk.resize(t * D), dv.resize(t * D);
  datt.resize(t * t);
}

namespace {
void check_example(const ModelConfig& c, const Example& ex) {
  const int T = ex.T();
  if (T < 1) throw InputError("empty sequence");
  if (int(ex.targets.size()) != T) throw InputError("targets and tokens differ in length");
  for (int lv = 0; lv < pos_levels(c.pos_mode); ++lv) {
    if (int(ex.pos[lv].size()) < T) throw InputError(fmt::format("position IDs of level {} are missing", lv + 1));
    for (int t = 0; t < T; ++t)
      if (ex.pos[lv][std::size_t(t)] < 0 || ex.pos[lv][std::size_t(t)] > c.max_pos(lv))
        throw InputError(fmt::format("position ID {} of level {} outside [0, {}]: the model's max_pos{} is too small "
                                     "for this shape",
                                     ex.pos[lv][std::size_t(t)], lv + 1, c.max_pos(lv), lv + 1));
  }
  for (auto tok : ex.tokens)
    if (tok >= c.vocab) throw InputError("token outside the vocabulary");
}
template <class S>
void zero(std::vector<S>& v) {
  std::fill(v.begin(), v.end(), S(0));
}
}  // namespace

template <class S>
S model_forward(Acts<S>& a, const ModelConfig& c, const Layout& lay, const S* P, const Example& ex) {
  check_example(c, ex);
  const int T = ex.T(), C = c.d_model, NH = c.n_heads, HS = c.d_head, D = NH * HS, F = c.d_ff, V = c.vocab;
  const S eps = S(c.norm_eps);
  a.resize(c, T);
  const int L = pos_levels(c.pos_mode);
  const std::int32_t* pos[2] = {ex.pos[0].data(), ex.pos[1].data()};
  const S* wpe[2] = {P + lay.wpe[0], P + lay.wpe[1]};
  // 1. x0 = tok_emb[tok] + sum_lv pos_emb_lv[pos_lv]
  embedding_forward(a.x0.data(), ex.tokens.data(), pos, L, P + lay.wte, wpe, T, C);
  const S* x = a.x0.data();
  for (int l = 0; l < c.n_layers; ++l) {
    auto& b = a.blocks[std::size_t(l)];
    const auto& w = lay.blocks[std::size_t(l)];
    std::copy(x, x + std::int64_t(T) * C, b.a_in.begin());
    // 2. n1 = Norm1(x)
    rmsnorm_forward(b.n1.data(), b.r1.data(), x, P + w.attn_norm1, T, C, eps);
    // 3. q, k, v = n1 Wq^T, n1 Wk^T, n1 Wv^T
    matmul_forward(b.q.data(), b.n1.data(), P + w.wq, T, C, D);
    matmul_forward(b.k.data(), b.n1.data(), P + w.wk, T, C, D);
    matmul_forward(b.v.data(), b.n1.data(), P + w.wv, T, C, D);
    // 4. ao = causal softmax(q k^T / sqrt(HS)) v per head
    attention_forward(b.ao.data(), b.att.data(), b.q.data(), b.k.data(), b.v.data(), T, NH, HS);
    // 5. proj = ao Wo^T ; res1 = x + proj ; x1 = Norm2(res1)
    matmul_forward(b.proj.data(), b.ao.data(), P + w.wo, T, D, C);
    residual_forward(b.res1.data(), x, b.proj.data(), std::int64_t(T) * C);
    rmsnorm_forward(b.x1.data(), b.r2.data(), b.res1.data(), P + w.attn_norm2, T, C, eps);
    // 6. n3 = Norm1'(x1) ; h = n3 Wi^T ; g = geglu(h) ; fo = g Wo'^T
    rmsnorm_forward(b.n3.data(), b.r3.data(), b.x1.data(), P + w.ffn_norm1, T, C, eps);
    matmul_forward(b.h.data(), b.n3.data(), P + w.wi, T, C, 2 * F);
    geglu_forward(b.g.data(), b.h.data(), T, F);
    matmul_forward(b.fo.data(), b.g.data(), P + w.wo_ff, T, F, C);
    // 7. res2 = x1 + fo ; x2 = Norm2'(res2)
    residual_forward(b.res2.data(), b.x1.data(), b.fo.data(), std::int64_t(T) * C);
    rmsnorm_forward(b.x2.data(), b.r4.data(), b.res2.data(), P + w.ffn_norm2, T, C, eps);
    x = b.x2.data();
  }
  // 8. xf = final_norm(x) ; logits = xf W^T ; losses
  rmsnorm_forward(a.xf.data(), a.rf.data(), x, P + lay.final_norm, T, C, eps);
  matmul_forward(a.logits.data(), a.xf.data(), P + lay.lm_head, T, C, V);
  return crossentropy_forward(a.losses.data(), a.probs.data(), a.logits.data(), ex.targets.data(), T, V);
}

template <class S>
void model_backward(S* G, GradScratch<S>& g, const Acts<S>& a, const ModelConfig& c, const Layout& lay,
                    const S* P, const Example& ex, S loss_scale) {
  const int T = ex.T(), C = c.d_model, NH = c.n_heads, HS = c.d_head, D = NH * HS, F = c.d_ff, V = c.vocab;
  g.resize(c, T);
  const int L = pos_levels(c.pos_mode);
  // 8. losses ; logits = xf W^T ; xf = final_norm(x)
  crossentropy_backward(g.dlogits.data(), a.probs.data(), ex.targets.data(), loss_scale, T, V);
  zero(g.dxf);
  matmul_backward(g.dxf.data(), G + lay.lm_head, g.dlogits.data(), a.xf.data(), P + lay.lm_head, T, C, V);
  zero(g.dx);  // gradient w.r.t. the current block output
  const S* xlast = c.n_layers ? a.blocks.back().x2.data() : a.x0.data();
  rmsnorm_backward(g.dx.data(), G + lay.final_norm, g.dxf.data(), xlast, P + lay.final_norm, a.rf.data(), T, C);
  for (int l = c.n_layers - 1; l >= 0; --l) {
    const auto& b = a.blocks[std::size_t(l)];
    const auto& w = lay.blocks[std::size_t(l)];
    // 7. x2 = Norm2'(res2) ; res2 = x1 + fo   (dres = d res2, flows to x1 and fo)
    zero(g.dres);
    rmsnorm_backward(g.dres.data(), G + w.ffn_norm2, g.dx.data(), b.res2.data(), P + w.ffn_norm2, b.r4.data(), T, C);
    // 6. fo = g Wo'^T ; g = geglu(h) ; h = n3 Wi^T ; n3 = Norm1'(x1)
    zero(g.dg);
    matmul_backward(g.dg.data(), G + w.wo_ff, g.dres.data(), b.g.data(), P + w.wo_ff, T, F, C);
    zero(g.dh);
    geglu_backward(g.dh.data(), g.dg.data(), b.h.data(), T, F);
    zero(g.dn);
    matmul_backward(g.dn.data(), G + w.wi, g.dh.data(), b.n3.data(), P + w.wi, T, C, 2 * F);
    // d x1 = dres (residual) + Norm1' backward; reuse dx as d x1
    std::copy(g.dres.begin(), g.dres.end(), g.dx.begin());
    rmsnorm_backward(g.dx.data(), G + w.ffn_norm1, g.dn.data(), b.x1.data(), P + w.ffn_norm1, b.r3.data(), T, C);
    // 5. x1 = Norm2(res1) ; res1 = x + proj ; proj = ao Wo^T
    zero(g.dres);
    rmsnorm_backward(g.dres.data(), G + w.attn_norm2, g.dx.data(), b.res1.data(), P + w.attn_norm2, b.r2.data(), T, C);
    zero(g.dao);
    matmul_backward(g.dao.data(), G + w.wo, g.dres.data(), b.ao.data(), P + w.wo, T, D, C);
    // 4. attention
    zero(g.dq), zero(g.dk), zero(g.dv);
    attention_backward(g.dq.data(), g.dk.data(), g.dv.data(), g.datt.data(), g.dao.data(), b.att.data(), b.q.data(),
                       b.k.data(), b.v.data(), T, NH, HS);
    // 3. q, k, v from n1
    zero(g.dn);
    matmul_backward(g.dn.data(), G + w.wq, g.dq.data(), b.n1.data(), P + w.wq, T, C, D);
    matmul_backward(g.dn.data(), G + w.wk, g.dk.data(), b.n1.data(), P + w.wk, T, C, D);
    matmul_backward(g.dn.data(), G + w.wv, g.dv.data(), b.n1.data(), P + w.wv, T, C, D);
    // 2. n1 = Norm1(x); d x = dres (residual) + Norm1 backward
    std::copy(g.dres.begin(), g.dres.end(), g.dx.begin());
    rmsnorm_backward(g.dx.data(), G + w.attn_norm1, g.dn.data(), b.a_in.data(), P + w.attn_norm1, b.r1.data(), T, C);
  }
  // 1. embedding
  const std::int32_t* pos[2] = {ex.pos[0].data(), ex.pos[1].data()};
  S* dwpe[2] = {G + lay.wpe[0], G + lay.wpe[1]};
  embedding_backward(G + lay.wte, dwpe, g.dx.data(), ex.tokens.data(), pos, L, T, C);
}

std::vector<std::uint8_t> KvDecoder::greedy(const std::vector<std::uint8_t>& prefix,
                                            const std::vector<std::int32_t> pos[2], int max_new) const {
  const int C = c.d_model, NH = c.n_heads, HS = c.d_head, D = NH * HS, F = c.d_ff, V = c.vocab;
  const int Lv = pos_levels(c.pos_mode);
  const int total = int(prefix.size()) + max_new;
  if (prefix.empty()) throw InputError("greedy decoding needs a non-empty prefix");
  for (int lv = 0; lv < Lv; ++lv)
    if (int(pos[lv].size()) < total - 1) throw InputError("greedy decoding: position IDs shorter than the output");
  const float eps = c.norm_eps;
  const float* P = params;
  // Cache per layer: keys and values (total, D).
  std::vector<std::vector<float>> K(std::size_t(c.n_layers)), Vc(std::size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    K[std::size_t(l)].assign(std::size_t(total) * D, 0.f);
    Vc[std::size_t(l)].assign(std::size_t(total) * D, 0.f);
  }
  std::vector<float> x(C), n(C), q(D), ao(D), tmp(C), res(C), x1(C), h(2 * F), gg(F), logits(V), sc(total);
  float r;
  std::vector<std::uint8_t> out;
  std::uint8_t tok = prefix[0];
  for (int t = 0; t + 1 < total; ++t) {
    if (t < int(prefix.size())) tok = prefix[std::size_t(t)];
    for (int lv = 0; lv < Lv; ++lv) {
      const auto p = pos[lv][std::size_t(t)];
      if (p < 0 || p > c.max_pos(lv))
        throw InputError(fmt::format("position ID {} of level {} outside [0, {}]", p, lv + 1, c.max_pos(lv)));
    }
    // Same numbered passes as model_forward, for one new token against the cache.
    const std::int32_t* pp[2] = {pos[0].data() + (Lv > 0 ? t : 0), pos[1].data() + (Lv > 1 ? t : 0)};
    const float* wpe[2] = {P + lay.wpe[0], P + lay.wpe[1]};
    embedding_forward(x.data(), &tok, pp, Lv, P + lay.wte, wpe, 1, C);
    for (int l = 0; l < c.n_layers; ++l) {
      const auto& w = lay.blocks[std::size_t(l)];
      float* Kl = K[std::size_t(l)].data();
      float* Vl = Vc[std::size_t(l)].data();
      rmsnorm_forward(n.data(), &r, x.data(), P + w.attn_norm1, 1, C, eps);
      matmul_forward(q.data(), n.data(), P + w.wq, 1, C, D);
      matmul_forward(Kl + std::int64_t(t) * D, n.data(), P + w.wk, 1, C, D);
      matmul_forward(Vl + std::int64_t(t) * D, n.data(), P + w.wv, 1, C, D);
      const float scale = 1.f / std::sqrt(float(HS));
      for (int hh = 0; hh < NH; ++hh) {
        // scores against keys 0..t, the same products as the dense forward's row t
        CMapR<float> Kh(Kl, t + 1, D);
        Eigen::Map<Eigen::RowVectorXf> s(sc.data(), t + 1);
        s.noalias() = Eigen::Map<const Eigen::RowVectorXf>(q.data() + hh * HS, HS) *
                      Kh.middleCols(hh * HS, HS).transpose();
        float mx = -std::numeric_limits<float>::infinity();
        for (int j = 0; j <= t; ++j) mx = std::max(mx, sc[std::size_t(j)] * scale);
        float sum = 0;
        for (int j = 0; j <= t; ++j) sum += (sc[std::size_t(j)] = std::exp(sc[std::size_t(j)] * scale - mx));
        const float inv = 1.f / sum;
        for (int j = 0; j <= t; ++j) sc[std::size_t(j)] *= inv;
        CMapR<float> Vh(Vl, t + 1, D);
        Eigen::Map<Eigen::RowVectorXf>(ao.data() + hh * HS, HS).noalias() = s * Vh.middleCols(hh * HS, HS);
      }
      matmul_forward(tmp.data(), ao.data(), P + w.wo, 1, D, C);
      residual_forward(res.data(), x.data(), tmp.data(), C);
      rmsnorm_forward(x1.data(), &r, res.data(), P + w.attn_norm2, 1, C, eps);
      rmsnorm_forward(n.data(), &r, x1.data(), P + w.ffn_norm1, 1, C, eps);
      matmul_forward(h.data(), n.data(), P + w.wi, 1, C, 2 * F);
      geglu_forward(gg.data(), h.data(), 1, F);
      matmul_forward(tmp.data(), gg.data(), P + w.wo_ff, 1, F, C);
      residual_forward(res.data(), x1.data(), tmp.data(), C);
      rmsnorm_forward(x.data(), &r, res.data(), P + w.ffn_norm2, 1, C, eps);
    }
    if (t + 1 < int(prefix.size())) continue;  // still reading the prompt
    rmsnorm_forward(n.data(), &r, x.data(), P + lay.final_norm, 1, C, eps);
    matmul_forward(logits.data(), n.data(), P + lay.lm_head, 1, C, V);
    const int best = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
    tok = std::uint8_t(best);
    out.push_back(tok);
    if (tok == kDollar) break;
  }
  return out;
}

template std::vector<float> init_params<float>(const ModelConfig&, const Layout&, std::uint64_t);
template std::vector<double> init_params<double>(const ModelConfig&, const Layout&, std::uint64_t);
template struct Acts<float>;
template struct Acts<double>;
template struct GradScratch<float>;
template struct GradScratch<double>;
template float model_forward<float>(Acts<float>&, const ModelConfig&, const Layout&, const float*, const Example&);
template double model_forward<double>(Acts<double>&, const ModelConfig&, const Layout&, const double*, const Example&);
template void model_backward<float>(float*, GradScratch<float>&, const Acts<float>&, const ModelConfig&, const Layout&,
                                    const float*, const Example&, float);
template void model_backward<double>(double*, GradScratch<double>&, const Acts<double>&, const ModelConfig&,
                                     const Layout&, const double*, const Example&, double);

}  // namespace manyadd::learn
