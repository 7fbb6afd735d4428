// The certificate's Parts 2 and 3 (certificate.hpp): exact margins. The feed-forward network and the
// readout in exact arithmetic (ExactFFN), piecewise-linear minima, the attention heads' enclosures
// (FpModel, head boxes), the digit tables, the floating-point rounding of the FFN (FfnRounding), and the
// minimum margin over the classes of Part 1 for one precision (class_margins), in one code path for
// double (bisection) and Rational (the proof). Private to proofs-check/src (certificate.cpp: one shape;
// certificate_whole_claim.cpp: the classes of the whole claim); the names live in manyadd::cert_detail.
#pragma once

#include "manyadd/certificate.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include <boost/multiprecision/gmp.hpp>
#include <fmt/format.h>
#include <mpfr.h>

#include "manyadd/closed_form.hpp"
#include "manyadd/core/parallel.hpp"
#include "manyadd/cuda_engine.hpp"
#include "manyadd/kernel_rounding.hpp"
#include "manyadd/offset_cases.hpp"
#include "manyadd/structured.hpp"

#include "certificate_structure.hpp"

namespace manyadd {
using Rational = boost::multiprecision::mpq_rational;  // GMP: several times faster than cpp_rational here
}  // namespace manyadd

namespace manyadd::cert_detail {

// e^a rounded outward: a directed-rounding enclosure from MPFR (128-bit intermediate precision).
inline double exp_bound(double a, bool upper) {
  const mpfr_rnd_t rnd = upper ? MPFR_RNDU : MPFR_RNDD;
  mpfr_t x;
  mpfr_init2(x, 128);
  mpfr_set_d(x, a, rnd);  // exact: a is a double
  mpfr_exp(x, x, rnd);
  const double r = mpfr_get_d(x, rnd);
  mpfr_clear(x);
  return r;
}
inline double exp_lower(double a) { return exp_bound(a, false); }
inline double exp_upper(double a) { return exp_bound(a, true); }

// ---- Part 2/3: exact margins ---------------------------------------------------------------
// Number helpers so one code path serves double (bisection) and Rational (the proof).
template <class T> T num(double v) { return T(v); }
template <class T> T frac(std::int64_t a, std::int64_t b) { return T(a) / T(b); }
template <class T> double to_d(const T& v) { return double(v); }
template <> inline double to_d<Rational>(const Rational& v) { return v.convert_to<double>(); }

template <class T>
struct Box {
  T lo, hi;
};

// The feed-forward layer + readout as exact numbers of a precision's weights (the float32 program
// runs float-cast weights).
template <class T>
struct ExactFFN {
  struct Group {
    std::array<T, 7> w;
    std::vector<int> units;
    bool digit_side;  // reads NUM / PRE_SUM / PRE_CARRY (else PRE_ARROW / PRE_EOS)
  };
  std::vector<Group> groups;
  std::vector<T> b1;
  std::vector<std::array<T, kVocab>> C;
  std::array<T, kVocab> c0;
};

template <class T>
ExactFFN<T> exact_ffn(const ConstructedModel& M, const CompiledFFN& F, bool f32, std::string& err) {
  auto cast = [&](double v) { return f32 ? T(double(float(v))) : T(v); };
  ExactFFN<T> E;
  const int H = int(M.W1.rows());
  E.b1.resize(std::size_t(H));
  E.C.resize(std::size_t(H));
  for (int u = 0; u < H; ++u) {
    E.b1[std::size_t(u)] = cast(M.b1(u));
    for (int t = 0; t < kVocab; ++t) {
      T c = T(0);
      for (int k = 0; k < M.d(); ++k)
        if (M.Wout(t, k) != 0 && M.W2(k, u) != 0) c += cast(M.Wout(t, k)) * cast(M.W2(k, u));
      E.C[std::size_t(u)][std::size_t(t)] = c;
    }
  }
  for (int t = 0; t < kVocab; ++t) {
    T c = T(0);
    for (int k = 0; k < M.d(); ++k)
      if (M.Wout(t, k) != 0 && M.b2(k) != 0) c += cast(M.Wout(t, k)) * cast(M.b2(k));
    E.c0[std::size_t(t)] = c;
  }
  for (const auto& G : F.groups) {
    typename ExactFFN<T>::Group g;
    for (int c = 0; c < 7; ++c) g.w[std::size_t(c)] = cast(G.w[std::size_t(c)]);
    g.units = G.units;
    const bool digit = G.w[Layout::NUM] != 0 || G.w[Layout::PRE_SUM] != 0 || G.w[Layout::PRE_CARRY] != 0;
    const bool other = G.w[Layout::PRE_ARROW] != 0 || G.w[Layout::PRE_EOS] != 0;
    if (digit && other) err = "a hidden unit reads both the digit heads and the arrow/EOS heads: margins are not separable";
    g.digit_side = digit;
    E.groups.push_back(g);
  }
  // Separable: the non-digit groups must read disjoint inputs.
  int readers_arrow = 0, readers_eos = 0;
  for (const auto& G : F.groups) {
    readers_arrow += G.w[Layout::PRE_ARROW] != 0;
    readers_eos += G.w[Layout::PRE_EOS] != 0;
  }
  int digit_groups = 0;
  for (const auto& g : E.groups) digit_groups += g.digit_side;
  if (readers_arrow > 1 || readers_eos > 1 || digit_groups > 1)
    err = "several hidden-unit groups read the same attention output: margins are not separable";
  return E;
}

// min over z in [lo, hi] of sum_u coef_u relu(z + b_u): a piecewise-linear function, so the
// minimum is at an end point or a kink.
template <class T, class Coef>
T pl_min(const T& lo, const T& hi, const std::vector<int>& units, const std::vector<T>& b1, Coef coef) {
  auto f = [&](const T& z) {
    T s = T(0);
    for (int u : units) {
      const T a = z + b1[std::size_t(u)];
      if (a > 0) s += coef(u) * a;
    }
    return s;
  };
  T best = std::min(f(lo), f(hi));
  for (int u : units) {
    const T k = -b1[std::size_t(u)];
    if (k > lo && k < hi) best = std::min(best, f(k));
  }
  return best;
}

// The digit group's logits as exact piecewise-linear functions of its shared input z:
// L_t(z) = sum_u C[u][t] relu(z + b_u). Kinks at -b_u; on each segment L_t is alpha + beta z, and
// the values at the kinks are tabulated, so min_{z in [lo, hi]} (L_e - L_k) costs a few exact
// operations (end points by their segment's line, kinks inside from the table).
template <class T>
struct PLTable {
  std::vector<T> kinks;                            // sorted, distinct
  std::vector<std::array<T, kVocab>> alpha, beta;  // per segment (kinks.size() + 1)
  std::vector<std::array<T, kVocab>> at_kink;      // L_t(kink)
  std::size_t segment(const T& z) const {          // number of kinks < z ... with z == kink put left
    return std::size_t(std::lower_bound(kinks.begin(), kinks.end(), z) - kinks.begin());
  }
  std::array<T, kVocab> eval(const T& z) const {
    const std::size_t s = segment(z);
    std::array<T, kVocab> r;
    for (int t = 0; t < kVocab; ++t) r[std::size_t(t)] = alpha[s][std::size_t(t)] + beta[s][std::size_t(t)] * z;
    return r;
  }
};

template <class T>
PLTable<T> pl_table(const std::vector<int>& units, const std::vector<T>& b1, const std::vector<std::array<T, kVocab>>& C) {
  PLTable<T> P;
  for (int u : units) P.kinks.push_back(-b1[std::size_t(u)]);
  std::sort(P.kinks.begin(), P.kinks.end());
  P.kinks.erase(std::unique(P.kinks.begin(), P.kinks.end()), P.kinks.end());
  const std::size_t K = P.kinks.size();
  P.alpha.resize(K + 1);
  P.beta.resize(K + 1);
  // Segment 0 (left of every kink) has no active unit; crossing kink s-1 activates its units.
  for (int t = 0; t < kVocab; ++t) P.alpha[0][std::size_t(t)] = P.beta[0][std::size_t(t)] = T(0);
  for (std::size_t s = 1; s <= K; ++s) {
    P.alpha[s] = P.alpha[s - 1];
    P.beta[s] = P.beta[s - 1];
    for (int u : units) {
      if (!(-b1[std::size_t(u)] == P.kinks[s - 1])) continue;
      for (int t = 0; t < kVocab; ++t) {
        P.alpha[s][std::size_t(t)] += C[std::size_t(u)][std::size_t(t)] * b1[std::size_t(u)];
        P.beta[s][std::size_t(t)] += C[std::size_t(u)][std::size_t(t)];
      }
    }
  }
  P.at_kink.resize(K);
  for (std::size_t i = 0; i < K; ++i)
    for (int t = 0; t < kVocab; ++t) P.at_kink[i][std::size_t(t)] = P.alpha[i][std::size_t(t)] + P.beta[i][std::size_t(t)] * P.kinks[i];
  return P;
}

template <class T>
Box<T> linear_box(const std::array<T, 7>& w, const std::array<Box<T>, 7>& y) {
  Box<T> r{T(0), T(0)};
  for (int c = 0; c < 7; ++c) {
    const T a = w[std::size_t(c)] * y[std::size_t(c)].lo, b = w[std::size_t(c)] * y[std::size_t(c)].hi;
    r.lo += std::min(a, b);
    r.hi += std::max(a, b);
  }
  return r;
}

// Head-output enclosures. Real arithmetic: matched keys weight 1, unmatched in [0, eps]:
//   [vsum / (x + u eps), (vsum + u vmax eps) / x].
// Floating point (the dense engine's program, unit roundoff r; see the derivation in certify()).
// kernel: the tensor-core kernel's program instead (kernel_rounding.hpp; r, wlo, whi, eps unused).
struct FpModel {
  bool exact = true;
  double r = 0;       // unit roundoff
  double wlo = 1, whi = 1;  // bounds of a matched key's computed weight
  double eps = 0;     // bound of an unmatched key's computed weight
  bool kernel = false;
  KernelRounding kr{};
};

template <class T>
T big_value() { return T(1e300); }

// An enclosure's ends rounded outward to doubles (sound: the box only grows, by an ulp). Exact
// arithmetic downstream then runs on 53-bit dyadic rationals instead of the long fractions that
// e^{-2 lambda} and the rounding factors produce: the floating-point tables build ~10x faster.
template <class T>
Box<T> outward(const Box<T>& b) { return b; }  // double: already (the bisection's) working precision
template <>
inline Box<Rational> outward(const Box<Rational>& b) {
  double lo = b.lo.convert_to<double>(), hi = b.hi.convert_to<double>();
  if (Rational(lo) > b.lo) lo = std::nextafter(lo, -std::numeric_limits<double>::infinity());
  if (Rational(hi) < b.hi) hi = std::nextafter(hi, std::numeric_limits<double>::infinity());
  return {Rational(lo), Rational(hi)};
}

// Monotone in u, which lets one check at the largest token count cover every smaller shape: in
// real arithmetic lo = V / (x + u eps) falls and hi = (V + u vmax eps) / x rises with u; in floating
// point zb, ab, the unmatched additions' errors (u min(.)) and zhi, ahi rise with u, so zlo and alo
// fall, hence lo = alo / zhi (1 - r) falls and hi = ahi / zlo (1 + r) rises (and the [0, big] box
// taken once zlo <= 0 stays taken for larger u). tests/test_whole_claim.cpp checks it (RapidCheck).
//
// The enclosure for every matched count x in [x1, x2] at once (a hull over a class group).
// Real arithmetic is monotone in x. The floating-point model is not (its summation error grows
// like r x^2, so the upper end starts to rise near x ~ 1/(5r), ~3e6 keys in float32): its ends
// are bounded separately, each by the monotone pieces it is made of.
template <class T>
Box<T> head_box_range(std::int64_t vsum, std::int64_t x1, std::int64_t x2, std::int64_t u, int vmax, const FpModel& fp) {
  if (fp.kernel) {  // the kernel's enclosure, monotone in u likewise (kernel_rounding.hpp)
    double flo, fhi;
    kernel_rise_factors(fp.kr, x2, flo, fhi);
    const KernelBox<T> b = kernel_head_box_range<T>(vsum, x1, x2, u, vmax, fp.kr, flo, fhi);
    if (!b.bounded) return Box<T>{T(0), big_value<T>()};
    return outward(Box<T>{b.lo, b.hi});
  }
  const T V(vsum), U(u), eps(fp.eps), vm(vmax);
  if (fp.exact) return outward(Box<T>{V / (T(x2) + U * eps), (V + U * vm * eps) / T(x1)});
  const T r(fp.r), wlo(fp.wlo), whi(fp.whi);
  const T one(1);
  const Box<T> wide{T(0), big_value<T>()};  // when the lower bound of z is not positive
  // z = BOS + (x-1) matched + u unmatched terms, added in index order from 0 (the BOS term is
  // exact); acc likewise with the products fl(w v) = w v (1 +- r), values v >= 0. Round to
  // nearest: an addition errs by at most min(r |partial sum + term|, |term|) (the old partial sum
  // is itself a candidate), so no computed partial sum exceeds twice the exact sum of the terms
  // (zb for z, ab for acc). What the arithmetic can lose, and no more:
  //  * a matched addition errs by at most r zb (resp. r ab);
  //  * an unmatched one by at most min(eps, r zb) (resp. min(eps vmax (1 + r), r ab)): in float64
  //    near lambda_min that is r zb, ~1e-15, not the whole weight eps ~1e-8;
  //  * and an unmatched addition never lowers a partial sum (fl(s + w) >= s for w >= 0, s a
  //    float), so the lower ends lose only the matched additions' errors.
  struct Ends {
    T zlo, zhi, alo, ahi;
    bool valid;
  };
  auto at = [&](std::int64_t x) {
    const T X(x);
    const T zb = T(2) * (X * whi + U * eps);
    const T Ezm = (X - one) * r * zb, Ezu = U * std::min(eps, T(r * zb));
    const T A = whi * (one + r) * V + U * eps * vm * (one + r), ab = T(2) * A;
    const T Eam = (X - one) * r * ab, Eau = U * std::min(T(eps * vm * (one + r)), T(r * ab));
    Ends e{X * wlo - Ezm, X * whi + U * eps + Ezm + Ezu, wlo * (one - r) * V - Eam, A + Eam + Eau, true};
    e.valid = e.zlo > 0;
    if (e.alo < 0) e.alo = T(0);
    return e;
  };
  const Ends a = at(x1), b = at(x2);
  if (!a.valid || !b.valid) return wide;
  // alo falls and zhi, ahi rise with x; zlo is concave in x (its minimum is at an end)
  return outward(Box<T>{b.alo / b.zhi * (one - r), b.ahi / std::min(a.zlo, b.zlo) * (one + r)});
}

// Head-output enclosures. Real arithmetic: matched keys weight 1, unmatched in [0, eps]:
//   [vsum / (x + u eps), (vsum + u vmax eps) / x].
// Floating point: the dense engine's program, unit roundoff r (derivation in certify()).
template <class T>
Box<T> head_box(std::int64_t vsum, std::int64_t x, std::int64_t u, int vmax, const FpModel& fp) {
  return head_box_range<T>(vsum, x, x, u, vmax, fp);
}

struct Worst {
  double margin = std::numeric_limits<double>::infinity();
  std::int64_t position = -1;     // the first position of the class with the smallest margin
  std::int64_t first_fail = -1;   // the smallest position whose class fails
  std::string what;               // what that class is
  int S = -1, S2 = -1, carry = -1;
};

// Digit-side tables A[kind][e][k]: min over the kind's configurations with expected token e of
// the digit groups' contribution to logit_e - logit_k. Each configuration fixes NUM and the boxes
// of PRE_SUM / PRE_CARRY. u1, u2: the unmatched-key counts the boxes assume (a bound).
template <class T>
struct DigitTables {
  std::array<std::array<std::array<T, kVocab>, kVocab>, kKinds> A;
  std::array<std::array<std::array<std::array<int, 3>, kVocab>, kVocab>, kKinds> Acfg{};
  T ysum = T(0), ycarry = T(0);  // the largest upper ends of the head-1 / head-2 enclosures the tables use
};

// The enclosure of a head-1/2 output where part 1 bounds only the matched count: at most X keys,
// BOS included; BOS's value is 3 NUM('$') = 0 and every head matches it at every query; the others
// have value 0 (separators: zero = true) or values in [0, vmax] (the most significant digit's
// query); u unmatched keys with values in [0, vmax]. Every computed weight and value is >= 0 and
// every operation rounds to nearest, so the computed output is >= 0. Upper end: the hull over
// x in [1, X] of head_box at the largest matched sum vmax (x - 1) (head_box's upper end rises with
// vsum), i.e. the same rounding model as every other head output of the precision; in real
// arithmetic also <= vmax (a convex combination of values in [0, vmax]).
template <class T>
Box<T> bounded_match_box(std::int64_t X, bool zero, std::int64_t u, int vmax, const FpModel& fp) {
  Box<T> b{T(0), T(0)};
  for (std::int64_t x = 1; x <= X; ++x) {
    const Box<T> c = head_box<T>(zero ? 0 : vmax * (x - 1), x, u, vmax, fp);
    if (c.hi > b.hi) b.hi = c.hi;
  }
  if (fp.exact && b.hi > T(vmax)) b.hi = T(vmax);
  return b;
}

template <class T>
DigitTables<T> digit_tables(const ExactFFN<T>& E, const std::array<FpModel, 4>& fp, std::int64_t u1, std::int64_t u2) {
  const T big = big_value<T>();
  DigitTables<T> D;
  auto& A = D.A;
  auto& Acfg = D.Acfg;
  for (auto& a : A)
    for (auto& r : a) r.fill(big);
  std::vector<PLTable<T>> tables;
  for (const auto& g : E.groups) tables.push_back(g.digit_side ? pl_table(g.units, E.b1, E.C) : PLTable<T>{});
  // Heads 1-2 where they match separators only (B_0's digits, head 2 at a separator query) or are
  // not pinned down (the most significant digit): at most head12_keys() keys (part 1 checks it).
  const std::int64_t X12 = head12_keys();
  const Box<T> sep1 = bounded_match_box<T>(X12, true, u1, 27, fp[0]), sep2 = bounded_match_box<T>(X12, true, u2, 27, fp[1]);
  const Box<T> msd1 = bounded_match_box<T>(X12, false, u1, 27, fp[0]), msd2 = bounded_match_box<T>(X12, false, u2, 27, fp[1]);
  D.ysum = std::max(sep1.hi, msd1.hi);
  D.ycarry = std::max(sep2.hi, msd2.hi);
  for (int kind = 0; kind < kKinds; ++kind) {
    struct Cfg {
      int S, S2, c, numv, e;
      Box<T> ps, pc;
    };
    std::vector<Cfg> cfgs;
    if (kind == kM) {
      for (int numv = 0; numv <= 9; ++numv) cfgs.push_back({-1, -1, -1, numv, -1, msd1, msd2});
    } else if (kind == kZ) {
      cfgs.push_back({0, 0, 0, 0, 0, sep1, sep2});
    } else {
      for (int S = 0; S <= 18; ++S)
        for (int S2 = 0; S2 <= (kind == kD0 ? 0 : 18); ++S2)
          for (int c = 0; c <= (kind == kD2 ? 1 : 0); ++c) {
            const int total = S2 + c, carry = kind == kD0 ? 0 : total >= 10;
            const int numv = kind == kD0 ? 0 : total % 10;
            const int e = (S + carry) % 10;
            const Box<T> ps = head_box<T>(3 * S, 3, u1, 27, fp[0]);
            const Box<T> pc = kind == kD0 ? sep2 : head_box<T>(3 * S2, 3, u2, 27, fp[1]);
            cfgs.push_back({S, S2, c, numv, e, ps, pc});
            D.ysum = std::max(D.ysum, ps.hi);
            D.ycarry = std::max(D.ycarry, pc.hi);
          }
    }
    for (const auto& cf : cfgs) {
      std::array<Box<T>, 7> y;
      for (auto& b : y) b = {T(0), T(0)};
      y[Layout::NUM] = {T(cf.numv), T(cf.numv)};
      y[Layout::FULL_ONES] = {T(1), T(1)};
      y[Layout::PRE_SUM] = cf.ps;
      y[Layout::PRE_CARRY] = cf.pc;
      const std::vector<int> es = cf.e >= 0 ? std::vector<int>{cf.e} : std::vector<int>{int(kArrow), int(kDollar)};
      // digit-side contribution to logit_e - logit_k, minimized over the box, for every e and k
      std::array<std::array<T, kVocab>, kVocab> dmin;
      for (auto& r : dmin) r.fill(T(0));
      for (std::size_t gi = 0; gi < E.groups.size(); ++gi) {
        const auto& g = E.groups[gi];
        if (!g.digit_side) continue;
        const PLTable<T>& P = tables[gi];
        const Box<T> z = linear_box(g.w, y);
        const auto Llo = P.eval(z.lo), Lhi = P.eval(z.hi);
        const std::size_t a = P.segment(z.lo), b = std::size_t(std::upper_bound(P.kinks.begin(), P.kinks.end(), z.hi) - P.kinks.begin());
        for (int e : es)
          for (int k = 0; k < kVocab; ++k) {
            if (k == e) continue;
            T m = std::min(T(Llo[std::size_t(e)] - Llo[std::size_t(k)]), T(Lhi[std::size_t(e)] - Lhi[std::size_t(k)]));
            for (std::size_t i = a; i < b; ++i)  // kinks strictly inside (lo, hi]
              m = std::min(m, T(P.at_kink[i][std::size_t(e)] - P.at_kink[i][std::size_t(k)]));
            dmin[std::size_t(e)][std::size_t(k)] += m;
          }
      }
      for (int e : es)
        for (int k = 0; k < kVocab; ++k) {
          if (k == e) continue;
          const T& sum = dmin[std::size_t(e)][std::size_t(k)];
          if (sum < A[std::size_t(kind)][std::size_t(e)][std::size_t(k)]) {
            A[std::size_t(kind)][std::size_t(e)][std::size_t(k)] = sum;
            Acfg[std::size_t(kind)][std::size_t(e)][std::size_t(k)] = {cf.S, cf.S2, cf.c};
          }
        }
    }
  }
  return D;
}

inline double gamma(int n, double r) { return n * r / (1 - n * r); }

// The dense engine's floating-point model for head h at scale lambda (derivation in certify()).
inline FpModel fp_model_at(const ConstructedModel& M, int h, double r, double lambda) {
  FpModel f;
  f.exact = false;
  f.r = r;
  const Head& H = M.heads[std::size_t(h)];
  const int dqk = int(H.Q.rows());
  const double P = dqk - 1;
  const double eta = (gamma(dqk, r) + 4 * r) * lambda * P * (1 + 1e-12);
  f.wlo = exp_lower(-2 * eta * (1 + r)) * (1 - 2 * r) * (1 - 1e-15);
  f.whi = (1 + 2 * r) * (1 + 1e-15);
  f.eps = exp_upper(-(2 * lambda - 2 * eta) * (1 - r)) * (1 + 2 * r) * (1 + 1e-15);
  return f;
}
inline FpModel fp_model(const ConstructedModel& M, int h, double r) { return fp_model_at(M, h, r, M.heads[std::size_t(h)].lambda); }

// The FFN + readout's rounding, bounded from the ranges of its inputs: |NUM| <= 9 and FULL_ONES = 1
// (the token embedding, exact) and the head outputs, whose enclosures' upper ends bound them (every
// lower end is >= 0: weights and values are >= 0, every operation rounds to nearest). Each class
// is charged with its own enclosures' ends (FfnInputs), so the bound holds wherever they do, at
// every N, with no assumed constant. |W| are the magnitudes of the weights the program runs
// (float-cast in float32).
struct FfnInputs {
  double sum = 0, carry = 0, arrow = 0, eos = 0;  // upper ends of PRE_SUM, PRE_CARRY, PRE_ARROW, PRE_EOS
};
class FfnRounding {
 public:
  FfnRounding() = default;  // real arithmetic: no rounding
  // program: 0 the dense engine in precision r (float32: its float-cast weights), 1 CompiledFFN in
  // double (the structured and CUDA engines' host side)
  FfnRounding(const ConstructedModel& M, double r, int program) : r_(r), compiled_(program == 1), d_(M.d()), H_(int(M.W1.rows())) {
    const bool f32 = !compiled_ && r == 0x1p-24;
    auto a = [&](const auto& W) -> Eigen::MatrixXd {
      return f32 ? Eigen::MatrixXd(W.template cast<float>().template cast<double>().cwiseAbs()) : Eigen::MatrixXd(W.cwiseAbs());
    };
    W1_ = a(M.W1), b1_ = a(M.b1), W2_ = a(M.W2), b2_ = a(M.b2), Wout_ = a(M.Wout);
    A_ = Wout_ * W2_;  // >= |C| = |Wout W2|
    c0_ = Wout_ * b2_;
  }
  bool none() const { return r_ == 0; }
  // Bound of the rounding error of one logit (see certify()).
  double operator()(const FfnInputs& y) const {
    if (none()) return 0;
    Eigen::VectorXd ymax = Eigen::VectorXd::Zero(d_);
    ymax(Layout::NUM) = 9;
    ymax(Layout::FULL_ONES) = 1;
    ymax(Layout::PRE_SUM) = y.sum;
    ymax(Layout::PRE_CARRY) = y.carry;
    ymax(Layout::PRE_ARROW) = y.arrow;
    ymax(Layout::PRE_EOS) = y.eos;
    const Eigen::VectorXd hmax = W1_ * ymax + b1_;  // |pre-activation| of each hidden unit
    const double r = r_;
    const int d = d_, H = H_;
    if (!compiled_) {
      // the dense engine: Eigen dot products, gamma_n of the summed magnitudes at each stage
      const Eigen::VectorXd dpre = gamma(d + 1, r) * hmax;  // the pre-activation's rounding
      const Eigen::VectorXd x1max = W2_ * hmax + b2_;       // |X1| (Y's dims read by Wout are 0)
      const Eigen::VectorXd dx1 = W2_ * dpre + gamma(H + 2, r) * (W2_ * (hmax + dpre) + b2_);
      const Eigen::VectorXd dlog = Wout_ * dx1 + gamma(d, r) * (Wout_ * (x1max + dx1));
      return dlog.maxCoeff() * (1 + 1e-12);
    }
    // CompiledFFN (construct/src/structured.cpp): C = Wout W2 and c0 = Wout b2 are products computed
    // once (|error| <= gamma_d |Wout| |W2|, resp. |Wout| |b2|); a hidden unit's pre-activation sums
    // the 7 products w_c y_c and b1 in order (gamma_8 of the summed magnitudes; relu is
    // 1-Lipschitz); a logit sums c0 and up to H products C h in order (gamma_{H+1}). The inputs
    // y = tok_emb + U o are exact (U's one entry 1 writes into a dimension the token leaves 0).
    const Eigen::VectorXd dh = gamma(8, r) * hmax;
    const Eigen::MatrixXd dC = gamma(d, r) * A_;
    const Eigen::VectorXd dc0 = gamma(d, r) * c0_;
    const Eigen::VectorXd hf = hmax + dh;  // >= |h computed|
    const Eigen::VectorXd dlog = dc0 + dC * hf + A_ * dh + gamma(H + 1, r) * (c0_ + dc0 + (A_ + dC) * hf);
    return dlog.maxCoeff() * (1 + 1e-12);
  }

