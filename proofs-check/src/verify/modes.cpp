// The stages of the other modes: --exhaustive, --dump, --dims-table and --whole-claim (verify/stages.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <ostream>

#include <fmt/format.h>

#include "manyadd/core/parallel.hpp"
#include "manyadd/core/progress.hpp"
#include "manyadd/core/report.hpp"
#include "manyadd/dense.hpp"
#include "manyadd/offset_cases.hpp"
#include "manyadd/verify/stages.hpp"

namespace manyadd {

using json = nlohmann::json;

// --exhaustive: every instance of the shape (m operands of at most n digits), at every offset pair
// of the plan, through the real model in double. Attention weights depend on position IDs only (a
// key's token enters its score through IS_BOS alone), so the four N x N attention matrices come from
// one dense pass per offset pair; each instance then costs the two digit heads' rows (A_h times 3 NUM)
// and the feed-forward layer at the response positions.
// Offset pairs of one wrap case (offset_cases.hpp) match the same keys everywhere; only the
// unmatched keys' weights differ. The case's first pair is enumerated, recording every position's
// smallest margin; another pair of the case inherits the verdict when margin_shift_bound (what its
// attention can move any instance's margin) stays below those margins, and is enumerated otherwise.
ExhaustiveOutcome run_exhaustive(const Plan& plan, const BuiltModel& model) {
  const auto t0 = std::chrono::steady_clock::now();
  const Shape& shape = plan.shape;
  const ConstructedModel& M = model.M;
  ExhaustiveOutcome res;
  res.run = true;
  std::uint64_t per = 1;
  for (int i = 0; i < shape.n; ++i) per *= 10;  // operand values 0 .. 10^n - 1
  std::uint64_t total = 1;
  for (int i = 0; i < shape.m; ++i) total *= per;
  const std::int64_t N = shape.N(), eq = shape.eq_index();
  const auto rows = std::size_t(N - eq);
  constexpr std::uint64_t chunk = 4096;
  const auto chunks = std::int64_t((total + chunk - 1) / chunk);
  Progress prog("exhaustive", std::int64_t(total) * std::int64_t(plan.offsets.size()), "instances", plan.progress);
  for (const auto& group : group_by_wrap_case(shape, M.layout.P1, M.layout.P2, plan.offsets)) {
    std::array<Eigen::MatrixXd, 4> first_attention;
    std::vector<double> first_margin(rows, std::numeric_limits<double>::infinity());
    bool first_ok = false;
    for (std::size_t gi = 0; gi < group.size(); ++gi) {
      const auto [s1, s2] = group[gi];
      Problem rep;
      for (int i = 0; i < shape.m; ++i) rep.operands.push_back("0");
      const auto ids = position_ids(shape, s1, s2);
      DenseOptions dopt;
      dopt.keep_attention = true;
      const auto R = dense_forward<double>(M, embed(M, build_sequence(rep, shape), ids), dopt);
      if (gi > 0 && first_ok) {  // inherit the first pair's verdict when no margin can close
        const auto shift = margin_shift_bound(model.F, first_attention, R.attention, eq);
        bool inherit = true;
        for (std::size_t r = 0; r < shift.size(); ++r) inherit = inherit && first_margin[r] > shift[r] + 1e-9;
        if (inherit) {
          res.instances += total;
          ++res.inherited_pairs;
          prog.add(std::int64_t(total));
          continue;
        }
      }
      const bool record = gi == 0;  // the first pair's per-position margins, for the pairs that inherit
      // per thread: the digit values, the result buffer of one instance and the smallest margins
      std::vector<std::vector<double>> nums(std::size_t(plan.threads), std::vector<double>(std::size_t(N)));
      std::vector<std::vector<double>> margins(std::size_t(plan.threads),
                                               std::vector<double>(record ? rows : 0, std::numeric_limits<double>::infinity()));
      std::vector<EngineResult> results(std::size_t(plan.threads));
      for (auto& r : results) {
        r.engine = "exhaustive (dense attention)";
        r.first = eq;
        r.logits.resize(kVocab, N - eq);
      }
      std::mutex mu;
      std::uint64_t fails = 0, first_code = total;
      std::optional<Counterexample> first;
      parallel_for(
          plan.threads, chunks,
          [&](int t, std::int64_t c) {
            std::vector<double>& num = nums[std::size_t(t)];
            std::vector<double>& margin = margins[std::size_t(t)];
            EngineResult& er = results[std::size_t(t)];
            std::uint64_t chunk_fails = 0;
            for (std::uint64_t code = std::uint64_t(c) * chunk; code < std::min(total, std::uint64_t(c + 1) * chunk); ++code) {
              Problem p;
              p.operands.reserve(std::size_t(shape.m));
              std::uint64_t rest = code;
              std::int64_t sum = 0;
              for (int i = 0; i < shape.m; ++i) {
                const std::uint64_t v = rest % per;
                rest /= per;
                p.operands.push_back(std::to_string(v));
                sum += std::int64_t(v);
              }
              const auto seq = build_sequence(p, shape);
              if (parse_sequence(seq).partial_sums.back() != std::to_string(sum)) {  // independent 64-bit reference
                ++chunk_fails;
                continue;
              }
              for (std::int64_t k = 0; k < N; ++k) num[std::size_t(k)] = seq[std::size_t(k)] < 10 ? seq[std::size_t(k)] : 0;
              for (std::int64_t j = eq; j < N; ++j) {
                std::array<double, 7> y{};
                y[Layout::NUM] = num[std::size_t(j)];
                y[Layout::FULL_ONES] = 1;
                for (int h = 0; h < 2; ++h) {
                  const double vs = M.heads[std::size_t(h)].V(0, Layout::NUM);
                  double acc = 0;
                  for (std::int64_t i = 0; i <= j; ++i) acc += R.attention[std::size_t(h)](j, i) * num[std::size_t(i)];
                  y[std::size_t(3 + h)] = vs * acc;
                }
                y[Layout::PRE_ARROW] = R.Y(Layout::PRE_ARROW, j);
                y[Layout::PRE_EOS] = R.Y(Layout::PRE_EOS, j);
                const auto lg = model.F.logits(y);
                std::copy(lg.begin(), lg.end(), er.logits.col(j - eq).data());
                if (record) {
                  const int expected = j + 1 < N ? seq[std::size_t(j + 1)] : int(kDollar);
                  double other = -std::numeric_limits<double>::infinity();
                  for (int t2 = 0; t2 < kVocab; ++t2)
                    if (t2 != expected) other = std::max(other, lg[std::size_t(t2)]);
                  double& mj = margin[std::size_t(j - eq)];
                  mj = std::min(mj, lg[std::size_t(expected)] - other);
                }
              }
              predict_from_logits(er);
              const Verdict v = judge(er, seq, shape);
              if (v.ok) continue;
              ++chunk_fails;
              std::lock_guard<std::mutex> g(mu);
              if (code < first_code) {
                first_code = code;
                first = counterexample_from(p, s1, s2, v, er.engine);
              }
            }
            prog.add(std::int64_t(std::min(total, std::uint64_t(c + 1) * chunk) - std::uint64_t(c) * chunk));
            std::lock_guard<std::mutex> g(mu);
            fails += chunk_fails;
          },
          Schedule::dynamic);
      res.instances += total;
      res.failures += fails;
      ++res.enumerated_pairs;
      if (first && !res.first) res.first = first;
      if (record) {
        first_ok = fails == 0;
        first_attention = R.attention;
        for (const auto& m : margins)
          for (std::size_t r = 0; r < rows; ++r) first_margin[r] = std::min(first_margin[r], m[r]);
      }
    }
  }
  prog.finish();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

namespace {

// A value as a small fraction when it is one (the paper's tables write 1/4, 1/3, ...).
std::string pretty(double v) {
  if (std::abs(v) < 5e-10) return "0";
  for (int q = 1; q <= 12; ++q) {
    const double p = std::round(v * q);
    if (std::abs(v - p / q) < 5e-4) {  // within the 3 digits shown
      if (q == 1) return fmt::format("{}", std::int64_t(p));
      if (std::gcd(std::int64_t(std::abs(p)), std::int64_t(q)) == 1) return fmt::format("{}/{}", std::int64_t(p), q);
    }
  }
  return fmt::format("{:.3g}", v);
}

void dump_residual(std::ostream& out, const ConstructedModel& M, const std::vector<std::uint8_t>& seq,
                   const PositionIds& ids, const Eigen::MatrixXd& X1, json& report) {
  const auto names = M.layout.names();
  const auto N = std::int64_t(seq.size());
  auto row = [&](const std::string& name, auto cell) {
    out << fmt::format("{:>12}", name);
    for (std::int64_t k = 0; k < N; ++k) out << fmt::format(" {:>7}", cell(k));
    out << '\n';
  };
  out << "residual stream after the layer (X1; paper Tables 21-23 layout, all tokens)\n";
  row("I", [&](std::int64_t k) { return std::string(1, token_char(seq[std::size_t(k)])); });
  row("p1", [&](std::int64_t k) { return std::to_string(ids.p1[std::size_t(k)]); });
  row("p2", [&](std::int64_t k) { return std::to_string(ids.p2[std::size_t(k)]); });
  json rows = json::object();
  for (int r = 0; r < 19; ++r) {
    row(fmt::format("{}:{}", r + 1, names[std::size_t(r)]), [&](std::int64_t k) { return pretty(X1(r, k)); });
  }
  // Position blocks as the paper writes them: v_p (0 for BOS).
  row("POS_1", [&](std::int64_t k) { return ids.p1[std::size_t(k)] ? fmt::format("v{}", ids.p1[std::size_t(k)]) : std::string("0"); });
  row("POS_1_NEXT", [&](std::int64_t k) { return ids.p1[std::size_t(k)] ? fmt::format("v{}", ids.p1[std::size_t(k)] + 1) : std::string("0"); });
  row("POS_2", [&](std::int64_t k) { return ids.p2[std::size_t(k)] ? fmt::format("v{}", ids.p2[std::size_t(k)]) : std::string("0"); });
  row("POS_2_NEXT", [&](std::int64_t k) { return ids.p2[std::size_t(k)] ? fmt::format("v{}", ids.p2[std::size_t(k)] + 1) : std::string("0"); });
  for (int r = 0; r < M.d(); ++r) {
    std::vector<double> v(static_cast<std::size_t>(N));
    for (std::int64_t k = 0; k < N; ++k) v[std::size_t(k)] = X1(r, k);
    rows[names[std::size_t(r)]] = v;
  }
  json toks = json::array();
  for (auto t : seq) toks.push_back(std::string(1, token_char(t)));
  report["residual"] = {{"tokens", toks}, {"p1", ids.p1}, {"p2", ids.p2}, {"rows", rows}};
}

void dump_attention(std::ostream& out, const ConstructedModel& M, const std::vector<std::uint8_t>& seq,
                    const std::array<Eigen::MatrixXd, 4>& A, const Shape& shape, json& report) {
  const auto N = std::int64_t(seq.size());
  json att = json::object();
  for (int h = 0; h < 4; ++h) {
    out << fmt::format("head {} ({}): keys with weight >= 0.01 for each response query, as index:token=weight\n",
                       h + 1, M.heads[std::size_t(h)].name);
    for (std::int64_t j = shape.eq_index(); j < N; ++j) {
      out << fmt::format("  q{:>4}:{}  ", j + 1, token_char(seq[std::size_t(j)]));
      for (std::int64_t i = 0; i <= j; ++i) {
        const double a = A[std::size_t(h)](j, i);
        if (a >= 0.01) out << fmt::format(" {}:{}={}", i + 1, token_char(seq[std::size_t(i)]), pretty(a));
      }
      out << '\n';
    }
    std::vector<std::vector<double>> rows(static_cast<std::size_t>(N));
    for (std::int64_t j = 0; j < N; ++j) {
      rows[std::size_t(j)].resize(std::size_t(N));
      for (std::int64_t i = 0; i < N; ++i) rows[std::size_t(j)][std::size_t(i)] = A[std::size_t(h)](j, i);
    }
    att[fmt::format("head{}", h + 1)] = rows;
  }
  report["attention"] = att;
}

}  // namespace

void dump_instance(const Plan& plan, const BuiltModel& model, std::ostream& out, json& report) {
  MANYADD_INVARIANT(plan.problem.has_value(), "--dump without --problem passed the plan");
  const auto seq = build_sequence(*plan.problem, plan.shape);
  for (const auto& [s1, s2] : plan.sample_offsets) {
    const PositionIds ids = position_ids(plan.shape, s1, s2);
    const auto R = dense_forward<double>(model.M, embed(model.M, seq, ids), plan.dump_dense);
    if (plan.dump == "residual") dump_residual(out, model.M, seq, ids, R.X1, report);
    else dump_attention(out, model.M, seq, R.attention, plan.shape, report);
  }
}

namespace {

// For one shape and (P1, P2): does the certificate (real arithmetic) prove every offset pair?
struct AllOffsets {
  bool proven = false;
  std::string reason;
  std::int64_t s1 = 0, s2 = 0;
  std::vector<std::int64_t> risky;
};

AllOffsets certify_all_offsets(const Shape& shape, int P1, int P2, double lambda) {
  AllOffsets a;
  const std::int64_t h1 = max_s1(shape, P1), h2 = max_s2(shape, P2);
  if (h1 < 1 || h2 < 1) {
    a.reason = h1 < 1 ? fmt::format("2^P1 = {} < l + 1 = {}: no valid level-1 offset", std::int64_t(1) << P1, shape.l + 1)
                      : fmt::format("2^P2 = {} < m + 1 = {}: no valid level-2 offset", std::int64_t(1) << P2, shape.m + 1);
    return a;
  }
  const ConstructedModel M = build_model(P1, P2, lambda);
  Certifier C(M, shape, CertOptions{false, false});
  for (std::int64_t s1 = 1; s1 <= h1; ++s1)
    for (std::int64_t s2 = 1; s2 <= h2; ++s2) {
      const auto r = C.run(s1, s2);
      if (!r.proven) {
        a.s1 = s1;
        a.s2 = s2;
        a.reason = fmt::format("{} at token {}: {}", r.failure->part, r.failure->position + 1, r.failure->reason);
        a.risky = r.risky_positions;
        return a;
      }
    }
  a.proven = true;
  return a;
}

}  // namespace

// --dims-table: for each (n, m), the smallest (P1, P2) that the certificate proves at every offset
// pair (real arithmetic, at the default or given lambda), beside the paper's formula.
int dims_table(const DimsTablePlan& plan, std::ostream& out) {
  json rows = json::array();
  bool all_found = true;
  out << fmt::format("{:>4} {:>4} {:>4} | {:>6} {:>6} | {:>8} {:>8} | {}\n", "n", "m", "l", "P1_min", "P2_min", "P1_paper",
                     "P2_paper", "paper");
  Progress prog("dims table", plan.n_max * plan.m_max, "shapes", plan.progress);
  for (std::int64_t n = 1; n <= plan.n_max; ++n)
    for (std::int64_t m = 1; m <= plan.m_max; ++m, prog.add()) {
      const Shape shape = Shape::make(n, m, plan.padding);
      const double lam = plan.lambda ? *plan.lambda : default_lambda(shape.N());
      const Dims ours = dims_ours(shape), paper = dims_paper(shape);
      // smallest P1 with P2 generous, smallest P2 with P1 generous, then the pair together
      int P1 = std::max(1, ceil_log2(shape.l + 1)), P2 = std::max(1, ceil_log2(shape.m + 1));
      while (P1 < ours.P1 + 3 && !certify_all_offsets(shape, P1, ours.P2 + 1, lam).proven) ++P1;
      while (P2 < ours.P2 + 3 && !certify_all_offsets(shape, ours.P1 + 1, P2, lam).proven) ++P2;
      bool found = certify_all_offsets(shape, P1, P2, lam).proven;
      for (int bump = 0; !found && bump < 4; ++bump) {
        (bump % 2 ? P2 : P1)++;
        found = certify_all_offsets(shape, P1, P2, lam).proven;
      }
      all_found = all_found && found;
      const AllOffsets pa = certify_all_offsets(shape, paper.P1, paper.P2, lam);
      json ce = nullptr;
      if (!pa.proven && pa.s1 > 0) {
        const ConstructedModel M = build_model(paper.P1, paper.P2, lam);
        const CompiledFFN F = CompiledFFN::build(M);
        if (auto c = find_counterexample(M, F, shape, pa.s1, pa.s2, pa.risky, plan.seed)) ce = counterexample_json(*c);
      }
      json row = {{"n", n}, {"m", m}, {"l", shape.l}, {"lambda", lam},
                  {"P1_min", found ? json(P1) : json(nullptr)}, {"P2_min", found ? json(P2) : json(nullptr)},
                  {"P1_paper", paper.P1}, {"P2_paper", paper.P2}, {"P1_ours", ours.P1}, {"P2_ours", ours.P2},
                  {"paper_holds", pa.proven}, {"paper_failure", pa.proven ? json(nullptr) : json(pa.reason)},
                  {"counterexample", ce}};
      rows.push_back(row);
      std::string verdict = pa.proven ? "holds" : "FAILS: " + pa.reason;
      if (!ce.is_null())
        verdict += fmt::format("; e.g. {} at s1={} s2={}", ce["problem"].get<std::string>(), ce["s1"].get<std::int64_t>(),
                               ce["s2"].get<std::int64_t>());
      out << fmt::format("{:>4} {:>4} {:>4} | {:>6} {:>6} | {:>8} {:>8} | {}\n", n, m, shape.l, found ? std::to_string(P1) : "-",
                         found ? std::to_string(P2) : "-", paper.P1, paper.P2, verdict);
    }
  if (!plan.json_path.empty())
    report::write_json_report(plan.json_path, "verify_construction", all_found ? "pass" : "fail",
                              json({{"dims_table", rows}, {"padding", padding_name(plan.padding)}}));
  return all_found ? 0 : 1;
}

// --whole-claim: the claim for the plan's model (or the lambda window table), printed and written
// to --json.
int whole_claim_stage(const WholeClaimPlan& plan, std::ostream& out) {
  const auto t0 = std::chrono::steady_clock::now();
  json body;
  int code = 0;
  if (plan.windows_table) {
    const auto rows = lambda_window_table(plan.windows_table->first, plan.windows_table->second, plan.opt.threads);
    print_window_table(out, rows);
    body["lambda_windows_table"] = window_table_json(rows);
  } else {
    const WholeClaimResult r = whole_claim(plan.opt);
    print_whole_claim(out, r);
    body["whole_claim"] = whole_claim_json(r);
    code = r.proven ? 0 : 1;
  }
  body["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!plan.json_path.empty())
    report::write_json_report(plan.json_path, "verify_construction",
                              plan.windows_table ? "done" : code == 0 ? "pass" : "fail", body);
  return code;
}

}  // namespace manyadd
