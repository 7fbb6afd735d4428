// Theorem 4.1's whole claim for one model (see whole_claim.hpp): part 1 by the solver over every
// shape and offset, the class union in closed form, parts 2-3 once at the largest N, the lambda
// windows, and the failing admitted ranges with confirmed counterexamples.
#include "manyadd/whole_claim.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <functional>
#include <memory>
#include <ostream>

#include <boost/multiprecision/cpp_int.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "manyadd/closed_form.hpp"
#include "manyadd/core/parallel.hpp"
#include "manyadd/dense.hpp"
#include "manyadd/structured.hpp"
#include "manyadd/verify.hpp"
#include "manyadd/verify/stages.hpp"

namespace manyadd {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
std::int64_t pow2(int p) { return std::int64_t(1) << p; }
}  // namespace

std::int64_t max_tokens(const ShapeRange& r) { return (2 * r.m_hi + 1) * (r.l_hi + 1); }

// The class union (derivation). From the closed form, the query at column t of B_i has
//   x3 = 1 + m + i for t < l (A_1..A_m and B_0..B_{i-1} at significance t + 1),
//   x3 = 1 at t = l, or 1 + m + i when l = C1 - 1 (the wrap: every separator so far),
//   x4 = 2 + [i < m] for t >= 1 (itself and A_{i+1}'s digit), 2 + [m >= 2] at '=' (t = i = 0),
//        2 + [i <= m - 2] at the '>' before B_i (itself and the '+' after A_{i+1}).
// Over 1 <= i <= m <= M (s = m + i): i <= m - 1 gives every s in [3, 2M - 1], i <= m - 2 every s in
// [4, 2M - 2], i in {m - 1, m} every s in [2, 2M], i = m the even s = 2m; i in [0, m - 1] (MSD)
// every s in [1, 2M - 1]. The tests compare this list with the union over every shape and offset
// of the structure pass's classes for small P.
std::vector<ClassGroup> class_groups(const ShapeRange& r, int P1, int P2) {
  const std::int64_t C1v = pow2(P1), C2v = pow2(P2), Lh = r.l_hi, M = r.m_hi;
  if (r.l_lo != 1 || r.m_lo != 1 || Lh < 1 || M < 1 || Lh > C1v - 1 || M > C2v - 1)
    throw InputError("class_groups: the range must be l in [1, L], m in [1, M] with L <= 2^P1 - 1, M <= 2^P2 - 1");
  std::vector<ClassGroup> G;
  auto add = [&](int kind, int expect, std::int64_t x4, std::int64_t lo, std::int64_t hi, std::int64_t step, std::string origin) {
    if (hi >= lo) G.push_back({kind, expect, lo, hi, step, x4, std::move(origin)});
  };
  // B_0 (i = 0): '=' has x4 = 2 iff m = 1; B_0's digits (t in [1, l - 1], l >= 2) x4 = 3.
  add(kDigitB0, -1, 2, 2, 2, 1, "B_0, query '=' with m = 1");
  add(kDigitB0, -1, 3, Lh >= 2 ? 2 : 3, M + 1, 1, "B_0, x3 = 1 + m");
  // B_i, i >= 1, query the separator (t = 0)
  add(kDigitSep, -1, 3, 5, 2 * M - 1, 1, "B_i after '>', i <= m - 2");
  add(kDigitSep, -1, 2, 3, 2 * M + 1, 1, "B_i after '>', i >= m - 1");
  for (int kind : {int(kDigitT1), int(kDigitT2)}) {
    if (Lh < (kind == kDigitT1 ? 2 : 3)) continue;  // t = 1 < l, 2 <= t < l
    add(kind, -1, 3, 4, 2 * M, 1, "B_i digits, i < m");
    add(kind, -1, 2, 3, 2 * M + 1, 2, "B_m digits");
  }
  // The most significant digit predicts '>' (i < m, x4 = 3) or '$' (i = m, x4 = 2).
  add(kMsd, kArrow, 3, 1, 1, 1, "MSD of B_i, i < m");
  add(kMsd, kDollar, 2, 1, 1, 1, "MSD of B_m");
  if (Lh >= C1v - 1) {
    add(kMsd, kArrow, 3, 2, 2 * M, 1, "wrap (l = 2^P1 - 1): MSD of B_i, i < m");
    add(kMsd, kDollar, 2, 3, 2 * M + 1, 2, "wrap (l = 2^P1 - 1): MSD of B_m");
  }
  return G;
}

ClassBox class_box(int kind, int expect, std::int64_t a, std::int64_t b) {
  // hulls of the closed-form counts over m in [a, b], 1 <= i <= m (digits), 0 <= i (B_0, MSD):
  switch (kind) {
    case kDigitB0:  // x3 = 1 + m; x4 = 2 only at '=' with m = 1
      return {kind, expect, 1 + a, 1 + b, a == 1 ? 2 : 3, 3};
    case kDigitSep:  // x3 = 1 + m + i; x4 = 2 + [i <= m - 2]
      return {kind, expect, a + 2, 2 * b + 1, 2, b >= 3 ? 3 : 2};
    case kDigitT1:
    case kDigitT2:  // x3 = 1 + m + i; x4 = 2 + [i < m]
      return {kind, expect, a + 2, 2 * b + 1, 2, b >= 2 ? 3 : 2};
    default:  // the MSD without the wrap: x3 = 1; x4 = 3 before '>', 2 before '$'
      return {kind, expect, 1, 1, expect == kArrow ? 3 : 2, expect == kArrow ? 3 : 2};
  }
}

