// The fast CPU device (cpu_fast.hpp): a packed batch cut into chunks of whole sequences, each chunk
// through model_forward's passes and model_backward's (model.cpp, the numbering below is theirs) while
// its activations stay in cache, the matrix products on oneDNN (cpu_gemm.hpp), attention, RMSNorm,
// GEGLU and the bf16 rounding in cpu_fast_kernels.hpp, the row-wise rest (embedding, LayerNorm, residuals,
// loss, RoPE) the reference's own functions from layers.hpp.
//
// Shape legend: R rows of a chunk, Rl the rows that go on after the last layer's attention (target >= 0;
// all R in the other layers), C d_model, NH heads, HS d_head, D = NH HS, F d_ff, V vocabulary, L layers.
// E: the element type the matrix products read, float (fp32; bf16 values held in floats) or uint16_t
// (bf16 bit patterns, for oneDNN's bf16 products).
#include "manyadd/learn/devices/cpu_fast.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

#include <fmt/format.h>

#include "cpu_device_base.hpp"
#include "manyadd/learn/devices/cpu_fast_kernels.hpp"
#include "manyadd/learn/devices/cpu_gemm.hpp"
#include "manyadd/core/parallel.hpp"
#include "manyadd/learn/decoder/layers.hpp"

namespace manyadd::learn {
namespace {

using cpu_fast::AttnArgs;
using cpu_fast::Kernels;
using Elem = cpu_gemm::Elem;

constexpr std::uint8_t kNotPredicted = 255;

// The chunks of a batch: sequences [s0, s1), rows [r0, r1) of the packed batch.
struct Chunk {
  int s0 = 0, s1 = 0;
  std::int64_t r0 = 0, r1 = 0;
};
// Consecutive whole sequences of about `rows` rows each.
std::vector<Chunk> make_chunks(const PackedBatch& pb, int rows) {
  std::vector<Chunk> out;
  for (int b = 0; b < pb.B;) {
    Chunk ch;
    ch.s0 = b, ch.r0 = pb.offsets[std::size_t(b)];
    do ++b;
    while (b < pb.B && pb.offsets[std::size_t(b) + 1] - ch.r0 <= rows);
    ch.s1 = b, ch.r1 = pb.offsets[std::size_t(b)];
    out.push_back(ch);
  }
  return out;
}
// Contiguous runs of chunks for W threads, of about equal work (a fixed function of the batch and W: a
// run is deterministic for its thread count). Work of a sequence of n rows: its row-wise products plus
// its attention (n^2 / 2 key rows), in multiply-adds per layer.
std::vector<int> split_chunks(const PackedBatch& pb, const std::vector<Chunk>& chunks, const ModelConfig& c, int W) {
  const double D = double(c.n_heads) * c.d_head, per_row = 4.0 * c.d_model * D + 3.0 * c.d_model * c.d_ff;
  std::vector<double> cum(chunks.size() + 1, 0.0);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    double w = 0;
    for (int s = chunks[i].s0; s < chunks[i].s1; ++s) {
      const double n = pb.length(s);
      w += n * per_row + 2.0 * D * n * n;
    }
    cum[i + 1] = cum[i] + w;
  }
  std::vector<int> first(std::size_t(W) + 1, int(chunks.size()));
  first[0] = 0;
  for (int w = 1; w < W; ++w) {
    const double target = cum.back() * double(w) / double(W);
    first[std::size_t(w)] = int(std::lower_bound(cum.begin(), cum.end(), target) - cum.begin());
    first[std::size_t(w)] = std::max(first[std::size_t(w)], first[std::size_t(w) - 1]);
  }
  return first;
}

// The rows of x (R, width) listed in idx, into out (n, width).
template <class T>
void gather_rows(T* out, const T* x, const std::int32_t* idx, std::int64_t n, int width) {
  for (std::int64_t i = 0; i < n; ++i)
    std::copy(x + std::int64_t(idx[i]) * width, x + std::int64_t(idx[i] + 1) * width, out + i * width);
}
template <class T>
void scatter_add_rows(T* x, const T* in, const std::int32_t* idx, std::int64_t n, int width) {
  for (std::int64_t i = 0; i < n; ++i) {
    T* o = x + std::int64_t(idx[i]) * width;
    for (int c = 0; c < width; ++c) o[c] += in[i * width + c];
  }
}
template <class T>
void grow(std::vector<T>& v, std::int64_t n) {
  if (std::int64_t(v.size()) < n) v.resize(std::size_t(n));
}

// The device's arithmetic for one element type E (see the legend above).
class ImplBase {
 public:
  virtual ~ImplBase() = default;
  // entropy_w: train.attn_entropy's weight per loss row and head (CpuDeviceBase::entropy_weight), 0 = none.
  virtual double train(const float* P, const PackedBatch& pb, float loss_scale, float entropy_w,
                       std::vector<float>& grads) = 0;
  virtual void predict(const float* P, const PackedBatch& pb, std::vector<std::uint8_t>& argmax) = 0;
};

template <class E>
class Impl final : public ImplBase {
 public:
  Impl(const ModelConfig& c, const Layout& lay, int threads, Precision p, const Kernels& k, int chunk_rows)
      : c_(c), lay_(lay), threads_(threads), chunk_rows_(chunk_rows), bf16_(p == Precision::bf16), k_(k),
        workers_(std::size_t(threads)) {}

