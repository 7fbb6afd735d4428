// The last stage: the printed summary, the JSON report and the exit code (verify/stages.hpp).
#include <cmath>
#include <limits>
#include <map>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "manyadd/core/files.hpp"
#include "manyadd/core/report.hpp"
#include "manyadd/verify/stages.hpp"

namespace manyadd {

using json = nlohmann::json;

json counterexample_json(const Counterexample& c) {
  json j = {{"problem", c.problem.to_string()}, {"s1", c.s1}, {"s2", c.s2}, {"confirmed_by", c.confirmed_by},
            {"reference", reference_sum(c.problem).str()}};
  if (c.position > 0) {
    j["position"] = c.position;
    j["expected"] = std::string(1, token_char(c.expected));
    j["got"] = c.got >= 0 ? std::string(1, token_char(c.got)) : std::string("tie");
  }
  return j;
}

namespace {

// The certificate's entry of the report and its line of the summary.
json certificate_json(const Plan& plan, const CertifyOutcome& c, std::string& line) {
  if (!c.run) {
    line = "not run (--no-certify)";
    return {{"status", "not_run"}, {"min_margin", nullptr}, {"lambda_min", nullptr}};
  }
  double mm = std::numeric_limits<double>::infinity(), lmin = 0;
  std::map<std::string, double> pm;
  std::map<std::string, bool> pp;
  std::int64_t classes = 0;
  for (const auto& r : c.results) {
    mm = std::min(mm, r.min_margin);
    lmin = std::max(lmin, r.lambda_min);
    classes += r.classes;
    for (const auto& p : r.margins) {
      pm[p.precision] = pm.count(p.precision) ? std::min(pm[p.precision], p.min_margin) : p.min_margin;
      pp[p.precision] = (pp.count(p.precision) ? pp[p.precision] : true) && p.proven;
    }
  }
  json cert = {{"status", c.proven ? "proven" : "failed"},
               {"min_margin", mm},
               {"lambda_min", std::isfinite(lmin) ? json(lmin) : json(nullptr)},
               {"offsets", c.results.size()},
               {"positions_per_offset", c.results.front().positions},
               {"classes", classes},
               {"seconds", c.seconds}};
  json margins = json::object();
  for (const auto& [k, v] : pm) margins[k] = {{"min_margin", v}, {"proven", pp[k]}};
  cert["margins"] = margins;
  if (c.failed) {
    const auto& f = *c.results[*c.failed].failure;
    const auto [s1, s2] = plan.offsets[*c.failed];
    json jf = {{"s1", s1}, {"s2", s2}, {"part", f.part}, {"reason", f.reason}, {"position", f.position + 1},
               {"worst_margin", f.margin}};
    if (f.S >= 0) jf["configuration"] = {{"S", f.S}, {"S_prev", f.S2}, {"carry_in", f.carry}};
    cert["failure"] = jf;
    line = fmt::format("FAILED at s1={} s2={}: {} at token {} ({})", s1, s2, f.part, f.position + 1, f.reason);
  } else {
    std::vector<std::string> names;  // the precisions proven, in the certificate's order
    for (const auto& p : c.results.front().margins) names.push_back(p.precision);
    line = fmt::format("PROVEN for every digit input ({} offset pair(s); {}); min margin {:.4g}, lambda_min {:.4g}",
                       plan.offsets.size(), fmt::join(names, ", "), mm, lmin);
    if (plan.has_engine("cuda") && !plan.certify_cuda) line += "; the CUDA program's float32-cuda not asked (--certify-cuda)";
  }
  return cert;
}

}  // namespace

int report_outcomes(const Plan& plan, const BuiltModel& model, const Outcomes& r, json& j, std::ostream& out) {
  const Shape& shape = plan.shape;
  std::vector<std::string> engines;
  for (const auto& e : plan.engines) engines.push_back(e.name);
  j["n"] = shape.n;
  j["m"] = shape.m;
  j["l"] = shape.l;
  j["padding"] = padding_name(shape.padding);
  j["P1"] = plan.dims.P1;
  j["P2"] = plan.dims.P2;
  j["dims_rule"] = plan.dims_rule;
  j["d"] = model.M.d();
  // with --lambdas the heads' own scales; "lambda" (the default every head would have had) is not
  // what ran, so it is null then
  j["lambda"] = plan.per_head_lambdas ? json(nullptr) : json(plan.lambda);
  if (plan.per_head_lambdas) j["lambdas"] = plan.lambdas;
  j["N"] = shape.N();
  json offs = json::array();
  for (const auto& [a, b] : plan.offsets) offs.push_back({a, b});
  j["offsets_checked"] = offs;
  j["engines"] = engines;

  std::string cert_line;
  j["certificate"] = certificate_json(plan, r.certificate, cert_line);
  const bool cert_ok = !r.certificate.run || r.certificate.proven;
  // The counterexample shown: the certificate's, else the enumeration's, else the samples'.
  std::optional<Counterexample> ce = r.certificate.counterexample;
  if (!ce) ce = r.exhaustive.first;
  if (!ce) ce = r.samples.first;

  const bool exhaustive_ok = r.exhaustive.failures == 0;
  if (r.exhaustive.run)
    j["exhaustive"] = {{"instances", r.exhaustive.instances}, {"failures", r.exhaustive.failures},
                       {"offset_pairs_enumerated", r.exhaustive.enumerated_pairs},
                       {"offset_pairs_inherited", r.exhaustive.inherited_pairs}, {"seconds", r.exhaustive.seconds}};
  const SamplesOutcome& s = r.samples;
  json sample_offs = json::array();
  for (const auto& [a, b] : plan.sample_offsets) sample_offs.push_back({a, b});
  j["samples"] = {{"checked", s.checked}, {"exact", s.exact}, {"min_margin", s.min_margin}, {"offsets", sample_offs}};
  j["engines_agree"] = s.agree;
  const CrossCheckOutcome& x = r.cross_check;
  j["cross_check"] = x.run ? json{{"rows", x.rows}, {"agree", x.agree}, {"s1", x.s1}, {"s2", x.s2}, {"seconds", x.seconds}}
                           : json(nullptr);
  j["counterexample"] = ce ? counterexample_json(*ce) : json(nullptr);
  j["seconds"] = r.seconds;

  // An exhaustive run that passes settles the shape at its offsets even where the (conservative)
  // certificate failed; the certificate's own status stays "failed" in the report.
  const bool xc_ok = !x.run || x.agree == x.rows;
  const bool pass = (cert_ok || (r.exhaustive.run && exhaustive_ok)) && s.exact == s.checked && s.agree && xc_ok &&
                    exhaustive_ok;
  const std::string lam = plan.per_head_lambdas ? fmt::format("lambdas={}", fmt::join(plan.lambdas, ","))
                                                : fmt::format("lambda={}", plan.lambda);
  out << fmt::format("verify_construction  n={} m={} l={} ({} padding)  P1={} P2={} d={}  {}  N={}\n", shape.n,
                     shape.m, shape.l, padding_name(shape.padding), plan.dims.P1, plan.dims.P2, model.M.d(), lam,
                     shape.N());
  out << fmt::format("  certificate {}\n", cert_line);
  if (r.exhaustive.run)
    out << fmt::format("  exhaustive  {} (instance, offset pair) runs, {} failing ({} offset pair(s) enumerated, {} "
                       "inheriting the verdict of their wrap case){}\n",
                       r.exhaustive.instances, r.exhaustive.failures, r.exhaustive.enumerated_pairs,
                       r.exhaustive.inherited_pairs,
                       !cert_ok && exhaustive_ok ? " -- every instance verified: the certificate was conservative here" : "");
  out << fmt::format("  samples     {} checked, {} exact (engines: {}), min margin {:.4g}; engines {}\n", s.checked, s.exact,
                     fmt::join(engines, ", "), s.min_margin, s.agree ? "agree" : "DISAGREE");
  if (x.run)
    out << fmt::format("  cross-check {} of {} random response rows agree (exact finite-lambda softmax, double, O(N) each: inside the structured interval, same prediction)\n",
                       x.agree, x.rows);
  if (ce) {
    const auto& c = *ce;
    const std::string p = c.problem.to_string();
    out << fmt::format("  COUNTEREXAMPLE {} at s1={} s2={}", p.size() > 120 ? p.substr(0, 117) + "..." : p, c.s1, c.s2);
    if (c.position > 0)
      out << fmt::format(": token {} predicts '{}', expected '{}' ({})", c.position,
                         c.got >= 0 ? std::string(1, token_char(c.got)) : "tie", std::string(1, token_char(c.expected)),
                         c.confirmed_by);
    out << '\n';
  } else if (!cert_ok && !(r.exhaustive.run && exhaustive_ok)) {
    out << "  (no concrete counterexample found among the candidates tried: the certificate is conservative here)\n";
  }
  out << fmt::format("  result      {}  ({:.2f} s)\n", pass ? "VERIFIED" : "FAILED", r.seconds);
  if (!plan.json_path.empty()) report::write_json_report(plan.json_path, "verify_construction", pass ? "pass" : "fail", j);
  return pass ? kExitOk : kExitFailed;
}

}  // namespace manyadd