std::vector<std::pair<int, int>> claimed_kinds(std::int64_t l_hi) {
  std::vector<std::pair<int, int>> k = {{kDigitB0, -1}, {kDigitSep, -1}, {kMsd, kArrow}, {kMsd, kDollar}};
  if (l_hi >= 2) k.push_back({kDigitT1, -1});  // t = 1 < l
  if (l_hi >= 3) k.push_back({kDigitT2, -1});  // 2 <= t < l
  return k;
}

namespace {

bool is_wrap(const ClassGroup& g) { return g.origin.rfind("wrap", 0) == 0; }

bool same_box(const ClassBox& x, const ClassBox& y) {
  return x.x3_lo == y.x3_lo && x.x3_hi == y.x3_hi && x.x4_lo == y.x4_lo && x.x4_hi == y.x4_hi;
}

// Parts 2-3 over the claimed range (no wrap) by boxes: for each kind and expected token, the hull
// of its classes over every shape with m in [a, b] (class_box), halved in m while it fails, so that
// every shape's own hull (one per kind, as the per-shape certificate takes it) lies inside an
// accepted box and its margins are at least the whole claim's. `margin_of(box, ok)` returns a
// box's margins and which precisions hold.
struct BoxCheck {
  std::array<double, 3> margin{};
  std::array<bool, 3> ok{true, true, true};
  std::int64_t boxes = 0;
  std::string failing;  // the first failing box
};
// With fail_fast the search stops at the first box that fails and cannot be split (a yes/no answer
// for bisection); splitting stops after 4096 boxes either way (the remaining boxes are taken whole).
template <class MarginOf>
BoxCheck check_boxes(std::int64_t l_hi, std::int64_t m_hi, int precisions, bool fail_fast, MarginOf&& margin_of) {
  BoxCheck R;
  R.margin.fill(std::numeric_limits<double>::infinity());
  std::int64_t evaluated = 0;
  for (const auto& [kind, expect] : claimed_kinds(l_hi)) {
    std::function<void(std::int64_t, std::int64_t)> rec = [&](std::int64_t a, std::int64_t b) {
      if (fail_fast && !R.failing.empty()) return;
      ++evaluated;
      const ClassBox box = class_box(kind, expect, a, b);
      std::array<bool, 3> ok{};
      const std::array<double, 3> m = margin_of(box, ok);
      bool all = true;
      for (int p = 0; p < precisions; ++p) all = all && ok[std::size_t(p)];
      const std::int64_t mid = a + (b - a) / 2;
      if (!all && a < b && evaluated < 4096 && !same_box(class_box(kind, expect, a, mid), box)) {
        rec(a, mid);
        rec(mid + 1, b);
        return;
      }
      ++R.boxes;
      for (int p = 0; p < precisions; ++p) {
        R.margin[std::size_t(p)] = std::min(R.margin[std::size_t(p)], m[std::size_t(p)]);
        R.ok[std::size_t(p)] = R.ok[std::size_t(p)] && ok[std::size_t(p)];
      }
      if (!all && R.failing.empty())
        R.failing = fmt::format("{} (m in [{}, {}]: x3 in [{}, {}], x4 in [{}, {}])", position_kind_name(kind), a, b, box.x3_lo,
                                box.x3_hi, box.x4_lo, box.x4_hi);
    };
    rec(1, m_hi);
  }
  return R;
}

// Whether the claimed range's boxes hold at lambda in precision p (double, for bisection).
std::function<bool(double, int)> boxes_hold(const ClassCertifier& cert, const ShapeRange& r) {
  return [&cert, r](double lam, int p) {
    return check_boxes(r.l_hi, r.m_hi, 1, true, [&](const ClassBox& b, std::array<bool, 3>& ok) {
             const double m = cert.box_margin_at(b, lam, p);
             ok = {m > 0, true, true};
             return std::array<double, 3>{m, 0, 0};
           }).ok[0];
  };
}

// (kind, expect, x3, x4) of response position j, from the closed form (certificate.cpp's analyze
// assigns the same from the structure pass).
std::array<std::int64_t, 4> class_at(closed::Values v, std::int64_t j) {
  closed::set_query(v, j);
  const std::int64_t i = v[closed::I], t = v[closed::T], l = v[closed::L], m = v[closed::M];
  const auto x = closed::matched_counts(v);
  const int kind = t == l ? kMsd : i == 0 ? kDigitB0 : t >= 2 ? kDigitT2 : t == 1 ? kDigitT1 : kDigitSep;
  const int expect = kind == kMsd ? (i < m ? int(kArrow) : int(kDollar)) : -1;
  return {kind, expect, x[2], x[3]};
}

// Runs one concrete instance and reports the first wrong prediction (confirm_counterexample: the
// dense engine (double) when N <= 4000, else the exact row engine at the given positions and at the
// structured engine's first mismatch (limit mode)).
std::optional<ConfirmedCounterexample> confirm(const ConstructedModel& M, const CompiledFFN& F, const Shape& shape,
                                               std::int64_t s1, std::int64_t s2, const Problem& p, std::vector<std::int64_t> hints) {
  if (shape.N() > 4000) {
    const auto S = structured_forward(M, F, build_sequence(p, shape), shape, s1, s2);
    if (S.first_mismatch >= 0) hints.push_back(S.first_mismatch);
  }
  const auto ce = confirm_counterexample(M, F, p, shape, s1, s2, hints);
  if (!ce || ce->position <= 0) return std::nullopt;  // every prediction right
  ConfirmedCounterexample c;
  c.n = shape.n;
  c.m = shape.m;
  c.l = shape.l;
  c.s1 = s1;
  c.s2 = s2;
  c.padding = padding_name(shape.padding);
  c.problem = p.to_string();
  c.position = ce->position;
  c.expected = std::string(1, token_char(ce->expected));
  c.got = ce->got < 0 ? std::string("tie") : std::string(1, token_char(ce->got));
  c.engine = ce->confirmed_by;
  return c;
}

// A shape of width l with m operands: the theorem's padding when it gives l, else the minimal one.
// (None either when the shape is beyond what format.hpp builds, or than the engines run here:
// N <= kConfirmTokens.)
constexpr std::int64_t kConfirmTokens = 100'000'000;
std::optional<Shape> shape_of_width(std::int64_t l, std::int64_t m) {
  if ((2 * m + 1) * (l + 1) > kConfirmTokens) return std::nullopt;
  for (Padding pad : {Padding::theorem, Padding::minimal})
    for (std::int64_t n = std::max<std::int64_t>(1, l - 25); n <= l; ++n)
      if (width(pad, n, m) == l) return Shape::make(n, m, pad);
  return std::nullopt;
}

Problem zeros(std::int64_t m) {
  Problem p;
  for (std::int64_t k = 0; k < m; ++k) p.operands.push_back("0");
  return p;
}

std::string command_of(const ConfirmedCounterexample& c, int P1, int P2, double lambda, bool aliasing) {
  return fmt::format("./x verify_construction --n {} --m {} --padding {} --p1 {} --p2 {} --lambda {} --s1 {} --s2 {} --problem {} "
                     "--engine dense{}",
                     c.n, c.m, c.padding, P1, P2, lambda, c.s1, c.s2, c.m <= 8 ? c.problem : std::string("<see JSON>"),
                     aliasing ? " --allow-aliasing" : "");
}

// Bisection to relative 1e-3 of the boundary between `bad` and `good` (holds(good) is true).
template <class F>
double bisect(double bad, double good, F&& holds) {
  while (std::abs(good - bad) > 1e-3 * good) {
    const double mid = 0.5 * (bad + good);
    (holds(mid) ? good : bad) = mid;
  }
  return good;
}

// lambda_min (real) and the window of each precision for the classes `gs`, by bisection in double
// (relative 1e-3). Real margins only grow with lambda (every enclosure narrows), so its window is
// [lambda_min, inf); rounding adds error that grows with lambda (eta ~ lambda P r), so the
// floating-point windows close above; each is searched from a point inside it.
void lambda_windows(const std::function<bool(double, int)>& holds_at, double& lambda_min, std::array<LambdaWindow, 3>& windows) {
  auto holds = [&](int p) { return [&, p](double lam) { return holds_at(lam, p); }; };
  const double top = 1e12;
  lambda_min = 0;
  windows = {};
  double good = 1;
  while (!holds(0)(good) && good < top) good *= 2;
  if (!holds(0)(good)) return;
  lambda_min = bisect(good / 2 < 1 ? 0 : good / 2, good, holds(0));
  windows[0] = {false, lambda_min, std::numeric_limits<double>::infinity()};
  for (int p = 1; p < 3; ++p) {
    double in = -1;  // a point inside: rounding only adds to the real model's needs, so look above lambda_min
    for (double f : {1.001, 1.01, 1.03, 1.1, 1.3, 2.0, 4.0, 16.0, 256.0})
      if (holds(p)(lambda_min * f)) {
        in = lambda_min * f;
        break;
      }
    if (in < 0) continue;  // empty
    double bad = lambda_min;
    while (holds(p)(bad) && bad > 1e-3) bad /= 1.5;
    LambdaWindow w{false, bisect(bad, in, holds(p)), 0};
    double hi = in;
    while (hi < top && holds(p)(hi * 2)) hi *= 2;
    w.hi = hi >= top ? std::numeric_limits<double>::infinity() : bisect(hi * 2, hi, holds(p));
    windows[std::size_t(p)] = w;
  }
}

}  // namespace

