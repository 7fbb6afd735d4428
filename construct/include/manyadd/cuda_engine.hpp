// The constructed model's real-softmax forward pass on a CUDA device (flash-attention style: no N x N
// matrix). A plain C++ header: callers need no CUDA headers and no #ifdefs; in a build without CUDA
// cuda_available() is false ("built without CUDA") and cuda_forward_cpu_twin still runs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "manyadd/format.hpp"
#include "manyadd/kernels/constructed_attention.hpp"
#include "manyadd/model.hpp"

namespace manyadd {

// True when a CUDA device can be used. Any cudaGetDeviceCount error (e.g. "CUDA driver version is
// insufficient") or zero devices counts as "no device"; `why` then gets the reason.
bool cuda_available(std::string* why);

struct CudaForwardResult {
  std::int64_t first = 0;                     // 0-based index of the first response position ('=')
  std::vector<std::uint8_t> pred;             // (N - first) argmax at positions first..N-1 (lowest on ties)
  std::vector<std::array<double, 4>> heads;   // (N - first) head outputs o_h; empty unless asked
  double kernel_seconds = 0;                  // device time of the attention pass (cudaEvent)
  double prep_seconds = 0;                    // device time of the q/k/v preparation (tensor-core kernel)
};

// Which device kernel runs the attention pass (kernels/src/constructed_attention.cu).
//   tensor_core: scores on tensor cores from a 3xTF32 split, float32 online softmax per 64-key tile,
//                q/k/v built on the device. float32 only. The default.
//   simt:        the first kernel, one query row per thread on the FP32 (or FP64) units, q/k/v from
//                the host; kept for comparison (bench_cuda runs both).
enum class CudaKernel { tensor_core, simt };

struct CudaOptions {
  CudaKernel kernel = CudaKernel::tensor_core;
  bool float64 = false;  // simt only: attention in float64 (the tensor-core kernel is float32)
  bool keep_head_outputs = false;
  // tensor_core only: skip a row's key tiles that lie far below its running max (no exp2f, no
  // additions; kernels' tc::tile_skip_threshold says when, kernel_rounding.hpp step 5 why the
  // certificate's float32-cuda covers it). false: every tile of every row is summed.
  bool skip_far_tiles = true;
};

// Forward pass of `model` on `tokens` (one teacher-forced sequence of `shape`, offsets s1, s2).
// Attention (all 4 heads, model lambda, real softmax) runs on the device; the FFN + readout runs on
// the host with CompiledFFN (7 inputs NUM..PRE_EOS per response position). Throws InputError when no
// device is usable, the model is not the constructed one, or float64 is asked of the tensor-core kernel.
CudaForwardResult cuda_forward(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                               const Shape& shape, std::int64_t s1, std::int64_t s2, const CudaOptions& opt);

// The same pipeline with the device pass replaced by its CPU twin, O(N^2) on one thread: for the
// tensor-core kernel TcTwin (below, its nominal values), for the simt kernel a loop of the same key
// order and online softmax. Tests everything around the kernel where no device exists. Both builds.
CudaForwardResult cuda_forward_cpu_twin(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                                        const Shape& shape, std::int64_t s1, std::int64_t s2, const CudaOptions& opt);

// The earlier signatures: float64 selects the simt kernel in float64, else the tensor-core kernel.
CudaForwardResult cuda_forward(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                               const Shape& shape, std::int64_t s1, std::int64_t s2, bool float64,
                               bool keep_head_outputs);
CudaForwardResult cuda_forward_cpu_twin(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                                        const Shape& shape, std::int64_t s1, std::int64_t s2, bool float64,
                                        bool keep_head_outputs);

// ---- The tensor-core kernel's CPU twin ----
// Replays the kernel operation by operation: the q/k/v preparation (the same code,
// kernels/include/manyadd/kernels/constructed_tc.hpp), the tf32 split, the MMA steps in their order,
// the per-lane key order, the tile max, the rescaling at every rise, the quad sums and the division.
// Two operations are not specified bit for bit by the hardware's documentation; the twin carries an
// interval [lo, hi] through the row that contains every result the device can produce:
//  * an MMA step c' = c + sum of 8 products: the nominal value is RN(exact sum); under the MMA
//    assumption of constructed_tc.hpp (any tree of fused sums, each keeping >= 24 bits of its inputs
//    aligned to its largest and rounding its result by < 1 ulp) the device's differs from the exact
//    sum, with n nonzero products, by < n 2^(e - 23) (e: the largest addend's exponent) +
//    n 2^(e_a - 23) (e_a: the exponent of |c| + sum |products|, which bounds every partial result;
//    no error when n = 0); doubled, because the
//    interval is centred on the twin's own rounded chain and the device's addends may lie one binade
//    above the twin's (the rounding model, kernel_rounding.hpp, bounds device against exact and needs
//    neither).
//  * exp2f: <= 2 ulp (documented); the nominal value is exp2 in double rounded to float
//    (<= 0.5 ulp + 2^-29), the interval is 6 float steps either side (2.5 ulp, twice for a binade
//    edge, rounded up); exp2f(0) = 1 and exp2f(-inf) = 0 exactly.
// Every other operation is an IEEE float operation rounded to nearest on both sides and monotone in
// each argument, so applying it to the ends of its arguments' intervals (rises and the far-tile
// skip: the hull of both branches where the comparison is undecided) keeps the enclosure rigorous
// without widening.
struct TcRow {
  std::int64_t i = 0;
  std::array<float, 4> out{};        // nominal head outputs
  std::array<float, 4> lo{}, hi{};   // every output the device can give lies in [lo, hi]
  std::array<int, 4> rises{};        // nominal rises of the running max after the first tile
  std::array<int, 4> skipped{};      // tiles skipped by the far-tile skip (nominal)
  std::array<double, 4> score_bound{};  // largest MMA bound of a score of the row (base-2 units)
};

class TcTwin {
 public:
  // Builds the plan (throws InputError if the model is not the constructed one) and the IDs: O(N).
  TcTwin(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens, const Shape& shape,
         std::int64_t s1, std::int64_t s2, bool skip_far_tiles = true);
  // The given query rows (each in [0, N)), in one pass over the keys up to the largest: O(max row * D)
  // time, O(rows) memory; the keys' k rows are rebuilt per tile, never stored.
  std::vector<TcRow> rows(const std::vector<std::int64_t>& rows) const;
  const kernels::QkvPlan& plan() const { return plan_; }
  const std::vector<std::int32_t>& ids() const { return ids_; }  // (N, 2)

 private:
  kernels::QkvPlan plan_;
  std::vector<std::uint8_t> tokens_;
  std::vector<std::int32_t> ids_;
  std::int64_t N_;
};

// The plan of the constructed model: token embedding, the four position codes (POS_1, POS_1_NEXT,
// POS_2, POS_2_NEXT), the nonzeros of Q, K, V; D = the widest head rounded up to a multiple of 8;
// each head's far-tile skip threshold (tc::tile_skip_threshold of its lambda and P), or none.
kernels::QkvPlan qkv_plan(const ConstructedModel& model, bool skip_far_tiles = true);

}  // namespace manyadd
