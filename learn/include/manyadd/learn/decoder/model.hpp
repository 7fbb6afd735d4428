// The learned decoder-only transformer (paper 000, Appendix B, Table 2): token embedding plus one
// learned position table per position-ID level, summed; L blocks of causal MHA and GEGLU FFN, each
// sublayer wrapped as h = Norm2(x + Sublayer(Norm1(x))) with RMSNorm; a final norm; a linear readout.
// Options (ModelConfig; the defaults are this project's first model, the alternatives the authors'
// T5-style model): attention scores scaled by 1/sqrt(d_head) or unscaled; N(0, init_std) or T5
// initialization; a separate lm_head or the readout tied to the token table (hidden state scaled by
// d_model^-1/2); a final RMSNorm or LayerNorm (weight and bias).
// Parameters live in one flat buffer with a named layout (the names are the safetensors keys).
// One forward/backward (model_forward/model_backward) serves every caller: it runs on a batch of padded
// sequences, a single sequence being a batch of one, and with cached keys/values for decoding; in fp32
// or with the bf16 rounding points of mixed-precision training (Precision, ModelView::precision).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "manyadd/format.hpp"
#include "manyadd/learn/decoder/fire_pairs.hpp"

namespace manyadd::learn {

// How tokens get position IDs (see data.hpp and task.hpp for the exact rules). The coupled modes
// read the task's Position Coupling (task.hpp: each task couples on 1, 2 or 3 levels).
//   coupled  bi-level Position Coupling of the paper (two tables; addition: significance, operand index)
//   coupled3 tri-level Position Coupling (three tables; multiplication, Sec. 5)
//   digits   level 1 of the task's coupling only (one table): significance for the arithmetic tasks
//            (Abacus-like), the bit index for parity; the whole coupling of single-level tasks
//   absolute one ID per index, BOS 0 and index k -> s + k - 1 (one table)
//   none     NoPE: no position table
//   abacus   Abacus Embeddings (McLeish et al. 2024, Sec. 3.1): one table; every maximal run of digit
//            tokens numbered beta, beta + 1, ... from its first token, every other token 0, whatever
//            the task; beta uniform in [1, abacus_k] once per training batch, 1 at test (data.hpp)
//   fire     FIRE (Li et al. 2024): no table; a learned relative-position bias on every layer's scores,
//            a small MLP of the normalized log distance of the token indices (layers.hpp)
//   rope     RoPE (Su et al. 2021): no table; q and k rotated by their token index (layers.hpp)
//   coupled_rel  the bi-level coupling's IDs as a relative bias, no table: every layer's score of query
//            i and key j gets sum over levels lv of g[layer, head, lv, d] where d = id_lv(j) - id_lv(i)
//            and |d| <= rel_window (learned gains, drawn as the init scheme's other weights); with rel_far one
//            more gain per head and level for every |d| > rel_window; nothing otherwise (nor where either ID is 0):
//            "is the key's ID mine, my successor's, my predecessor's" for every ID, trained or not
//            (layers.hpp, coupled_rel_*; learn/README.md "coupled_rel")
enum class PosMode { coupled, digits, absolute, none, coupled3, abacus, fire, rope, coupled_rel };
// Every mode, for the code and tests that must cover each (a new mode joins this list).
inline constexpr PosMode kPosModes[] = {PosMode::coupled,  PosMode::digits, PosMode::absolute,
                                        PosMode::none,     PosMode::coupled3, PosMode::abacus,
                                        PosMode::fire,     PosMode::rope,   PosMode::coupled_rel};
inline constexpr int kMaxPosLevels = 3;  // position tables a model may have
PosMode parse_pos_mode(const std::string& s);  // throws InputError
const char* pos_mode_name(PosMode m);
int pos_levels(PosMode m);  // position-ID levels a mode reads (coupled_rel: 2, as coupled)
int pos_tables(PosMode m);  // position tables it has: pos_levels, except coupled_rel (0)

// Attention score scale: q.k / sqrt(d_head) (this project's default) or q.k unscaled (T5 / Mesh
// TensorFlow, the authors' model: the initialization of q carries the 1/sqrt(d_head) instead), or
// positional: q.k times 0, the scores are pos_mode coupled_rel's bias alone (positional attention: which
// keys a head reads depends on the positions only, what it reads on the values; q and k are unused and take
// no gradient).
enum class AttnScale { inv_sqrt_dhead, none, positional };
// Initialization: normal = N(0, init_std) for every matrix and table; t5 = the authors' (HuggingFace T5
// with initializer_factor 1): q ~ N(0, (d_model d_head)^-1/2), k, v ~ N(0, d_model^-1/2),
// o ~ N(0, (n_heads d_head)^-1/2), wi ~ N(0, d_model^-1/2), ffn wo ~ N(0, d_ff^-1/2), token and
// position tables (and an untied lm_head) N(0, 1). Both: norm weights 1, LayerNorm bias 0.
enum class InitScheme { normal, t5 };
// Final norm: RMSNorm (weight) or LayerNorm (weight and bias), both with norm_eps.
enum class NormKind { rms, layer };
// pos_mode fire: FIRE's normalizer psi(n_i) for query position i: n_i = max(i, L), the FIRE paper's
// progressive interpolation (Li et al. 2024, Sec. 3.3), or min(i, L), what the paper-000 authors' code
// computes (layers.hpp, FIRE).
enum class FireThreshold { max, min };
AttnScale parse_attn_scale(const std::string& s);  // throw InputError
InitScheme parse_init(const std::string& s);
NormKind parse_norm_kind(const std::string& s);
FireThreshold parse_fire_threshold(const std::string& s);
const char* attn_scale_name(AttnScale a);
// The factor of q.k in the scores: 1/sqrt(d_head), 1, or 0 (positional). Every forward reads it here.
template <class S>
S score_scale(AttnScale a, int d_head) {
  return a == AttnScale::positional ? S(0) : a == AttnScale::none ? S(1) : S(1) / std::sqrt(S(d_head));
}
const char* init_name(InitScheme i);
const char* norm_kind_name(NormKind n);
const char* fire_threshold_name(FireThreshold f);
// Position codes: what a position table holds and whether training moves it (model.pos_codes, one
// kind for every level or one per level; learn/README.md, "Position codes"). The forward is the same
// for every kind: x0 = tok_emb[token] + sum_lv pos_emb.lv[id]; only the tables' values and their
// update differ, so a model file needs no code logic to be read (the tables are in model.safetensors).
//   learned    the tables are parameters (today's model; init as the init scheme says)
//   frozen     N(0, pos_code_scale^2) drawn from the seed (the same draws a learned table takes), never
//              updated: no gradient, no AdamW step, no weight decay
//   hypercube  Theorem 4.1's code (construct/model.hpp, hypercube()): row p of level lv is
//              pos_code_scale [v_p ; v_{p+1}] (the ID's +-1 vertex and its successor's, P = the
//              smallest with 2^P >= max_pos + 1 bits each), row 0 zero, in 2P residual dimensions of
//              its own (PosCodeBlock: the coded levels' blocks side by side from dimension 0, level
//              order); every other dimension 0; frozen
//   shuffled   the same with the 2^P vertices assigned to IDs by a random permutation drawn from the
//              seed and the level (ID p -> vertex sigma(p), its successor's sigma(p + 1)): no binary
//              counting structure a learned bilinear form could single out; frozen
// pos_code_distance d (hypercube, shuffled): the vertices are the words of the binary lexicode of
// minimum Hamming distance d (d = 1: every vertex, Theorem 4.1's code), P the smallest length whose
// lexicode holds max_pos + 1 words (d = 4: 11 bits for max_pos 40, 12 for 110): two distinct IDs then
// differ in at least d coordinates, so no single coordinate's weight decides between them.
enum class PosCode { learned, frozen, hypercube, shuffled };
PosCode parse_pos_code(const std::string& s);  // throws InputError
const char* pos_code_name(PosCode k);
bool pos_code_frozen(PosCode k);  // every kind but learned
bool pos_code_is_vertex(PosCode k);  // hypercube and shuffled: the vertices of a hypercube

// RoPE's base (Su et al.; the authors' rotary_base): theta_k = base^(-2k/d_head).
inline constexpr double kRopeBase = 10000.0;

// Arithmetic of a forward/backward. fp32: every value in float (the reference; bitwise tests). bf16:
// mixed precision as PyTorch autocast trains the authors' model, emulated on floats with round to
// nearest even (core's float_to_bf16): the inputs of every matrix product (weights, norm outputs,
// q/k/v, the attention weights before they multiply v, attention output, GEGLU input and output, and in
// the backward the output gradients a product reads, the attention's dS included) are rounded to bf16;
// products accumulate in fp32; the residual stream, norm statistics, attention scores and softmax,
// logits, loss and every parameter gradient stay fp32. The rounding points are listed at
// model_forward/model_backward (model.cpp) and, for attention, at layers.hpp's attention_forward.
enum class Precision { fp32, bf16 };
Precision parse_precision(const std::string& s);  // throws InputError
const char* precision_name(Precision p);
// x rounded to the nearest bf16 value (ties to even), as a float: bf16_to_float(float_to_bf16(x)).
float round_bf16(float x);

struct ModelConfig {
  int vocab = kVocab;  // 14 (0-9 + = > $) or 15 (and '*', multiplication): the task's (task.hpp)
  int n_layers = 1;
  int n_heads = 4;
  int d_model = 64;
  int d_head = 16;
  int d_ff = 256;
  int max_pos1 = 20;  // largest position ID of level 1 (table has max_pos1 + 1 rows)
  int max_pos2 = 20;  // level 2 (coupled, coupled3)
  int max_pos3 = 20;  // level 3 (coupled3 only); absent from older config.json files: this default
  PosMode pos_mode = PosMode::coupled;
  // pos_mode abacus only: the paper's k, the largest training offset beta (their default 100; they
  // draw beta in U[1, k]). In config.json only for abacus models.
  int abacus_k = 100;
  // pos_mode fire only (in config.json only for fire models): the MLP's hidden width (the authors'
  // d_fire, default 32) and the threshold's direction (FireThreshold).
  int fire_width = 32;
  FireThreshold fire_threshold = FireThreshold::max;
  // Input injection (McLeish et al. 2024, Sec. 2 and their code's input_injection_type "add"): every
  // block after the first reads its predecessor's output plus the embedding x0 (the first reads x0).
  // In config.json only when true.
  bool input_injection = false;
  float norm_eps = 1e-6f;
  float init_std = 0.02f;  // init normal only
  AttnScale attn_scale = AttnScale::inv_sqrt_dhead;
  InitScheme init = InitScheme::normal;
  bool tie_readout = false;  // logits = tok_emb (final_norm(x) d_model^-1/2); no lm_head tensor
  NormKind final_norm = NormKind::rms;
  // Position codes per level (PosCode; levels beyond pos_levels(pos_mode) stay learned) and their
  // scale (frozen: the std; hypercube, shuffled: the coordinates' magnitude). In config.json only when
  // some level is not learned: "pos_codes" one kind for all levels or "k1,k2[,k3]" per level.
  PosCode pos_codes[kMaxPosLevels] = {PosCode::learned, PosCode::learned, PosCode::learned};
  float pos_code_scale = 1.0f;
  int pos_code_distance = 1;  // minimum Hamming distance of a vertex code (in config.json when not 1)
  // pos_mode coupled_rel only (in config.json for it alone): the largest |ID difference| with a gain of
  // its own; every other pair of IDs gets no bias.
  int rel_window = 2;
  // pos_mode coupled_rel: one more gain per layer, head and level for every pair of IDs farther apart
  // than rel_window (T5's last bucket): without it those pairs score 0 however many there are.
  bool rel_far = false;
  // rel_far: the far gain of a query and level shared between that level's far keys, g - ln N with N their
  // number (layers.hpp, coupled_rel_far_count): the far keys' total mass then does not grow with the length
  // (a length-aware bias; learn/README.md "Relative coupling"). In config.json only when true.
  bool rel_far_norm = false;
  // pos_mode coupled_rel, instead of rel_far: a key farther than rel_window from the query on either level
  // (both IDs > 0) is not attended at all (score -inf; layers.hpp, coupled_rel_masked): each query sees
  // its window of the coupled IDs and BOS, the same keys at every length (learn/README.md "Relative
  // coupling"). In config.json only when true.
  bool rel_far_mask = false;
  // pos_mode coupled_rel: what a key gives query i also carries a learned vector per layer, head, level and
  // bucket of their ID difference (Shaw et al. 2018's relative value embeddings on the coupling's IDs):
  // out_i = sum_j P_ij (v_j + sum_lv r[lv, bucket_lv(i, j)]), so a key's presence at a relative position is
  // visible whatever its token (layers.hpp, coupled_rel_value; learn/README.md "Relative coupling").
  // Initialized to 0 (the model starts as the one without it, drawn from the same stream); fp32 only. In
  // config.json only when true.
  bool rel_value = false;
  int rel_buckets() const { return 2 * rel_window + 1 + (rel_far ? 1 : 0); }  // gains per (layer, head, level)