void check_window_table_range(int P_lo, int P_hi) {
  if (P_lo < 2 || P_hi > 30 || P_lo > P_hi) throw InputError("--windows-table A:B needs 2 <= A <= B <= 30");
}

std::vector<WindowRow> lambda_window_table(int P_lo, int P_hi, int threads) {
  check_window_table_range(P_lo, P_hi);
  if (threads < 1 || threads > 256) throw InputError("--threads must be in [1, 256]");
  std::vector<WindowRow> rows(std::size_t(P_hi - P_lo + 1));
  parallel_for(
      threads, std::int64_t(rows.size()),
      [&](int, std::int64_t k) {
        const int P = P_lo + int(k);
        WindowRow& r = rows[std::size_t(k)];
        r.P = P;
        const ShapeRange claimed{1, pow2(P) - 2, 1, pow2(P) - 1};
        r.n_tokens_max = max_tokens(claimed);
        const ConstructedModel M = build_model(P, P, default_lambda(r.n_tokens_max));
        const ClassCertifier cert(M, r.n_tokens_max);
        lambda_windows(boxes_hold(cert, claimed), r.lambda_min, r.windows);
      },
      Schedule::dynamic);
  return rows;
}

void check_whole_claim_options(const WholeClaimOptions& o) {
  if (o.P1 < 2 || o.P1 > 30)
    throw InputError(fmt::format("--p1 {} outside [2, 30] (P1 = 1 leaves no width l with l + 1 < 2^P1)", o.P1));
  if (o.P2 < 1 || o.P2 > 30) throw InputError(fmt::format("--p2 {} outside [1, 30]", o.P2));
  if (o.P1 + o.P2 > 60) throw InputError("--p1 + --p2 must be <= 60 (the token count N < 2^62 stays exact)");
  if (o.lambda < 0 || !std::isfinite(o.lambda) || (o.lambda == 0 && std::signbit(o.lambda)))
    throw InputError(fmt::format("--lambda must be > 0 (got {})", o.lambda));
  if (o.threads < 1 || o.threads > 256) throw InputError("--threads must be in [1, 256]");
  if (o.sample_shapes < 0 || o.sample_shapes > 100000) throw InputError("--sample-shapes must be in [0, 100000]");
}

