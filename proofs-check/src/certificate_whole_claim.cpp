// The certificate's building blocks for the whole claim (certificate.hpp: response_structure,
// ClassCertifier, the heads' enclosures): Part 1's classes and Parts 2 and 3's margins
// (certificate_structure.hpp, certificate_margins.hpp) over whole classes of shapes at once.
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

// ---- Building blocks for the whole claim ---------------------------------------------------------
static_assert(int(kDigitT2) == kD2 && int(kDigitT1) == kD1 && int(kDigitSep) == kD0 && int(kDigitB0) == kZ &&
                  int(kMsd) == kM && int(kPositionKinds) == kKinds,
              "the public position kinds are the certificate's");

const char* position_kind_name(int kind) {
  static const char* names[] = {"digit (t >= 2)", "digit (t = 1)", "digit after a separator", "digit of B_0", "'>' or '$'"};
  return kind >= 0 && kind < kKinds ? names[kind] : "?";
}

ResponseStructure response_structure(const Shape& shape, std::int64_t s1, std::int64_t s2, int P1, int P2) {
  const Structure st = analyze(shape, s1, s2, P1, P2);
  ResponseStructure R;
  for (const auto& [k, c] : st.classes) R.classes.push_back({k.kind, k.expect, k.x3, k.x4, c.u3, c.u4, c.first, c.count});
  R.u1 = st.u1;
  R.u2 = st.u2;
  R.positions = st.positions;
  R.failure = st.failure;
  return R;
}

namespace {
constexpr double kRoundoff[3] = {0.0, 0x1p-53, 0x1p-24};  // real, float64, float32
}  // namespace

struct ClassCertifier::Impl {
  const ConstructedModel& M;
  std::int64_t ubound;
  bool fp;
  CompiledFFN F;
  std::array<ExactFFN<Rational>, 3> E;  // real, float64 (the double weights), float32 (cast weights)
  std::array<ExactFFN<double>, 3> Ed;
  std::array<std::array<FpModel, 4>, 3> fpm{};
  std::array<FfnRounding, 3> ffn_err{};  // none in real arithmetic
  mutable std::array<std::shared_ptr<const DigitTables<Rational>>, 3> D;  // built by the first check()
  mutable std::once_flag exact_once;
  mutable std::mutex memo_mu;
  mutable std::map<std::pair<double, int>, std::shared_ptr<const DigitTables<double>>> memo;

  Impl(const ConstructedModel& model, std::int64_t u, bool floating_point)
      : M(model), ubound(u), fp(floating_point), F(CompiledFFN::build(model)) {
    std::string err;
    E[0] = E[1] = exact_ffn<Rational>(M, F, false, err);
    E[2] = exact_ffn<Rational>(M, F, true, err);
    Ed[0] = Ed[1] = exact_ffn<double>(M, F, false, err);
    Ed[2] = exact_ffn<double>(M, F, true, err);
    if (!err.empty()) throw InputError("certificate: " + err);
    for (int h = 0; h < 4; ++h) fpm[0][std::size_t(h)].eps = exp_neg2_upper(M.heads[std::size_t(h)].lambda);
    for (int p = 1; p < 3; ++p) {
      for (int h = 0; h < 4; ++h) fpm[std::size_t(p)][std::size_t(h)] = fp_model(M, h, kRoundoff[p]);
      ffn_err[std::size_t(p)] = FfnRounding(M, kRoundoff[p], 0);
    }
  }
  // The exact tables at the model's lambda, built once (holds() needs only the double ones).
  void exact_tables() const {
    std::call_once(exact_once, [&] {
      const std::string fpr = ffn_fingerprint(M);
      // the real table on one thread, the two floating-point ones on another
      const int parts = fp ? 2 : 1;
      parallel_for(parts, parts, [&](int, std::int64_t part) {
        if (part == 0) {
          D[0] = cached_tables(fpr, false, E[0], fpm[0], ubound);
        } else {
          D[1] = cached_tables(fpr, false, E[1], fpm[1], ubound);
          D[2] = cached_tables(fpr, true, E[2], fpm[2], ubound);
        }
      });
    });
  }

