// Affine forms with an error box: the enclosure the learned certificate carries through the rest of a
// layer after attention (certify.cpp). A value x in R^n is enclosed by
//     x = c + G eps + r,   eps in [-1, 1]^K,   |r_i| <= e_i,
// for every input of a node and for the fp32 forward on it. Each operation returns an enclosure of its
// exact image plus the fp32 forward's own rounding of that operation (fp32_ulp: the unit roundoff 2^-24,
// inflated by 2^-10 to cover the double arithmetic that computes these bounds); nonlinear steps add their
// remainder to e, or (GEGLU) as fresh symbols so that later linear maps keep their signs.
#pragma once

#include <Eigen/Dense>

namespace manyadd::learned {

inline constexpr double kFp32Unit = 0x1p-24 * (1.0 + 0x1p-10);
// The rounding the enclosures cover: fp32 (u = kFp32Unit) or none (u = 0: the model in real arithmetic).
struct Rounding {
  double u = kFp32Unit;
  double gamma(double k) const { return k * u / (1.0 - k * u); }
};

// gelu_tanh as the model defines it, in exact arithmetic on its fp32 constants.
inline constexpr double kGeluC = 0.79788458347320556640625;     // float(sqrt(2/pi))
inline constexpr double kGeluA = 0.044714998453855514526367188; // float(0.044715)
// max over the reals of |gelu''|: gelu''(0) = kGeluC = 0.79788..., its largest value (a grid of step 1e-6
// on [-12, 12] with |gelu'''| <= 1 between points; |gelu''| < 1e-8 beyond |x| = 6); tests check it.
inline constexpr double kGeluSecondMax = 0.8;
// gelu's one minimum (gelu' < 0 below, > 0 above): x* and gelu(x*) a little below the true minimum value.
inline constexpr double kGeluArgmin = -0.7517915246935725;
double gelu(double x);
double gelu_prime(double x);
// |fl32(gelu(x)) - gelu(x)| for |x| <= X: the fp32 formula's rounding (tanhf within 4 ulp).
double gelu_fp32_error(double X, const Rounding& R);

struct Aff {
  Eigen::VectorXd c, e;
  Eigen::MatrixXd G;  // n x K
  int n() const { return int(c.size()); }
  int K() const { return int(G.cols()); }
  Eigen::VectorXd rad() const { return G.cwiseAbs().rowwise().sum() + e; }
  Eigen::VectorXd mag() const { return c.cwiseAbs() + rad(); }
};

// W x: the exact image and the fp32 product's rounding gamma(in) |W| |x| (absW = |W|, computed once by the caller).
Aff aff_linear(const Aff& x, const Eigen::MatrixXd& W, const Eigen::MatrixXd& absW, const Rounding& R);
// RMSNorm with weight w (eps): false when the enclosure reaches the origin's neighbourhood (no bound).
bool aff_rmsnorm(const Aff& x, const Eigen::VectorXd& w, double eps, const Rounding& R, Aff& out);
// [gate | up] -> gelu(gate) * up, the remainders as fresh symbols (fresh = false: kept in the error box).
Aff aff_geglu(const Aff& h, const Rounding& R, bool fresh = true);
// x + y (y may have fewer symbols: the missing ones are zero), with the fp32 add's rounding.
Aff aff_add(const Aff& x, const Aff& y, const Rounding& R);

}  // namespace manyadd::learned