namespace {
// The class part's state: the range claimed, its certifier and class groups, the wrap groups that
// fail, and the margins per precision (real, float64, float32) with the first failing class named.
struct ClassPart {
  ShapeRange claimed;
  std::unique_ptr<ClassCertifier> cert;
  std::vector<ClassGroup> groups;
  std::vector<std::pair<ClassGroup, ClassCertifier::Verdict>> wrap_fails;
  std::array<double, 3> mm{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::infinity()};
  std::array<bool, 3> ok{true, true, true};
  std::string fail_reason;
  bool all_ok() const { return ok[0] && ok[1] && ok[2]; }
};

// Part 1: the solver, over every shape with offsets.
void prove_part1(const ConstructedModel& M, const WholeClaimOptions& o, WholeClaimResult& R) {
  const auto tp = Clock::now();
  SmtOptions so;
  so.witnesses = so.mutants = o.non_vacuity;
  so.threads = o.threads;
  R.smt = prove_closed_form(M, SmtRange{o.P1, o.P2, 1, pow2(o.P1) - 1, 1, pow2(o.P2) - 1}, closed::families(), so);
  R.seconds_part1 = since(tp);
}

// The class union, and parts 2-3 at the largest N of the range that avoids the wrap (l = 2^P1 - 1):
// by boxes that hold every shape's hull; then the wrap groups, and the wrap claimed too when they hold.
ClassPart certify_classes(const ConstructedModel& M, const WholeClaimOptions& o, WholeClaimResult& R) {
  const std::int64_t C1v = pow2(o.P1), C2v = pow2(o.P2);
  const ShapeRange with_offsets{1, C1v - 1, 1, C2v - 1};  // l + 1 <= max_pos1 <= 2^P1: offsets exist
  const auto tc = Clock::now();
  const std::vector<ClassGroup> all_groups = class_groups(with_offsets, o.P1, o.P2);
  R.seconds_classes = since(tc);
  ClassPart C;
  C.claimed = ShapeRange{1, C1v - 2, 1, C2v - 1};
  const auto t23 = Clock::now();
  C.cert = std::make_unique<ClassCertifier>(M, max_tokens(C.claimed));
  std::vector<ClassGroup> wraps;
  for (const auto& g : all_groups) (is_wrap(g) ? wraps : C.groups).push_back(g);
  auto check_all = [&] {
    const auto v = C.cert->check(C.groups);
    C.mm = v.margin;
    C.ok = v.ok;
    C.fail_reason.clear();
    if (v.failing_group >= 0) {
      const ClassGroup& g = C.groups[std::size_t(v.failing_group)];
      C.fail_reason = fmt::format("{} (class x3 = {}, x4 = {}: {})", v.reason, v.failing_x3, g.x4, g.origin);
    }
  };
  // the claimed range (no wrap) by boxes that hold every shape's hull
  const BoxCheck bc = check_boxes(C.claimed.l_hi, C.claimed.m_hi, 3, false, [&](const ClassBox& b, std::array<bool, 3>& okb) {
    return C.cert->box_margins(b, okb);
  });
  C.mm = bc.margin;
  C.ok = bc.ok;
  R.boxes = bc.boxes;
  if (!C.all_ok()) {
    check_all();  // name the first failing class
    C.fail_reason = fmt::format("{}; box {}", C.fail_reason.empty() ? std::string("a box's hull fails") : C.fail_reason, bc.failing);
  }
  // The wrap groups: a failure at a smaller u is a failure at every larger u (the enclosures only
  // widen), so they are checked with the same tables; a pass must be re-checked at their own N.
  std::unique_ptr<ClassCertifier> big;
  for (const auto& g : wraps) {
    auto v = C.cert->check(g);
    if (v.ok[0] && v.ok[1] && v.ok[2]) {
      if (!big) big = std::make_unique<ClassCertifier>(M, max_tokens(with_offsets));
      v = big->check(g);
    }
    if (!(v.ok[0] && v.ok[1] && v.ok[2])) C.wrap_fails.push_back({g, v});
  }
  if (C.wrap_fails.empty()) {  // the wrap holds: claim l = 2^P1 - 1 too, at its own N
    C.claimed = with_offsets;
    C.groups = all_groups;
    C.cert = big ? std::move(big) : std::make_unique<ClassCertifier>(M, max_tokens(with_offsets));
    check_all();
  }
  R.seconds_part23 = since(t23);
  R.claimed = C.claimed;
  R.margin = C.mm;
  R.precision_ok = C.ok;
  R.groups = std::int64_t(C.groups.size());
  if (C.wrap_fails.empty()) R.boxes = R.groups;  // the claimed range holds the wrap: checked by groups
  for (const auto& g : C.groups) R.classes += g.size();
  R.n_tokens_max = max_tokens(C.claimed);
  return C;
}

// The failing admitted ranges (the wrap l = 2^P1 - 1 when it fails, and l = 2^P1), each with a
// concrete counterexample confirmed by an engine.
void failing_ranges(const ConstructedModel& M, const CompiledFFN& F, const WholeClaimOptions& o, const ClassPart& C,
                    WholeClaimResult& R) {
  const std::int64_t C1v = pow2(o.P1), C2v = pow2(o.P2);
  const auto tf = Clock::now();
  for (const auto& [g, v] : C.wrap_fails) {
    if (!R.failing.empty() && R.failing.back().what.rfind("l = 2^P1 - 1", 0) == 0) continue;  // one per range
    FailingRange fr;
    fr.what = fmt::format("l = 2^P1 - 1 = {}", C1v - 1);
    fr.range = {C1v - 1, C1v - 1, 1, C2v - 1};
    fr.reason = fmt::format(
        "the only offset is s1 = 1; the most significant digit's ID s1 + l = 2^P1 has POS_1_NEXT = v_(2^P1 + 1) = v_1, the "
        "separators' ID, so head 3 matches every separator so far: PRE_ARROW = 1/(1 + m + i) <= 1/2 and ARROW = 2 relu(PRE_ARROW - 1/2) "
        "= 0 where '>' or '$' is due: {}",
        v.reason);
    // the smallest m whose shape holds the failing class, and a position of it
    for (std::int64_t m = 1; m <= std::min<std::int64_t>(C2v - 1, 64) && !fr.counterexample; ++m) {
      const auto sh = shape_of_width(C1v - 1, m);
      if (!sh) continue;
      const closed::Values val = closed::shape_values(sh->l, m, 1, 1, o.P1, o.P2);
      std::vector<std::int64_t> hints;
      for (std::int64_t j = sh->eq_index(); j < sh->N() && hints.empty(); ++j) {
        const auto c = class_at(val, j);
        if (c[0] == g.kind && c[1] == g.expect && c[2] == v.failing_x3 && c[3] == g.x4) hints.push_back(j);
      }
      if (hints.empty()) continue;
      if (auto ce = confirm(M, F, *sh, 1, 1, zeros(m), hints)) {
        ce->command = command_of(*ce, o.P1, o.P2, R.lambda, false);
        fr.counterexample = ce;
      }
    }
    R.failing.push_back(fr);
  }
  FailingRange fr;
  fr.what = fmt::format("l = 2^P1 = {}", C1v);
  fr.range = {C1v, C1v, 1, C2v - 1};
  fr.reason = fmt::format(
      "admitted by the dimension formula P1 >= log2(n + 1 + floor(log10 m)) = log2 l, but D.4.2 needs l + 1 <= max_pos1 <= "
      "2^P1: no valid offset exists; at s1 = 1 the most significant digit's ID 2^P1 + 1 aliases ID 1");
  if (const auto sh = shape_of_width(C1v, 1))
    if (auto ce = confirm(M, F, *sh, 1, 1, zeros(1), {})) {
      ce->command = command_of(*ce, o.P1, o.P2, R.lambda, true);
      fr.counterexample = ce;
    }
  R.failing.push_back(fr);
  R.seconds_confirm = since(tf);
}

// Per-shape certificates in the claimed range, against the class part's margins: the boundary
// (smallest and largest l and m at the extreme offsets) and random (shape, offset) pairs.
void sample_shapes(const ConstructedModel& M, const WholeClaimOptions& o, const ClassPart& C, WholeClaimResult& R) {
  const std::int64_t C1v = pow2(o.P1), C2v = pow2(o.P2);
  const ShapeRange& claimed = C.claimed;
  const auto ts = Clock::now();
  struct Pick {
    std::int64_t l, m, s1, s2;
    const char* why;
  };
  std::vector<Pick> picks;
  for (std::int64_t l : {claimed.l_lo, claimed.l_hi})
    for (std::int64_t m : {claimed.m_lo, claimed.m_hi}) {
      picks.push_back({l, m, 1, 1, "boundary"});
      if (C1v - l > 1 || C2v - m > 1) picks.push_back({l, m, C1v - l, C2v - m, "boundary"});
    }
  Rng rng(o.seed ^ 0x5a3e1eULL);
  for (int k = 0; k < o.sample_shapes; ++k) {
    const std::int64_t l = std::int64_t(rng.uniform(std::uint64_t(claimed.l_lo), std::uint64_t(claimed.l_hi)));
    const std::int64_t m = std::int64_t(rng.uniform(std::uint64_t(claimed.m_lo), std::uint64_t(claimed.m_hi)));
    picks.push_back({l, m, std::int64_t(rng.uniform(1, std::uint64_t(C1v - l))), std::int64_t(rng.uniform(1, std::uint64_t(C2v - m))),
                     "random"});
  }
  for (const Pick& pk : picks) {
    ShapeSample smp;
    smp.l = pk.l;
    smp.m = pk.m;
    smp.s1 = pk.s1;
    smp.s2 = pk.s2;
    smp.why = pk.why;
    const auto sh = shape_of_width(pk.l, pk.m);
    if (!sh) continue;  // no n gives this width (l = 1 with m >= 2): not a shape of either padding
    smp.n = sh->n;
    smp.padding = padding_name(sh->padding);
    // the structure pass's code tables take 4 (2^P1 + 2 * 2^P2) bytes whatever the shape
    const double table_bytes = 4.0 * (double(C1v) + 2.0 * double(C2v));
    if (sh->N() > o.sample_max_tokens || table_bytes > 1e9) {
      smp.skipped = true;
    } else {
      const auto tq = Clock::now();
      const CertResult cr = Certifier(M, *sh, CertOptions{true, false}).run(pk.s1, pk.s2);
      smp.proven = cr.proven;
      smp.agrees = cr.proven;
      for (const auto& pm : cr.margins) {
        const int p = pm.precision == "real" ? 0 : pm.precision == "float64" ? 1 : 2;
        smp.margin[std::size_t(p)] = pm.min_margin;
        smp.agrees = smp.agrees && pm.min_margin >= R.margin[std::size_t(p)];
      }
      smp.seconds = since(tq);
    }
    if (!smp.skipped) R.samples_agree = R.samples_agree && (smp.agrees || !C.all_ok());
    R.samples.push_back(smp);
  }
  R.seconds_samples = since(ts);
}

// The verdict for the claimed range, and the first reason it is not proven (part 1, the cross-check,
// or the precision whose margin fails, with its lambda window).
void claim_verdict(const WholeClaimOptions& o, const ClassPart& C, WholeClaimResult& R) {
  R.proven = R.smt.proven && R.smt.non_vacuous && C.all_ok() && R.samples_agree;
  if (!R.smt.proven || !R.smt.non_vacuous) {
    for (const auto& ck : R.smt.checks)
      if (!ck.ok) {
        R.reason = fmt::format("part 1: {} check '{}' gave {}{}{}", ck.role, ck.name, ck.result, ck.model.empty() ? "" : ": ", ck.model);
        break;
      }
  } else if (!R.samples_agree) {
    for (const auto& smp : R.samples)
      if (!smp.skipped && !smp.agrees) {
        R.reason = fmt::format("cross-check: the per-shape certificate at n={} m={} s1={} s2={} is {} (margins {:.4g} / {:.4g} / {:.4g})",
                               smp.n, smp.m, smp.s1, smp.s2, smp.proven ? "proven with a smaller margin" : "not proven", smp.margin[0],
                               smp.margin[1], smp.margin[2]);
        break;
      }
  } else if (!R.proven) {
    const char* names[] = {"real", "float64", "float32"};
    for (int p = 0; p < 3 && R.reason.empty(); ++p) {
      if (C.ok[std::size_t(p)]) continue;
      const auto& w = R.windows[std::size_t(p)];
      const std::string hi = std::isfinite(w.hi) ? fmt::format("{:.4g}]", w.hi) : std::string("inf)");
      R.reason = w.empty ? fmt::format("{}: no lambda holds at this N (empty window); {}", names[p], C.fail_reason)
                         : fmt::format("lambda = {} is outside the {} window [{:.4g}, {}: {}", R.lambda, names[p], w.lo, hi, C.fail_reason);
      if (!o.windows) R.reason = fmt::format("{} margin not positive at lambda = {}: {}", names[p], R.lambda, C.fail_reason);
    }
  }
}

// What the claimed range means in n (the largest n of either padding at m = 1 and at the largest m),
// and how many (shape, offset) pairs it holds.
void claimed_extent(const ShapeRange& claimed, std::int64_t C1v, std::int64_t C2v, WholeClaimResult& R) {
  using boost::multiprecision::cpp_int;
  const std::int64_t Lc = claimed.l_hi, Mc = claimed.m_hi;
  auto nmax = [&](Padding pad, std::int64_t m) {
    std::int64_t best = 0;
    for (std::int64_t n = std::max<std::int64_t>(1, Lc - 25); n <= Lc; ++n)
      if (width(pad, n, m) <= Lc) best = n;
    return best;
  };
  R.n_max = {nmax(Padding::theorem, 1), nmax(Padding::theorem, Mc), nmax(Padding::minimal, 1), nmax(Padding::minimal, Mc)};
  // sum_{l=1}^{Lc} (C1 - l) * sum_{m=1}^{Mc} (C2 - m)
  const cpp_int sl = cpp_int(Lc) * C1v - cpp_int(Lc) * (Lc + 1) / 2, sm = cpp_int(Mc) * C2v - cpp_int(Mc) * (Mc + 1) / 2;
  const cpp_int pairs = sl * sm;
  R.pairs_covered = pairs.str();
  R.pairs_covered_approx = pairs.convert_to<double>();
}
}  // namespace

