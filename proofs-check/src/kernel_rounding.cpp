// The tensor-core kernel's rounding model: the numbers of kernel_rounding.hpp's derivation.
#include "manyadd/kernel_rounding.hpp"

#include <cmath>

#include <fmt/format.h>

#include "manyadd/kernels/constructed_tc.hpp"

namespace manyadd {

KernelRounding kernel_rounding(const ConstructedModel& M, int h, int D, double widen) {
  if (h < 0 || h > 3) throw InputError(fmt::format("kernel_rounding: head {} outside 1..4", h + 1));
  const Head& H = M.heads[std::size_t(h)];
  const int P = int(H.Q.rows()) - 1;
  if (D % 8 || D < P + 1 || D > 48)
    throw InputError(fmt::format("kernel_rounding: width {} is not a multiple of 8 in [P + 1, 48] (P = {})", D, P));
  if (!(widen >= 1) || !std::isfinite(widen)) throw InputError("kernel_rounding: widen must be a finite factor >= 1");
  const double r = std::ldexp(1.0, -24) * widen;
  const double log2e = 1.4426950408889634074;
  KernelRounding k;
  k.r = r;
  k.D = D;
  // The layout step 1 relies on: rows 0..P-1 of Q and K read the position codes with sqrt(lambda),
  // row P FULL_ONES against IS_BOS with sqrt(lambda P) (model.cpp, make_head).
  const Head ref = build_model(M.layout.P1, M.layout.P2, H.lambda).heads[std::size_t(h)];
  if (H.Q.rows() != ref.Q.rows() || H.Q.cols() != ref.Q.cols() || H.K.rows() != ref.K.rows() || H.K.cols() != ref.K.cols() ||
      H.Q != ref.Q || H.K != ref.K)
    throw InputError(fmt::format("kernel_rounding: head {} is not the Theorem 4.1 construction's", h + 1));
  // Step 1. lam2 bounds one position product |q k| (the entries' own rounding: relative <= 2^-22),
  // S = P lam2 every score's sum |q k|. Per key kind (a digit or separator: P position products;
  // BOS: the one product in dim P) and k8 step: n nonzero products, 2 n error terms of <= 2^-23 M,
  // M <= (1 + 2^-9) (partial sum bound after the step) + 2^-9 S, the small steps' M <= 2^-10 S (1 + 2^-8).
  const double lam2 = H.lambda * log2e * (1 + std::ldexp(1.0, -21)), S = P * lam2;
  double mma = 0;
  for (int bos = 0; bos < 2; ++bos) {
    double e = 0;
    for (int ks = 0; ks < D / 8; ++ks) {
      const int lo = 8 * ks, hi = 8 * ks + 8;  // dims [lo, hi)
      const int n = bos ? (P >= lo && P < hi) : std::max(0, std::min(hi, P) - lo);
      if (n == 0) continue;  // only c and zero products: exact
      const double partial = bos ? S : std::min(hi, P) * lam2;
      const double Mhi = (1 + std::ldexp(1.0, -9)) * partial + std::ldexp(1.0, -9) * S;
      const double Mlo = std::ldexp(1.0, -10) * S * (1 + std::ldexp(1.0, -8));
      e += 2 * n * std::ldexp(1.0, -23) * (Mhi + 2 * Mlo);
    }
    mma = std::max(mma, e);
  }
  const double rel = std::ldexp(1.0, -23) + 6 * std::ldexp(1.0, -53) + 3.01 * std::ldexp(1.0, -22) + mma / S;
  k.eta2 = S * rel * widen * (1 + 1e-9);
  // Step 2. exp2 in double is within 1 ulp of double: the 1e-15 margins cover it.
  const double e2 = std::ldexp(1.0, -22) * widen;
  k.wlo = std::exp2(-2 * k.eta2 * (1 + r)) * (1 - e2) * (1 - 1e-15);
  k.whi = (1 + e2) * (1 + 1e-15);
  const double gap = 2 * H.lambda * log2e * (1 - 1e-15) - 2 * k.eta2;
  if (!(gap > 0))
    throw KernelUnbounded(fmt::format("kernel_rounding: the score error reaches the gap 2 lambda (head {}, lambda {})",
                                      h + 1, H.lambda));
  k.eps = std::exp2(-gap * (1 - r)) * (1 + e2) * (1 + 1e-15);
  // Step 3.
  k.rho = (e2 + r + 2 * k.eta2 * std::log(2.0) * r) * (1 + 1e-9);
  // Step 5: the far-tile skip never drops a matched key.
  k.skip = kernels::tc::tile_skip_threshold(H.lambda, P);
  if (!(k.skip >= 2 * k.eta2 * (1 + std::ldexp(1.0, -23))))
    throw InputError(fmt::format("kernel_rounding: the far-tile skip threshold {} is within twice the score bound {} (head {})",
                                 k.skip, k.eta2, h + 1));
  return k;
}

void kernel_rise_factors(const KernelRounding& k, std::int64_t x, double& lo, double& hi) {
  const double R = double(std::max<std::int64_t>(0, x - 1));
  lo = std::exp(R * std::log1p(-k.rho)) * (1 - 1e-12);
  hi = std::exp(R * std::log1p(k.rho)) * (1 + 1e-12);
}

KernelBox<double> kernel_head_box(std::int64_t vsum, std::int64_t x, std::int64_t u, int vmax, const KernelRounding& k) {
  double lo, hi;
  kernel_rise_factors(k, x, lo, hi);
  return kernel_head_box<double>(vsum, x, u, vmax, k, lo, hi);
}

}  // namespace manyadd
