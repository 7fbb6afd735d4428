// The stages of a verification run: model, certificate, samples, cross-check (verify/stages.hpp).
#include "manyadd/verify/stages.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <cmath>
#include <tuple>

#include "manyadd/core/parallel.hpp"
#include "manyadd/core/progress.hpp"
#include "manyadd/export.hpp"
#include "manyadd/verify/engines.hpp"

namespace manyadd {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

BuiltModel build_model_stage(const Plan& plan) {
  BuiltModel b{build_model(plan.dims.P1, plan.dims.P2, plan.lambdas), {}};
  b.F = CompiledFFN::build(b.M);
  if (!plan.export_dir.empty())
    export_model(b.M, &plan.shape, std::int64_t(1) << plan.dims.P1, std::int64_t(1) << plan.dims.P2, plan.export_dir);
  return b;
}

Counterexample counterexample_from(const Problem& p, std::int64_t s1, std::int64_t s2, const Verdict& v,
                                   const std::string& engine) {
  Counterexample c{p, s1, s2, -1, -1, -1, engine};
  if (v.mismatch) {
    c.position = v.mismatch->position;
    c.expected = v.mismatch->expected;
    c.got = v.mismatch->got;
  }
  return c;
}

std::optional<Counterexample> confirm_counterexample(const ConstructedModel& M, const CompiledFFN& F, const Problem& p,
                                                     const Shape& shape, std::int64_t s1, std::int64_t s2,
                                                     const std::vector<std::int64_t>& risky) {
  const auto seq = build_sequence(p, shape);
  if (shape.N() <= 4000) {
    const Verdict v = judge(run_dense(M, seq, shape, s1, s2, Precision::float64), seq, shape, reference_sum(p).str());
    if (v.ok) return std::nullopt;
    return counterexample_from(p, s1, s2, v, v.mismatch ? "dense" : "dense (answer differs)");
  }
  const Verdict v = judge(run_rows(RowEngine(M, shape, s1, s2, seq), F, shape, risky, 1), seq, shape);
  if (v.ok) return std::nullopt;
  return counterexample_from(p, s1, s2, v, "row");
}

std::optional<Counterexample> find_counterexample(const ConstructedModel& M, const CompiledFFN& F, const Shape& shape,
                                                  std::int64_t s1, std::int64_t s2,
                                                  const std::vector<std::int64_t>& risky, std::uint64_t seed) {
  std::vector<Problem> cands;
  Problem nines, ones;
  for (int i = 0; i < shape.m; ++i) {
    nines.operands.push_back(std::string(std::size_t(shape.n), '9'));
    ones.operands.push_back(std::string(std::size_t(shape.n), '1'));
  }
  cands.push_back(nines);
  cands.push_back(ones);
  Rng rng(seed ^ 0xce11ULL);
  const int tries = shape.N() <= 4000 ? 62 : 6;
  for (int i = 0; i < tries; ++i) cands.push_back(sample_TA(rng, shape.n, shape.m));
  for (const auto& p : cands) {
    auto ce = confirm_counterexample(M, F, p, shape, s1, s2, risky);
    if (!ce) continue;
    // Shrink: digits are zeroed one by one (most significant first) while the instance still fails.
    if (shape.N() <= 400) {
      Problem cur = ce->problem;
      for (int i = 0; i < shape.m; ++i)
        for (std::size_t k = 0; k < cur.operands[std::size_t(i)].size(); ++k) {
          Problem t = cur;
          std::string& o = t.operands[std::size_t(i)];
          if (o[k] == '0') continue;
          o[k] = '0';
          const auto nz = o.find_first_not_of('0');
          o = nz == std::string::npos ? "0" : o.substr(nz);
          if (auto c2 = confirm_counterexample(M, F, t, shape, s1, s2, risky)) {
            cur = t;
            ce = c2;
            k = std::size_t(-1);  // restart this operand
            if (cur.operands[std::size_t(i)] == "0") break;
          }
        }
    }
    return ce;
  }
  return std::nullopt;
}

CertifyOutcome certify_offsets(const Plan& plan, const BuiltModel& model) {
  CertifyOutcome c;
  if (!plan.certify) return c;
  const auto t0 = std::chrono::steady_clock::now();
  c.run = true;
  CertOptions co;
  co.kernel = plan.certify_cuda;
  const Certifier C(model.M, plan.shape, co);
  c.results.resize(plan.offsets.size());
  Progress prog("certificate", std::int64_t(plan.offsets.size()), "offset pairs", plan.progress);
  parallel_for(
      plan.threads, std::int64_t(plan.offsets.size()),
      [&](int, std::int64_t i) {
        const auto [s1, s2] = plan.offsets[std::size_t(i)];
        c.results[std::size_t(i)] = C.run(s1, s2);
        prog.add();
      },
      Schedule::dynamic);
  prog.finish();
  c.proven = true;
  for (std::size_t i = 0; i < c.results.size(); ++i) {
    c.proven = c.proven && c.results[i].proven;
    if (!c.results[i].proven && !c.failed) c.failed = i;
  }
  c.seconds = seconds_since(t0);
  if (c.failed) {
    const auto [s1, s2] = plan.offsets[*c.failed];
    c.counterexample = find_counterexample(model.M, model.F, plan.shape, s1, s2, c.results[*c.failed].risky_positions, plan.seed);
  }
  return c;
}

SamplesOutcome run_samples(const Plan& plan, const BuiltModel& model) {
  SamplesOutcome s;
  s.min_margin = std::numeric_limits<double>::infinity();
  const Shape& shape = plan.shape;
  const std::int64_t O = std::int64_t(plan.sample_offsets.size());
  const bool keep_intervals = plan.cross_check > 0 && plan.has_engine("structured");
  // Problems are drawn in order (the seed decides them), a batch at a time, and each batch's
  // (problem, offset pair) jobs are checked in parallel; a job keeps only its summary.
  struct Job {
    bool ok = true, agree = true;
    double min_margin = std::numeric_limits<double>::infinity();
    std::optional<Counterexample> failure;
  };
  Rng rng(plan.seed);
  const std::int64_t batch = std::max<std::int64_t>(1, 8 * std::int64_t(plan.threads));
  Progress prog("samples", plan.samples * O, "instances", plan.progress);
  for (std::int64_t p0 = 0; p0 < plan.samples; p0 += batch) {
    std::vector<Problem> problems;
    for (std::int64_t k = p0; k < std::min(plan.samples, p0 + batch); ++k)
      problems.push_back(plan.problem ? *plan.problem : sample_TA(rng, shape.n, shape.m));
    std::vector<Job> jobs(problems.size() * std::size_t(O));
    parallel_for(
        plan.threads, std::int64_t(jobs.size()),
        [&](int, std::int64_t i) {
          const Problem& p = problems[std::size_t(i / O)];
          const auto [s1, s2] = plan.sample_offsets[std::size_t(i % O)];
          const bool first = p0 == 0 && i == 0;
          const auto seq = build_sequence(p, shape);
          const std::string reference = reference_sum(p).str();
          const Instance in{seq, s1, s2, first && keep_intervals ? &plan.cross_check_rows : nullptr};
          Job& job = jobs[std::size_t(i)];
          std::vector<std::uint8_t> first_pred;
          for (std::size_t e = 0; e < plan.engines.size(); ++e) {
            EngineResult r = plan.engines[e].run(model, shape, in);
            const Verdict v = judge(r, seq, shape, reference);
            job.ok = job.ok && v.ok;
            job.min_margin = std::min(job.min_margin, v.min_margin);
            if (!v.ok && !job.failure) job.failure = counterexample_from(p, s1, s2, v, r.engine);
            if (e == 0) first_pred = r.pred;
            else if (r.pred != first_pred) job.agree = false;
            if (first && in.interval_rows && r.engine == "structured") s.first_structured = std::move(r);
          }
          if (first) s.first_tokens = seq;
          prog.add();
        },
        Schedule::dynamic);
    for (auto& job : jobs) {
      ++s.checked;
      s.exact += job.ok;
      s.agree = s.agree && job.agree;
      s.min_margin = std::min(s.min_margin, job.min_margin);
      if (job.failure && !s.first) s.first = std::move(job.failure);
    }
  }
  prog.finish();
  return s;
}

CrossCheckOutcome cross_check(const Plan& plan, const BuiltModel& model, SamplesOutcome& samples) {
  CrossCheckOutcome x;
  if (plan.cross_check <= 0 || samples.first_tokens.empty()) return x;
  const auto t0 = std::chrono::steady_clock::now();
  x.run = true;
  std::tie(x.s1, x.s2) = plan.sample_offsets.front();
  const std::vector<std::uint8_t>& seq = samples.first_tokens;
  const EngineResult S = samples.first_structured
                             ? std::move(*samples.first_structured)
                             : run_structured(model.M, model.F, seq, plan.shape, x.s1, x.s2, &plan.cross_check_rows);
  samples.first_structured.reset();
  const EngineResult R =
      run_rows(RowEngine(model.M, plan.shape, x.s1, x.s2, seq), model.F, plan.shape, plan.cross_check_rows, plan.threads);
  MANYADD_INVARIANT(R.rows == S.interval_rows && S.intervals.size() == R.rows.size(),
                    "the cross-check rows of the two engines differ");
  x.rows = R.rows.size();
  for (std::size_t i = 0; i < R.rows.size(); ++i) {
    bool ok = R.pred[i] == S.pred[std::size_t(R.rows[i] - S.first)];
    for (int h = 0; h < 4; ++h) {
      // inside the interval up to the row engine's own rounding (relative 1e-12, see tests)
      const double v = R.heads[i][std::size_t(h)], tol = 1e-12 * (1 + std::abs(v));
      const Interval& iv = S.intervals[i][std::size_t(h)];
      if (v < iv.lo - tol || v > iv.hi + tol) ok = false;
    }
    x.agree += ok;
  }
  x.seconds = seconds_since(t0);
  return x;
}

int run_plan(const Plan& plan, std::ostream& out) {
  const auto t0 = std::chrono::steady_clock::now();
  const BuiltModel model = build_model_stage(plan);
  nlohmann::json json;
  Outcomes r;
  r.certificate = certify_offsets(plan, model);
  if (plan.exhaustive) r.exhaustive = run_exhaustive(plan, model);
  if (!plan.dump.empty()) dump_instance(plan, model, out, json);
  r.samples = run_samples(plan, model);
  r.cross_check = cross_check(plan, model, r.samples);
  r.seconds = seconds_since(t0);
  return report_outcomes(plan, model, r, json, out);
}

}  // namespace manyadd
