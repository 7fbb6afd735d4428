// Host side of the CUDA engine: the attention pass on the device (kernels/src/constructed_attention.cu),
// then the FFN + readout on the host with CompiledFFN. The tensor-core kernel gets a plan (qkv_plan)
// and the tokens and IDs and builds q/k/v itself; the simt kernel gets q/k/v built here (the model's
// Q, K, V applied to X0 column by column, through their nonzeros only). Both have CPU twins: TcTwin
// (an operation-by-operation replay with an enclosure of the device's result) and attention_cpu.
// Without CUDA in the build only the twins run.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "manyadd/cuda_engine.hpp"
#include "manyadd/kernels/constructed_attention.hpp"
#include "manyadd/kernels/device.hpp"
#include "manyadd/structured.hpp"

namespace manyadd {
namespace {

struct SparseRow {  // one row of Q, K or V: its nonzero (column, value) pairs
  std::vector<std::pair<int, double>> nz;
  double dot(const double* x) const {
    double s = 0;
    for (const auto& [c, w] : nz) s += w * x[c];
    return s;
  }
};

std::vector<SparseRow> sparse_rows(const Eigen::MatrixXd& A) {
  std::vector<SparseRow> rows(std::size_t(A.rows()));
  for (Eigen::Index r = 0; r < A.rows(); ++r)
    for (Eigen::Index c = 0; c < A.cols(); ++c)
      if (A(r, c) != 0) rows[std::size_t(r)].nz.emplace_back(int(c), A(r, c));
  return rows;
}

// CPU twin of the device pass (kernels/src/constructed_attention.cu): same layout, same per-row key order, same online
// softmax; O(N^2) on one thread, for tests of everything around the kernel on machines without a GPU.
template <typename T>
double attention_cpu(const T* q, const T* k, const T* v, T* out, int D, std::int64_t N, std::int64_t first) {
  for (std::int64_t h = 0; h < 4; ++h)
    for (std::int64_t i = first; i < N; ++i) {
      const T* qi = q + (h * N + i) * D;
      T mx = -std::numeric_limits<T>::infinity(), l = 0, acc = 0;
      for (std::int64_t j = 0; j <= i; ++j) {
        const T* kj = k + (h * N + j) * D;
        T s = 0;
        for (int c = 0; c < D; ++c) s += qi[c] * kj[c];
        if (s > mx) {
          const T sc = std::exp(mx - s);
          l *= sc;
          acc *= sc;
          mx = s;
        }
        const T p = std::exp(s - mx);
        l += p;
        acc += p * v[h * N + j];
      }
      out[h * (N - first) + (i - first)] = acc / l;
    }
  return 0;
}

template <typename T>
double attention_device(const T* q, const T* k, const T* v, T* out, int D, std::int64_t N, std::int64_t first) {
#if MANYADD_WITH_CUDA
  return kernels::constructed_attention(q, k, v, out, D, N, first);
#else
  (void)q, (void)k, (void)v, (void)out, (void)D, (void)N, (void)first;
  throw InvariantError("attention_device in a build without CUDA (cuda_forward checks the device first)");
#endif
}

// Step 3, shared by both kernels: the residual after attention in the 7 FFN inputs (the token's
// NUM, IS_BOS, FULL_ONES plus U_h o_h in its target), FFN, readout, argmax (lowest index on ties).
// out: (4, N - first) head outputs.
template <typename T>
void finish(const ConstructedModel& M, const CompiledFFN& F, const std::vector<std::uint8_t>& tokens, std::int64_t first,
            const std::vector<T>& out, bool keep, CudaForwardResult& R) {
  const std::size_t nr = tokens.size() - std::size_t(first);
  R.first = first;
  R.pred.resize(nr);
  if (keep) R.heads.resize(nr);
  for (std::size_t r = 0; r < nr; ++r) {
    std::array<double, 7> y{};
    for (int t = 0; t < 7; ++t) y[std::size_t(t)] = M.tok_emb(tokens[std::size_t(first) + r], t);
    for (std::size_t h = 0; h < 4; ++h) {
      const double o = double(out[h * nr + r]);
      if (keep) R.heads[r][h] = o;
      for (int t = 0; t < 7; ++t) y[std::size_t(t)] += M.heads[h].U(t, 0) * o;
    }
    const auto lg = F.logits(y);
    R.pred[r] = std::uint8_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
  }
}

void check_tokens(const std::vector<std::uint8_t>& tokens, const Shape& shape) {
  if (std::int64_t(tokens.size()) != shape.N())
    throw InputError(fmt::format("cuda_forward: {} tokens, the shape has N = {}", tokens.size(), shape.N()));
  for (std::uint8_t t : tokens)
    if (t >= kVocab) throw InputError(fmt::format("cuda_forward: token {} outside the vocabulary", int(t)));
}

template <typename T>
CudaForwardResult simt_forward(const ConstructedModel& M, const std::vector<std::uint8_t>& tokens, const Shape& shape,
                               std::int64_t s1, std::int64_t s2, bool keep, bool on_device) {
  const std::int64_t N = shape.N(), first = shape.eq_index();
  check_tokens(tokens, shape);
  const CompiledFFN F = CompiledFFN::build(M);  // checks the model's structure
  int D = 0;
  std::array<std::vector<SparseRow>, 4> Q, K, V;
  for (std::size_t h = 0; h < 4; ++h) {
    Q[h] = sparse_rows(M.heads[h].Q);
    K[h] = sparse_rows(M.heads[h].K);
    V[h] = sparse_rows(M.heads[h].V);
    if (V[h].size() != 1 || M.heads[h].U.cols() != 1)
      throw InputError("cuda_forward: expects one value dimension per head (the constructed model)");
    D = std::max<int>(D, int(Q[h].size()));
  }
  D = (D + 7) / 8 * 8;  // the kernel is instantiated for widths 8, 16, .., 48 (zero padding adds nothing)
  if (D > kernels::kMaxD)
    throw InputError(fmt::format("cuda_forward: query/key width {} above the engine's {}", D, kernels::kMaxD));

  // 1. q, k (4, N, D), v (4, N) from X0, one column at a time.
  const int d = M.d();
  std::vector<T> q(std::size_t(4 * N * D), T(0)), k(q.size(), T(0)), v(std::size_t(4 * N));
  std::vector<double> col(static_cast<std::size_t>(d), 0.0);
  for (std::int64_t i = 0; i < N; ++i) {
    std::int32_t p1 = 0, p2 = 0;
    position_id_at(shape, s1, s2, i, p1, p2);
    std::fill(col.begin(), col.end(), 0.0);
    for (int t = 0; t < 19; ++t) col[std::size_t(t)] = M.tok_emb(tokens[std::size_t(i)], t);
    write_position(M.layout, p1, p2, col.data());
    for (std::size_t h = 0; h < 4; ++h) {
      const std::size_t base = (h * std::size_t(N) + std::size_t(i)) * std::size_t(D);
      for (std::size_t r = 0; r < Q[h].size(); ++r) q[base + r] = T(Q[h][r].dot(col.data()));
      for (std::size_t r = 0; r < K[h].size(); ++r) k[base + r] = T(K[h][r].dot(col.data()));
      v[h * std::size_t(N) + std::size_t(i)] = T(V[h][0].dot(col.data()));
    }
  }
  // 2. attention on the device: out (4, N - first)
  std::vector<T> out(std::size_t(4 * (N - first)));
  CudaForwardResult R;
  R.kernel_seconds = on_device ? attention_device(q.data(), k.data(), v.data(), out.data(), D, N, first)
                               : attention_cpu(q.data(), k.data(), v.data(), out.data(), D, N, first);
  // 3.
  finish(M, F, tokens, first, out, keep, R);
  return R;
}

#if MANYADD_WITH_CUDA  // the device path's only caller
std::vector<std::int32_t> ids_of(const Shape& shape, std::int64_t s1, std::int64_t s2) {
  std::vector<std::int32_t> ids(2 * std::size_t(shape.N()));
  for_each_id(shape, s1, s2, [&](std::int64_t k, std::int64_t p1, std::int64_t p2) {
    ids[2 * std::size_t(k)] = std::int32_t(p1);
    ids[2 * std::size_t(k) + 1] = std::int32_t(p2);
  });
  return ids;
}
#endif

CudaForwardResult tc_forward(const ConstructedModel& M, const std::vector<std::uint8_t>& tokens, const Shape& shape,
                             std::int64_t s1, std::int64_t s2, bool keep, bool skip, bool on_device) {
  check_tokens(tokens, shape);
  const CompiledFFN F = CompiledFFN::build(M);  // checks the model's structure
  const std::int64_t N = shape.N(), first = shape.eq_index();
  std::vector<float> out(std::size_t(4 * (N - first)));
  CudaForwardResult R;
  if (on_device) {
#if MANYADD_WITH_CUDA
    const kernels::QkvPlan plan = qkv_plan(M, skip);
    const std::vector<std::int32_t> ids = ids_of(shape, s1, s2);
    const kernels::TcTimes T = kernels::constructed_attention_tc(plan, tokens.data(), ids.data(), N, first, out.data());
    R.kernel_seconds = T.attention_seconds;
    R.prep_seconds = T.prep_seconds;
#else
    throw InvariantError("tc_forward on a device in a build without CUDA (cuda_forward checks the device first)");
#endif
  } else {
    const TcTwin twin(M, tokens, shape, s1, s2, skip);
    std::vector<std::int64_t> rows;
    for (std::int64_t i = first; i < N; ++i) rows.push_back(i);
    const std::vector<TcRow> rr = twin.rows(rows);
    const std::size_t nr = std::size_t(N - first);
    for (std::size_t r = 0; r < nr; ++r)
      for (std::size_t h = 0; h < 4; ++h) out[h * nr + r] = rr[r].out[h];
  }
  finish(M, F, tokens, first, out, keep, R);
  return R;
}

CudaForwardResult run(const ConstructedModel& M, const std::vector<std::uint8_t>& tokens, const Shape& shape,
                      std::int64_t s1, std::int64_t s2, const CudaOptions& o, bool on_device) {
  if (o.kernel == CudaKernel::tensor_core) {
    if (o.float64) throw InputError("cuda_forward: the tensor-core kernel is float32 only (float64: the simt kernel)");
    return tc_forward(M, tokens, shape, s1, s2, o.keep_head_outputs, o.skip_far_tiles, on_device);
  }
  return o.float64 ? simt_forward<double>(M, tokens, shape, s1, s2, o.keep_head_outputs, on_device)
                   : simt_forward<float>(M, tokens, shape, s1, s2, o.keep_head_outputs, on_device);
}

}  // namespace

bool cuda_available(std::string* why) { return kernels::device_available(why); }

CudaForwardResult cuda_forward(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                               const Shape& shape, std::int64_t s1, std::int64_t s2, const CudaOptions& opt) {
  std::string why;
  if (!cuda_available(&why)) throw InputError("cuda_forward: no CUDA device: " + why);
  return run(model, tokens, shape, s1, s2, opt, true);
}

CudaForwardResult cuda_forward_cpu_twin(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                                        const Shape& shape, std::int64_t s1, std::int64_t s2, const CudaOptions& opt) {
  return run(model, tokens, shape, s1, s2, opt, false);
}

namespace {
CudaOptions legacy(bool float64, bool keep) {
  CudaOptions o;
  o.kernel = float64 ? CudaKernel::simt : CudaKernel::tensor_core;
  o.float64 = float64;
  o.keep_head_outputs = keep;
  return o;
}
}  // namespace

CudaForwardResult cuda_forward(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                               const Shape& shape, std::int64_t s1, std::int64_t s2, bool float64,
                               bool keep_head_outputs) {
  return cuda_forward(model, tokens, shape, s1, s2, legacy(float64, keep_head_outputs));
}

CudaForwardResult cuda_forward_cpu_twin(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                                        const Shape& shape, std::int64_t s1, std::int64_t s2, bool float64,
                                        bool keep_head_outputs) {
  return cuda_forward_cpu_twin(model, tokens, shape, s1, s2, legacy(float64, keep_head_outputs));
}

}  // namespace manyadd
