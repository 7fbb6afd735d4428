// The fast CPU device's own kernels (cpu_fast_device.cpp; the matrix products are oneDNN's, cpu_gemm.hpp):
// attention over a sequence's rows fused (scores, softmax and values of a few query rows at a time in
// cache: no T x T buffer, forward or backward), GEGLU, and the bf16 rounding. One source
// (cpu_fast_kernels.inc) compiled twice: for plain x86-64 and, in a region of `#pragma GCC target`, for
// AVX-512; kernels() picks the AVX-512 build where the CPU has it (the project itself compiles for
// x86-64). The two builds compute the same operations with other vector widths: they agree within the
// fp32 bounds of test_learn_fast, not bit for bit; each is deterministic.
//
// Arithmetic against the reference (layers.hpp), which the device's tests bound:
//  * attention: the reference's operations per (query row, key) and its rounding points in bf16
//    (layers.hpp attention_forward/backward: FlashAttention-2's), the sums over keys and over a head's
//    dimensions in another order (vectors of 16 partial sums); exp and exp2 are polynomials within 2 ulp
//    (measured in the tests) instead of libm's; scores of a backward are recomputed, bit for bit those of
//    the forward, from the saved row statistics (fp32: max and sum; bf16: the integer M and l).
//  * RMSNorm: the reference's operations, a row's two sums in 16 partial sums.
//  * GEGLU: gelu_tanh(x) = 0.5 x (1 + tanh(u)) computed as x sigmoid(2u) (the same function:
//    1 + tanh(u) = 2 sigmoid(2u)), exp by the same polynomial; accurate to a few ulp relative where the
//    tanh form cancels (x << 0).
//  * bf16 rounding: core's float_to_bf16 bit for bit (round to nearest even, NaN kept).
#pragma once

#include <cstdint>

