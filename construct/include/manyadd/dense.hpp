// Dense forward engine: the constructed model over a whole teacher-forced sequence, with every
// causal attention score computed (max-subtracted softmax), in double or float. O(N^2) time;
// memory O(N d) plus, when asked, the four N x N attention matrices. The independent twin of the
// structured O(N) engine.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include <Eigen/Dense>

#include "manyadd/model.hpp"

namespace manyadd {

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

template <typename T>
struct DenseResult {
  Mat<T> Y;                        // (d, N) residual after attention (Eq. 23)
  Mat<T> X1;                       // (d, N) residual after the feed-forward layer (D.6.4)
  Mat<T> logits;                   // (14, N) Wout X1
  std::vector<std::uint8_t> pred;  // (N) argmax (lowest index on ties)
  std::array<Mat<T>, 4> attention; // per head (N, N), row = query, col = key; empty unless asked
};

struct DenseOptions {
  bool keep_attention = false;
  std::int64_t max_tokens = 20000;               // refuse above (time grows as N^2)
  std::int64_t max_bytes = std::int64_t(6) << 30;  // refuse when the estimate is above
};

// Cost of one dense pass, for refusing before allocating.
struct DenseCost {
  double bytes = 0;     // peak memory of the pass
  double seconds = 0;   // rough single-core time (measured ~2.5e8 scores/s; see bench/)
};
DenseCost estimate_dense(std::int64_t N, int d, bool keep_attention, int bytes_per_scalar);
// Throws InputError with the estimate when the pass would exceed `opt`.
void check_dense_fits(std::int64_t N, int d, const DenseOptions& opt, int bytes_per_scalar);

template <typename T>
DenseResult<T> dense_forward(const ConstructedModel& model, const Eigen::MatrixXd& X0, const DenseOptions& opt = {});

extern template DenseResult<double> dense_forward<double>(const ConstructedModel&, const Eigen::MatrixXd&,
                                                          const DenseOptions&);
extern template DenseResult<float> dense_forward<float>(const ConstructedModel&, const Eigen::MatrixXd&,
                                                        const DenseOptions&);

}  // namespace manyadd
