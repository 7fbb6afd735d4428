// The grid universal transformer of paper 003 (Cognolato and Testolin, "Transformers discover an
// elementary calculation system exploiting local attention and grid-like problem representation";
// their code: github.com/CognacS/tag-cat): token embedding -> Seq2Grid (Eq. 2-3) -> a convolutional
// universal transformer block with local attention (Eq. 5-8) applied recurrently -> the top row read
// out by a linear decoder; a halting transformer (Eq. 13-14) decides with PonderNet (Eq. 9-12) when to
// stop, or a fixed number of steps runs (the fixedTime variant). learn/README.md, "The grid universal
// transformer", maps every equation to the code and lists where the paper and the authors' code differ.
//
// The model runs one sample at a time (its grid, H x W, is its own; the batch's samples share H and W
// only because the data says so); the trainer (grid_train.hpp) runs the samples of a batch on threads.
// Parameters live in one flat buffer with a named layout (learn's Layout: the names are the
// safetensors keys), so io.hpp's readers and writers and run_files.hpp's checkpoints serve it unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "manyadd/learn/grid/grid_layers.hpp"
#include "manyadd/learn/decoder/model.hpp"

namespace manyadd::learn::grid {

// The authors' alphabet in their order (tasks/math/alphabets.py, generate_arithmetic_alphabet):
// digits 0-9, '+', '=', PAD.
inline constexpr int kVocab = 13;
enum Tok : std::uint8_t { kPlus = 10, kEq = 11, kPad = 12 };
char token_char(int tok);  // '0'..'9', '+', '=', '_' (PAD); InputError beyond

enum class Halting { ponder, fixed };
Halting parse_halting(const std::string& s);  // throws InputError
const char* halting_name(Halting h);

struct GridConfig {
  int vocab = kVocab;
  int d_emb = 64;          // Table I: d_emb, the width of every vector (tokens, grid cells, context)
  int d_s2g = 64;          // FFN_2^s2g hidden
  int kernel = 3;          // k, the local attention's window (odd)
  int groups = 8;          // g (noGroups: 1)
  int heads = 64;          // h (d_emb / h channels per head)
  int d_ffn = 256;         // FFN_3^ut hidden (both hidden layers)
  int context_len = 3;     // S_C
  int context_heads = 8;
  int d_ctx_ffn = 64;      // FFN_2^ctx hidden
  int d_halt = 128;        // FFN_2^halt hidden
  bool alibi = true;       // the context attention's grid ALiBi (their use_posenc)
  Halting halting = Halting::ponder;
  // Recurrent steps: the most a sample may take in training and at test (their train_max_steps 40,
  // valid_max_steps 50); with halting fixed, the steps taken (their fixedTime profile: 12 and 12).
  int max_steps_train = 40;
  int max_steps_eval = 50;
  double halt_eps = 0.05;  // epsilon: training stops a sample once sum_{i<n} p_i > 1 - epsilon
  double dropout = 0.1;
  double norm_eps = 1e-5;  // LayerNorm (torch's default)
  void validate() const;   // throws InputError
};
void to_json(nlohmann::json& j, const GridConfig& c);
void from_json(const nlohmann::json& j, GridConfig& c);  // throws InputError on unknown or bad fields
// The checks of every grid config section: j is an object whose every key is a field of `defaults` with
// a value of the same kind (boolean, string, unsigned, integer within +-1e9, number); InputError naming
// "section.field" otherwise.
void check_config_fields(const nlohmann::json& j, const nlohmann::json& defaults, const std::string& section);
nlohmann::json grid_architecture_description(const GridConfig& c);

// Offsets of every tensor in the flat buffer (names in layout order: grid_layout_names in the README).
// -1: not part of this configuration (halting fixed has no context or halting tensors).
struct GridLayout {
  Layout lay;
  std::int64_t emb = -1;
  std::int64_t s2g_w1 = -1, s2g_b1 = -1, s2g_w2 = -1, s2g_b2 = -1;
  std::int64_t wq = -1, wk = -1, wv = -1, rel = -1, qe = -1;
  std::int64_t n1_w = -1, n1_b = -1, f1_w = -1, f1_b = -1, f2_w = -1, f2_b = -1, f3_w = -1, f3_b = -1, n2_w = -1,
               n2_b = -1;
  std::int64_t ctx0 = -1, in_w = -1, in_b = -1, out_w = -1, out_b = -1, cn1_w = -1, cn1_b = -1, cf1_w = -1,
               cf1_b = -1, cf2_w = -1, cf2_b = -1, cn2_w = -1, cn2_b = -1, h1_w = -1, h1_b = -1, h2_w = -1, h2_b = -1;
  std::int64_t dec_w = -1, dec_b = -1;
  static GridLayout make(const GridConfig& c);
};

// PyTorch's default initialization of the authors' modules, drawn from the seed in layout order:
// nn.Embedding and rel_emb, q_emb, the starting context N(0, 1); nn.Linear weight and bias
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the grouped q/k/v projections kaiming_normal_(fan_out, relu):
// N(0, 2 / d_emb); MultiheadAttention's in_proj_weight xavier_uniform_ U(-sqrt(6 / (4 d_emb)), ...), its
// biases 0, its out_proj weight U(-1/sqrt(d_emb), ...) and bias 0; LayerNorm weight 1, bias 0.
template <class S>
std::vector<S> grid_init_params(const GridConfig& c, const GridLayout& L, std::uint64_t seed);

template <class S>
struct GridView {
  const GridConfig& cfg;
  const GridLayout& L;
  const S* p;
  bool fast = false;  // the linear layers' products on oneDNN (train_grid / evaluate_grid --device cpu-fast)
  const S* at(std::int64_t o) const { return p + o; }
};

// One sample: its tokens (S, padded with PAD after '=' as the batch requires), its grid and its target
// row (W tokens: the sum's digits right-aligned, PAD before them) or null (prediction only).
struct GridInput {
  const std::uint8_t* tokens = nullptr;
  int S = 0, H = 0, W = 0;
  const std::int32_t* target = nullptr;
};

// How a run proceeds.
//   train: dropout on; PonderNet stops once sum_{i<n} p_i > 1 - halt_eps (or at max_steps), the
//          read-out of every step is computed (the loss is their expectation under p)
//   eval:  no dropout; the halting event of step n is Bernoulli(lambda_n) (the authors' evaluation), or
//          lambda_n >= 1/2 (greedy: an option of ours); only the last read-out is computed
// key: the sample's stream (dropout masks, Bernoulli draws): a function of the run's seed, the step and
// the sample alone.
enum class RunMode { train, eval };
// Interventions at test (evaluate_grid's experiments, not the paper's test; ignored in training):
// run_to_max, every sample takes max_steps steps whatever its halting says (what more steps compute);
// hard_actions, Seq2Grid's actions one-hot at their argmax (what the soft mixture costs).
struct Interventions {
  bool run_to_max = false, hard_actions = false;
};
struct RunOptions {
  RunMode mode = RunMode::eval;
  std::uint64_t key = 0;
  bool keep = false;         // keep every activation (a backward follows)
  bool greedy_halt = false;  // eval: halt when lambda_n >= 1/2 instead of sampling
  double pad_weight = 0.1;   // the PAD class's weight in the cross-entropy (the paper's 1/10)
  int max_steps = -1;        // -1: the config's for the mode
  Interventions test;        // eval only
};

// Everything one sample's run computes; with keep = false only what the run's results need (one step's
// buffers, reused).
template <class S>
struct SampleActs {
  int H = 0, W = 0, Sq = 0;
  int N = 0;  // recurrent steps taken: the read-out is of G_N
  double pad_weight = 0.1;  // the run's (RunOptions::pad_weight), for the backward
  std::vector<S> x;          // (S, C) embeddings
  FfnActs<S> s2g;            // Eq. 2's FFN_2
  std::vector<S> s2g_o, act; // (S, 3) its output and the actions (softmax)
  std::vector<S> grids;  // keep: (S + 1) H W C (Seq2Grid's steps); else H W C
  std::vector<S> G;      // keep: (N + 1) H W C, G_0 .. G_N; else two grids, used in turn
  struct Ut {  // one application of the block (Eq. 5)
    std::vector<S> q, k, v, att, res1, m1, r1, x1, res2, m2, r2;
    FfnActs<S> ffn;  // FFN_3^ut
  };
  std::vector<Ut> ut;
  struct Ctx {  // one step of the halting transformer (Eq. 14)
    std::vector<S> q, k, v, att, o, res1, m1, r1, x1, res2, m2, r2;
    FfnActs<S> ffn, halt;  // FFN_2^ctx, FFN_2^halt
    S hlogit = 0;
  };
  std::vector<Ctx> ctx;
  std::vector<S> Cs;         // keep: (N + 2) SC C, C_0 .. C_{N+1}; else two, used in turn
  std::vector<S> lambda, p;  // (N + 1) halting probabilities (ponder)
  struct Dec {  // a read-out of the top row
    FfnActs<S> lin;  // the decoder: dropout and one linear layer
    std::vector<S> logits, probs, losses;
  };
  std::vector<Dec> dec;
  std::vector<S> ce;                // (N + 1) train: weighted cross-entropy sum of step n's read-out
  std::vector<std::uint8_t> pred;   // (W) argmax of the last read-out (lowest index on ties)
  std::vector<S> scratch;
  std::size_t bytes() const;        // the memory its buffers hold
  void release();                   // gives that memory back
};

// Runs one sample. Returns nothing; the results are in a (N, ce, p, pred). InputError for tokens outside
// the vocabulary, an empty sequence, a grid smaller than 1 x 1, or a target token outside it.
template <class S>
void sample_forward(SampleActs<S>& a, const GridView<S>& m, const GridInput& in, const RunOptions& opt);

// Backward of L = sum_n cce[n] ce_n + sum_n cp[n] p_n (with halting fixed: cce[0] ce_N) for the last
// sample_forward on `in` (keep = true, mode train); grads (the layout's size) accumulates dL/dparams.
// cp is the loss's derivative in each p_n as a constant (the regularizer's own derivative included by
// the caller): d/dp_n (p_n ce_n / D_n + beta R(p)) is ce_n / D_n + beta R'(p)_n.
template <class S>
void sample_backward(S* grads, SampleActs<S>& a, const GridView<S>& m, const GridInput& in, const S* cce,
                     const S* cp);

// The authors' accuracy of one read-out (tagcat/functions/metrics.py, compute_matches_samplewise):
// position w is valid when the prediction or the target is not PAD (a PAD-PAD match is not counted),
// and the last position always is; correct = valid and equal. Returns (correct, valid).
std::pair<int, int> matches(const std::uint8_t* pred, const std::int32_t* target, int W);

}  // namespace manyadd::learn::grid
