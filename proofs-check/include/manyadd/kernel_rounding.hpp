// The rounding model of the tensor-core attention kernel (kernels/src/constructed_attention.cu,
// tc_attention): how far its float32 head outputs can be from the real softmax, per head, as an
// enclosure of the same shape as the certificate's (part 3, head_box): from a query's matched count
// x (BOS included), unmatched count u, matched value sum vsum and the largest value vmax.
// Derivation (each step is a line of kernel_rounding.cpp):
//  1. Scores, base 2 (log2 e folded into q). q = fl32(fl64(w x) fl64(log2 e)), k = fl32(w x): relative
//     2^-24 + 4 2^-53 and 2^-24 + 2 2^-53 against the exact sqrt(lambda) entries. 3xTF32 drops
//     q_lo k_lo and the split's residuals: <= 3.01 2^-22 |q k| per product. The layout (checked
//     against model.cpp's make_head): dims 0..P-1 hold the position codes (a product of +-lambda
//     log2 e with every key but BOS, 0 with BOS), dim P FULL_ONES x IS_BOS (lambda P log2 e with BOS,
//     0 otherwise), dims above P are zero; so every score has S = sum |q k| = lambda P log2 e.
//     MMA: 3 KS k8 steps (KS = D / 8), the small products first (q_lo k_hi, q_hi k_lo), then
//     q_hi k_hi. The MMA assumption (constructed_tc.hpp): a step is any tree of fused sums, each
//     keeping >= 24 bits of every input aligned to its largest input (exponent e: error < 2^(e - 23)
//     per input but the largest) and rounding its result with error < 1 ulp of float. With n nonzero
//     products in the step the tree has at most n nodes with a nonzero input besides c and n
//     inputs that are not their node's largest, so the step errs by < 2 n 2^-23 M, M a bound of every
//     input and partial result of the step; n = 0 (c plus zeros) is exact. Every partial result is a
//     partial sum of the score's terms plus the errors so far, so for a q_hi k_hi step
//     M <= (1 + 2^-9) B + 2^-9 S, B = the sum of |q k| over the dims up to the step's last (tf32
//     parts: |hi| <= (1 + 2^-11) |x|, |lo| <= 2^-11 (1 + 2^-11) |x|; all small products <= 2^-10
//     (1 + 2^-10) S; the errors so far < 2^-16 S), and for a small step M <= 2^-10 S (1 + 2^-8).
//     eta2 = S (2^-23 + 6 2^-53 + 3.01 2^-22) + the larger over the two key kinds (BOS, the others)
//     of sum over steps with n > 0 of 2 n 2^-23 (M_hi + 2 M_lo): |computed - exact| <= eta2.
//     No factor 2: this bounds the device's score against the exact one directly. The twin doubles
//     its own step bound because its interval is centred on its own rounded chain and takes exponents
//     from its own addends (the device's may lie one binade above); neither applies here, where M is
//     a bound of magnitudes, not of exponents. (Until this derivation the model charged
//     22 2^-23 S per step, a 9-input sum's bound doubled as in the twin, for every step, zero or not.)
//  2. Weights p = exp2f(RN(s - m)) with m the running max: a matched key (exact score = the top)
//     has s - m in [-2 eta2, 0] (m <= top + eta2), so p in [2^(-2 eta2 (1 + r)) (1 - 2^-22), 1 + 2^-22]
//     (exp2f: 2 ulp <= 2^-22 relative); an unmatched key (exact <= top - 2 lambda log2 e)
//     p <= 2^(-(2 lambda log2 e - 2 eta2)(1 - r)) (1 + 2^-22) = eps.
//  3. Rescaling: at each rise of the running max, l and acc of every lane are multiplied by
//     sc = exp2f(RN(m_old - m_new)): the terms added before the rise gain a relative error
//     rho = 2^-22 + r + 2 eta2 ln 2 r (exp2f, the product's rounding, the exponent's rounding). BOS
//     (key 0, first tile) carries the top score, unmatched keys stay below the computed BOS score, so
//     the max rises only at a tile with a new matched key: at most x - 1 rises. Each weight, relative
//     to the final max, is therefore within (1 +- rho)^(x - 1) of step 2's.
//  4. Sums: each lane sums its keys sequentially (l += p; acc = fma(p, v, acc)), then the quad
//     (l0 + l1) + (l2 + l3): every addition of a positive term errs by <= min(r |sum|, |term|), in any
//     order, so head_box's argument holds with x + 2 matched-sized additions (each lane's first is
//     exact; the two quad additions are charged as matched ones). fma rounds once: head_box's (1 + r)
//     product factor over-covers it. out = acc / l: (1 +- r).
//  5. The far-tile skip (constructed_tc.hpp, tc::tile_skip_threshold T, plan.skip): a row drops a
//     tile when RN(m - tile max) > T. A tile holding a matched key has tile max >= top - eta2 and
//     m <= top + eta2, so RN(m - tile max) <= RN(2 eta2) <= 2 eta2 (1 + 2^-23) <= T (checked): it is
//     never dropped. The dropped keys are unmatched, and their weight 0 lies in step 2's [0, eps]; a
//     dropped tile causes no rise (its max is below m) and no addition (step 4's error terms only
//     shrink). So every enclosure above holds for the kernel with or without the skip: the certificate
//     charges the dropped keys as unmatched keys of weight in [0, eps], which it already did.
// Not covered here: the FFN and readout (the host's double arithmetic; the certificate's float64
// rounding of them applies) and the q/k/v of a model other than the Theorem 4.1 construction.
#pragma once

