// The CUDA training device (learn::TrainDevice): weights, gradients, Adam moments and activations live
// on the GPU; each step uploads the host-packed batch (learn/batch.hpp: varlen, the real tokens only,
// with the sequences' row offsets), runs learn::model_forward / model_backward on the whole batch pass
// by pass (same numbers in the comments; every row-wise pass over the R real rows, attention per
// sequence on its own rows, as PackedCpuDevice), reduces the loss and
// the global gradient norm in a fixed order, and applies AdamW with the scalars the CPU trainer computes
// (learn::adam_scalars; the clipping factor computed on the device from the norm, bitwise the host's).
//
// Two precisions, one pipeline (CudaDevice<A>, A the type of every matrix product's inputs):
//  * fp32 (A = float): cuBLAS SGEMM (default math mode: no TF32) and the fp32 kernels.
//  * bf16 (A = kernels::bf16): the rounding points of learn's bf16 forward/backward (model.cpp,
//    learn/README "Precision"), i.e. of PackedCpuDevice in bf16, value for value: the matrix weights
//    (and a tied readout's token table) rounded to bf16 once per step (one convert of the whole
//    parameter buffer; the embedding lookup and the norms read the fp32 master values); norm outputs
//    n1, n3 written bf16 by the norm kernels; q, k, v and h written bf16 by their GEMMs (pos_mode rope: q
//    and k written fp32 by their GEMMs, rotated, then rounded by the rotation kernel); attention output
//    and GEGLU output written bf16 by their kernels (attention on tensor cores, kernels/flash_tc.hpp:
//    scores and softmax in fp32, the weights rounded to bf16 before they multiply v, as the CPU twin's
//    layers.hpp attention in bf16); proj, fo and logits fp32 GEMM outputs; the readout
//    input xr = bf16(xf [* d_model^-1/2]). Backward: dlogits and the residual gradients dres a GEMM reads
//    converted to bf16 copies; dao written bf16 by its GEMM; dq, dk, dv bf16 by the attention kernel
//    (bf16(P) into dv and dS rounded before it multiplies k or q, inside the kernel, as the twin; rope:
//    the kernel writes dq and dk in fp32, the inverse rotation reads them and rounds once, the twin's
//    order); dh
//    bf16 by the GEGLU kernel; dg, dn, the residual stream's gradient and every weight gradient fp32
//    (bf16 x bf16 products accumulated in fp32 by cuBLAS). So the device and its twin differ only by
//    fp32 accumulation order and the rare bf16 rounding it flips (tests/test_cuda_train.cpp).
//
// Asynchrony: step_async launches everything on the default stream and returns; the batch goes up from
// pinned staging buffers (two, alternating, each reused only after the copy from it has run) with
// asynchronous copies, the loss sum and the gradient's sum of squares stay on the device in a slot per
// step until take_results reads them (once per log line). Nothing in a step waits for the host: the
// host samples and packs the next batch (Trainer's packing thread) while the device computes. (Buffers grow, with cuda's implicit
// synchronization, only when a batch holds more rows than every earlier one; they grow to 1/8 more
// than asked, so a run of batches of similar size grows them a few times at its start.)
//
// Determinism: cuBLAS is run-to-run reproducible on one GPU model (bitwise for a toolkit version,
// architecture and SM count, single stream); every other reduction is ours and fixed order
// (kernels/src/train.cu). So a resumed CUDA run equals the uninterrupted CUDA run bit for bit on the
// same GPU model and toolkit, in either precision. The fp32 device's GPU tests passed on an H100 at
// commit 896f091; the bf16 device, the T5 options, pos_mode coupled3 (three position tables), pos_mode
// rope and input injection have not run on a GPU yet (compiled for sm_90; their tests are
// tests/test_cuda_train.cpp's *Gpu suites).
// Without CUDA in the build only make_cuda_device's refusal is compiled.
#include "manyadd/learn/devices/cuda_device.hpp"

#include "manyadd/kernels/device.hpp"

#if MANYADD_WITH_CUDA
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "manyadd/kernels/blas.hpp"
#include "manyadd/kernels/flash_tc.hpp"
#include "manyadd/kernels/train.hpp"
#include "manyadd/learn/decoder/layers.hpp"
#include "manyadd/learn/tasks/train_config.hpp"

namespace manyadd::learn {
namespace {
namespace K = manyadd::kernels::train;
using kernels::bf16;
template <class T>
using Buf = kernels::DeviceBuffer<T>;
static_assert(K::kMaxPosLevels == kMaxPosLevels, "the embedding kernels read every position level a model has");
using kernels::ScoreBias;
constexpr int kFireMaxRows = 46340;  // the attention kernels index the bias table in int: tri(T) < 2^31

template <class A>
struct BlockActs {  // one block's activations, (R, ...) as learn::Acts::Block (Tk = T), lse (NH R; base 2 in bf16) instead of att
  Buf<A> n1, q, k, v, ao, n3, h, g;  // matrix-product inputs: bf16 in the bf16 pipeline
  Buf<float> r1, lse, proj, res1, x1, r2, r3, fo, res2, x2, r4;
  Buf<float> xin;  // input_injection, blocks after the first: the previous output + x0
};

// The batch's host arrays in one pinned block (tokens, targets, position IDs per level, row offsets),
// uploaded with one asynchronous copy per array.
struct Staging {
  // targets, the position IDs of each level, offsets, the embedding's readers and their starts
  kernels::PinnedBuffer<std::int32_t> ints;
  kernels::PinnedBuffer<std::uint8_t> tok;   // R
  kernels::DeviceEvent copied;               // recorded after the copies from this staging buffer
};

constexpr std::size_t kStatSlots = 1024;  // steps whose (loss sum, sum of squares) wait on the device

template <class A>
class CudaDevice final : public TrainDevice {
  static constexpr bool kBf16 = std::is_same_v<A, bf16>;