namespace manyadd::learn::cpu_fast {

// One sequence's attention for one layer. qkv (T, ld) holds the rows of q | k | v (columns [0, D),
// [D, 2D), [2D, 3D), D = NH HS, head h at h HS within each), in bf16 training the bf16 values (as
// floats). The queries computed are the rows qrows[0..nq) (ascending; each sees keys 0..its row): all
// rows, or in the last layer only the rows whose output a loss reads. scale: the scores' factor
// (1/sqrt(HS) or 1). bf16: layers.hpp's bf16 rounding points.
struct AttnArgs {
  int T = 0, NH = 0, HS = 0;
  const float* qkv = nullptr;
  std::int64_t ld = 0;
  const std::int32_t* qrows = nullptr;
  int nq = 0;
  float scale = 1.f;
  bool bf16 = false;
  // pos_mode coupled_rel (fp32 only): the score of query row i and key j plus sum over the two levels of
  // rel_gain[(h 2 + lv) nb + bucket] (layers.hpp coupled_rel_bias and coupled_rel_bucket; nb = 2 rel_W + 1,
  // + 1 with rel_far), the sequence's IDs rel_ids[lv][0 .. T); rel_gain null: no bias. The backward adds
  // each pair's d score into rel_dgain (same layout) when it is not null.
  const float* rel_gain = nullptr;
  const std::int32_t* rel_ids[2] = {nullptr, nullptr};
  int rel_W = 0;
  bool rel_far = false;
  bool rel_far_norm = false;
  bool rel_far_mask = false;  // keys far on either level get -inf (coupled_rel_masked)  // the far gain minus ln(the row's far keys on the level): coupled_rel_far_shift
  float* rel_dgain = nullptr;
  // model.rel_value (fp32 only; needs rel_gain's IDs): the layer's (NH, 2, nb, HS) vectors, each computed row's
  // output plus sum over levels and buckets of its bucket mass times the bucket's vector (layers.hpp
  // coupled_rel_value: the same operations); the backward adds d r into rel_dvalue (same layout) when not null.
  const float* rel_value = nullptr;
  float* rel_dvalue = nullptr;
  // train.attn_entropy (fp32 only; the backward): plus the gradient of entropy_w times every computed query
  // row's entropy -sum_j P_j ln P_j (layers.hpp attention_backward's ent_w on the rows qrows).
  float entropy_w = 0.f;
};
// Scratch floats the attention kernels need for a sequence of T rows (forward and backward).
std::int64_t attention_workspace(int T, int HS);

struct Kernels {
  const char* name;  // "avx512" | "x86-64"
  // out (nq, D) row stride ldo: query r's output (fp32: sum_j P_j v_j; bf16: (sum_j bf16(w_j) v_j) / l,
  // w_j = 2^(z_j - M)); stats (nq, NH, 2): the row statistics (fp32: max s, sum e; bf16: M, l).
  void (*attention_forward)(const AttnArgs& a, float* out, std::int64_t ldo, float* stats, float* work);
  // dqkv (T, ld), overwritten: dq at the rows qrows (0 at the other rows), dk and dv at every row, from
  // dout (nq, D, row stride lddo: in bf16 the rounded gradient), out (nq, D, ldo: the forward's output as
  // the next product reads it, bf16: rounded; used for D_i = dout_i . out_i in bf16) and stats.
  void (*attention_backward)(const AttnArgs& a, const float* dout, std::int64_t lddo, const float* out,
                             std::int64_t ldo, const float* stats, float* dqkv, float* work);
  // GEGLU (layers.hpp): h (R, 2F) = [gate | up] -> out (R, F) = gelu_tanh(gate) up; backward writes
  // dh (R, 2F) from dout (R, F).
  void (*geglu_forward)(float* out, const float* h, std::int64_t R, int F);
  void (*geglu_backward)(float* dh, const float* dout, const float* h, std::int64_t R, int F);
  // RMSNorm (layers.hpp's rmsnorm_forward / rmsnorm_backward, the same operations, a row's sums in 16
  // partial sums): the backward accumulates into dinp and dw.
  void (*rmsnorm_forward)(float* out, float* rstd, const float* inp, const float* w, std::int64_t R, int C, float eps);
  void (*rmsnorm_backward)(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                           const float* rstd, std::int64_t R, int C);
  // SiLU (the grid model's, grid_layers.hpp): out = x sigmoid(x); the backward accumulates
  // dx += dout sigmoid(x) (1 + x (1 - sigmoid(x))). n values each; exp by the polynomial below.
  void (*silu_forward)(float* out, const float* x, std::int64_t n);
  void (*silu_backward)(float* dx, const float* dout, const float* x, std::int64_t n);
  // The grid model's dropout mask (grid_layers.hpp dropout_mask, bit for bit): n entries from the
  // splitmix64 stream at `state`, entry 2t and 2t + 1 from draw t's low and high 32 bits, 0 below cut.
  void (*dropout_mask)(float* mask, std::int64_t n, std::uint64_t state, std::uint64_t cut, float keep);
  // The grid model's K x K local attention with one channel per head (grid_layers.hpp's
  // local_attention_forward / _backward with NH = C; K * K <= 64): the same operations per channel, exp
  // by the polynomial below; the backward accumulates.
  void (*local_attention_c1_forward)(float* out, float* att, const float* q, const float* k, const float* v,
                                     const float* rel, const float* qe, int H, int W, int C, int K);
  void (*local_attention_c1_backward)(float* dq, float* dk, float* dv, float* drel, float* dqe, const float* dout,
                                      const float* att, const float* q, const float* k, const float* v,
                                      const float* rel, const float* qe, int H, int W, int C, int K);
  // x rounded to bf16 in place; and as bf16 bit patterns (n values each).
  void (*round_bf16)(float* x, std::int64_t n);
  void (*to_bf16)(std::uint16_t* out, const float* x, std::int64_t n);
  // exp and exp2 of n values (the polynomials the kernels use; exposed for the tests).
  void (*exp)(float* out, const float* x, std::int64_t n);
  void (*exp2)(float* out, const float* x, std::int64_t n);
};

const Kernels& generic_kernels();
const Kernels* avx512_kernels();  // null where the CPU lacks AVX-512 (F, BW, DQ, VL) or FMA
const Kernels& kernels();         // the AVX-512 build where it runs, else the generic one

}  // namespace manyadd::learn::cpu_fast