  double train(const float* P, const PackedBatch& pb, float loss_scale, float entropy_w,
               std::vector<float>& grads) override {
    prepare(P, pb);
    entropy_w_ = entropy_w;
    const int W = over_chunks(
        pb, [&](Worker& wk) { wk.G.assign(std::size_t(lay_.total), 0.f), wk.loss = 0; },
        [&](Worker& wk, const Chunk& ch) { wk.loss += run_chunk(wk, pb, ch, loss_scale, nullptr); });
    grads = workers_[0].G;  // reduced in thread order (deterministic)
    for (int w = 1; w < W; ++w)
      for (std::size_t i = 0; i < grads.size(); ++i) grads[i] += workers_[std::size_t(w)].G[i];
    double total = 0;
    for (int w = 0; w < W; ++w) total += workers_[std::size_t(w)].loss;
    return total;
  }
  void predict(const float* P, const PackedBatch& pb, std::vector<std::uint8_t>& argmax) override {
    prepare(P, pb);
    argmax.assign(std::size_t(pb.rows()), kNotPredicted);
    over_chunks(pb, [](Worker&) {}, [&](Worker& wk, const Chunk& ch) { run_chunk(wk, pb, ch, 0.f, argmax.data()); });
  }

 private:
  static constexpr bool kBits = std::is_same_v<E, std::uint16_t>;
  static constexpr Elem kElem = kBits ? Elem::bf16 : Elem::f32;
  const ModelConfig& c_;
  const Layout& lay_;
  int threads_, chunk_rows_;
  float entropy_w_ = 0.f;  // this train() call's entropy weight (AttnArgs::entropy_w)
  bool bf16_;
  const Kernels& k_;
  const float* P_ = nullptr;                // this call's parameters
  // bf16: the products' matrices rounded once per call, at their layout offsets (model.cpp's
  // round_gemm_weights: every product's weight and a tied readout's table; the embedding and the norms
  // read the fp32 parameters). fp32 reads the parameters themselves.
  std::vector<E> wts_;
  std::vector<float> rope_cos_, rope_sin_;  // pos_mode rope: tables for the batch's longest sequence
  std::vector<std::int32_t> iota_;          // 0, 1, 2, ...: every row of a sequence as a query

  // A block's activations on a chunk (what its backward reads): R rows up to the keys and values, Rq
  // after them (Rq = R, or Rl in the last block).
  struct Block {
    std::vector<float> xin;       // (R, C) input injection: previous output + x0
    std::vector<E> n1;            // (R, C) attn pre-norm (bf16: rounded)
    std::vector<float> r1;        // (R)
    std::vector<float> qkv;       // (R, 3D) q | k | v (RoPE turned; bf16: rounded)
    std::vector<float> stats;     // (Rq, NH, 2) attention row statistics
    std::vector<float> ao;        // (Rq, D) attention output (bf16: rounded)
    std::vector<E> ao_e;          // (Rq, D) its bit patterns (E = uint16)
    std::vector<float> res1, r2;  // (Rq, C) x + ao Wo^T, (Rq)
    std::vector<float> x1;        // (Rq, C)
    std::vector<E> n3;            // (Rq, C) ffn pre-norm (bf16: rounded)
    std::vector<float> r3;        // (Rq)
    std::vector<float> h;         // (Rq, 2F) [gate | up] (bf16: rounded)
    std::vector<float> g;         // (Rq, F) geglu (bf16: rounded)
    std::vector<E> g_e;           // (Rq, F) (E = uint16)
    std::vector<float> res2, r4;  // (Rq, C) x1 + g Wo'^T, (Rq)
    std::vector<float> x2;        // (Rq, C) block output
  };
  struct Worker {
    std::vector<float> G;  // (total) this thread's gradient
    double loss = 0;
    std::vector<Block> blocks;
    std::vector<float> x0, xf, rf, mf, xrf, logits, probs, losses, tmp;
    std::vector<E> xr;
    std::vector<std::int32_t> live;        // (Rl) chunk rows a loss reads, sequence by sequence
    std::vector<std::int32_t> live_local;  // (Rl) the same rows' indices within their sequence
    std::vector<std::int32_t> seq_live;    // (sequences + 1) where each sequence's live rows start
    std::vector<std::int32_t> tgt;         // (Rl) their targets
    std::vector<float> work, rot;          // attention scratch; RoPE: one sequence's q or k rows
    std::vector<float> dlogits, dxf, dx, dxin, dres, dg, dh, dn, dao, dqkv, dx0;  // backward
    std::vector<E> dl_e, dres_e, dh_e, dqkv_e;
  };
  std::vector<Worker> workers_;