 public:
  explicit CudaDevice(const ModelConfig& c) : c_(c), lay_(Layout::make(c)), segs_(lay_.trainable_segments()) {
    c_.validate();
    check_cuda_supports(c_, precision());
    n_ = std::size_t(lay_.total);
    params_.resize(n_), grads_.resize(n_), m_.resize(n_), v_.resize(n_);
    if constexpr (kBf16) wbf_.resize(n_);
    red_.resize(K::reduce_scratch_doubles());
    stats_.resize(2 * kStatSlots);
    att_scale_ = score_scale<float>(c_.attn_scale, c_.d_head);
    readout_scale_ = 1.f / std::sqrt(float(c_.d_model));  // model.cpp's readout_scale<float>
  }
  std::string name() const override { return "cuda"; }
  Precision precision() const override { return kBf16 ? Precision::bf16 : Precision::fp32; }

  void set_state(const std::vector<float>& p, const std::vector<float>& m, const std::vector<float>& v) override {
    MANYADD_INVARIANT(p.size() == n_ && m.size() == n_ && v.size() == n_, "CudaDevice::set_state: sizes");
    params_.upload(p.data(), n_), m_.upload(m.data(), n_), v_.upload(v.data(), n_);
  }
  void get_state(std::vector<float>& p, std::vector<float>& m, std::vector<float>& v) override {
    p.resize(n_), m.resize(n_), v.resize(n_);
    params_.download(p.data(), n_), m_.download(m.data(), n_), v_.download(v.data(), n_);
  }

  StepResult step(const PackedBatch& pb, float loss_scale, const TrainConfig& tc, std::int64_t t) override {
    MANYADD_INVARIANT(queued_ == 0 && taken_.empty(), "CudaDevice::step with deferred results not taken");
    step_async(pb, loss_scale, tc, t);
    return take_results().back();
  }

  // Forward, backward, sum of squares, AdamW with the clip factor computed on the device: no host wait.
  void step_async(const PackedBatch& pb, float loss_scale, const TrainConfig& tc, std::int64_t t) override {
    if (queued_ == kStatSlots) drain();  // all slots hold results: read them back (one wait)
    double* slot = stats_.get() + 2 * queued_;
    forward(pb, slot);
    grads_.zero();
    backward(pb, loss_scale);
    K::reduce_sum(grads_, std::int64_t(n_), true, red_, slot + 1);
    const AdamScalars s = adam_scalars(tc, t, 0.0);  // every scalar but the clip, which needs the norm
    // Frozen position codes (model.pos_codes) are outside the segments: never stepped, never decayed.
    for (const ParamSegment& sg : segs_)
      K::adamw_update(params_.get() + sg.offset, m_.get() + sg.offset, v_.get() + sg.offset, grads_.get() + sg.offset,
                      sg.size, slot + 1, tc.grad_clip, s.b1, s.b2, s.eps, s.step_size, s.inv_sqrt_bc2,
                      sg.decay ? s.wd : 0.f);
    ++queued_;
  }
  std::vector<StepResult> take_results() override {
    drain();
    std::vector<StepResult> r;
    r.swap(taken_);
    return r;
  }

  double gradient(const PackedBatch& pb, float loss_scale, std::vector<float>& grads) override {
    forward(pb, red_.get() + K::reduce_scratch_doubles() - 1);  // the scratch's result slot
    grads_.zero();
    backward(pb, loss_scale);
    grads.resize(n_);
    grads_.download(grads.data(), n_);
    double loss = 0;
    kernels::to_host(&loss, red_.get() + K::reduce_scratch_doubles() - 1, sizeof(double));
    return loss;
  }

  void predict(const PackedBatch& pb, std::vector<std::uint8_t>& argmax) override {  // (R)
    forward(pb, nullptr);
    const std::size_t R = std::size_t(pb.rows()), V = std::size_t(c_.vocab);
    host_logits_.resize(R * V);
    logits_.download(host_logits_.data(), R * V);
    argmax.resize(R);
    for (std::size_t i = 0; i < R; ++i) {
      const float* z = host_logits_.data() + i * V;
      argmax[i] = std::uint8_t(std::max_element(z, z + V) - z);  // lowest index on ties, as the CPU
    }
  }