  void validate() const;  // throws InputError
  bool any_pos_code() const;  // some level's table is not learned
  std::string pos_codes_string() const;  // "learned", "hypercube", "learned,shuffled", ...
  int max_pos(int level) const { return level == 0 ? max_pos1 : level == 1 ? max_pos2 : max_pos3; }
};
void to_json(nlohmann::json& j, const ModelConfig& c);
void from_json(const nlohmann::json& j, ModelConfig& c);  // throws InputError on bad fields
// The architecture in plain words, as config.json's "architecture" section states it (every option).
nlohmann::json architecture_description(const ModelConfig& c);

// One named tensor inside the flat parameter buffer.
struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0, size = 0;
  bool trainable = true;  // false: a frozen position code (no gradient, no optimizer step)
  bool decay = true;      // false: AdamW applies no weight decay to it (the grid model's biases, embeddings, norms)
};
// A run of consecutive trainable parameters, [offset, offset + size) of the flat buffer, all decayed or
// none (TensorSpec::decay).
struct ParamSegment {
  std::int64_t offset = 0, size = 0;
  bool decay = true;
};

// Offsets of every weight; built from a config, shared by parameters, gradients and Adam moments.
struct Layout {
  std::vector<TensorSpec> tensors;
  std::int64_t total = 0;
  struct Block {
    std::int64_t attn_norm1, wq, wk, wv, wo, attn_norm2, ffn_norm1, wi, wo_ff, ffn_norm2;
    std::int64_t rel_bias = -1;  // coupled_rel: this layer's (n_heads, 2, rel_buckets()) gains
    std::int64_t rel_value = -1; // rel_value: this layer's (n_heads, 2, rel_buckets(), d_head) vectors
  };
  std::int64_t wte = 0, wpe[kMaxPosLevels] = {0, 0, 0}, final_norm = 0;
  // pos_mode fire: the MLP's three matrices (fire.mlp.0/2/4.weight: (H, 1), (H, H), (n_heads, H), the
  // indices of the authors' nn.Sequential) and the scalars fire.c, fire.L_sqrt (shape (1)); -1 otherwise.
  std::int64_t fire_w1 = -1, fire_w2 = -1, fire_w3 = -1, fire_c = -1, fire_L_sqrt = -1;
  std::int64_t final_norm_bias = -1;  // final_norm layer only
  // pos_mode coupled_rel: rel_bias.weight (n_layers, n_heads, 2, rel_buckets()), the gains of every
  // layer, head, level and ID difference d (index d + rel_window; 2 rel_window + 1: |d| > rel_window, rel_far); -1 otherwise (Block::rel_bias: the layer's)
  std::int64_t rel_bias = -1;
  // model.rel_value: rel_value.weight (n_layers, n_heads, 2, rel_buckets(), d_head); -1 otherwise
  std::int64_t rel_value = -1;
  std::int64_t lm_head = -1;          // -1 when the readout is tied to tok_emb
  std::int64_t readout() const { return lm_head >= 0 ? lm_head : wte; }  // the readout matrix (vocab, C)
  std::vector<Block> blocks;
  static Layout make(const ModelConfig& c);
  // Appends a tensor at the end of the buffer; returns its offset (Layout::make and other model
  // families build their layouts with it).
  std::int64_t add(const std::string& name, std::vector<std::int64_t> shape);
  const TensorSpec& find(const std::string& name) const;  // throws InputError
  // The trainable parameters as maximal runs of equal decay (one run covering everything when no table
  // is frozen and every tensor decays): every optimizer walks these and nothing else.
  std::vector<ParamSegment> trainable_segments() const;
};

