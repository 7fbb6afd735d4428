// Dense forward engine; see dense.hpp.
#include "manyadd/dense.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace manyadd {

DenseCost estimate_dense(std::int64_t N, int d, bool keep_attention, int bytes_per_scalar) {
  DenseCost c;
  const double n = double(N);
  const double block = 256;  // query rows per score block
  c.bytes = n * d * 8.0                         // X0 (double)
            + 3.0 * n * d * bytes_per_scalar    // Y, X1, and the cast input
            + n * (kVocab + 82) * bytes_per_scalar
            + 2.0 * n * 32 * bytes_per_scalar   // projected queries and keys, d_qk <= 2 log2 N + 1
            + block * n * bytes_per_scalar      // one block of scores
            + (keep_attention ? 4.0 * n * n * bytes_per_scalar : 0.0);
  c.seconds = 4.0 * n * n / 2.0 / 2.5e8;
  return c;
}

void check_dense_fits(std::int64_t N, int d, const DenseOptions& opt, int bytes_per_scalar) {
  const auto c = estimate_dense(N, d, opt.keep_attention, bytes_per_scalar);
  if (N > opt.max_tokens || c.bytes > double(opt.max_bytes)) {
    throw InputError(fmt::format(
        "the dense engine would need ~{:.2f} GiB and ~{:.0f} s for N = {} tokens{} (limits: {} tokens, {:.1f} GiB); "
        "use a smaller --n/--m{}",
        c.bytes / double(1 << 30), c.seconds, N, opt.keep_attention ? " with the 4 attention matrices kept" : "",
        opt.max_tokens, double(opt.max_bytes) / double(1 << 30),
        opt.keep_attention ? " or drop --dump attention" : " or the structured engine (--engine structured)"));
  }
}

template <typename T>
DenseResult<T> dense_forward(const ConstructedModel& M, const Eigen::MatrixXd& X0d, const DenseOptions& opt) {
  const Eigen::Index N = X0d.cols();
  const int d = M.d();
  if (X0d.rows() != d) throw InputError(fmt::format("dense_forward: X0 has {} rows, model d = {}", X0d.rows(), d));
  check_dense_fits(N, d, opt, int(sizeof(T)));

  DenseResult<T> R;
  const Mat<T> X0 = X0d.cast<T>();
  R.Y = X0;
  constexpr Eigen::Index kBlock = 256;

  // 1. Attention, head by head: Y += U_h (V_h X0) A_h^T (Eq. 23), A_h = causal softmax of
  //    (K_h X0)^T (Q_h X0), computed in blocks of query columns so no N x N matrix is needed.
  for (int h = 0; h < 4; ++h) {
    const Head& H = M.heads[std::size_t(h)];
    const Mat<T> Qx = H.Q.cast<T>() * X0;  // (d_qk, N)
    const Mat<T> Kx = H.K.cast<T>() * X0;  // (d_qk, N)
    const Mat<T> Vx = H.V.cast<T>() * X0;  // (1, N)
    const Mat<T> U = H.U.cast<T>();        // (d, 1)
    if (opt.keep_attention) R.attention[std::size_t(h)] = Mat<T>::Zero(N, N);
    Eigen::Matrix<T, 1, Eigen::Dynamic> out(N);  // head output per query
    Mat<T> S;
    for (Eigen::Index j0 = 0; j0 < N; j0 += kBlock) {
      const Eigen::Index B = std::min(kBlock, N - j0), keys = j0 + B;  // causal: keys 0 .. j0+B-1
      S.noalias() = Kx.leftCols(keys).transpose() * Qx.middleCols(j0, B);  // (keys, B)
      for (Eigen::Index b = 0; b < B; ++b) {
        const Eigen::Index j = j0 + b;
        auto col = S.col(b).head(j + 1);
        const T mx = col.maxCoeff();
        T z = 0, acc = 0;
        for (Eigen::Index i = 0; i <= j; ++i) {
          const T e = std::exp(col(i) - mx);
          col(i) = e;
          z += e;
          acc += e * Vx(0, i);
        }
        out(j) = acc / z;
        if (opt.keep_attention) R.attention[std::size_t(h)].row(j).head(j + 1) = (col / z).transpose();
      }
    }
    R.Y.noalias() += U * out;
  }

  // 2. Feed-forward: X1 = Y + W2 relu(W1 Y + b1) + b2 (D.6).
  Mat<T> hidden = (M.W1.cast<T>() * R.Y).colwise() + M.b1.cast<T>();
  hidden = hidden.cwiseMax(T(0));
  R.X1 = R.Y + M.W2.cast<T>() * hidden;
  R.X1.colwise() += M.b2.cast<T>();

  // 3. Readout and greedy argmax (D.7, Eq. 24).
  R.logits = M.Wout.cast<T>() * R.X1;
  R.pred.resize(std::size_t(N));
  for (Eigen::Index k = 0; k < N; ++k) {
    Eigen::Index best;
    R.logits.col(k).maxCoeff(&best);
    R.pred[std::size_t(k)] = std::uint8_t(best);
  }
  return R;
}

template DenseResult<double> dense_forward<double>(const ConstructedModel&, const Eigen::MatrixXd&,
                                                   const DenseOptions&);
template DenseResult<float> dense_forward<float>(const ConstructedModel&, const Eigen::MatrixXd&,
                                                 const DenseOptions&);

}  // namespace manyadd