 private:
  ModelConfig c_;
  Layout lay_;
  std::vector<ParamSegment> segs_;  // the trainable parameters
  std::size_t n_ = 0;
  float att_scale_ = 1, readout_scale_ = 1;
  kernels::Blas blas_;
  Buf<float> params_, grads_, m_, v_;
  Buf<bf16> wbf_;  // bf16: the parameters rounded, read by every matrix product
  Buf<double> red_, stats_;
  std::size_t queued_ = 0;          // steps whose stats sit in stats_ slots 0..queued_-1
  std::vector<StepResult> taken_;   // read back, not yet returned
  std::array<Staging, 2> staging_;
  int next_staging_ = 0;
  // batch
  std::size_t rcap_ = 0, bcap_ = 0;  // rows and sequences the buffers hold
  Buf<std::uint8_t> tok_;
  Buf<std::int32_t> pos_[kMaxPosLevels], tgt_, off_;  // position IDs per level in use; row offsets (B + 1)
  Buf<std::int32_t> readers_[1 + kMaxPosLevels], starts_[1 + kMaxPosLevels];  // PackedBatch::readers, starts
  Buf<float> x0_, xf_, mf_, rf_, logits_, probs_, losses_;
  Buf<A> xr_;  // the readout's input when it is not xf (tied, or bf16)
  std::vector<BlockActs<A>> blocks_;
  Buf<float> dlogits_, dxf_, dx_, dres_, dn_, dg_, attscr_, normscr_;
  Buf<A> dlogits16_, dres16_;  // bf16: the rounded copies a product reads
  Buf<A> dh_, dao_, dq_, dk_, dv_;
  Buf<float> dx0_;  // input_injection: d x0 from the blocks after the first
  // pos_mode rope: cos and sin of positions 0..rope_rows_-1 (learn::rope_tables<float>, grown with the
  // longest sequence); bf16: the fp32 q, k GEMM outputs the rotation reads in the forward, and in the
  // backward the flash kernel's fp32 dq, dk (so that they reach the inverse rotation unrounded)
  Buf<float> rope_cs_, rope_sn_;
  std::size_t rope_rows_ = 0;
  Buf<float> qf_, kf_;
  // pos_mode fire (kernels/README.md "FIRE on CUDA"), fp32 in both precisions: the MLP on every pair (i,
  // d <= i) of the batch's longest sequence (fire_P_ = tri(T) pairs; score_bias.hpp's table): u (P), h1, h2
  // (P, H), the bias (NH, P); backward: its gradient (NH, P), one layer's slots (NH sum_b tri(T_b)) and
  // their offsets (B + 1), the MLP's gradients, the scalars' per-pair terms and their two sums.
  long long fire_P_ = 0;
  Buf<float> fire_u_, fire_h1_, fire_h2_, fire_bias_, fire_dbias_, fire_slots_, fire_dh1_, fire_dh2_, fire_du_,
      fire_tc_, fire_tl_;
  Buf<long long> fire_soff_;
  Buf<double> fire_sums_;
  std::vector<float> host_logits_;

  const float* P(std::int64_t off) const { return params_.get() + off; }
  float* G(std::int64_t off) const { return grads_.get() + off; }
  // The weights the matrix products read: the parameters (fp32) or their bf16 copy.
  const A* W(std::int64_t off) const {
    if constexpr (kBf16) return wbf_.get() + off;
    else return params_.get() + off;
  }

  void drain() {
    if (queued_ == 0) return;
    std::vector<double> h(2 * queued_);
    stats_.download(h.data(), h.size());  // waits for the launched steps
    for (std::size_t i = 0; i < queued_; ++i) taken_.push_back({h[2 * i], std::sqrt(h[2 * i + 1])});
    queued_ = 0;
  }

  // out (R, OC) = inp (R, C) W^T with W (OC, C), all row-major; out fp32, or bf16 (rounded once) in the
  // bf16 pipeline.
  template <class O>
  void mm_forward(O* out, const A* inp, const A* w, int R, int C, int OC) {
    blas_.linear_forward(out, inp, w, R, C, OC);
  }
  // dinp (R, C) = dout W (written; added to with accumulate) ; dW (OC, C) += dout^T inp.
  template <class DI>
  void mm_backward(DI* dinp, float* dw, const A* dout, const A* inp, const A* w, int R, int C, int OC,
                   bool accumulate) {
    if constexpr (!kBf16) {  // SGEMM accumulating into both (the fp32 twin's += on a zeroed dinp)
      if (!accumulate) kernels::dev_zero(dinp, std::size_t(R) * C * sizeof(float));
      blas_.linear_backward(dinp, dw, dout, inp, w, R, C, OC);
    } else {
      if constexpr (std::is_same_v<DI, float>) {
        blas_.linear_backward_input(dinp, dout, w, R, C, OC, accumulate);
      } else {
        MANYADD_INVARIANT(!accumulate, "a bf16 gradient is written, never accumulated (it would round twice)");
        blas_.linear_backward_input(dinp, dout, w, R, C, OC);
      }
      blas_.linear_backward_weight(dw, dout, inp, R, C, OC);
    }
  }
  // A fp32 gradient as a product's input: itself (fp32) or its bf16 copy in `copy`.
  const A* as_input(const Buf<float>& g, Buf<A>& copy, std::int64_t n) {
    if constexpr (kBf16) {
      K::convert(copy.get(), g.get(), n);
      return copy.get();
    } else {
      (void)copy, (void)n;
      return g.get();
    }
  }