WholeClaimResult whole_claim(const WholeClaimOptions& o) {
  const auto t0 = Clock::now();
  check_whole_claim_options(o);  // before building anything

  WholeClaimResult R;
  R.P1 = o.P1;
  R.P2 = o.P2;
  const std::int64_t C1v = pow2(o.P1), C2v = pow2(o.P2);
  R.admitted = {1, C1v, 1, C2v - 1};  // P1 >= log2(l), P2 >= log2(m + 1) (end of D.4.2)
  R.lambda = o.lambda > 0 ? o.lambda : default_lambda(max_tokens(ShapeRange{1, C1v - 1, 1, C2v - 1}));
  const ConstructedModel M = build_model(o.P1, o.P2, R.lambda);
  const CompiledFFN F = CompiledFFN::build(M);

  prove_part1(M, o, R);
  const ClassPart C = certify_classes(M, o, R);
  // lambda_min and the windows (bisection in double; the verdict above is exact)
  if (o.windows) {
    const auto tw = Clock::now();
    if (C.wrap_fails.empty())
      lambda_windows([&](double lam, int p) { return C.cert->holds(C.groups, lam, p); }, R.lambda_min, R.windows);
    else
      lambda_windows(boxes_hold(*C.cert, C.claimed), R.lambda_min, R.windows);
    R.seconds_windows = since(tw);
  }
  failing_ranges(M, F, o, C, R);
  sample_shapes(M, o, C, R);
  claim_verdict(o, C, R);
  claimed_extent(C.claimed, C1v, C2v, R);
  R.seconds = since(t0);
  return R;
}