#include <algorithm>
#include <cstdint>

#include "manyadd/core/error.hpp"
#include "manyadd/model.hpp"

namespace manyadd {

struct KernelRounding {
  double r = 0;         // float32 unit roundoff 2^-24
  double eta2 = 0;      // bound of |computed - exact| of a score, base-2 units (step 1)
  double wlo = 1, whi = 1;  // a matched key's weight relative to the running max (step 2)
  double eps = 0;       // an unmatched key's weight bound (step 2)
  double rho = 0;       // relative error per rise of the running max (step 3)
  int D = 0;            // the kernel's padded q/k width (KS = D / 8 MMA k-steps)
  double skip = 0;      // the far-tile skip threshold it was checked against (step 5)
};

// Thrown by kernel_rounding when the head's scale leaves no room for the kernel's score error (the
// error bound reaches the gap 2 lambda, e.g. lambda 0: a head switched off): the kernel's program has
// no rounding bound there, which the certificate reports as a failed precision, not as bad input.
struct KernelUnbounded : InputError {
  using InputError::InputError;
};

// Head h of M, run by the kernel at padded width D (a multiple of 8 >= the head's P + 1).
// widen > 1 multiplies every rounding term (r, the exp2f error, the score bound eta2): a model more
// pessimistic than the kernel, for tests that the certificate fails when its model is too wide.
KernelRounding kernel_rounding(const ConstructedModel& M, int h, int D, double widen = 1);

template <class T>
struct KernelBox {
  T lo, hi;
  bool bounded = true;  // false: the sum of weights may reach 0 (lo = 0, hi is no bound)
};

// Enclosure of the kernel's head output for a query with x matched keys (BOS included), u unmatched,
// matched value sum vsum, values in [0, vmax] (step 4 on top of steps 1-3), for every x in [x1, x2]
// at once. rise_lo_factor, rise_hi_factor: kernel_rise_factors of x2 (they bound those of every
// smaller x). With the factors fixed, alo falls and zhi, ahi rise with x, and zlo is concave in x
// (a quadratic with a negative leading term), so lo is taken at x2 and hi's denominator at the
// smaller of zlo(x1), zlo(x2). Every end widens as u grows (zb, ab, Ez, Ea, zhi, ahi rise with u;
// zlo, alo fall). T: double or an exact rational type constructible from double and int64 (the
// certificate's).
template <class T>
KernelBox<T> kernel_head_box_range(std::int64_t vsum, std::int64_t x1, std::int64_t x2, std::int64_t u, int vmax,
                                   const KernelRounding& k, double rise_lo_factor, double rise_hi_factor) {
  const T V(vsum), U(u), vm(vmax), r(k.r), one(1);
  const T wlo = T(k.wlo) * T(rise_lo_factor), whi = T(k.whi) * T(rise_hi_factor), eps = T(k.eps) * T(rise_hi_factor);
  struct Ends {
    T zlo, zhi, alo, ahi;
  };
  auto at = [&](std::int64_t x) {
    const T X(x), adds = X + T(2);
    const T zb = T(2) * (X * whi + U * eps);
    const T Ez = U * eps + adds * r * zb;
    const T ab = T(2) * (whi * (one + r) * V + U * eps * vm * (one + r));
    const T Ea = U * eps * vm * (one + r) + adds * r * ab;
    Ends e{X * wlo - Ez, X * whi + U * eps + Ez, wlo * (one - r) * V - Ea,
           whi * (one + r) * V + U * eps * vm * (one + r) + Ea};
    if (e.alo < T(0)) e.alo = T(0);
    return e;
  };
  const Ends a = at(x1), b = x2 > x1 ? at(x2) : a;
  const T zlo = std::min(a.zlo, b.zlo);
  if (!(zlo > T(0))) return {T(0), T(1e300), false};
  return {b.alo / b.zhi * (one - r), b.ahi / zlo * (one + r), true};
}

// One matched count x (rise factors of x).
template <class T>
KernelBox<T> kernel_head_box(std::int64_t vsum, std::int64_t x, std::int64_t u, int vmax, const KernelRounding& k,
                             double rise_lo_factor, double rise_hi_factor) {
  return kernel_head_box_range<T>(vsum, x, x, u, vmax, k, rise_lo_factor, rise_hi_factor);
}

// The factors (1 - rho)^(x - 1) (rounded down) and (1 + rho)^(x - 1) (rounded up) of step 3.
void kernel_rise_factors(const KernelRounding& k, std::int64_t x, double& lo, double& hi);

// kernel_head_box in double with the rise factors of x.
KernelBox<double> kernel_head_box(std::int64_t vsum, std::int64_t x, std::int64_t u, int vmax, const KernelRounding& k);

}  // namespace manyadd