  // The part-1 structure of a sub-range of a group: its two corner classes (the hull of a merged
  // class covers every x3 between them, see class_margins).
  Structure corners(const ClassGroup& g, std::int64_t lo, std::int64_t hi) const {
    Structure st;
    st.u1 = st.u2 = ubound;
    for (std::int64_t x3 : {lo, hi}) st.classes[ClassKey{g.kind, g.expect, x3, g.x4}] = ClassInfo{ubound, ubound, -1, 1};
    return st;
  }
  Rational margin(const Structure& st, int p, Worst& w) const {
    return class_margins<Rational>(st, E[std::size_t(p)], fpm[std::size_t(p)], *D[std::size_t(p)], w, nullptr, true,
                                   &ffn_err[std::size_t(p)]);
  }
  // The smallest failing x3 of [lo, hi] (a progression of step g.x3_step), or -1 when none is
  // found within `budget` hull evaluations (a hull may fail where no single class does).
  std::int64_t first_failing(const ClassGroup& g, std::int64_t lo, std::int64_t hi, int p, std::string& why, int& budget) const {
    Worst w;
    if (--budget < 0 || margin(corners(g, lo, hi), p, w) > 0) return -1;
    if (lo == hi) {
      why = w.what;
      return lo;
    }
    const std::int64_t k = (hi - lo) / g.x3_step, mid = lo + (k - 1) / 2 * g.x3_step;
    const std::int64_t a = first_failing(g, lo, mid, p, why, budget);
    return a >= 0 ? a : first_failing(g, mid + g.x3_step, hi, p, why, budget);
  }

  std::shared_ptr<const DigitTables<double>> tables_at(double lam, int p) const {
    std::lock_guard<std::mutex> g(memo_mu);
    auto it = memo.find({lam, p});
    if (it != memo.end()) return it->second;
    const auto fm = models_at(lam, p);
    auto t = std::make_shared<const DigitTables<double>>(digit_tables<double>(Ed[std::size_t(p)], fm, ubound, ubound));
    if (memo.size() > 256) memo.clear();
    memo[{lam, p}] = t;
    return t;
  }
  std::array<FpModel, 4> models_at(double lam, int p) const {
    std::array<FpModel, 4> fm{};
    for (int h = 0; h < 4; ++h)
      fm[std::size_t(h)] = p == 0 ? FpModel{true, 0, 1, 1, exp_neg2_upper(lam)} : fp_model_at(M, h, kRoundoff[p], lam);
    return fm;
  }
};

ClassCertifier::ClassCertifier(const ConstructedModel& M, std::int64_t ubound, bool floating_point)
    : impl_(std::make_unique<Impl>(M, ubound, floating_point)) {}
ClassCertifier::~ClassCertifier() = default;

ClassCertifier::Verdict ClassCertifier::check(const ClassGroup& g) const { return check(std::vector<ClassGroup>{g}); }

ClassCertifier::Verdict ClassCertifier::check(const std::vector<ClassGroup>& gs) const {
  const Impl& I = *impl_;
  I.exact_tables();
  // One structure holding every group's corners: class_margins merges the classes of one (kind,
  // expected token) into one hull, exactly as the per-shape certifier merges a shape's classes, so
  // every shape's margins are at least these (its hulls lie inside, its u is smaller).
  Structure st;
  st.u1 = st.u2 = I.ubound;
  for (const ClassGroup& g : gs) {
    if (g.size() < 1) throw InputError("ClassCertifier: an empty class group");
    for (std::int64_t x3 : {g.x3_lo, g.x3_hi}) st.classes[ClassKey{g.kind, g.expect, x3, g.x4}] = ClassInfo{I.ubound, I.ubound, -1, 1};
  }
  Verdict v;
  for (int p = 0; p < (I.fp ? 3 : 1); ++p) {
    Worst w;
    Rational r = I.margin(st, p, w);
    bool ok = r > 0;
    if (!ok && gs.size() > 1) {  // the merged hull fails: decide group by group (finer hulls)
      r = Rational(1e300);
      for (const ClassGroup& g : gs) {
        Worst wg;
        r = std::min(r, I.margin(I.corners(g, g.x3_lo, g.x3_hi), p, wg));
      }
      ok = r > 0;
    }
    v.margin[std::size_t(p)] = r.convert_to<double>();
    v.ok[std::size_t(p)] = ok;
    if (!ok && v.failing_x3 < 0)
      for (const ClassGroup& g : gs) {
        std::string why = "(only the hull of the group's classes fails)";
        int budget = 4096;
        const std::int64_t x3 = I.first_failing(g, g.x3_lo, g.x3_hi, p, why, budget);
        Worst wg;
        if (x3 < 0 && I.margin(I.corners(g, g.x3_lo, g.x3_hi), p, wg) > 0) continue;
        v.failing_x3 = x3;
        v.failing_group = int(&g - gs.data());
        v.reason = std::string(p == 0 ? "" : p == 1 ? "float64: " : "float32: ") + "margin not positive " + why;
        break;
      }
  }
  return v;
}

