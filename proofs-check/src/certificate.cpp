// The certificate of one shape and its offsets (Certifier); see certificate.hpp for what each part
// proves. Part 1: certificate_structure.hpp; Parts 2 and 3: certificate_margins.hpp; the building blocks
// of the whole claim: certificate_whole_claim.cpp.
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

#include "certificate_margins.hpp"

namespace manyadd {

using namespace cert_detail;

// -2 lambda is computed in double first; rounding it up keeps the result an upper bound.
double exp_neg2_upper(double lambda) { return exp_upper(std::nextafter(-2.0 * lambda, 0.0)); }

// Digit tables depend on the feed-forward weights, the head-1/2 enclosure models and the bound on
// unmatched keys only, not on P1, P2 or the offsets: a process-wide cache lets --dims-table and
// --offsets all build each table once.
std::string cert_detail::ffn_fingerprint(const ConstructedModel& M) {
  std::string k;
  auto add = [&](const auto& mat) {
    k.append(reinterpret_cast<const char*>(mat.data()), std::size_t(mat.size()) * sizeof(double));
  };
  add(M.W1);
  add(M.b1);
  add(M.W2);
  add(M.b2);
  add(M.Wout);
  return std::to_string(std::hash<std::string>{}(k));
}

std::shared_ptr<const DigitTables<Rational>> cert_detail::cached_tables(const std::string& ffn, bool f32, const ExactFFN<Rational>& E,
                                                          const std::array<FpModel, 4>& fp, std::int64_t u) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const DigitTables<Rational>>> cache;
  std::string key = ffn + (f32 ? "f" : "d") + std::to_string(u);
  for (int h = 0; h < 2; ++h) {
    const FpModel& f = fp[std::size_t(h)];
    key += fmt::format("|{:a},{:a},{:a},{:a},{}", f.eps, f.wlo, f.whi, f.r, f.exact);
    if (f.kernel)
      key += fmt::format("|k{:a},{:a},{:a},{:a},{:a},{:a},{}", f.kr.r, f.kr.eta2, f.kr.wlo, f.kr.whi, f.kr.eps, f.kr.rho, f.kr.D);
  }
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  auto t = std::make_shared<const DigitTables<Rational>>(digit_tables<Rational>(E, fp, u, u));
  std::lock_guard<std::mutex> g(mu);
  if (cache.size() > 64) cache.clear();
  cache[key] = t;
  return t;
}

struct Certifier::Impl {
  const ConstructedModel& M;
  Shape shape;
  CertOptions opt;
  CompiledFFN F;
  ExactFFN<Rational> Eq, E32;
  ExactFFN<double> Ed;
  std::int64_t ubound;  // unmatched keys of any query: fewer than N
  std::array<FpModel, 4> real{};
  // float64, float32 (the dense engine), float32-cuda (the tensor-core kernel, CertOptions::kernel)
  std::array<std::array<FpModel, 4>, 3> fpm{};
  std::array<FfnRounding, 3> ffn_err{};  // float64, float32, float32-cuda
  std::shared_ptr<const DigitTables<Rational>> Dreal;
  std::array<std::shared_ptr<const DigitTables<Rational>>, 3> Dfp;
  std::mutex memo_mu;
  std::map<double, std::shared_ptr<const DigitTables<double>>> memo;  // lambda -> tables (bisection)
  std::mutex share_mu;
  std::map<std::pair<bool, bool>, std::shared_future<CertResult>> by_wrap;  // one result per wrap case
  std::atomic<std::int64_t> passes{0};
  std::string kernel_unbounded;  // float32-cuda: why a head's kernel has no rounding bound (empty: it has)