  // Device buffers for the batch (grown, never shrunk, to 1/8 more rows and sequences than asked, so that
  // batches of similar size rarely grow them), and the batch uploaded through the next pinned staging buffer.
  void ensure(const PackedBatch& pb) {
    MANYADD_INVARIANT(pb.offsets.size() == std::size_t(pb.B) + 1 && pb.offsets[std::size_t(pb.B)] == pb.rows(),
                      "CudaDevice: a packed batch without its row offsets");
    if (std::size_t(pb.rows()) > rcap_) rcap_ = (std::size_t(pb.rows()) * 9 / 8 + 255) / 256 * 256;
    if (std::size_t(pb.B) + 1 > bcap_) bcap_ = (std::size_t(pb.B) + 1) * 9 / 8 + 1;
    const std::size_t R = rcap_, C = std::size_t(c_.d_model), D = std::size_t(c_.n_heads) * std::size_t(c_.d_head),
                      F = std::size_t(c_.d_ff), V = std::size_t(c_.vocab), HR = R * std::size_t(c_.n_heads);
    tok_.resize(R), tgt_.resize(R), off_.resize(bcap_);
    for (int lv = 0; lv < pos_levels(c_.pos_mode); ++lv) pos_[lv].resize(R);
    for (int k = 0; k <= pos_levels(c_.pos_mode); ++k) readers_[k].resize(R), starts_[k].resize(table_rows(k) + 1);
    x0_.resize(R * C), xf_.resize(R * C), mf_.resize(R), rf_.resize(R), xr_.resize(R * C), logits_.resize(R * V);
    probs_.resize(R * V), losses_.resize(R);
    if (blocks_.size() != std::size_t(c_.n_layers)) blocks_ = std::vector<BlockActs<A>>(std::size_t(c_.n_layers));
    for (auto& b : blocks_) {
      if (c_.input_injection) b.xin.resize(R * C);
      b.n1.resize(R * C), b.r1.resize(R), b.q.resize(R * D), b.k.resize(R * D), b.v.resize(R * D), b.ao.resize(R * D);
      b.lse.resize(HR), b.proj.resize(R * C), b.res1.resize(R * C), b.x1.resize(R * C), b.r2.resize(R);
      b.n3.resize(R * C), b.r3.resize(R), b.h.resize(R * 2 * F), b.g.resize(R * F), b.fo.resize(R * C);
      b.res2.resize(R * C), b.x2.resize(R * C), b.r4.resize(R);
    }
    dlogits_.resize(R * V), dlogits16_.resize(R * V), dxf_.resize(R * C), dx_.resize(R * C), dres_.resize(R * C);
    dres16_.resize(R * C), dn_.resize(R * C), dh_.resize(R * 2 * F), dg_.resize(R * F), dao_.resize(R * D);
    dq_.resize(R * D), dk_.resize(R * D), dv_.resize(R * D), attscr_.resize(HR);
    normscr_.resize(std::max(K::rmsnorm_scratch_floats(int(R), int(C)), K::layernorm_scratch_floats(int(R), int(C))));
    if (c_.input_injection) dx0_.resize(R * C);
    if (c_.pos_mode == PosMode::rope) {
      if (std::size_t(pb.T) > rope_rows_) {  // row t depends on t alone: the tables only grow
        rope_rows_ = std::size_t(pb.T) * 9 / 8 + 1;
        std::vector<float> cs, sn;
        rope_tables(cs, sn, 0, int(rope_rows_), c_.d_head, kRopeBase);
        rope_cs_.resize(cs.size()), rope_sn_.resize(sn.size());
        rope_cs_.upload(cs.data(), cs.size()), rope_sn_.upload(sn.data(), sn.size());
      }
      if constexpr (kBf16) qf_.resize(R * D), kf_.resize(R * D);
    }
    if (c_.pos_mode == PosMode::fire) {
      if (pb.T > kFireMaxRows)
        throw InputError("--device cuda: pos_mode fire takes sequences of at most " + std::to_string(kFireMaxRows) +
                         " tokens (got " + std::to_string(pb.T) + "; the CPU devices run longer ones)");
      const std::size_t P = std::size_t(K::fire_pairs(pb.T)), H = std::size_t(c_.fire_width),
                        NHs = std::size_t(c_.n_heads);
      fire_u_.resize(P), fire_h1_.resize(P * H), fire_h2_.resize(P * H), fire_bias_.resize(NHs * P);
    }
    upload(pb);
  }
  // The backward's FIRE buffers (not in ensure: evaluation's long sequences, up to 2^17 rows of them, would
  // otherwise hold NH sum_b tri(T_b) slots, gigabytes, for a forward that never writes them).
  void ensure_fire_backward(const PackedBatch& pb) {
    const std::size_t P = std::size_t(fire_P_), H = std::size_t(c_.fire_width), NHs = std::size_t(c_.n_heads);
    std::size_t slots = 0;
    for (int b = 0; b < pb.B; ++b) slots += std::size_t(K::fire_pairs(pb.length(b)));
    fire_dbias_.resize(NHs * P), fire_slots_.resize(NHs * slots), fire_dh1_.resize(P * H), fire_dh2_.resize(P * H);
    fire_du_.resize(P), fire_tc_.resize(P), fire_tl_.resize(P), fire_soff_.resize(bcap_), fire_sums_.resize(2);
  }
  void upload(const PackedBatch& pb) {
    const std::size_t R = std::size_t(pb.rows()), B1 = std::size_t(pb.B) + 1;
    Staging& s = staging_[std::size_t(next_staging_)];
    next_staging_ ^= 1;
    s.copied.synchronize();  // the copies from this buffer two batches ago have run
    const int L = pos_levels(c_.pos_mode);
    std::size_t all_starts = 0;
    for (int k = 0; k <= L; ++k) all_starts += table_rows(k) + 1;
    s.ints.resize(std::size_t(2 + 2 * L) * rcap_ + bcap_ + all_starts), s.tok.resize(rcap_);
    std::memcpy(s.tok.get(), pb.tokens.data(), R);
    std::memcpy(s.ints.get(), pb.targets.data(), R * sizeof(std::int32_t));
    kernels::to_device_async(tok_, s.tok.get(), R);
    kernels::to_device_async(tgt_, s.ints.get(), R * sizeof(std::int32_t));
    for (int lv = 0; lv < L; ++lv) {
      MANYADD_INVARIANT(pb.pos[lv].size() == R, "CudaDevice: a packed batch without the model's position level");
      std::int32_t* h = s.ints.get() + std::size_t(lv + 1) * R;
      std::memcpy(h, pb.pos[lv].data(), R * sizeof(std::int32_t));
      kernels::to_device_async(pos_[lv], h, R * sizeof(std::int32_t));
    }
    std::int32_t* h = s.ints.get() + std::size_t(1 + L) * R;
    std::memcpy(h, pb.offsets.data(), B1 * sizeof(std::int32_t));
    kernels::to_device_async(off_, h, B1 * sizeof(std::int32_t));
    h += B1;
    for (int k = 0; k <= L; ++k) {
      const std::size_t ns = table_rows(k) + 1;
      MANYADD_INVARIANT(pb.readers[k].size() == R && pb.reader_starts[k].size() == ns,
                        "CudaDevice: a packed batch without the embedding's readers");
      std::memcpy(h, pb.readers[k].data(), R * sizeof(std::int32_t));
      kernels::to_device_async(readers_[k], h, R * sizeof(std::int32_t));
      h += R;
      std::memcpy(h, pb.reader_starts[k].data(), ns * sizeof(std::int32_t));
      kernels::to_device_async(starts_[k], h, ns * sizeof(std::int32_t));
      h += ns;
    }
    s.copied.record();
  }
  // Rows of embedding table k: 0 the token table, 1 + lv position level lv's.
  std::size_t table_rows(int k) const { return std::size_t(k == 0 ? c_.vocab : c_.max_pos(k - 1) + 1); }