nlohmann::json whole_claim_json(const WholeClaimResult& r) {
  using json = nlohmann::json;
  auto range = [](std::int64_t a, std::int64_t b) { return json::array({a, b}); };
  auto window = [](const LambdaWindow& w) {
    return json{{"empty", w.empty}, {"lo", w.empty ? json(nullptr) : json(w.lo)},
                {"hi", w.empty || !std::isfinite(w.hi) ? json(nullptr) : json(w.hi)}};  // hi null: +infinity
  };
  json failing = json::array();
  for (const auto& f : r.failing) {
    json ce = nullptr;
    if (f.counterexample) {
      const auto& c = *f.counterexample;
      ce = {{"n", c.n}, {"m", c.m}, {"l", c.l}, {"padding", c.padding}, {"s1", c.s1}, {"s2", c.s2}, {"problem", c.problem},
            {"position", c.position}, {"expected", c.expected}, {"got", c.got}, {"confirmed_by", c.engine}, {"command", c.command}};
    }
    failing.push_back({{"what", f.what}, {"l", range(f.range.l_lo, f.range.l_hi)}, {"m", range(f.range.m_lo, f.range.m_hi)},
                       {"reason", f.reason}, {"counterexample", ce}});
  }
  json samples = json::array();
  for (const auto& x : r.samples)
    samples.push_back({{"n", x.n}, {"m", x.m}, {"l", x.l}, {"padding", x.padding}, {"s1", x.s1}, {"s2", x.s2}, {"why", x.why},
                       {"skipped", x.skipped}, {"proven", x.proven},
                       {"margins", {{"real", x.margin[0]}, {"float64", x.margin[1]}, {"float32", x.margin[2]}}},
                       {"agrees", x.agrees}, {"seconds", x.seconds}});
  json checks = json::array();
  for (const auto& c : r.smt.checks)
    checks.push_back({{"name", c.name}, {"role", c.role}, {"expect_sat", c.expect_sat}, {"result", c.result}, {"ok", c.ok},
                      {"model", c.model}, {"seconds", c.seconds}});
  const char* names[] = {"real", "float64", "float32"};
  json margins = json::object(), windows = json::object();
  for (int p = 0; p < 3; ++p) {
    margins[names[p]] = {{"min_margin", r.margin[std::size_t(p)]}, {"proven", r.precision_ok[std::size_t(p)]}};
    windows[names[p]] = window(r.windows[std::size_t(p)]);
  }
  return {{"P1", r.P1},
          {"P2", r.P2},
          {"d", 19 + 2 * (r.P1 + r.P2)},
          {"lambda", r.lambda},
          {"status", r.proven ? "proven" : "failed"},
          {"reason", r.proven ? json(nullptr) : json(r.reason)},
          {"l_range", range(r.claimed.l_lo, r.claimed.l_hi)},
          {"m_range", range(r.claimed.m_lo, r.claimed.m_hi)},
          {"admitted", {{"l", range(r.admitted.l_lo, r.admitted.l_hi)}, {"m", range(r.admitted.m_lo, r.admitted.m_hi)}}},
          {"n_ranges",
           {{"theorem", {{"rule", fmt::format("1 <= n <= {} - floor(log10 m)", r.claimed.l_hi - 1)}, {"n_max_m1", r.n_max[0]},
                         {"n_max_mmax", r.n_max[1]}}},
            {"minimal", {{"rule", fmt::format("digits(m (10^n - 1)) <= {}", r.claimed.l_hi)}, {"n_max_m1", r.n_max[2]},
                         {"n_max_mmax", r.n_max[3]}}}}},
          {"pairs_covered", r.pairs_covered_approx},
          {"pairs_covered_exact", r.pairs_covered},
          {"N_max", r.n_tokens_max},
          {"classes", r.classes},
          {"class_groups", r.groups},
          {"boxes", r.boxes},
          {"margins", margins},
          {"lambda_min", r.lambda_min > 0 ? json(r.lambda_min) : json(nullptr)},
          {"lambda_windows", windows},
          {"part1", {{"solver", r.smt.solver}, {"proven", r.smt.proven}, {"non_vacuous", r.smt.non_vacuous}, {"proofs", r.smt.proofs},
                     {"witnesses", r.smt.witnesses}, {"mutants", r.smt.mutants}, {"checks", checks}}},
          {"failing", failing},
          {"per_shape_samples", samples},
          {"per_shape_samples_agree", r.samples_agree},
          {"seconds", {{"part1", r.seconds_part1}, {"classes", r.seconds_classes}, {"part23", r.seconds_part23},
                       {"windows", r.seconds_windows}, {"confirm", r.seconds_confirm}, {"samples", r.seconds_samples},
                       {"total", r.seconds}}}};
}