// Where a hypercube or shuffled code lives: level lv's [v ; v_next] occupies residual dimensions
// [offset, offset + 2 bits); bits = 0 for a level without such a code.
struct PosCodeBlock {
  int offset = 0, bits = 0;
};
PosCodeBlock pos_code_block(const ModelConfig& c, int level);
// Level lv's code table ((max_pos(lv) + 1) x d_model, row-major) for a hypercube or shuffled level.
std::vector<double> pos_code_table(const ModelConfig& c, int level, std::uint64_t seed);

// Deterministic initialization (InitScheme): one standard normal draw per matrix or table entry, in
// layout order, scaled by that tensor's std; norm weights 1 and LayerNorm biases 0 take no draw. FIRE's
// tensors take the authors' initialization in both schemes (their FIRE init inside the attention
// module): W1 N(0, 1), W2 and W3 N(0, fire_width^-1/2), c = 0.1, L_sqrt = 16 (no draws for the scalars).
// Position codes (PosCode) take the same draws as a learned table, so every other weight of a run is
// the learned run's: frozen scales them by pos_code_scale, hypercube and shuffled overwrite the table.
template <class S>
std::vector<S> init_params(const ModelConfig& c, const Layout& lay, std::uint64_t seed);
// One N(0, 1) draw: Box-Muller on our own uniform draws (two per call), so a seed gives the same weights
// with every standard library.
double standard_normal(Rng& rng);