  // Each of W threads runs begin(its worker), then fn(worker, chunk) on its contiguous run of the
  // batch's chunks (split_chunks; a run may be empty); returns W.
  template <class B, class F>
  int over_chunks(const PackedBatch& pb, B&& begin, F&& fn) {
    const auto chunks = make_chunks(pb, chunk_rows_);
    const int W = std::min<int>(threads_, int(chunks.size()));
    const auto first = split_chunks(pb, chunks, c_, W);
    parallel_for(W, W, [&](int, std::int64_t w) {
      Worker& wk = workers_[std::size_t(w)];
      begin(wk);
      for (int i = first[std::size_t(w)]; i < first[std::size_t(w) + 1]; ++i) fn(wk, chunks[std::size_t(i)]);
    });
    return W;
  }
  const float* P(std::int64_t off) const { return P_ + off; }
  const E* W(std::int64_t off) const {
    if constexpr (kBits) return wts_.data() + off;
    else return bf16_ ? wts_.data() + off : P_ + off;
  }
  void gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const E* A, std::int64_t lda, const E* B,
            std::int64_t ldb, float beta, float* C, std::int64_t ldc) const {
    cpu_gemm::gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, kElem);
  }
  // The reverse of y (M, N) = x (M, K) W^T, W (N, K): dx = dy W (written), dW += dy^T x.
  void linear_backward(float* dx, float* dW, const E* dy, const E* x, const E* W, std::int64_t M, std::int64_t N,
                       std::int64_t K) const {
    gemm(false, false, M, K, N, dy, N, W, K, 0.f, dx, K);
    gemm(true, false, N, K, M, dy, N, x, K, 1.f, dW, K);
  }
  // A value the products read that stays in floats too (attention reads ao; the norms' outputs go only to
  // products): bf16 rounds f in place and, for E = uint16, writes its bit patterns to e. Returns the
  // products' operand.
  const E* round_operand(std::vector<float>& f, std::vector<E>& e, std::int64_t n) const {
    if (!bf16_) {
      if constexpr (kBits) throw InvariantError("cpu-fast: bf16 bit patterns in an fp32 run");
      else return f.data();
    }
    if constexpr (kBits) {
      grow(e, n);
      k_.to_bf16(e.data(), f.data(), n);
      k_.round_bf16(f.data(), n);
      return e.data();
    } else {
      k_.round_bf16(f.data(), n);
      return f.data();
    }
  }
  // What round_operand returned for (f, e), later.
  static const E* operand(const std::vector<float>& f, const std::vector<E>& e) {
    if constexpr (kBits) return e.data();
    else return f.data();
  }
  // A gradient a product reads whose fp32 value goes on elsewhere (the residual's): a rounded copy in bf16.
  const E* rounded_copy(const std::vector<float>& f, std::vector<E>& e, std::int64_t n) const {
    if (!bf16_) {
      if constexpr (kBits) throw InvariantError("cpu-fast: bf16 bit patterns in an fp32 run");
      else return f.data();
    }
    grow(e, n);
    if constexpr (kBits) {
      k_.to_bf16(e.data(), f.data(), n);
    } else {
      std::copy(f.begin(), f.begin() + n, e.begin());
      k_.round_bf16(e.data(), n);
    }
    return e.data();
  }
  // A norm's output, which only products read: into E (bf16: rounded).
  void norm_operand(std::vector<E>& e, std::vector<float>& f, std::int64_t n) const {
    grow(e, n);
    if constexpr (kBits) {
      k_.to_bf16(e.data(), f.data(), n);
    } else {
      if (bf16_) k_.round_bf16(f.data(), n);
      std::copy(f.begin(), f.begin() + n, e.begin());
    }
  }

  void prepare(const float* P, const PackedBatch& pb) {
    P_ = P;
    for (std::int64_t i = 0; i < pb.rows(); ++i)  // as model_forward's check_rows: a bad ID would read outside
      if (pb.tokens[std::size_t(i)] >= c_.vocab) throw InputError("token outside the vocabulary");
    for (int lv = 0; lv < pos_levels(c_.pos_mode); ++lv) {
      if (std::int64_t(pb.pos[lv].size()) < pb.rows())
        throw InputError(fmt::format("position IDs of level {} are missing", lv + 1));
      for (std::int64_t i = 0; i < pb.rows(); ++i)
        if (pb.pos[lv][std::size_t(i)] < 0 || pb.pos[lv][std::size_t(i)] > c_.max_pos(lv))
          throw InputError(fmt::format("position ID {} of level {} outside [0, {}]", pb.pos[lv][std::size_t(i)], lv + 1,
                                       c_.max_pos(lv)));
    }
    const std::int64_t C = c_.d_model, D = std::int64_t(c_.n_heads) * c_.d_head, F = c_.d_ff;
    if (bf16_) {  // model.cpp's round_gemm_weights: each product's weight rounded once per call
      wts_.resize(std::size_t(lay_.total));
      auto put = [&](std::int64_t off, std::int64_t n) {
        if constexpr (kBits) {
          k_.to_bf16(wts_.data() + off, P + off, n);
        } else {
          std::copy(P + off, P + off + n, wts_.data() + off);
          k_.round_bf16(wts_.data() + off, n);
        }
      };
      for (const auto& w : lay_.blocks) put(w.wq, 3 * D * C), put(w.wo, C * D), put(w.wi, 2 * F * C), put(w.wo_ff, C * F);
      put(lay_.readout(), std::int64_t(c_.vocab) * C);
    }
    if (c_.pos_mode == PosMode::rope && std::int64_t(rope_cos_.size()) < std::int64_t(pb.T) * (c_.d_head / 2))
      rope_tables(rope_cos_, rope_sin_, 0, pb.T, c_.d_head, kRopeBase);
    if (std::int64_t(iota_.size()) < pb.T) {
      iota_.resize(std::size_t(pb.T));
      std::iota(iota_.begin(), iota_.end(), 0);
    }
  }

  // Forward of one chunk and, unless predicting (argmax set: the live rows' argmax into it), its
  // backward into wk.G; returns the chunk's loss sum.
  double run_chunk(Worker& wk, const PackedBatch& pb, const Chunk& ch, float loss_scale, std::uint8_t* argmax) {
    const int C = c_.d_model, V = c_.vocab, L = c_.n_layers;
    const std::int64_t R = ch.r1 - ch.r0;
    const std::int32_t* targets = pb.targets.data() + ch.r0;
    wk.live.clear(), wk.live_local.clear(), wk.tgt.clear();
    wk.seq_live.assign(std::size_t(ch.s1 - ch.s0) + 1, 0);
    for (int s = ch.s0; s < ch.s1; ++s) {
      const std::int64_t o = pb.offsets[std::size_t(s)] - ch.r0;
      for (int t = 0; t < pb.length(s); ++t)
        if (targets[o + t] >= 0)
          wk.live.push_back(std::int32_t(o + t)), wk.live_local.push_back(t), wk.tgt.push_back(targets[o + t]);
      wk.seq_live[std::size_t(s - ch.s0) + 1] = std::int32_t(wk.live.size());
    }
    const std::int64_t Rl = std::int64_t(wk.live.size());
    if (Rl == 0 && argmax) return 0.0;  // nothing to predict
    wk.blocks.resize(std::size_t(L));
    // 1. x0 = tok_emb[tok] + sum_lv pos_emb_lv[pos_lv]
    const std::int32_t* pos[kMaxPosLevels];
    const float* wpe[kMaxPosLevels];
    for (int lv = 0; lv < kMaxPosLevels; ++lv) {
      pos[lv] = pb.pos[lv].empty() ? nullptr : pb.pos[lv].data() + ch.r0;
      wpe[lv] = P(lay_.wpe[lv]);
    }
    grow(wk.x0, R * C);
    embedding_forward(wk.x0.data(), pb.tokens.data() + ch.r0, pos, pos_tables(c_.pos_mode), P(lay_.wte), wpe, int(R), C);
    // 2.-7. the blocks (input injection: block l >= 1 reads its predecessor's output + x0)
    const float* x = wk.x0.data();
    for (int l = 0; l < L; ++l) {
      Block& b = wk.blocks[std::size_t(l)];
      if (c_.input_injection && l > 0) {
        grow(b.xin, R * C);
        residual_forward(b.xin.data(), x, wk.x0.data(), R * C);
        x = b.xin.data();
      }
      block_forward(wk, b, x, pb, ch, lay_.blocks[std::size_t(l)], l == L - 1);
      x = b.x2.data();
    }
    // 8. xf = final_norm(x) ; xr = xf [* d_model^-1/2 when tied] (bf16: rounded) ; logits = xr W^T ; losses
    grow(wk.xf, Rl * C), grow(wk.rf, Rl), grow(wk.mf, Rl), grow(wk.xrf, Rl * C), grow(wk.logits, Rl * V);
    const float eps = c_.norm_eps;
    if (c_.final_norm == NormKind::layer)
      layernorm_forward(wk.xf.data(), wk.mf.data(), wk.rf.data(), x, P(lay_.final_norm), P(lay_.final_norm_bias),
                        int(Rl), C, eps);
    else
      k_.rmsnorm_forward(wk.xf.data(), wk.rf.data(), x, P(lay_.final_norm), int(Rl), C, eps);
    if (c_.tie_readout) scale_forward(wk.xrf.data(), wk.xf.data(), 1.f / std::sqrt(float(C)), Rl * C);
    else std::copy(wk.xf.begin(), wk.xf.begin() + Rl * C, wk.xrf.begin());
    const E* xr = round_operand(wk.xrf, wk.xr, Rl * C);
    gemm(false, true, Rl, V, C, xr, C, W(lay_.readout()), C, 0.f, wk.logits.data(), V);
    if (argmax) {
      for (std::int64_t i = 0; i < Rl; ++i) detail::argmax_rows(wk.logits.data() + i * V, 1, V, argmax + ch.r0 + wk.live[std::size_t(i)]);
      return 0.0;
    }
    grow(wk.probs, Rl * V), grow(wk.losses, Rl);
    const double loss = crossentropy_forward(wk.losses.data(), wk.probs.data(), wk.logits.data(), wk.tgt.data(), int(Rl), V);
    backward(wk, pb, ch, xr, loss_scale);
    return loss;
  }

  // The attention of sequence s of the chunk: every row as a query, or (last) its live rows.
  // rel_dgain: coupled_rel's gains' gradient (the worker's), in the backward; null in the forward.
  // rel_dvalue: model.rel_value's gradient (the worker's), likewise.
  AttnArgs attn_args(const Worker& wk, const Block& b, const PackedBatch& pb, const Chunk& ch, int s, bool last,
                     const Layout::Block& w, float* rel_dgain, float* rel_dvalue = nullptr) const {
    const int D = c_.n_heads * c_.d_head;
    AttnArgs a;
    a.T = pb.length(s), a.NH = c_.n_heads, a.HS = c_.d_head;
    a.qkv = b.qkv.data() + (pb.offsets[std::size_t(s)] - ch.r0) * 3 * D, a.ld = 3 * D;
    a.scale = score_scale<float>(c_.attn_scale, c_.d_head);
    a.bf16 = bf16_;
    if (last) {
      const std::int32_t lo = wk.seq_live[std::size_t(s - ch.s0)], hi = wk.seq_live[std::size_t(s - ch.s0) + 1];
      a.qrows = wk.live_local.data() + lo, a.nq = hi - lo;
    } else {
      a.qrows = iota_.data(), a.nq = a.T;
    }
    if (w.rel_bias >= 0) {  // coupled_rel: the layer's gains, the sequence's IDs
      a.rel_gain = P(w.rel_bias), a.rel_W = c_.rel_window, a.rel_far = c_.rel_far, a.rel_dgain = rel_dgain;
      a.rel_far_norm = c_.rel_far_norm, a.rel_far_mask = c_.rel_far_mask;
      for (int lv = 0; lv < 2; ++lv) a.rel_ids[lv] = pb.pos[std::size_t(lv)].data() + pb.offsets[std::size_t(s)];
    }
    if (w.rel_value >= 0) a.rel_value = P(w.rel_value), a.rel_dvalue = rel_dvalue;
    return a;
  }
  // The first query row of sequence s in the (Rq, ...) buffers.
  std::int64_t query_row(const Worker& wk, const PackedBatch& pb, const Chunk& ch, int s, bool last) const {
    return last ? wk.seq_live[std::size_t(s - ch.s0)] : pb.offsets[std::size_t(s)] - ch.r0;
  }

  // Passes 2-7 of one block on the chunk's rows, input x (R, C), into b; in the last block only the live
  // rows go on after the keys and values. The bf16 rounding points of model.cpp's block_forward.
  void block_forward(Worker& wk, Block& b, const float* x, const PackedBatch& pb, const Chunk& ch,
                     const Layout::Block& w, bool last) {
    const int C = c_.d_model, NH = c_.n_heads, HS = c_.d_head, D = NH * HS, F = c_.d_ff;
    const std::int64_t R = ch.r1 - ch.r0, Rq = last ? std::int64_t(wk.live.size()) : R;
    const float eps = c_.norm_eps;
    // 2. n1 = Norm1(x)
    grow(wk.tmp, R * C), grow(b.r1, R);
    k_.rmsnorm_forward(wk.tmp.data(), b.r1.data(), x, P(w.attn_norm1), int(R), C, eps);
    norm_operand(b.n1, wk.tmp, R * C);
    // 3. q | k | v = n1 [Wq | Wk | Wv]^T (the three consecutive in the layout); RoPE turns q and k of each
    //    sequence by their index within it; bf16 rounds all three after it
    grow(b.qkv, R * 3 * D);
    gemm(false, true, R, 3 * D, C, b.n1.data(), C, W(w.wq), C, 0.f, b.qkv.data(), 3 * D);
    if (c_.pos_mode == PosMode::rope) rope_sequences(wk, b.qkv.data(), pb, ch, +1);
    if (bf16_) k_.round_bf16(b.qkv.data(), R * 3 * D);
    // 4. attention of each sequence's query rows against its own keys
    grow(b.stats, Rq * NH * 2), grow(b.ao, Rq * D);
    for (int s = ch.s0; s < ch.s1; ++s) {
      const AttnArgs a = attn_args(wk, b, pb, ch, s, last, w, nullptr);
      if (a.nq == 0) continue;
      const std::int64_t q0 = query_row(wk, pb, ch, s, last);
      grow(wk.work, cpu_fast::attention_workspace(a.T, HS));
      k_.attention_forward(a, b.ao.data() + q0 * D, D, b.stats.data() + q0 * NH * 2, wk.work.data());
    }
    const E* ao = round_operand(b.ao, b.ao_e, Rq * D);
    // 5. res1 = x + ao Wo^T (the residual is the product's accumulator) ; x1 = Norm2(res1)
    grow(b.res1, Rq * C), grow(b.r2, Rq), grow(b.x1, Rq * C);
    if (last) gather_rows(b.res1.data(), x, wk.live.data(), Rq, C);
    else std::copy(x, x + R * C, b.res1.begin());
    gemm(false, true, Rq, C, D, ao, D, W(w.wo), D, 1.f, b.res1.data(), C);
    k_.rmsnorm_forward(b.x1.data(), b.r2.data(), b.res1.data(), P(w.attn_norm2), int(Rq), C, eps);
    // 6. n3 = Norm1'(x1) ; h = n3 Wi^T ; g = geglu(h) ; res2 = x1 + g Wo'^T
    grow(wk.tmp, Rq * C), grow(b.r3, Rq);
    k_.rmsnorm_forward(wk.tmp.data(), b.r3.data(), b.x1.data(), P(w.ffn_norm1), int(Rq), C, eps);
    norm_operand(b.n3, wk.tmp, Rq * C);
    grow(b.h, Rq * 2 * F), grow(b.g, Rq * F);
    gemm(false, true, Rq, 2 * F, C, b.n3.data(), C, W(w.wi), C, 0.f, b.h.data(), 2 * F);
    if (bf16_) k_.round_bf16(b.h.data(), Rq * 2 * F);
    k_.geglu_forward(b.g.data(), b.h.data(), Rq, F);
    const E* g = round_operand(b.g, b.g_e, Rq * F);
    grow(b.res2, Rq * C), grow(b.r4, Rq), grow(b.x2, Rq * C);
    std::copy(b.x1.begin(), b.x1.begin() + Rq * C, b.res2.begin());
    gemm(false, true, Rq, C, F, g, F, W(w.wo_ff), F, 1.f, b.res2.data(), C);
    // 7. x2 = Norm2'(res2)
    k_.rmsnorm_forward(b.x2.data(), b.r4.data(), b.res2.data(), P(w.ffn_norm2), int(Rq), C, eps);
  }

  // RoPE on each sequence's q and k columns of qkv (R, 3D): +1 turns (forward), -1 turns back (backward).
  void rope_sequences(Worker& wk, float* qkv, const PackedBatch& pb, const Chunk& ch, int sign) const {
    const int NH = c_.n_heads, HS = c_.d_head, D = NH * HS;
    for (int s = ch.s0; s < ch.s1; ++s) {
      const std::int64_t o = pb.offsets[std::size_t(s)] - ch.r0;
      const int T = pb.length(s);
      grow(wk.rot, std::int64_t(T) * D);
      for (int part = 0; part < 2; ++part) {  // q, then k
        for (int t = 0; t < T; ++t) {
          const float* src = qkv + (o + t) * 3 * D + part * D;
          std::copy(src, src + D, wk.rot.begin() + std::int64_t(t) * D);
        }
        rope_rotate(wk.rot.data(), rope_cos_, rope_sin_, T, NH, HS, sign);
        for (int t = 0; t < T; ++t)
          std::copy(wk.rot.begin() + std::int64_t(t) * D, wk.rot.begin() + std::int64_t(t + 1) * D,
                    qkv + (o + t) * 3 * D + part * D);
      }
    }
  }

  // model_backward's passes on the chunk, into wk.G (bf16 rounding points: dlogits, the residual gradient
  // entering each output projection (a rounded copy), dh, dao, dq|dk|dv, and inside attention).
  void backward(Worker& wk, const PackedBatch& pb, const Chunk& ch, const E* xr, float loss_scale) {
    const int C = c_.d_model, V = c_.vocab, L = c_.n_layers;
    const std::int64_t R = ch.r1 - ch.r0, Rl = std::int64_t(wk.live.size());
    float* G = wk.G.data();
    // 8. xf = final_norm(x) ; xr = xf [* s] ; logits = xr W^T ; losses
    grow(wk.dlogits, Rl * V), grow(wk.dxf, Rl * C);
    crossentropy_backward(wk.dlogits.data(), wk.probs.data(), wk.tgt.data(), loss_scale, int(Rl), V);
    const E* dl = round_operand(wk.dlogits, wk.dl_e, Rl * V);
    linear_backward(wk.dxf.data(), G + lay_.readout(), dl, xr, W(lay_.readout()), Rl, V, C);
    if (c_.tie_readout) {
      const float s = 1.f / std::sqrt(float(C));
      for (std::int64_t i = 0; i < Rl * C; ++i) wk.dxf[std::size_t(i)] *= s;
    }
    grow(wk.dx, R * C);
    std::fill(wk.dx.begin(), wk.dx.begin() + Rl * C, 0.f);
    const float* xlast = wk.blocks.back().x2.data();
    if (c_.final_norm == NormKind::layer)
      layernorm_backward(wk.dx.data(), G + lay_.final_norm, G + lay_.final_norm_bias, wk.dxf.data(), xlast,
                         P(lay_.final_norm), wk.mf.data(), wk.rf.data(), int(Rl), C);
    else
      k_.rmsnorm_backward(wk.dx.data(), G + lay_.final_norm, wk.dxf.data(), xlast, P(lay_.final_norm), wk.rf.data(), int(Rl), C);
    // 7.-2. the blocks, last first (input injection: d xin flows to the previous output and to x0)
    if (c_.input_injection) wk.dx0.assign(std::size_t(R * C), 0.f);
    for (int l = L - 1; l >= 0; --l) {
      const bool inj = c_.input_injection && l > 0;
      const float* in = l == 0 ? wk.x0.data() : inj ? wk.blocks[std::size_t(l)].xin.data() : wk.blocks[std::size_t(l - 1)].x2.data();
      block_backward(wk, wk.blocks[std::size_t(l)], in, pb, ch, lay_.blocks[std::size_t(l)], l == L - 1);
      if (inj)
        for (std::int64_t i = 0; i < R * C; ++i) wk.dx0[std::size_t(i)] += wk.dx[std::size_t(i)];
    }
    if (c_.input_injection)
      for (std::int64_t i = 0; i < R * C; ++i) wk.dx[std::size_t(i)] += wk.dx0[std::size_t(i)];
    // 1. x0 = tok_emb[tok] + sum_lv pos_emb_lv[pos_lv]; a frozen position code takes no gradient
    const std::int32_t* pos[kMaxPosLevels];
    float* dwpe[kMaxPosLevels] = {nullptr, nullptr, nullptr};
    for (int lv = 0; lv < kMaxPosLevels; ++lv) pos[lv] = pb.pos[lv].empty() ? nullptr : pb.pos[lv].data() + ch.r0;
    for (int lv = 0; lv < pos_tables(c_.pos_mode); ++lv)
      if (!pos_code_frozen(c_.pos_codes[lv])) dwpe[lv] = G + lay_.wpe[lv];
    embedding_backward(G + lay_.wte, dwpe, wk.dx.data(), pb.tokens.data() + ch.r0, pos, pos_tables(c_.pos_mode), int(R), C);
  }

  // Passes 7..2 of one block in reverse: wk.dx holds d(block output) (Rq, C) on entry and d(block input)
  // (R, C) on exit.
  void block_backward(Worker& wk, const Block& b, const float* x, const PackedBatch& pb, const Chunk& ch,
                      const Layout::Block& w, bool last) {
    const int C = c_.d_model, NH = c_.n_heads, HS = c_.d_head, D = NH * HS, F = c_.d_ff;
    const std::int64_t R = ch.r1 - ch.r0, Rq = last ? std::int64_t(wk.live.size()) : R;
    float* G = wk.G.data();
    grow(wk.dres, Rq * C), grow(wk.dg, Rq * F), grow(wk.dh, Rq * 2 * F), grow(wk.dn, R * C), grow(wk.dao, Rq * D);
    // 7. x2 = Norm2'(res2) ; res2 = x1 + fo
    std::fill(wk.dres.begin(), wk.dres.begin() + Rq * C, 0.f);
    k_.rmsnorm_backward(wk.dres.data(), G + w.ffn_norm2, wk.dx.data(), b.res2.data(), P(w.ffn_norm2), b.r4.data(), int(Rq), C);
    // 6. fo = g Wo'^T ; g = geglu(h) ; h = n3 Wi^T ; n3 = Norm1'(x1)
    const E* dres = rounded_copy(wk.dres, wk.dres_e, Rq * C);
    const E* g = operand(b.g, b.g_e);
    linear_backward(wk.dg.data(), G + w.wo_ff, dres, g, W(w.wo_ff), Rq, C, F);
    k_.geglu_backward(wk.dh.data(), wk.dg.data(), b.h.data(), Rq, F);
    const E* dh = round_operand(wk.dh, wk.dh_e, Rq * 2 * F);
    linear_backward(wk.dn.data(), G + w.wi, dh, b.n3.data(), W(w.wi), Rq, 2 * F, C);
    //    d x1 = dres (residual) + Norm1' backward (into dx)
    std::copy(wk.dres.begin(), wk.dres.begin() + Rq * C, wk.dx.begin());
    k_.rmsnorm_backward(wk.dx.data(), G + w.ffn_norm1, wk.dn.data(), b.x1.data(), P(w.ffn_norm1), b.r3.data(), int(Rq), C);
    // 5. proj = ao Wo^T ; res1 = x + proj ; x1 = Norm2(res1)
    std::fill(wk.dres.begin(), wk.dres.begin() + Rq * C, 0.f);
    k_.rmsnorm_backward(wk.dres.data(), G + w.attn_norm2, wk.dx.data(), b.res1.data(), P(w.attn_norm2), b.r2.data(), int(Rq), C);
    const E* dres1 = rounded_copy(wk.dres, wk.dres_e, Rq * C);
    const E* ao = operand(b.ao, b.ao_e);
    linear_backward(wk.dao.data(), G + w.wo, dres1, ao, W(w.wo), Rq, C, D);
    if (bf16_) k_.round_bf16(wk.dao.data(), Rq * D);
    // 4. attention, one sequence at a time: dq at its query rows, dk and dv at all its rows
    grow(wk.dqkv, R * 3 * D);
    for (int s = ch.s0; s < ch.s1; ++s) {
      AttnArgs a = attn_args(wk, b, pb, ch, s, last, w, w.rel_bias >= 0 ? G + w.rel_bias : nullptr,
                             w.rel_value >= 0 ? G + w.rel_value : nullptr);
      if (last) a.entropy_w = entropy_w_;  // one-layer models (CpuDeviceBase): the loss rows are the queries
      const std::int64_t q0 = query_row(wk, pb, ch, s, last), o = pb.offsets[std::size_t(s)] - ch.r0;
      grow(wk.work, cpu_fast::attention_workspace(a.T, HS));
      k_.attention_backward(a, wk.dao.data() + q0 * D, D, b.ao.data() + q0 * D, D, b.stats.data() + q0 * NH * 2,
                            wk.dqkv.data() + o * 3 * D, wk.work.data());
    }
    if (c_.pos_mode == PosMode::rope) rope_sequences(wk, wk.dqkv.data(), pb, ch, -1);  // 3'. R^T d(after)
    const E* dqkv = round_operand(wk.dqkv, wk.dqkv_e, R * 3 * D);
    // 3. q | k | v = n1 [Wq | Wk | Wv]^T
    linear_backward(wk.dn.data(), G + w.wq, dqkv, b.n1.data(), W(w.wq), R, 3 * D, C);
    // 2. n1 = Norm1(x): d x = dres (residual, at the rows that went on) + Norm1 backward
    grow(wk.dxin, R * C);
    if (last) {
      std::fill(wk.dxin.begin(), wk.dxin.begin() + R * C, 0.f);
      scatter_add_rows(wk.dxin.data(), wk.dres.data(), wk.live.data(), Rq, C);
    } else {
      std::copy(wk.dres.begin(), wk.dres.begin() + R * C, wk.dxin.begin());
    }
    k_.rmsnorm_backward(wk.dxin.data(), G + w.attn_norm1, wk.dn.data(), x, P(w.attn_norm1), b.r1.data(), int(R), C);
    std::swap(wk.dx, wk.dxin);
  }
};

