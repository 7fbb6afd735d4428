// The learned decoder-only transformer (paper 000, Appendix B, Table 2): token embedding plus one
// learned position table per position-ID level, summed; L blocks of causal MHA and GEGLU FFN, each
// sublayer wrapped as h = Norm2(x + Sublayer(Norm1(x))) with RMSNorm; a final RMSNorm; a linear readout.
// Parameters live in one flat buffer with a named layout (the names are the safetensors keys).
// One forward/backward (model_forward/model_backward) serves every caller: it runs on a batch of padded
// sequences, a single sequence being a batch of one, and with cached keys/values for decoding.
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

// A model to run: its configuration, the layout of its flat parameter buffer, and the parameters (not
// owned; fp32 for training and evaluation, double for the finite-difference checks). Every forward,
// backward, decoder and evaluator takes one of these.
template <class S>
struct ModelView {
  const ModelConfig& cfg;
  const Layout& lay;
  const S* params;
  const S* at(std::int64_t offset) const { return params + offset; }
};

// The input rows of a forward: B sequences of T rows each, row-major (B, T), sequence b in rows
// [b T, (b + 1) T). A single sequence is a batch of one; a packed batch (batch.hpp) pads its sequences
// to a common T after their real tokens. Points into the caller's buffers.
struct BatchView {
  int B = 0, T = 0;
  const std::uint8_t* tokens = nullptr;              // (B, T)
  const std::int32_t* pos[2] = {nullptr, nullptr};   // (B, T) per position level in use
  const std::int32_t* targets = nullptr;             // (B, T), -1 = no loss; nullptr: no loss pass (decoding)
  std::int64_t rows() const { return std::int64_t(B) * T; }
};
// One sequence as a batch of one; throws InputError for an empty sequence or mismatched lengths.
BatchView batch_of(const Example& ex);

// Activations of a batch: every buffer forward writes and backward reads, R = B T rows. The keys and
// values keep Tk >= T rows per sequence: Tk = T in training; when decoding (B = 1) they are the cache,
// positions 0..Tk-1, of which the last T are the rows of the current call.
template <class S>
struct Acts {
  int B = 0, T = 0, Tk = 0;
  std::vector<S> x0;  // (R, C) embedding
  struct Block {
    std::vector<S> n1, r1;  // (R, C), (R) attn pre-norm out, its rstd
    std::vector<S> q;       // (R, NH*HS)
    std::vector<S> k, v;    // (B, Tk, NH*HS)
    std::vector<S> att;     // (B, NH, T, Tk) post-softmax
    std::vector<S> ao;      // (R, NH*HS) attention values
    std::vector<S> proj;    // (R, C) output projection
    std::vector<S> res1;    // (R, C) x + attn
    std::vector<S> x1, r2;  // (R, C), (R) attn post-norm
    std::vector<S> n3, r3;  // (R, C), (R) ffn pre-norm
    std::vector<S> h;       // (R, 2F) [gate | up]
    std::vector<S> g;       // (R, F) geglu
    std::vector<S> fo;      // (R, C) ffn out
    std::vector<S> res2;    // (R, C) x1 + ffn
    std::vector<S> x2, r4;  // (R, C), (R) ffn post-norm = block output
  };
  std::vector<Block> blocks;
  std::vector<S> xf, rf;        // (R, C), (R) final norm
  std::vector<S> logits, probs; // (R, V)
  std::vector<S> losses;        // (R)
  // Keeps the first min(old, new) key/value rows of a batch of one (the cache grows in place).
  void resize(const ModelConfig& c, int B, int T, int Tk);
};

// Scratch for backward (gradients w.r.t. activations), reused between calls.
template <class S>
struct GradScratch {
  std::vector<S> dlogits, dxf, dx, dres, dn, dh, dg, dao, dq, dk, dv;  // (R, ...) as the activations
  std::vector<S> datt;                                                 // (T, T)
  void resize(const ModelConfig& c, std::int64_t R, int T);
};

// Forward of a batch: the numbered passes 1 (embedding), 2-7 per block (norm, q/k/v, attention, output
// projection and residual, FFN, residual and norm), 8 (final norm, readout, loss), each layer on all
// R rows at once except attention, which runs per sequence. Returns the sum of the losses at counted
// targets (0 when x.targets is null). Validates tokens and position IDs against the model (InputError).
// past > 0 (decoding, B = 1): x holds positions past..past+T-1 of the sequence, and the keys/values of
// positions 0..past-1 are already in a (from the earlier calls on the same Acts); the new rows attend
// to all of them.
template <class S>
S model_forward(Acts<S>& a, const ModelView<S>& m, const BatchView& x, int past = 0);
// Backward of loss_scale * (sum of losses) of the last model_forward on x (past = 0); accumulates into
// grads (same layout as params). Padded rows (target -1) carry zero gradient through every pass.
template <class S>
void model_backward(S* grads, GradScratch<S>& g, const Acts<S>& a, const ModelView<S>& m, const BatchView& x,
                    S loss_scale);

// Greedy decoding with a key/value cache: model_forward on `prefix` (positions sized to the full
// length), then on one new token at a time against the cached keys/values, up to `max_new` tokens,
// stopping after EOS. Returns the generated tokens (the prediction after the last prefix token first).
// Each new token costs O(t d) attention instead of a full forward.
struct KvDecoder {
  ModelView<float> m;
  explicit KvDecoder(const ModelView<float>& mv) : m(mv) {}
  std::vector<std::uint8_t> greedy(const std::vector<std::uint8_t>& prefix, const std::vector<std::int32_t> pos[2],
                                   int max_new) const;
};

}  // namespace manyadd::learn
