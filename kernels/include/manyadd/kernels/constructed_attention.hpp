// The constructed model's attention pass on the device (kernels/src/constructed_attention.cu): the
// four heads' causal real softmax, plain pointers only (no Eigen in nvcc's way). Two kernels behind
// one interface: the tensor-core kernel (3xTF32 scores, float32 softmax; q/k/v built on the device
// from tokens and IDs) and the first kernel (one query row per thread on the FP32/FP64 units; q/k/v
// from the host), kept for comparison. construct/'s CUDA engine (cuda_engine.hpp) calls both.
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "manyadd/kernels/constructed_tc.hpp"

namespace manyadd::kernels {

constexpr int kMaxD = 48;  // query/key width P + 1 <= 2 log2(N) + 1 = 45 at N = 2^22

// ---- the first kernel: one query row per thread ----
// Shapes: q, k (4, N, D) row-major, D a multiple of 8 in [8, kMaxD] (zero-padded), v (4, N); out (4, N - first).
// Rows first..N-1 are queries. Returns the attention pass's device time in seconds. Throws
// std::runtime_error on CUDA errors.
double constructed_attention(const float* q, const float* k, const float* v, float* out, int D, std::int64_t N,
                             std::int64_t first);
double constructed_attention(const double* q, const double* k, const double* v, double* out, int D, std::int64_t N,
                             std::int64_t first);

// ---- the tensor-core kernel ----
// The q/k/v plan of constructed_tc.hpp as owning host arrays (see tc::PlanView for the meaning).
struct QkvPlan {
  int d = 0, D = 0, vocab = 0;
  std::vector<double> emb;              // (vocab, d)
  std::vector<tc::PlanCode> codes;
  std::vector<std::int32_t> col_code;   // (d)
  std::vector<std::int32_t> row_start;  // (8 D + 5)
  std::vector<std::int32_t> nz_col;
  std::vector<double> nz_w;
  // per head, the far-tile skip threshold (tc::tile_skip_threshold; +inf: no tile is skipped)
  std::array<float, 4> skip{std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
  tc::PlanView view() const {
    return {d, D, vocab, int(codes.size()), emb.data(), codes.data(), col_code.data(), row_start.data(), nz_col.data(),
            nz_w.data()};
  }
  void check() const;  // throws std::invalid_argument naming the inconsistency (sizes, columns, codes)
};

struct TcTimes {
  double prep_seconds = 0;       // q/k/v preparation on the device (cudaEvent)
  double attention_seconds = 0;  // the attention kernel, all 4 heads in one launch (cudaEvent)
};

// tokens (N) in [0, vocab), ids (N, 2) the two integer IDs per token; out (4, N - first) the head
// outputs of rows first..N-1. Scores: q.k from the 3xTF32 split (q_hi k_hi + q_hi k_lo + q_lo k_hi,
// fp32 MMA accumulation, order in constructed_tc.hpp), base 2 (log2 e folded into q); softmax online
// per 64-key tile in float32 with exp2f, a tile far below a row's running max skipped for that row
// (plan.skip, constructed_tc.hpp); out = acc / l. Validates the plan and the inputs first
// (std::invalid_argument), then allocates 4 N (2 D + 1) floats on the device.
TcTimes constructed_attention_tc(const QkvPlan& plan, const std::uint8_t* tokens, const std::int32_t* ids,
                                 std::int64_t N, std::int64_t first, float* out);

}  // namespace manyadd::kernels
