// The learned decoder-only transformer (paper 000, Appendix B, Table 2): token embedding plus one
// learned position table per position-ID level, summed; L blocks of causal MHA and GEGLU FFN, each
// sublayer wrapped as h = Norm2(x + Sublayer(Norm1(x))) with RMSNorm; a final RMSNorm; a linear readout.
// Parameters live in one flat buffer with a named layout (the names are the safetensors keys).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "manyadd/format.hpp"

namespace manyadd::learn {

// How tokens get position IDs (see data.hpp for the exact rules).
//   coupled  bi-level Position Coupling of the paper (two tables: significance, operand index)
//   digits   single-level coupling of significance only (one table; Abacus-like)
//   absolute one ID per index, BOS 0 and index k -> s + k - 1 (one table)
//   none     NoPE: no position table
enum class PosMode { coupled, digits, absolute, none };
PosMode parse_pos_mode(const std::string& s);  // throws InputError
const char* pos_mode_name(PosMode m);
int pos_levels(PosMode m);

struct ModelConfig {
  int vocab = kVocab;
  int n_layers = 1;
  int n_heads = 4;
  int d_model = 64;
  int d_head = 16;
  int d_ff = 256;
  int max_pos1 = 20;  // largest position ID of level 1 (table has max_pos1 + 1 rows)
  int max_pos2 = 20;  // level 2 (coupled only)
  PosMode pos_mode = PosMode::coupled;
  float norm_eps = 1e-6f;
  float init_std = 0.02f;

  void validate() const;  // throws InputError
  int max_pos(int level) const { return level == 0 ? max_pos1 : max_pos2; }
};
void to_json(nlohmann::json& j, const ModelConfig& c);
void from_json(const nlohmann::json& j, ModelConfig& c);  // throws InputError on bad fields

// One named tensor inside the flat parameter buffer.
struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0, size = 0;
};

// Offsets of every weight; built from a config, shared by parameters, gradients and Adam moments.
struct Layout {
  std::vector<TensorSpec> tensors;
  std::int64_t total = 0;
  struct Block {
    std::int64_t attn_norm1, wq, wk, wv, wo, attn_norm2, ffn_norm1, wi, wo_ff, ffn_norm2;
  };
  std::int64_t wte = 0, wpe[2] = {0, 0}, final_norm = 0, lm_head = 0;
  std::vector<Block> blocks;
  static Layout make(const ModelConfig& c);
  const TensorSpec& find(const std::string& name) const;  // throws InputError
};

// Deterministic initialization: N(0, init_std) for matrices and embeddings, 1 for norm weights.
template <class S>
std::vector<S> init_params(const ModelConfig& c, const Layout& lay, std::uint64_t seed);

// One input sequence with its targets: tokens (T), position IDs per level (T each), targets (T) with
// -1 where no loss is taken.
struct Example {
  std::vector<std::uint8_t> tokens;
  std::vector<std::int32_t> pos[2];
  std::vector<std::int32_t> targets;
  int T() const { return int(tokens.size()); }
};

// Activations of one sequence (every buffer forward writes and backward reads). Shapes per buffer.
template <class S>
struct Acts {
  int T = 0;
  std::vector<S> x0;  // (T, C) embedding
  struct Block {
    std::vector<S> a_in;    // (T, C) input of the block
    std::vector<S> n1, r1;  // (T, C), (T) attn pre-norm out, its rstd
    std::vector<S> q, k, v; // (T, NH*HS)
    std::vector<S> att;     // (NH, T, T) post-softmax
    std::vector<S> ao;      // (T, NH*HS) attention values
    std::vector<S> proj;    // (T, C) output projection
    std::vector<S> res1;    // (T, C) x + attn
    std::vector<S> x1, r2;  // (T, C), (T) attn post-norm
    std::vector<S> n3, r3;  // (T, C), (T) ffn pre-norm
    std::vector<S> h;       // (T, 2F) [gate | up]
    std::vector<S> g;       // (T, F) geglu
    std::vector<S> fo;      // (T, C) ffn out
    std::vector<S> res2;    // (T, C) x1 + ffn
    std::vector<S> x2, r4;  // (T, C), (T) ffn post-norm = block output
  };
  std::vector<Block> blocks;
  std::vector<S> xf, rf;        // (T, C), (T) final norm
  std::vector<S> logits, probs; // (T, V)
  std::vector<S> losses;        // (T)
  void resize(const ModelConfig& c, int T);
};

// Scratch for backward (gradients w.r.t. activations), reused between sequences.
template <class S>
struct GradScratch {
  std::vector<S> dlogits, dxf, dx, dres, dn, dh, dg, dao, dq, dk, dv, datt;
  void resize(const ModelConfig& c, int T);
};

// Forward pass of one sequence; returns the sum of the losses at counted targets.
template <class S>
S model_forward(Acts<S>& a, const ModelConfig& c, const Layout& lay, const S* params, const Example& ex);
// Backward of loss_scale * (sum of losses); accumulates into grads (same layout as params).
template <class S>
void model_backward(S* grads, GradScratch<S>& g, const Acts<S>& a, const ModelConfig& c, const Layout& lay,
                    const S* params, const Example& ex, S loss_scale);

// Greedy decoding with a key/value cache: feeds `prefix` (tokens and positions for every index the
// caller will use, i.e. positions sized to the full length) and then generates up to `max_new` tokens,
// stopping after EOS. Returns the generated tokens (the prediction after the last prefix token first).
// Each new token costs O(t d) attention against the cached keys/values instead of a full forward;
// the numbered passes mirror model_forward (tests check they pick the same tokens).
struct KvDecoder {
  const ModelConfig& c;
  const Layout& lay;
  const float* params;
  KvDecoder(const ModelConfig& cc, const Layout& ll, const float* p) : c(cc), lay(ll), params(p) {}
  std::vector<std::uint8_t> greedy(const std::vector<std::uint8_t>& prefix, const std::vector<std::int32_t> pos[2],
                                   int max_new) const;
};

}  // namespace manyadd::learn