void print_whole_claim(std::ostream& out, const WholeClaimResult& r) {
  auto win = [](const LambdaWindow& w) {
    if (w.empty) return std::string("empty");
    return std::isfinite(w.hi) ? fmt::format("[{:.4g}, {:.4g}]", w.lo, w.hi) : fmt::format("[{:.4g}, inf)", w.lo);
  };
  out << fmt::format("verify_construction --whole-claim  P1={} P2={} d={}  lambda={}\n", r.P1, r.P2, 19 + 2 * (r.P1 + r.P2), r.lambda);
  out << fmt::format("  part 1      {} by {} for every shape with offsets, offset pair, response query and causal key: {} "
                     "obligations; non-vacuity {} ({} witnesses, {} wrong key lists / models refuted) ({:.2f} s)\n",
                     r.smt.proven ? "PROVEN" : "NOT PROVEN", r.smt.solver, r.smt.proofs, r.smt.non_vacuous ? "ok" : "FAILED",
                     r.smt.witnesses, r.smt.mutants, r.seconds_part1);
  out << fmt::format("  classes     {} classes in {} groups (closed form), every response position of every claimed shape; "
                     "parts 2-3 check {} boxes holding each shape's hulls\n",
                     r.classes, r.groups, r.boxes);
  out << fmt::format("  parts 2-3   at u = N_max = {}: min margin real {:.4g}, float64 {:.4g}, float32 {:.4g} ({}) ({:.2f} s)\n",
                     r.n_tokens_max, r.margin[0], r.margin[1], r.margin[2],
                     r.precision_ok[0] && r.precision_ok[1] && r.precision_ok[2] ? "all positive" : "NOT all positive",
                     r.seconds_part23);
  out << "  not covered the CUDA program (precision float32-cuda: the tensor-core kernel's rounding): per shape only, "
         "with --n --m --certify-cuda\n";
  if (r.lambda_min > 0)
    out << fmt::format("  lambda      lambda_min {:.4g}; windows real {}, float64 {}, float32 {} ({:.2f} s)\n", r.lambda_min,
                       win(r.windows[0]), win(r.windows[1]), win(r.windows[2]), r.seconds_windows);
  out << fmt::format("  claimed     l in [{}, {}], m in [{}, {}], every offset pair: {:.4g} (shape, offset) pairs; n <= {} - floor(log10 m) "
                     "(theorem padding: {} at m = 1, {} at m = {}), minimal padding n <= {} at m = 1, {} at m = {}\n",
                     r.claimed.l_lo, r.claimed.l_hi, r.claimed.m_lo, r.claimed.m_hi, r.pairs_covered_approx, r.claimed.l_hi - 1,
                     r.n_max[0], r.n_max[1], r.claimed.m_hi, r.n_max[2], r.n_max[3], r.claimed.m_hi);
  for (const auto& f : r.failing) {
    out << fmt::format("  FAILS       {} (m in [{}, {}]): {}\n", f.what, f.range.m_lo, f.range.m_hi, f.reason);
    if (f.counterexample) {
      const auto& c = *f.counterexample;
      out << fmt::format("              counterexample {} (n={} m={} l={}, {} padding) at s1={} s2={}: token {} predicts '{}', expected "
                         "'{}' ({})\n",
                         c.problem.size() > 40 ? c.problem.substr(0, 37) + "..." : c.problem, c.n, c.m, c.l, c.padding, c.s1, c.s2,
                         c.position, c.got, c.expected, c.engine);
    } else {
      out << fmt::format("              (no concrete counterexample confirmed{})\n",
                         f.range.l_lo * 3 > 100'000'000 ? ": its smallest shape has more than 1e8 tokens, beyond the engines run here" : "");
    }
  }
  int run = 0, agree = 0, skipped = 0;
  for (const auto& x : r.samples) {
    run += !x.skipped;
    agree += !x.skipped && x.agrees;
    skipped += x.skipped;
  }
  if (!r.samples.empty())
    out << fmt::format("  per-shape   {} of {} certificates on the same model (boundary and random shapes, extreme offsets) proven with "
                       "margins >= the whole claim's{} ({:.2f} s)\n",
                       agree, run,
                       skipped ? fmt::format("; {} skipped (N above the sample limit, or 2^P code tables above 1 GB)", skipped) : std::string(),
                       r.seconds_samples);
  if (!r.proven) out << fmt::format("  reason      {}\n", r.reason);
  std::string verdict = r.proven ? "VERIFIED for the claimed range" : "FAILED";
  if (!r.proven && r.smt.proven && r.smt.non_vacuous && r.samples_agree) {
    std::vector<std::string> held, failed;
    const char* names[] = {"real", "float64", "float32"};
    for (int p = 0; p < 3; ++p) (r.precision_ok[std::size_t(p)] ? held : failed).push_back(names[p]);
    if (!held.empty())
      verdict = fmt::format("FAILED in {} (proven in {} for the claimed range)", fmt::join(failed, ", "), fmt::join(held, ", "));
  }
  out << fmt::format("  result      {}  ({:.2f} s)\n", verdict, r.seconds);
}