  // learn::model_forward on the packed batch, pass by pass. The loss sum (fixed-order double reduction)
  // goes to *loss on the device (nullptr: no loss, prediction only).
  void forward(const PackedBatch& pb, double* loss) {
    ensure(pb);
    if constexpr (kBf16) K::convert(wbf_, params_, std::int64_t(n_));  // the step's bf16 weights
    const int B = pb.B, R = int(pb.rows()), C = c_.d_model, NH = c_.n_heads, HS = c_.d_head, D = NH * HS,
              F = c_.d_ff, V = c_.vocab, L = pos_levels(c_.pos_mode);
    const std::int64_t RC = std::int64_t(R) * C;
    const float eps = c_.norm_eps;
    // 1.
    const std::int32_t* ids[kMaxPosLevels];
    const float* wpe[kMaxPosLevels];
    for (int lv = 0; lv < kMaxPosLevels; ++lv) ids[lv] = pos_[lv], wpe[lv] = P(lay_.wpe[lv]);
    K::embedding_forward(x0_, tok_, ids, L, P(lay_.wte), wpe, R, C);
    // 0. FIRE: the bias of every pair of the longest sequence, which every layer and sequence reads
    const ScoreBias sb = c_.pos_mode == PosMode::fire ? fire_forward(pb.T) : ScoreBias{};
    const float* x = x0_;
    for (int l = 0; l < c_.n_layers; ++l) {
      auto& b = blocks_[std::size_t(l)];
      const auto& w = lay_.blocks[std::size_t(l)];
      if (c_.input_injection && l > 0) {  // block l >= 1 reads its predecessor's output + x0
        K::residual_forward(b.xin, x, x0_, RC);
        x = b.xin;
      }
      // 2. 3. (RoPE: q, k rotated from the fp32 products, then rounded in bf16, as the twin)
      K::rmsnorm_forward(b.n1.get(), b.r1, x, P(w.attn_norm1), R, C, eps);
      if (c_.pos_mode == PosMode::rope) {
        float* qf = qk_fp32(b.q, qf_);
        float* kf = qk_fp32(b.k, kf_);
        mm_forward(qf, b.n1, W(w.wq), R, C, D);
        mm_forward(kf, b.n1, W(w.wk), R, C, D);
        K::rope_forward(b.q.get(), qf, rope_cs_, rope_sn_, off_, B, R, NH, HS);
        K::rope_forward(b.k.get(), kf, rope_cs_, rope_sn_, off_, B, R, NH, HS);
      } else {
        mm_forward(b.q.get(), b.n1, W(w.wq), R, C, D);
        mm_forward(b.k.get(), b.n1, W(w.wk), R, C, D);
      }
      mm_forward(b.v.get(), b.n1, W(w.wv), R, C, D);
      // 4. (bf16: the tensor-core flash kernel, lse in base 2; fp32: the CUDA-core flash kernel)
      if constexpr (kBf16)
        kernels::flash::attention_forward(b.ao.get(), b.lse, b.q, b.k, b.v, off_, B, R, NH, HS, att_scale_, sb);
      else
        K::attention_forward(b.ao.get(), b.lse, b.q, b.k, b.v, off_, B, R, NH, HS, att_scale_, sb);
      // 5.
      mm_forward(b.proj.get(), b.ao, W(w.wo), R, D, C);
      K::residual_forward(b.res1, x, b.proj, RC);
      K::rmsnorm_forward(b.x1.get(), b.r2, b.res1, P(w.attn_norm2), R, C, eps);
      // 6. 7.
      K::rmsnorm_forward(b.n3.get(), b.r3, b.x1, P(w.ffn_norm1), R, C, eps);
      mm_forward(b.h.get(), b.n3, W(w.wi), R, C, 2 * F);
      K::geglu_forward(b.g.get(), b.h, R, F);
      mm_forward(b.fo.get(), b.g, W(w.wo_ff), R, F, C);
      K::residual_forward(b.res2, b.x1, b.fo, RC);
      K::rmsnorm_forward(b.x2.get(), b.r4, b.res2, P(w.ffn_norm2), R, C, eps);
      x = b.x2;
    }
    // 8. xf = final_norm(x) ; xr = xf [* d_model^-1/2 when tied] [rounded in bf16] ; logits = xr W^T
    if (c_.final_norm == NormKind::layer)
      K::layernorm_forward(xf_, mf_, rf_, x, P(lay_.final_norm), P(lay_.final_norm_bias), R, C, eps);
    else
      K::rmsnorm_forward(xf_.get(), rf_, x, P(lay_.final_norm), R, C, eps);
    mm_forward(logits_.get(), readout_input(RC), W(lay_.readout()), R, C, V);
    if (!loss) return;
    K::crossentropy_forward(losses_, probs_, logits_, tgt_, R, V);
    K::reduce_sum(losses_, R, false, red_, loss);
  }
  // FIRE's forward (learn::fire_forward, every pair unmerged): u and h1 = relu(u W1^T) per pair, h2 =
  // relu(h1 W2^T), the bias (NH, P) = W3 h2^T (fp32 SGEMMs in both precisions: the twin's MLP is fp32).
  ScoreBias fire_forward(int T) {
    const int H = c_.fire_width, NH = c_.n_heads;
    fire_P_ = K::fire_pairs(T);
    const int Pn = int(fire_P_);
    K::fire_mlp_input(fire_u_, fire_h1_, P(lay_.fire_w1), P(lay_.fire_c), P(lay_.fire_L_sqrt), T, H, fire_max());
    blas_.linear_forward(fire_h2_.get(), fire_h1_.get(), P(lay_.fire_w2), Pn, H, H);
    K::relu_forward(fire_h2_, std::int64_t(fire_P_) * H);
    blas_.linear_forward(fire_bias_.get(), P(lay_.fire_w3), fire_h2_.get(), NH, H, Pn);
    return {fire_bias_.get(), fire_P_, nullptr, nullptr};
  }
  bool fire_max() const { return c_.fire_threshold == FireThreshold::max; }
  // FIRE's backward (learn::fire_backward): the bias's gradient dbias (NH, P), summed by the layers'
  // fire_dbias_reduce, through the MLP (the twin's fire_mlp_backward: dW3, dh2, dW2, dh1, dW1, du), then
  // d c and d L_sqrt from each pair's terms, summed in double in a fixed order.
  void fire_backward(int T) {
    const int H = c_.fire_width, NH = c_.n_heads, Pn = int(fire_P_);
    const std::size_t PH = std::size_t(fire_P_) * std::size_t(H);
    kernels::dev_zero(fire_dh2_, PH * sizeof(float));
    blas_.linear_backward(G(lay_.fire_w3), fire_dh2_.get(), fire_dbias_.get(), P(lay_.fire_w3), fire_h2_.get(), NH, H,
                          Pn);  // dW3 += dbias h2 ; dh2 = dbias^T W3
    K::relu_backward(fire_dh2_, fire_h2_, std::int64_t(PH));
    kernels::dev_zero(fire_dh1_, PH * sizeof(float));
    blas_.linear_backward(fire_dh1_.get(), G(lay_.fire_w2), fire_dh2_.get(), fire_h1_.get(), P(lay_.fire_w2), Pn, H, H);
    K::relu_backward(fire_dh1_, fire_h1_, std::int64_t(PH));
    kernels::dev_zero(fire_du_, std::size_t(fire_P_) * sizeof(float));
    blas_.linear_backward(fire_du_.get(), G(lay_.fire_w1), fire_dh1_.get(), fire_u_.get(), P(lay_.fire_w1), Pn, 1, H);
    K::fire_scalar_terms(fire_tc_, fire_tl_, fire_du_, P(lay_.fire_c), P(lay_.fire_L_sqrt), T, fire_max());
    K::reduce_sum(fire_tc_, fire_P_, false, red_, fire_sums_.get());
    K::reduce_sum(fire_tl_, fire_P_, false, red_, fire_sums_.get() + 1);
    K::add_double(G(lay_.fire_c), fire_sums_.get());
    K::add_double(G(lay_.fire_L_sqrt), fire_sums_.get() + 1);
  }
  // RoPE's fp32 q or k before the rotation: the activation itself (fp32, rotated in place) or the fp32
  // scratch (bf16: the rotation writes the rounded activation).
  float* qk_fp32(Buf<A>& act, Buf<float>& scratch) {
    if constexpr (kBf16) {
      (void)act;
      return scratch.get();
    } else {
      (void)scratch;
      return act.get();
    }
  }
  const A* readout_input(std::int64_t RC) {
    if (c_.tie_readout) {
      K::scale_forward(xr_.get(), xf_, readout_scale_, RC);
      return xr_;
    }
    if constexpr (kBf16) {
      K::convert(xr_.get(), xf_, RC);
      return xr_;
    } else {
      return xf_;
    }
  }
  const A* readout_input_saved() const {
    if constexpr (kBf16) return xr_;
    else return c_.tie_readout ? xr_.get() : xf_.get();
  }