bool ClassCertifier::holds(const std::vector<ClassGroup>& gs, double lambda, int p) const {
  const Impl& I = *impl_;
  const auto fm = I.models_at(lambda, p);
  const auto T = I.tables_at(lambda, p);
  auto margin = [&](const Structure& st) {
    Worst w;
    return class_margins<double>(st, I.Ed[std::size_t(p)], fm, *T, w, nullptr, true, &I.ffn_err[std::size_t(p)]);
  };
  Structure st;  // merged as in check()
  st.u1 = st.u2 = I.ubound;
  for (const ClassGroup& g : gs)
    for (std::int64_t x3 : {g.x3_lo, g.x3_hi}) st.classes[ClassKey{g.kind, g.expect, x3, g.x4}] = ClassInfo{I.ubound, I.ubound, -1, 1};
  if (margin(st) > 0) return true;
  for (const ClassGroup& g : gs)
    if (!(margin(I.corners(g, g.x3_lo, g.x3_hi)) > 0)) return false;
  return gs.size() > 1;
}

namespace {
// A box as part 1's structure: its two corners, which class_margins merges into one hull.
Structure box_structure(const ClassBox& b, std::int64_t ubound) {
  Structure st;
  st.u1 = st.u2 = ubound;
  st.classes[ClassKey{b.kind, b.expect, b.x3_lo, b.x4_lo}] = ClassInfo{ubound, ubound, -1, 1};
  st.classes[ClassKey{b.kind, b.expect, b.x3_hi, b.x4_hi}] = ClassInfo{ubound, ubound, -1, 1};
  return st;
}
}  // namespace

std::array<double, 3> ClassCertifier::box_margins(const ClassBox& b, std::array<bool, 3>& ok) const {
  const Impl& I = *impl_;
  I.exact_tables();
  const Structure st = box_structure(b, I.ubound);
  std::array<double, 3> m{};
  ok = {false, false, false};
  for (int p = 0; p < (I.fp ? 3 : 1); ++p) {
    Worst w;
    const Rational r = I.margin(st, p, w);
    m[std::size_t(p)] = r.convert_to<double>();
    ok[std::size_t(p)] = r > 0;
  }
  return m;
}

double ClassCertifier::box_margin_at(const ClassBox& b, double lambda, int p) const {
  const Impl& I = *impl_;
  const auto fm = I.models_at(lambda, p);
  const auto T = I.tables_at(lambda, p);
  Worst w;
  return class_margins<double>(box_structure(b, I.ubound), I.Ed[std::size_t(p)], fm, *T, w, nullptr, true, &I.ffn_err[std::size_t(p)]);
}

namespace {
// Head `head`'s model in `precision` (0 real, 1 float64, 2 float32, 3 float32-cuda), as part 3 builds it.
FpModel enclosure_model(const ConstructedModel& M, int head, int precision) {
  FpModel f;
  if (precision == 0) {
    f = FpModel{true, 0, 1, 1, exp_neg2_upper(M.heads[std::size_t(head)].lambda)};
  } else if (precision == 3) {
    f.exact = false;
    f.kernel = true;
    f.kr = kernel_rounding(M, head, qkv_plan(M).D);
  } else {
    f = fp_model(M, head, kRoundoff[precision]);
  }
  return f;
}
}  // namespace

ExactInterval head_enclosure(const ConstructedModel& M, int head, int precision, std::int64_t vsum, std::int64_t x,
                             std::int64_t u, int vmax, std::int64_t x_hi) {
  if (head < 0 || head > 3 || precision < 0 || precision > 3) throw InputError("head_enclosure: head 0..3, precision 0..3");
  const Box<Rational> b = head_box_range<Rational>(vsum, x, std::max(x, x_hi), u, vmax, enclosure_model(M, head, precision));
  return {b.lo, b.hi};
}

ExactInterval unpinned_head_enclosure(const ConstructedModel& M, int head, int precision, std::int64_t u, bool separators_only) {
  if (head < 0 || head > 1 || precision < 0 || precision > 3 || u < 0)
    throw InputError("unpinned_head_enclosure: head 0..1, precision 0..3, u >= 0");
  const Box<Rational> b = bounded_match_box<Rational>(head12_keys(), separators_only, u, 27, enclosure_model(M, head, precision));
  return {b.lo, b.hi};
}

std::int64_t head12_max_keys() { return head12_keys(); }

}  // namespace manyadd