void print_window_table(std::ostream& out, const std::vector<WindowRow>& rows) {
  auto win = [](const LambdaWindow& w) {
    if (w.empty) return std::string("empty");
    return std::isfinite(w.hi) ? fmt::format("[{:.4g}, {:.4g}]", w.lo, w.hi) : fmt::format("[{:.4g}, inf)", w.lo);
  };
  out << fmt::format("lambda windows of the whole claim, P1 = P2 = P (claimed range l <= 2^P - 2, m <= 2^P - 1; bisection, rel. 1e-3)\n");
  out << fmt::format("{:>3} {:>10} {:>10} {:>26} {:>22}\n", "P", "N_max", "lambda_min", "float64", "float32");
  for (const auto& r : rows)
    out << fmt::format("{:>3} {:>10.3e} {:>10.4g} {:>26} {:>22}\n", r.P, double(r.n_tokens_max), r.lambda_min, win(r.windows[1]),
                       win(r.windows[2]));
}

nlohmann::json window_table_json(const std::vector<WindowRow>& rows) {
  nlohmann::json table = nlohmann::json::array();
  const char* names[] = {"real", "float64", "float32"};
  for (const auto& r : rows) {
    nlohmann::json row = {{"P", r.P}, {"N_max", r.n_tokens_max}, {"lambda_min", r.lambda_min}};
    for (int p = 0; p < 3; ++p) {
      const auto& w = r.windows[std::size_t(p)];
      row[names[p]] = {{"empty", w.empty}, {"lo", w.empty ? nlohmann::json(nullptr) : nlohmann::json(w.lo)},
                       {"hi", w.empty || !std::isfinite(w.hi) ? nlohmann::json(nullptr) : nlohmann::json(w.hi)}};
    }
    table.push_back(row);
  }
  return table;
}

}  // namespace manyadd