  // learn::model_backward on the packed batch, pass by pass; grads_ must be zero.
  void backward(const PackedBatch& pb, float loss_scale) {
    const int B = pb.B, R = int(pb.rows()), C = c_.d_model, NH = c_.n_heads, HS = c_.d_head, D = NH * HS,
              F = c_.d_ff, V = c_.vocab, L = pos_levels(c_.pos_mode);
    const std::int64_t RC = std::int64_t(R) * C;
    const std::size_t RCb = std::size_t(RC) * sizeof(float);
    // 8.
    K::crossentropy_backward(dlogits_, probs_, tgt_, loss_scale, R, V);
    const A* dlog = as_input(dlogits_, dlogits16_, std::int64_t(R) * V);
    const A* xr = readout_input_saved();
    kernels::dev_zero(dxf_, RCb);  // the batch's rows only (the buffers hold more)
    if (c_.tie_readout) {  // d xr into dn (scratch), then dxf += s d xr
      mm_backward(dn_.get(), G(lay_.readout()), dlog, xr, W(lay_.readout()), R, C, V, false);
      K::scale_backward(dxf_, dn_, readout_scale_, RC);
    } else {
      mm_backward(dxf_.get(), G(lay_.readout()), dlog, xr, W(lay_.readout()), R, C, V, true);
    }
    kernels::dev_zero(dx_, RCb);
    const float* xlast = blocks_.back().x2.get();
    if (c_.final_norm == NormKind::layer)
      K::layernorm_backward(dx_, G(lay_.final_norm), G(lay_.final_norm_bias), normscr_, dxf_, xlast,
                            P(lay_.final_norm), mf_, rf_, R, C);
    else
      K::rmsnorm_backward(dx_, G(lay_.final_norm), normscr_, dxf_.get(), xlast, P(lay_.final_norm), rf_, R, C);
    if (c_.input_injection) kernels::dev_zero(dx0_, RCb);
    // FIRE: the bias read again, its gradient's slots written by each layer's attention backward and
    // summed into dbias after it (layer by layer, each layer's sequences in order: the twin's order)
    ScoreBias sb;
    if (c_.pos_mode == PosMode::fire) {
      ensure_fire_backward(pb);
      sb = {fire_bias_.get(), fire_P_, fire_slots_.get(), fire_soff_.get()};
      K::fire_slot_offsets(fire_soff_, off_, B);
      kernels::dev_zero(fire_dbias_, std::size_t(NH) * std::size_t(fire_P_) * sizeof(float));
    }
    for (int l = c_.n_layers - 1; l >= 0; --l) {
      auto& b = blocks_[std::size_t(l)];
      const auto& w = lay_.blocks[std::size_t(l)];
      const bool inj = c_.input_injection && l > 0;
      const float* a_in = l == 0 ? x0_.get() : inj ? b.xin.get() : blocks_[std::size_t(l - 1)].x2.get();
      // 7.
      kernels::dev_zero(dres_, RCb);
      K::rmsnorm_backward(dres_, G(w.ffn_norm2), normscr_, dx_.get(), b.res2, P(w.ffn_norm2), b.r4, R, C);
      // 6.
      mm_backward(dg_.get(), G(w.wo_ff), as_input(dres_, dres16_, RC), b.g, W(w.wo_ff), R, F, C, false);
      if constexpr (!kBf16) kernels::dev_zero(dh_, std::size_t(R) * 2 * F * sizeof(float));  // fp32: accumulated into; bf16: written
      K::geglu_backward(dh_.get(), dg_.get(), b.h.get(), R, F);
      mm_backward(dn_.get(), G(w.wi), dh_, b.n3, W(w.wi), R, C, 2 * F, false);
      kernels::dev_copy(dx_, dres_, RCb);
      K::rmsnorm_backward(dx_, G(w.ffn_norm1), normscr_, dn_.get(), b.x1, P(w.ffn_norm1), b.r3, R, C);
      // 5.
      kernels::dev_zero(dres_, RCb);
      K::rmsnorm_backward(dres_, G(w.attn_norm2), normscr_, dx_.get(), b.res1, P(w.attn_norm2), b.r2, R, C);
      mm_backward(dao_.get(), G(w.wo), as_input(dres_, dres16_, RC), b.ao, W(w.wo), R, D, C, false);
      // 4. (written, not accumulated; bf16: D = dao . ao into attscr_) 3'. RoPE: dq, dk rotated back (the
      //    rotation's transpose), then rounded (bf16: the flash kernel writes them fp32 into the forward's q,
      //    k scratch, free by now; the rotation rounds them once)
      if constexpr (kBf16) {
        if (c_.pos_mode == PosMode::rope) {
          kernels::flash::attention_backward(qf_.get(), kf_.get(), dv_.get(), attscr_, dao_.get(), b.ao.get(), b.lse,
                                             b.q.get(), b.k.get(), b.v.get(), off_, B, R, NH, HS, att_scale_);
          K::rope_backward(dq_.get(), qf_, rope_cs_, rope_sn_, off_, B, R, NH, HS);
          K::rope_backward(dk_.get(), kf_, rope_cs_, rope_sn_, off_, B, R, NH, HS);
        } else {
          kernels::flash::attention_backward(dq_.get(), dk_.get(), dv_.get(), attscr_, dao_.get(), b.ao.get(), b.lse,
                                             b.q.get(), b.k.get(), b.v.get(), off_, B, R, NH, HS, att_scale_, sb);
        }
      } else {
        K::attention_backward(dq_.get(), dk_.get(), dv_.get(), attscr_, dao_.get(), b.lse, b.q.get(), b.k.get(),
                              b.v.get(), off_, B, R, NH, HS, att_scale_, sb);
        if (c_.pos_mode == PosMode::rope) {
          K::rope_backward(dq_.get(), dq_.get(), rope_cs_, rope_sn_, off_, B, R, NH, HS);
          K::rope_backward(dk_.get(), dk_.get(), rope_cs_, rope_sn_, off_, B, R, NH, HS);
        }
      }
      if (sb.dslots) K::fire_dbias_reduce(fire_dbias_, fire_slots_, fire_soff_, off_, B, NH, pb.T);
      // 3.
      mm_backward(dn_.get(), G(w.wq), dq_, b.n1, W(w.wq), R, C, D, false);
      mm_backward(dn_.get(), G(w.wk), dk_, b.n1, W(w.wk), R, C, D, true);
      mm_backward(dn_.get(), G(w.wv), dv_, b.n1, W(w.wv), R, C, D, true);
      // 2.
      kernels::dev_copy(dx_, dres_, RCb);
      K::rmsnorm_backward(dx_, G(w.attn_norm1), normscr_, dn_.get(), a_in, P(w.attn_norm1), b.r1, R, C);
      if (inj) K::residual_forward(dx0_, dx0_, dx_, RC);  // d xin flows to x0 (dx0 += dx) and on to block l - 1
    }
    if (c_.input_injection) K::residual_forward(dx_, dx_, dx0_, RC);  // d x0 = block 0's + the injections'
    // 1. (a tied readout's gradient is already in dwte: the sums of rows are added to it)
    const std::int32_t* readers[1 + kMaxPosLevels];
    const std::int32_t* starts[1 + kMaxPosLevels];
    float* dwpe[kMaxPosLevels];
    int rows[kMaxPosLevels];
    for (int lv = 0; lv < kMaxPosLevels; ++lv) dwpe[lv] = G(lay_.wpe[lv]), rows[lv] = c_.max_pos(lv) + 1;
    for (int k = 0; k <= kMaxPosLevels; ++k) readers[k] = readers_[k], starts[k] = starts_[k];
    K::embedding_backward(G(lay_.wte), dwpe, dx_, readers, starts, L, C, V, rows);
    // A frozen position code is a constant: its gradient is zero, as the CPU's (which accumulates none).
    for (int lv = 0; lv < L; ++lv)
      if (pos_code_frozen(c_.pos_codes[lv]))
        kernels::dev_zero(G(lay_.wpe[lv]), std::size_t(c_.max_pos(lv) + 1) * std::size_t(C) * sizeof(float));
    // 0. FIRE: the bias's gradient, summed over sequences and layers, through the MLP to its weights, c, L_sqrt
    if (c_.pos_mode == PosMode::fire) fire_backward(pb.T);
  }
};

}  // namespace

}  // namespace manyadd::learn
#endif  // MANYADD_WITH_CUDA