  Impl(const ConstructedModel& model, const Shape& s, const CertOptions& o)
      : M(model), shape(s), opt(o), F(CompiledFFN::build(model)), ubound(s.N()) {
    std::string err;
    Eq = exact_ffn<Rational>(M, F, false, err);
    E32 = exact_ffn<Rational>(M, F, true, err);
    Ed = exact_ffn<double>(M, F, false, err);
    if (!err.empty()) throw InputError("certificate: " + err);
    // Part 2 in exact rationals at the model's scales: eps_h = an upper bound of e^{-2 lambda_h}.
    for (int h = 0; h < 4; ++h) real[std::size_t(h)].eps = exp_neg2_upper(M.heads[std::size_t(h)].lambda);
    const std::string fpr = ffn_fingerprint(M);
  // Part 3. The program is the dense engine (construct/src/dense.cpp) in precision p with unit
  // roundoff r (2^-53, 2^-24):
  //  * Q, K entries are fl_p(fl_64(sqrt(lambda))) etc.: relative error <= 2r each, so a product
  //    q_i k_i errs by <= 4r relative; X0 holds exact small integers and +-1, and every row of Q, K
  //    has one nonzero, so Q X0 and K X0 add only exact zeros. A score sums d_qk = P_h + 1 such
  //    products in some order: |error| <= (gamma_{d_qk} + 4r) sum |q_i k_i| = (...) lambda P_h =: eta.
  //  * max-subtraction and exp: d = fl(s_i - max) errs by <= r |d|; exp is the C library's,
  //    assumed within 1 ulp (glibc documents <= 1 ulp for exp/expf on x86-64): factor (1 +- 2r).
  //    A matched key (true score = top) gets weight in [e^{-2 eta (1+r)} (1-2r), 1 + 2r]; an
  //    unmatched one at most e^{-(2 lambda - 2 eta)(1-r)} (1 + 2r).
  //  * the sums z, acc in index order: see head_box. out = fl(acc / z): factor (1 +- r).
  //  * U (one entry 1) writes into an empty dimension: exact.
  //  * FFN and readout: Eigen dot products with the standard bound gamma_n sum |terms|, inputs
  //    bounded by |NUM| <= 9 and by each class's own head enclosures (FfnRounding); the class's
  //    margin loses at most twice the resulting logit error. The exact part
  //    of part 3 uses the precision's own (cast) weights.
    // The three tables are independent: the real one on one thread, the two floating-point ones on
    // another.
    if (opt.floating_point) {
      for (int p = 0; p < 2; ++p) {
        const double r = p == 0 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
        for (int h = 0; h < 4; ++h) fpm[std::size_t(p)][std::size_t(h)] = fp_model(M, h, r);
        ffn_err[std::size_t(p)] = FfnRounding(M, r, 0);
      }
    }
  // float32-cuda: the tensor-core kernel (kernels/src/constructed_attention.cu) for the attention,
  // its rounding model per head at the plan's padded width (kernel_rounding.hpp, which states the
  // MMA assumption), then the FFN + readout on the host in double (CompiledFFN, construct's
  // cuda_engine.cpp: finish()), bounded by FfnRounding's CompiledFFN bound; the exact part uses the double
  // weights.
    if (opt.floating_point && opt.kernel) {
      const int D = qkv_plan(M).D;
      for (int h = 0; h < 4; ++h) {
        FpModel& f = fpm[2][std::size_t(h)];
        f.exact = false;
        f.kernel = true;
        try {
          f.kr = opt.kernel_model ? (*opt.kernel_model)[std::size_t(h)] : kernel_rounding(M, h, D);
        } catch (const KernelUnbounded& e) {
          kernel_unbounded = e.what();  // the precision fails in every run (run_one)
        }
      }
      ffn_err[2] = FfnRounding(M, std::ldexp(1.0, -53), 1);
    }
    const int parts = opt.floating_point ? 2 : 1;
    parallel_for(parts, parts, [&](int, std::int64_t part) {
      if (part == 0) {
        Dreal = cached_tables(fpr, false, Eq, real, ubound);
      } else {
        Dfp[0] = cached_tables(fpr, false, Eq, fpm[0], ubound);
        Dfp[1] = cached_tables(fpr, true, E32, fpm[1], ubound);
        if (opt.kernel && kernel_unbounded.empty()) Dfp[2] = cached_tables(fpr, false, Eq, fpm[2], ubound);
      }
    });
  }

  std::shared_ptr<const DigitTables<double>> tables_at(double lam) {
    std::lock_guard<std::mutex> g(memo_mu);
    auto it = memo.find(lam);
    if (it != memo.end()) return it->second;
    std::array<FpModel, 4> fm{};
    for (auto& f : fm) f.eps = exp_neg2_upper(lam);
    auto t = std::make_shared<const DigitTables<double>>(digit_tables<double>(Ed, fm, ubound, ubound));
    memo[lam] = t;
    return t;
  }

  // Offsets enter part 1 only through the wrap of a "next" vector (offset_cases.hpp; proven for
  // every shape and offset pair whose IDs stay within [1, 2^P] by the whole claim's solver run, and
  // compared with the structure pass at every offset for P1 = P2 <= 5 by the tests), and parts
  // 2-3 read only part 1's classes: so one structure pass serves every offset pair of a wrap case.
  // Offsets whose IDs exceed 2^P (aliasing) get their own pass.
  CertResult run(std::int64_t s1, std::int64_t s2) {
    if (!opt.share_offsets || !ids_in_range(shape, M.layout.P1, M.layout.P2, s1, s2)) return run_one(s1, s2);
    const std::pair<bool, bool> key = wrap_case(shape, M.layout.P1, M.layout.P2, s1, s2);
    std::promise<CertResult> mine;
    std::shared_future<CertResult> fut;
    bool first = false;
    {
      std::lock_guard<std::mutex> g(share_mu);
      auto it = by_wrap.find(key);
      if (it == by_wrap.end()) {
        fut = mine.get_future().share();
        by_wrap[key] = fut;
        first = true;
      } else {
        fut = it->second;
      }
    }
    if (first) {
      try {
        mine.set_value(run_one(s1, s2));
      } catch (...) {
        mine.set_exception(std::current_exception());
      }
    }
    return fut.get();
  }

