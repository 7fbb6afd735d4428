// learned/affine.hpp: the enclosure's operations (derivations beside each).
#include "affine.hpp"

#include <algorithm>
#include <cmath>

namespace manyadd::learned {

double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + kGeluA * x * x * x))); }

double gelu_prime(double x) {
  const double th = std::tanh(kGeluC * (x + kGeluA * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kGeluC * (1.0 + 3.0 * kGeluA * x * x);
}

// fp32: u = fl(c fl(x + fl(a fl(fl(x x) x)))) errs by gamma(5) c (|x| + a |x|^3); tanhf by 4 ulp (8 units)
// plus |tanh'| <= 1 times u's error; fl(1 + th) by one unit of 2; the two products by gamma(2) of |x|.
double gelu_fp32_error(double X, const Rounding& R) {
  const double du = R.gamma(5) * kGeluC * (X + kGeluA * X * X * X);
  return 0.5 * X * (std::min(du, 2.0) + 8 * R.u + 2 * R.u) + R.gamma(2) * X;
}

Aff aff_linear(const Aff& x, const Eigen::MatrixXd& W, const Eigen::MatrixXd& absW, const Rounding& R) {
  Aff y;
  y.c = W * x.c;
  if (x.K() > 0) y.G = W * x.G;
  else y.G.resize(W.rows(), 0);
  y.e = absW * (x.e + R.gamma(double(W.cols())) * x.mag());
  return y;
}

Aff aff_add(const Aff& x, const Aff& y, const Rounding& R) {
  Aff z;
  z.c = x.c + y.c;
  const int K = std::max(x.K(), y.K());
  z.G = Eigen::MatrixXd::Zero(x.n(), K);
  z.G.leftCols(x.K()) += x.G;
  z.G.leftCols(y.K()) += y.G;
  z.e = x.e + y.e + R.u * (x.mag() + y.mag());
  return z;
}

// y = w x rho(x), rho = (q)^(-1/2), q = |x|^2 / d + eps. With x = c + delta:
//   rho(x) = rho - rho^3 (c.delta) / d + r,  |r| <= rho^3 |delta|^2 / (2d) + (3/8) qmin^(-5/2) dq^2
// (q's change dq = (2 c.delta + |delta|^2) / d; Taylor of q^(-1/2) with Lagrange remainder), so
//   y = w c rho + J delta + w (c r + delta (rho(x) - rho)),  J = diag(w) rho (I - c c^T rho^2 / d),
// with |rho(x) - rho| <= qmin^(-3/2) |dq| / 2. J delta is carried exactly for the symbols and through |J|
// for the error box. fp32: the norm's own rounding is gamma(d + 6) |y| (sum of d squares, /d, +eps, sqrt,
// 1/, two products; every term positive).
bool aff_rmsnorm(const Aff& x, const Eigen::VectorXd& w, double eps, const Rounding& R, Aff& out) {
  const int n = x.n();
  const double d = double(n);
  const Eigen::VectorXd& c = x.c;
  const double nc = c.norm();
  const double q = c.squaredNorm() / d + eps, rho = 1.0 / std::sqrt(q);
  const Eigen::VectorXd rad = x.rad();
  const double dn = std::min(rad.norm(), x.G.colwise().norm().sum() + x.e.norm());
  if (!(dn < nc)) return false;
  const Eigen::RowVectorXd cG = c.transpose() * x.G;
  const double cd = cG.cwiseAbs().sum() + c.cwiseAbs().dot(x.e);
  const double lo = std::max(-2 * cd, (nc - dn) * (nc - dn) - nc * nc) / d;
  const double hi = std::min(2 * cd + dn * dn, (nc + dn) * (nc + dn) - nc * nc) / d;
  const double qmin = q + lo, dqm = std::max(std::abs(lo), std::abs(hi));
  if (!(qmin > 0)) return false;
  const double r_rho = rho * rho * rho * dn * dn / (2 * d) + 0.375 * std::pow(qmin, -2.5) * dqm * dqm;
  const double drho = 0.5 * std::pow(qmin, -1.5) * dqm;
  const double rho3d = rho * rho * rho / d;
  out.c = w.cwiseProduct(c) * rho;
  out.G = (w * rho).asDiagonal() * x.G - (w.cwiseProduct(c) * rho3d) * cG;
  const Eigen::VectorXd aw = w.cwiseAbs();
  const Eigen::VectorXd ac = c.cwiseAbs();
  out.e = aw.cwiseProduct(x.e) * rho + aw.cwiseProduct(ac) * (rho3d * ac.dot(x.e)) +
          aw.cwiseProduct(ac * r_rho + rad * drho);
  const double rho_max = 1.0 / std::sqrt(qmin);
  out.e += R.gamma(d + 6) * aw.cwiseProduct(x.mag()) * rho_max;
  return true;
}

// Per unit: gelu(g) over [c - r, c + r] either linear, gelu(c) + gelu'(c)(g - c) +- kGeluSecondMax r^2 / 2,
// or gelu(c) with the interval [min, max] of gelu there as its error (monotone on each side of
// kGeluArgmin), whichever is narrower;
// plus its fp32 rounding. Then p = s v = c_s c_v + c_s dv + c_v ds + ds dv with |ds dv| <= rad_s rad_v;
// the product's rounding one unit of |p|. Every unit's error becomes a symbol of its own.
Aff aff_geglu(const Aff& h, const Rounding& R, bool fresh) {
  const int F = h.n() / 2, K = h.K();
  const Eigen::VectorXd rad = h.rad();
  Aff s;
  s.c.resize(F), s.e.resize(F);
  s.G = Eigen::MatrixXd::Zero(F, K);
  const double gmin = gelu(kGeluArgmin) - 1e-12;
  for (int f = 0; f < F; ++f) {
    const double cg = h.c(f), rg = rad(f), lo = cg - rg, hi = cg + rg;
    const double slope = gelu_prime(cg);
    const double lin_err = std::abs(slope) * h.e(f) + 0.5 * kGeluSecondMax * rg * rg + 1e-12 * rg;
    const double lin_rad = std::abs(slope) * (rg - h.e(f)) + lin_err;
    double glo = std::min(gelu(lo), gelu(hi)), ghi = std::max(gelu(lo), gelu(hi));
    if (lo <= kGeluArgmin && hi >= kGeluArgmin) glo = gmin;
    glo -= 1e-12 * (1 + std::abs(glo)), ghi += 1e-12 * (1 + std::abs(ghi));
    const double fp = gelu_fp32_error(std::max(std::abs(lo), std::abs(hi)), R);
    const double gc = gelu(cg);  // the center stays gelu(c): at a single input the form's center is exact
    const double int_rad = std::max(ghi - gc, gc - glo);
    if (int_rad < lin_rad) {
      s.c(f) = gc;
      s.e(f) = int_rad + fp;
    } else {
      s.c(f) = gc;
      s.G.row(f) = slope * h.G.row(f);
      s.e(f) = lin_err + fp;
    }
  }
  const Eigen::VectorXd vc = h.c.tail(F), ve = h.e.tail(F), vrad = rad.tail(F);
  const Eigen::VectorXd srad = s.rad();
  Aff p;
  p.c = s.c.cwiseProduct(vc);
  Eigen::MatrixXd G = s.c.asDiagonal() * h.G.bottomRows(F) + vc.asDiagonal() * s.G;
  Eigen::VectorXd e = s.c.cwiseAbs().cwiseProduct(ve) + vc.cwiseAbs().cwiseProduct(s.e) + srad.cwiseProduct(vrad);
  e += R.u * (s.c.cwiseAbs() + srad).cwiseProduct(vc.cwiseAbs() + vrad);
  if (!fresh) {
    p.G = std::move(G);
    p.e = std::move(e);
    return p;
  }
  p.G.resize(F, K + F);
  p.G.leftCols(K) = G;
  p.G.rightCols(F) = e.asDiagonal();
  p.e = Eigen::VectorXd::Zero(F);
  return p;
}

}  // namespace manyadd::learned
