// Host side of the CUDA engine: builds each head's query/key/value rows from the token sequence and
// position IDs (the model's Q, K, V applied to X0 column by column, through their nonzeros only), runs
// the attention pass on the device (kernels/src/constructed_attention.cu), then the FFN + readout on the
// host with CompiledFFN. Without CUDA in the build only the CPU twin of the device pass runs.
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

template <typename T>
CudaForwardResult forward(const ConstructedModel& M, const std::vector<std::uint8_t>& tokens, const Shape& shape,
                          std::int64_t s1, std::int64_t s2, bool keep, bool on_device) {
  const std::int64_t N = shape.N(), first = shape.eq_index();
  if (std::int64_t(tokens.size()) != N)
    throw InputError(fmt::format("cuda_forward: {} tokens, the shape has N = {}", tokens.size(), N));
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

  // 1. q, k (4, N, D), v (4, N) and the 7 FFN inputs (N - first, 7) from X0, one column at a time.
  const int d = M.d();
  std::vector<T> q(std::size_t(4 * N * D), T(0)), k(q.size(), T(0)), v(std::size_t(4 * N));
  std::vector<std::array<double, 7>> y(std::size_t(N - first));
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
    if (i >= first)
      for (int t = 0; t < 7; ++t) y[std::size_t(i - first)][std::size_t(t)] = col[std::size_t(t)];
  }

  // 2. attention on the device: out (4, N - first)
  std::vector<T> out(std::size_t(4 * (N - first)));
  CudaForwardResult R;
  R.first = first;
  R.kernel_seconds = on_device ? attention_device(q.data(), k.data(), v.data(), out.data(), D, N, first)
                               : attention_cpu(q.data(), k.data(), v.data(), out.data(), D, N, first);

  // 3. residual after attention (the 7 FFN inputs; U writes o_h into its target dimension), FFN, readout
  const std::size_t nr = std::size_t(N - first);
  R.pred.resize(nr);
  if (keep) R.heads.resize(nr);
  for (std::size_t r = 0; r < nr; ++r) {
    auto& yr = y[r];
    for (std::size_t h = 0; h < 4; ++h) {
      const double o = double(out[h * nr + r]);
      if (keep) R.heads[r][h] = o;
      for (int t = 0; t < 7; ++t) yr[std::size_t(t)] += M.heads[h].U(t, 0) * o;
    }
    const auto lg = F.logits(yr);
    R.pred[r] = std::uint8_t(std::max_element(lg.begin(), lg.end()) - lg.begin());  // lowest on ties
  }
  return R;
}

}  // namespace

bool cuda_available(std::string* why) { return kernels::device_available(why); }

CudaForwardResult cuda_forward(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                               const Shape& shape, std::int64_t s1, std::int64_t s2, bool float64,
                               bool keep_head_outputs) {
  std::string why;
  if (!cuda_available(&why)) throw InputError("cuda_forward: no CUDA device: " + why);
  return float64 ? forward<double>(model, tokens, shape, s1, s2, keep_head_outputs, true)
                 : forward<float>(model, tokens, shape, s1, s2, keep_head_outputs, true);
}

CudaForwardResult cuda_forward_cpu_twin(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                                        const Shape& shape, std::int64_t s1, std::int64_t s2, bool float64,
                                        bool keep_head_outputs) {
  return float64 ? forward<double>(model, tokens, shape, s1, s2, keep_head_outputs, false)
                 : forward<float>(model, tokens, shape, s1, s2, keep_head_outputs, false);
}

}  // namespace manyadd
