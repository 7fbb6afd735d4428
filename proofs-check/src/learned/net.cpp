// learned/net.hpp: the verifier's narrow interface to learn/'s model files.
#include "manyadd/learned/net.hpp"

#include <cmath>

#include <fmt/format.h>

#include "manyadd/core/error.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/decoder/layers.hpp"
#include "manyadd/learn/decoder/model.hpp"
#include "manyadd/learn/tasks/task.hpp"

namespace manyadd::learned {

std::uint64_t evaluate_cell_seed(std::uint64_t seed, int n, int m) { return learn::cell_seed(seed, n, m); }

struct Net::Impl {
  learn::LoadedModel model;
  std::string dir;
};

Net::Net(std::unique_ptr<Impl> p) : p_(std::move(p)) {}
Net::Net(Net&&) noexcept = default;
Net& Net::operator=(Net&&) noexcept = default;
Net::~Net() = default;

Net Net::load(const std::string& dir) {
  auto impl = std::make_unique<Impl>();
  impl->model = learn::load_model_dir(dir);
  impl->dir = dir;
  const learn::Task& t = learn::task_of_model(impl->model.config_json, "", dir);
  if (t.kind() != learn::TaskKind::addition)
    throw InputError(fmt::format("model '{}' was trained on task {}: verify_learned checks addition models only", dir,
                                 t.name()));
  if (impl->model.cfg.vocab != kVocab)
    throw InputError(fmt::format("model '{}' has vocabulary {}, addition's is {}", dir, impl->model.cfg.vocab, kVocab));
  return Net(std::move(impl));
}

const std::string& Net::dir() const { return p_->dir; }
int Net::n_layers() const { return p_->model.cfg.n_layers; }
int Net::vocab() const { return p_->model.cfg.vocab; }
std::string Net::pos_mode() const { return learn::pos_mode_name(p_->model.cfg.pos_mode); }

std::string Net::describe() const {
  const auto& c = p_->model.cfg;
  std::string s = fmt::format("{}L{}H d{} dff{} {}", c.n_layers, c.n_heads, c.d_model, c.d_ff,
                              learn::pos_mode_name(c.pos_mode));
  if (c.pos_mode == learn::PosMode::coupled_rel)
    s += fmt::format(" (window {}{})", c.rel_window,
                     c.rel_far ? (c.rel_far_norm ? ", far / count" : ", far") : c.rel_far_mask ? ", far masked" : "");
  return s;
}

std::int64_t Net::max_offset1(const Shape& shape) const { return learn::max_offset1(p_->model.cfg, shape); }
std::int64_t Net::max_offset2(const Shape& shape) const { return learn::max_offset2(p_->model.cfg, shape); }

Positions Net::positions(const Shape& shape, std::int64_t s1, std::int64_t s2) const {
  const auto& c = p_->model.cfg;
  const std::int64_t o1 = max_offset1(shape), o2 = max_offset2(shape);
  if (o1 < 1 || o2 < 1)
    throw InputError(fmt::format("TA({}, {}) needs position IDs beyond the model's max_pos ({}, {})", shape.n, shape.m,
                                 c.max_pos1, c.max_pos2));
  if (s1 < 1 || s1 > o1 || s2 < 1 || s2 > o2)
    throw InputError(fmt::format("offsets (s1, s2) = ({}, {}) out of range for TA({}, {}) on this model: s1 in [1, {}], "
                                 "s2 in [1, {}]",
                                 s1, s2, shape.n, shape.m, o1, o2));
  Positions p;
  learn::position_ids_for(shape, c.pos_mode, s1, s2, p.level[0], p.level[1]);
  return p;
}

namespace {
learn::BatchView batch(const std::vector<std::uint8_t>& tokens, const Positions& pos) {
  learn::BatchView x;
  x.B = 1, x.T = int(tokens.size());
  x.tokens = tokens.data();
  for (int lv = 0; lv < 3; ++lv)
    if (!pos.level[lv].empty()) x.pos[lv] = pos.level[lv].data();
  return x;
}
}  // namespace

void Net::logits(const std::vector<std::uint8_t>& tokens, const Positions& pos, std::vector<float>& out) const {
  thread_local learn::Acts<float> acts;
  const learn::ModelView<float> view = p_->model.view();
  learn::model_forward(acts, view, batch(tokens, pos), 0);
  out.assign(acts.logits.begin(), acts.logits.begin() + std::int64_t(tokens.size()) * p_->model.cfg.vocab);
}

std::vector<std::uint8_t> Net::greedy(const std::vector<std::uint8_t>& prefix, const Positions& pos,
                                      int max_new) const {
  std::vector<std::int32_t> ids[learn::kMaxPosLevels];
  for (int lv = 0; lv < 3; ++lv) ids[lv] = pos.level[lv];
  learn::KvDecoder dec(p_->model.view());
  return dec.greedy(prefix, ids, max_new);
}

int OneLayer::rel_bucket(std::int32_t query_id, std::int32_t key_id) const {
  return learn::coupled_rel_bucket(query_id, key_id, rel_window, rel_far);
}

bool OneLayer::rel_masked(const std::int32_t* const* ids, std::int64_t i, std::int64_t j) const {
  return rel_far_mask && learn::coupled_rel_masked(ids, rel_levels, i, j, rel_window);
}

double OneLayer::rel_far_shift(const std::int32_t* ids, int n) const {
  return double(learn::coupled_rel_far_shift<float>(learn::coupled_rel_far_count(ids[n - 1], ids, n, rel_window)));
}

OneLayer Net::one_layer() const {
  const auto& c = p_->model.cfg;
  const auto& lay = p_->model.lay;
  const float* P = p_->model.params.data();
  if (c.n_layers != 1)
    throw InputError(fmt::format("the certificate covers one-layer models; '{}' has {} layers (--attack and --samples "
                                 "run on any depth)",
                                 p_->dir, c.n_layers));
  if (c.pos_mode == learn::PosMode::fire || c.pos_mode == learn::PosMode::rope)
    throw InputError(fmt::format("the certificate does not cover pos_mode {} (its scores depend on the token indices "
                                 "through {}); --attack and --samples run on it",
                                 learn::pos_mode_name(c.pos_mode),
                                 c.pos_mode == learn::PosMode::fire ? "FIRE's MLP" : "RoPE's rotation"));
  if (c.final_norm != learn::NormKind::rms)
    throw InputError("the certificate covers models with an RMSNorm final norm; this one has a LayerNorm");
  OneLayer w;
  w.V = c.vocab, w.C = c.d_model, w.H = c.n_heads, w.dh = c.d_head, w.F = c.d_ff;
  w.eps = double(float(c.norm_eps));
  w.score_scale = double(learn::score_scale<float>(c.attn_scale, c.d_head));
  w.pos_mode = learn::pos_mode_name(c.pos_mode);
  w.tables = learn::pos_tables(c.pos_mode);
  auto take = [&](std::int64_t off, std::int64_t n) { return std::vector<double>(P + off, P + off + n); };
  const std::int64_t C = c.d_model, D = std::int64_t(c.n_heads) * c.d_head, F = c.d_ff, V = c.vocab;
  w.wte = take(lay.wte, V * C);
  for (int lv = 0; lv < w.tables; ++lv) {
    w.pos_rows[lv] = c.max_pos(lv) + 1;
    w.pos[lv] = take(lay.wpe[lv], std::int64_t(w.pos_rows[lv]) * C);
  }
  const auto& b = lay.blocks[0];
  w.norm1 = take(b.attn_norm1, C), w.wq = take(b.wq, D * C), w.wk = take(b.wk, D * C), w.wv = take(b.wv, D * C);
  w.wo = take(b.wo, C * D), w.norm2 = take(b.attn_norm2, C), w.norm3 = take(b.ffn_norm1, C);
  w.wi = take(b.wi, 2 * F * C), w.wf = take(b.wo_ff, C * F), w.norm4 = take(b.ffn_norm2, C);
  w.normf = take(lay.final_norm, C);
  w.readout = take(lay.readout(), V * C);
  if (c.tie_readout) {
    // The fp32 forward scales xf by fl(1/sqrt(d_model)) before the tied product: the same constant here.
    const double s = double(1.0f / std::sqrt(float(c.d_model)));
    for (double& x : w.readout) x *= s;
  }
  if (c.pos_mode == learn::PosMode::coupled_rel) {
    w.rel_levels = learn::pos_levels(c.pos_mode);
    w.rel_window = c.rel_window, w.rel_far = c.rel_far, w.rel_far_norm = c.rel_far_norm;
    w.rel_far_mask = c.rel_far_mask;
    w.rel = take(lay.rel_bias, std::int64_t(c.n_heads) * w.rel_levels * c.rel_buckets());
    if (lay.rel_value >= 0)
      w.rel_value = take(lay.rel_value, std::int64_t(c.n_heads) * w.rel_levels * c.rel_buckets() * c.d_head);
  }
  return w;
}

}  // namespace manyadd::learned