namespace manyadd::learn {

bool cuda_training_available(std::string* why) { return kernels::device_available(why); }

void check_cuda_supports(const ModelConfig& c, Precision) {
  if (c.pos_mode == PosMode::coupled_rel)
    throw InputError("--device cuda does not run pos_mode coupled_rel yet (its bias is built per sequence from the "
                     "position IDs on the CPU devices); train it with --device cpu");
  // fp32: the CUDA-core flash kernels hold a head's row across a warp's registers, 16 dims per lane at
  // most; bf16: the tensor-core kernels' widest instance is 512 (its tiles fill a CTA's shared memory).
  constexpr int kMaxHeadDim = 512;
  if (c.d_head > kMaxHeadDim)
    throw InputError("--device cuda does not support d_head " + std::to_string(c.d_head) + " (at most " +
                     std::to_string(kMaxHeadDim) + ": the attention kernels keep a head's row in a warp's registers "
                     "(fp32) or tiles of it in shared memory (bf16); the CPU devices run it)");
}

std::unique_ptr<TrainDevice> make_cuda_device(const ModelConfig& c, Precision p) {
  check_cuda_supports(c, p);
  std::string why;
  if (!kernels::device_available(&why)) throw InputError("no CUDA device: " + why);
#if MANYADD_WITH_CUDA
  if (p == Precision::bf16) return std::make_unique<CudaDevice<kernels::bf16>>(c);
  return std::make_unique<CudaDevice<float>>(c);
#else
  (void)c;
  throw InvariantError("a CUDA device was reported in a build without CUDA");
#endif
}

}  // namespace manyadd::learn