// One input sequence with its targets: tokens (T), position IDs per level (T each), targets (T) with
// -1 where no loss is taken, and where the task's final answer lies: tokens [answer_begin, answer_end)
// (predicted at rows answer_begin - 1 .. answer_end - 2; task.hpp), both 0 when unknown.
struct Example {
  std::vector<std::uint8_t> tokens;
  std::vector<std::int32_t> pos[kMaxPosLevels];
  std::vector<std::int32_t> targets;
  std::int32_t answer_begin = 0, answer_end = 0;
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
  Precision precision = Precision::fp32;  // bf16: float only (the rounding is float's)
  const S* at(std::int64_t offset) const { return params + offset; }
};

// The input rows of a forward: B sequences, row-major, in one of two layouts.
//  * uniform (offsets null): T rows each, sequence b in rows [b T, (b + 1) T). A single sequence is a
//    batch of one; a batch padded to a common T (padding after the real tokens) is one too.
//  * varlen (offsets set, the packed batches of batch.hpp): sequence b in rows [offsets[b],
//    offsets[b + 1]), of length 1..T (T = the longest), no padding: every row is a real token. Every
//    row-wise pass runs on the R = offsets[B] rows, attention per sequence on its own rows.
// Points into the caller's buffers.
struct BatchView {
  int B = 0, T = 0;
  const std::uint8_t* tokens = nullptr;              // (R)
  const std::int32_t* pos[kMaxPosLevels] = {nullptr, nullptr, nullptr};  // (R) per position level in use
  const std::int32_t* targets = nullptr;             // (R), -1 = no loss; nullptr: no loss pass (decoding)
  const std::int32_t* offsets = nullptr;             // (B + 1) varlen; nullptr: uniform
  std::int64_t rows() const { return offsets ? offsets[B] : std::int64_t(B) * T; }
  std::int64_t begin(int b) const { return offsets ? offsets[b] : std::int64_t(b) * T; }  // first row of b
  int length(int b) const { return offsets ? offsets[b + 1] - offsets[b] : T; }
};
// One sequence as a batch of one; throws InputError for an empty sequence or mismatched lengths.
BatchView batch_of(const Example& ex);