class CpuFastDevice final : public detail::CpuDeviceBase {
 public:
  CpuFastDevice(const ModelConfig& c, int threads, Precision p, const CpuFastOptions& o) : CpuDeviceBase(c, p), o_(o) {
    if (c.pos_mode == PosMode::fire)
      throw InputError("the cpu-fast device does not run pos_mode fire (its bias is a T x T table per head, which this "
                       "device never holds): use --device cpu");
    if (c.pos_mode == PosMode::coupled_rel && p != Precision::fp32)
      throw InputError("the cpu-fast device runs pos_mode coupled_rel in fp32 only (its bias has no bf16 rounding "
                       "points here): use --precision fp32 or --device cpu");
    if (threads < 1 || threads > 256) throw InputError(fmt::format("threads must be in [1, 256] (got {})", threads));
    cpu_gemm::require("the cpu-fast device");
    if (o.chunk_rows < 1) throw InputError(fmt::format("chunk_rows must be >= 1 (got {})", o.chunk_rows));
    const Kernels& k = o.generic_kernels ? cpu_fast::generic_kernels() : cpu_fast::kernels();
    if (p == Precision::bf16 && !o.bf16_as_floats && cpu_gemm::bf16_supported())
      impl_ = std::make_unique<Impl<std::uint16_t>>(c_, lay_, threads, p, k, o.chunk_rows);
    else
      impl_ = std::make_unique<Impl<float>>(c_, lay_, threads, p, k, o.chunk_rows);
  }
  std::string name() const override { return "cpu-fast"; }
  void predict(const PackedBatch& pb, std::vector<std::uint8_t>& argmax) override { impl_->predict(p_.data(), pb, argmax); }

 private:
  CpuFastOptions o_;
  std::unique_ptr<ImplBase> impl_;
  double forward_backward(const PackedBatch& pb, float loss_scale, std::vector<float>& grads) override {
    return impl_->train(p_.data(), pb, loss_scale, entropy_weight(loss_scale), grads);
  }
};

}  // namespace

std::unique_ptr<TrainDevice> make_cpu_fast_device(const ModelConfig& c, int threads, Precision p, const CpuFastOptions& o) {
  return std::make_unique<CpuFastDevice>(c, threads, p, o);
}

std::string cpu_fast_description(Precision p, const CpuFastOptions& o) {
  const Kernels& k = o.generic_kernels ? cpu_fast::generic_kernels() : cpu_fast::kernels();
  const bool bits = p == Precision::bf16 && !o.bf16_as_floats && cpu_gemm::bf16_supported();
  return fmt::format("kernels {}, oneDNN {}, {}", k.name, cpu_gemm::isa_name(),
                     p == Precision::fp32 ? "fp32 products" : bits ? "bf16 products (vdpbf16ps)"
                                                                : "bf16 values in fp32 products");
}

}  // namespace manyadd::learn