  CertResult run_one(std::int64_t s1, std::int64_t s2) {
    ++passes;
    const auto t0 = std::chrono::steady_clock::now();
    CertResult R;
    // Part 1.
    const Structure st = analyze(shape, s1, s2, M.layout.P1, M.layout.P2);
    R.positions = st.positions;
    R.classes = std::int64_t(st.classes.size());
    if (st.failure) {
      R.failure = st.failure;
      R.risky_positions.push_back(st.failure->position);
    }
    // Part 2.
    Worst w;
    const Rational mreal = class_margins<Rational>(st, Eq, real, *Dreal, w, &R.risky_positions);
    R.min_margin = mreal.convert_to<double>();
    R.margins.push_back({"real", R.min_margin, !st.failure && mreal > 0});
    if (!(mreal > 0) && (!R.failure || (w.first_fail >= 0 && w.first_fail < R.failure->position)))
      R.failure = CertFailure{w.first_fail, "local", "margin not positive " + w.what, w.S, w.S2, w.carry, w.margin};
    // Part 3.
    bool fp_ok = true;
    if (opt.floating_point) {
      for (int p = 0; p < (opt.kernel ? 3 : 2); ++p) {
        if (p == 2 && !kernel_unbounded.empty()) {  // no bound: not proven, from the first prediction on
          const double none = -std::numeric_limits<double>::infinity();
          fp_ok = false;
          R.margins.push_back({"float32-cuda", none, false});
          if (!R.failure)
            R.failure = CertFailure{shape.eq_index(), "float32-cuda", "no rounding bound: " + kernel_unbounded, -1, -1, -1, none};
          continue;
        }
        Worst wf;
        const Rational mf = class_margins<Rational>(st, p == 1 ? E32 : Eq, fpm[std::size_t(p)], *Dfp[std::size_t(p)], wf, nullptr,
                                                    false, &ffn_err[std::size_t(p)]);
        const bool ok = !st.failure && mf > 0;
        fp_ok = fp_ok && ok;
        const char* name = p == 0 ? "float64" : p == 1 ? "float32" : "float32-cuda";
        R.margins.push_back({name, mf.convert_to<double>(), ok});
        if (!ok && !R.failure)
          R.failure = CertFailure{wf.first_fail >= 0 ? wf.first_fail : wf.position, name, "margin not positive with rounding " + wf.what,
                                  wf.S, wf.S2, wf.carry, mf.convert_to<double>()};
      }
    }
    R.proven = !st.failure && mreal > 0 && fp_ok;
    // lambda_min: the structure does not depend on lambda, the local margins grow with it; bisect a
    // common lambda in double (a report, not part of the proof; the proof is at the model's lambda).
    R.lambda_min = std::numeric_limits<double>::infinity();
    if (opt.lambda_min && !st.failure) {
      auto holds = [&](double lam) {
        std::array<FpModel, 4> fm{};
        for (auto& f : fm) f.eps = exp_neg2_upper(lam);
        Worst ww;
        return class_margins<double>(st, Ed, fm, *tables_at(lam), ww, nullptr) > 0;
      };
      double hi = 16;
      while (!holds(hi) && hi < 1e4) hi *= 2;
      if (holds(hi)) {
        double lo = 0;
        while (hi - lo > 1e-3 * hi) {
          const double mid = 0.5 * (lo + hi);
          (holds(mid) ? hi : lo) = mid;
        }
        R.lambda_min = hi;
      }
    }
    R.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return R;
  }
};

Certifier::Certifier(const ConstructedModel& M, const Shape& shape, const CertOptions& opt)
    : impl_(std::make_unique<Impl>(M, shape, opt)) {}
Certifier::~Certifier() = default;
CertResult Certifier::run(std::int64_t s1, std::int64_t s2) const { return impl_->run(s1, s2); }
std::int64_t Certifier::structure_passes() const { return impl_->passes; }

CertResult certify(const ConstructedModel& M, const Shape& shape, std::int64_t s1, std::int64_t s2, const CertOptions& opt) {
  return Certifier(M, shape, opt).run(s1, s2);
}

}  // namespace manyadd