// Activations of a batch: every buffer forward writes and backward reads, R = x.rows() rows. The keys
// and values keep Tk >= T rows per sequence: Tk = T in training; when decoding (B = 1) they are the
// cache, positions 0..Tk-1, of which the last T are the rows of the current call.
template <class S>
struct Acts {
  int B = 0, T = 0, Tk = 0;
  std::int64_t R = 0;  // rows
  std::vector<S> x0;  // (R, C) embedding
  // pos_mode fire: the pairs of this call's rows and keys, the MLP's activations, the bias (NH, T, Tk) of
  // positions past..past+T-1 (T the longest sequence: a shorter one of a varlen batch reads its corner)
  FirePairs fire;
  std::vector<S> fire_u, fire_h1, fire_h2, fire_out, fire_bias;
  // pos_mode rope: cos and sin (T, d_head / 2) of positions past..past+T-1 (row t: every sequence's row t)
  std::vector<S> rope_cos, rope_sin;
  // pos_mode coupled_rel: one sequence's (NH, T, Tk) bias at a time (rebuilt per layer and sequence)
  std::vector<S> rel_bias;
  struct Block {
    std::vector<S> xin;     // (R, C) input_injection, blocks after the first: previous output + x0
    std::vector<S> n1, r1;  // (R, C), (R) attn pre-norm out, its rstd
    std::vector<S> q;       // (R, NH*HS)
    std::vector<S> k, v;    // (B, Tk, NH*HS)
    std::vector<S> att;     // per sequence (NH, len, len + Tk - T) post-softmax, sequences in order
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
  std::vector<S> xf, rf, mf;    // (R, C), (R), (R) final norm output, rstd, mean (LayerNorm only)
  std::vector<S> xr;            // (R, C) readout input when it is not xf (tied: xf d_model^-1/2; bf16: rounded)
  std::vector<S> logits, probs; // (R, V)
  std::vector<S> wgemm;         // bf16: the parameters with every matrix-product weight rounded (per forward)
  std::vector<S> losses;        // (R)
  // Sized for x with Tk key rows per sequence; keeps the first min(old, new) key/value rows of a batch
  // of one (the cache grows in place).
  void resize(const ModelConfig& c, const BatchView& x, int Tk);
};

// Scratch for backward (gradients w.r.t. activations), reused between calls.
template <class S>
struct GradScratch {
  std::vector<S> dlogits, dxf, dx, dres, dn, dh, dg, dao, dq, dk, dv;  // (R, ...) as the activations
  std::vector<S> dres16;                                               // bf16: dres rounded (a product's input)
  std::vector<S> datt;                                                 // (T, T)
  std::vector<S> dx0;                                                  // input_injection: d x0 from the blocks
  std::vector<S> dfire_bias, dfire_out, dfire_u, dfire_h;              // pos_mode fire
  std::vector<S> rel_bias, drel_bias;                                  // pos_mode coupled_rel, per sequence
  std::vector<S> drel_value_p;                                         // model.rel_value: its d P (NH, T, T)
  void resize(const ModelConfig& c, std::int64_t R, int T);
};

// Forward of a batch: the numbered passes 1 (embedding), 2-7 per block (norm, q/k/v, attention, output
// projection and residual, FFN, residual and norm), 8 (final norm, readout, loss), each layer on all
// R rows at once except attention, which runs per sequence (on its own rows: uniform or varlen). Returns the sum of the losses at counted
// targets (0 when x.targets is null). Validates tokens and position IDs against the model (InputError).
// past > 0 (decoding, B = 1): x holds positions past..past+T-1 of the sequence, and the keys/values of
// positions 0..past-1 are already in a (from the earlier calls on the same Acts); the new rows attend
// to all of them (uniform layout only).
template <class S>
S model_forward(Acts<S>& a, const ModelView<S>& m, const BatchView& x, int past = 0);
// Backward of loss_scale * (sum of losses) of the last model_forward on x (past = 0); accumulates into
// grads (same layout as params). Padded rows (target -1) carry zero gradient through every pass.
// attn_entropy_w > 0 (train.attn_entropy; one-layer models, fp32/double): plus the gradient of
// attn_entropy_w times the sum, over the rows with a target and the heads, of the attention weights'
// entropy -sum_j P_j ln P_j (layers.hpp attention_backward).
template <class S>
void model_backward(S* grads, GradScratch<S>& g, const Acts<S>& a, const ModelView<S>& m, const BatchView& x,
                    S loss_scale, S attn_entropy_w = S(0));

// Greedy decoding with a key/value cache: model_forward on `prefix` (positions sized to the full
// length), then on one new token at a time against the cached keys/values, up to `max_new` tokens,
// stopping after EOS. Returns the generated tokens (the prediction after the last prefix token first).
// Each new token costs O(t d) attention instead of a full forward.
struct KvDecoder {
  ModelView<float> m;
  explicit KvDecoder(const ModelView<float>& mv) : m(mv) {}
  std::vector<std::uint8_t> greedy(const std::vector<std::uint8_t>& prefix,
                                   const std::vector<std::int32_t> pos[kMaxPosLevels],
                                   int max_new) const;
};

}  // namespace manyadd::learn