 private:
  double r_ = 0;
  bool compiled_ = false;
  int d_ = 0, H_ = 0;
  Eigen::MatrixXd W1_, W2_, Wout_, A_;
  Eigen::VectorXd b1_, b2_, c0_;
};

// v rounded up to a double (>= v).
inline double up(double v) { return v; }
inline double up(const Rational& v) {
  double d = v.convert_to<double>();
  if (Rational(d) < v) d = std::nextafter(d, std::numeric_limits<double>::infinity());
  return d;
}

// The minimum margin over all classes for one precision; in floating point (err) less twice the
// FFN + readout's logit error, bounded per class from its enclosures' upper ends.
template <class T>
T class_margins(const Structure& st, const ExactFFN<T>& E, const std::array<FpModel, 4>& fp, const DigitTables<T>& D,
                Worst& worst, std::vector<std::int64_t>* risky, bool hull_only = false, const FfnRounding* err = nullptr) {
  const T big = big_value<T>();
  const auto& A = D.A;
  const auto& Acfg = D.Acfg;
  // Per class: the arrow/EOS side with the class's head-3/4 boxes. Classes of one (kind, expected
  // token) are first merged into the hull of their boxes (sound: the hull contains every box); only
  // when a merged class fails are its classes checked one by one, to locate the failure.
  auto eval_exact = [&](int kind, int expect, const Box<T>& pa, const Box<T>& pe, int& arge, int& argk) {
    std::array<Box<T>, 7> y;
    for (auto& b : y) b = {T(0), T(0)};
    y[Layout::FULL_ONES] = {T(1), T(1)};
    y[Layout::PRE_ARROW] = pa;
    y[Layout::PRE_EOS] = pe;
    // each non-digit group: its linear form's range, and the unit values at both ends (relu is
    // monotone, so a single unit's coefficient times relu is minimized at an end)
    std::vector<std::pair<const typename ExactFFN<T>::Group*, std::array<std::vector<T>, 2>>> ends;
    for (const auto& g : E.groups) {
      if (g.digit_side) continue;
      const Box<T> z = linear_box(g.w, y);
      std::array<std::vector<T>, 2> v;
      for (int u : g.units) {
        const T a = z.lo + E.b1[std::size_t(u)], b = z.hi + E.b1[std::size_t(u)];
        v[0].push_back(a > 0 ? a : T(0));
        v[1].push_back(b > 0 ? b : T(0));
      }
      ends.push_back({&g, v});
    }
    std::vector<int> es;
    if (kind == kM) es = {expect};
    else if (kind == kZ) es = {0};
    else es = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    T cls = big;
    for (int e : es)
      for (int k = 0; k < kVocab; ++k) {
        if (k == e) continue;
        const T& a = A[std::size_t(kind)][std::size_t(e)][std::size_t(k)];
        if (a == big) continue;  // no configuration expects e here
        T sum = a + E.c0[std::size_t(e)] - E.c0[std::size_t(k)];
        for (const auto& [g, v] : ends) {
          if (g->units.size() == 1) {
            const int u = g->units[0];
            const T c = E.C[std::size_t(u)][std::size_t(e)] - E.C[std::size_t(u)][std::size_t(k)];
            if (c != 0) sum += c > 0 ? c * v[0][0] : c * v[1][0];
          } else {
            const Box<T> z = linear_box(g->w, y);
            sum += pl_min(z.lo, z.hi, g->units, E.b1, [&](int u) { return E.C[std::size_t(u)][std::size_t(e)] - E.C[std::size_t(u)][std::size_t(k)]; });
          }
        }
        if (sum < cls) {
          cls = sum;
          arge = e;
          argk = k;
        }
      }
    return cls;
  };
  auto eval_class = [&](int kind, int expect, const Box<T>& pa, const Box<T>& pe, int& arge, int& argk) {
    const T cls = eval_exact(kind, expect, pa, pe, arge, argk);
    if (!err || err->none() || cls == big) return cls;
    const double e = (*err)(FfnInputs{up(D.ysum), up(D.ycarry), up(pa.hi), up(pe.hi)});
    return std::isfinite(e) ? T(cls - T(2 * e)) : T(-big);
  };
  struct Merged {
    std::int64_t x3lo, x3hi, u3lo, u3hi, x4lo, x4hi, u4lo, u4hi;
    std::vector<const std::pair<const ClassKey, ClassInfo>*> members;
  };
  std::map<std::pair<int, int>, Merged> merged;
  // The hull of a merged group's boxes from the extreme counts: a head-3/4 enclosure widens as u
  // (unmatched keys) grows, and head_box_range bounds it over the whole x range, so the hull costs
  // a few exact operations per group instead of two boxes per class.
  for (const auto& kv : st.classes) {
    const auto& [key, info] = kv;
    auto it = merged.find({key.kind, key.expect});
    if (it == merged.end()) {
      merged[{key.kind, key.expect}] = Merged{key.x3, key.x3, info.u3, info.u3, key.x4, key.x4, info.u4, info.u4, {&kv}};
    } else {
      Merged& mg = it->second;
      mg.x3lo = std::min(mg.x3lo, key.x3);
      mg.x3hi = std::max(mg.x3hi, key.x3);
      mg.u3lo = std::min(mg.u3lo, info.u3);
      mg.u3hi = std::max(mg.u3hi, info.u3);
      mg.x4lo = std::min(mg.x4lo, key.x4);
      mg.x4hi = std::max(mg.x4hi, key.x4);
      mg.u4lo = std::min(mg.u4lo, info.u4);
      mg.u4hi = std::max(mg.u4hi, info.u4);
      mg.members.push_back(&kv);
    }
  }
  auto hull = [&](std::int64_t xlo, std::int64_t xhi, std::int64_t ulo, std::int64_t uhi, const FpModel& f) {
    Box<T> b{big, -big};
    for (std::int64_t u : {ulo, uhi}) {
      const Box<T> c = head_box_range<T>(1, xlo, xhi, u, 0, f);
      if (c.lo < b.lo) b.lo = c.lo;
      if (c.hi > b.hi) b.hi = c.hi;
    }
    return b;
  };
  T best = big;
  auto record = [&](const T& cls, int kind, int arge, int argk, std::int64_t first, std::int64_t x3, std::int64_t x4) {
    if (cls < best) best = cls;
    const double d = to_d(cls);
    if (!(cls > 0)) {
      if (risky && risky->size() < 16) risky->push_back(first);
      if (worst.first_fail < 0 || first < worst.first_fail) {
        worst.first_fail = first;
        static const char* kinds[] = {"a digit (t >= 2)", "a digit (t = 1)", "a digit after a separator", "a digit of B_0",
                                      "'>' or '$'"};
        worst.what = fmt::format("predicting {}: head 3 attends to {} keys with BOS (PRE_ARROW ~ 1/{}), head 4 to {} (PRE_EOS ~ "
                                 "1/{}); worst rival '{}'",
                                 kinds[kind], x3, x3, x4, x4, argk >= 0 ? token_char(argk) : '?');
      }
    }
    if (d < worst.margin || (d == worst.margin && first < worst.position)) {
      worst.margin = d;
      worst.position = first;
      if (arge >= 0 && kind <= kD0) {
        const auto& cfg = Acfg[std::size_t(kind)][std::size_t(arge)][std::size_t(argk)];
        worst.S = cfg[0];
        worst.S2 = cfg[1];
        worst.carry = cfg[2];
      }
    }
  };
  for (const auto& [mk, mg] : merged) {
    int arge = -1, argk = -1;
    const T cls = eval_class(mk.first, mk.second, hull(mg.x3lo, mg.x3hi, mg.u3lo, mg.u3hi, fp[2]),
                             hull(mg.x4lo, mg.x4hi, mg.u4lo, mg.u4hi, fp[3]), arge, argk);
    std::int64_t first = -1;
    for (auto* kv : mg.members) first = first < 0 ? kv->second.first : std::min(first, kv->second.first);
    // hull_only: the members stand for a range of classes (a class group's corners), so only the
    // hull speaks for them; else the members are every class and each may be checked alone.
    if (cls > 0 || hull_only) {
      record(cls, mk.first, arge, argk, first, mg.x3lo, mg.x4lo);
      continue;
    }
    for (auto* kv : mg.members) {  // locate: class by class
      int e2 = -1, k2 = -1;
      const Box<T> pa = head_box<T>(1, kv->first.x3, kv->second.u3, 0, fp[2]);
      const Box<T> pe = head_box<T>(1, kv->first.x4, kv->second.u4, 0, fp[3]);
      const T cm = eval_class(kv->first.kind, kv->first.expect, pa, pe, e2, k2);  // sets e2, k2
      record(cm, kv->first.kind, e2, k2, kv->second.first, kv->first.x3, kv->first.x4);
    }
  }
  return best;
}

// The digit tables of one FFN (ffn_fingerprint), precision and enclosure models, built once per process
// (certificate.cpp).
std::string ffn_fingerprint(const ConstructedModel& M);
std::shared_ptr<const DigitTables<Rational>> cached_tables(const std::string& ffn, bool f32, const ExactFFN<Rational>& E,
                                                          const std::array<FpModel, 4>& fp, std::int64_t u);

}  // namespace manyadd::cert_detail
