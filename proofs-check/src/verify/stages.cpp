// The stages of a verification run: model, certificate, samples, cross-check (verify/stages.hpp).
#include "manyadd/verify/stages.hpp"

#include <algorithm>
#include <mutex>
#include <memory>
#include <map>
#include <future>
#include <atomic>
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

namespace {
// A stage as tasks for a pool of workers: count() tasks, run(i) for each (any order, any thread),
// then finish() once. A stage alone is parallel_for over its tasks; run_plan gives the certificate,
// the samples and the cross-check one pool, so that no worker idles while a lone offset pair is
// certified or a problem is drawn (draws are serial: one seed, drawn in order).
// Each stage's seconds are from the pool's start to its own last task.
class StageClock {
 public:
  explicit StageClock(std::int64_t tasks) : left_(tasks), t0_(std::chrono::steady_clock::now()) {
    if (tasks == 0) seconds_ = 0;
  }
  // true for the stage's last task
  bool done() {
    if (left_.fetch_sub(1) != 1) return false;
    seconds_ = seconds_since(t0_);
    return true;
  }
  double seconds() const { return seconds_; }

 private:
  std::atomic<std::int64_t> left_;
  std::chrono::steady_clock::time_point t0_;
  double seconds_ = 0;
};

class CertifyTasks {
 public:
  CertifyTasks(const Plan& plan, const BuiltModel& model)
      : plan_(plan), model_(model), n_(plan.certify ? std::int64_t(plan.offsets.size()) : 0), clock_(n_),
        prog_("certificate", n_, "offset pairs", n_ > 0 ? plan.progress : quiet_progress()) {
    if (!plan.certify) return;
    CertOptions co;
    co.kernel = plan.certify_cuda;
    C_.emplace(model.M, plan.shape, co);
    c_.run = true;
    c_.results.resize(plan.offsets.size());
  }
  std::int64_t count() const { return n_; }
  void run(std::int64_t i) {
    const auto [s1, s2] = plan_.offsets[std::size_t(i)];
    c_.results[std::size_t(i)] = C_->run(s1, s2);
    prog_.add();
    if (clock_.done()) prog_.finish();
  }
  CertifyOutcome finish() {
    if (!c_.run) return c_;
    c_.proven = true;
    for (std::size_t i = 0; i < c_.results.size(); ++i) {
      c_.proven = c_.proven && c_.results[i].proven;
      if (!c_.results[i].proven && !c_.failed) c_.failed = i;
    }
    c_.seconds = clock_.seconds();
    if (c_.failed) {
      const auto [s1, s2] = plan_.offsets[*c_.failed];
      c_.counterexample = find_counterexample(model_.M, model_.F, plan_.shape, s1, s2,
                                              c_.results[*c_.failed].risky_positions, plan_.seed);
    }
    return std::move(c_);
  }

 private:
  const Plan& plan_;
  const BuiltModel& model_;
  std::int64_t n_;
  StageClock clock_;
  Progress prog_;
  std::optional<Certifier> C_;
  CertifyOutcome c_;
};

// The sample problems, drawn in order from the plan's seed whatever order the jobs run in; a
// problem is kept until its last offset pair's job took it (so about `threads` are alive at once).
class ProblemSource {
 public:
  explicit ProblemSource(const Plan& plan) : plan_(plan), rng_(plan.seed) {}
  std::shared_ptr<const Problem> take(std::int64_t p, std::int64_t uses) {
    std::lock_guard<std::mutex> lock(mu_);
    for (; drawn_ <= p; ++drawn_)
      live_[drawn_] = {std::make_shared<const Problem>(plan_.problem ? *plan_.problem
                                                                      : sample_TA(rng_, plan_.shape.n, plan_.shape.m)),
                       uses};
    const auto it = live_.find(p);
    MANYADD_INVARIANT(it != live_.end(), "a sample problem is taken once per offset pair");
    std::shared_ptr<const Problem> out = it->second.first;
    if (--it->second.second == 0) live_.erase(it);
    return out;
  }

 private:
  const Plan& plan_;
  Rng rng_;
  std::mutex mu_;
  std::int64_t drawn_ = 0;
  std::map<std::int64_t, std::pair<std::shared_ptr<const Problem>, std::int64_t>> live_;
};

// The first job's instance, which the cross-check recomputes: its tokens and, when the structured
// engine ran, its result with the finite-lambda intervals at the cross-check rows.
struct FirstInstance {
  std::vector<std::uint8_t> tokens;
  std::optional<EngineResult> structured;
};

class SampleTasks {
 public:
  SampleTasks(const Plan& plan, const BuiltModel& model)
      : plan_(plan), model_(model), O_(std::int64_t(plan.sample_offsets.size())), problems_(plan),
        clock_(plan.samples * O_), prog_("samples", plan.samples * O_, "instances", plan.progress),
        first_(first_promise_.get_future().share()) {
    s_.min_margin = std::numeric_limits<double>::infinity();
  }
  std::int64_t count() const { return plan_.samples * O_; }
  std::shared_future<std::shared_ptr<FirstInstance>> first() const { return first_; }
  // job i: problem i / O at offset pair i % O, through every engine of the plan
  void run(std::int64_t i) {
    if (i != 0) return job(i);
    try {
      job(i);
    } catch (...) {  // the cross-check may be waiting for job 0
      first_promise_.set_exception(std::current_exception());
      throw;
    }
  }
  // keep_first: the first instance in the outcome (for a cross-check run after the samples)
  SamplesOutcome finish(bool keep_first) {
    if (first_failure_) s_.first = std::move(first_failure_->second);
    if (keep_first && first_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      const std::shared_ptr<FirstInstance> f = first_.get();
      s_.first_tokens = f->tokens;
      s_.first_structured = f->structured;
    }
    return std::move(s_);
  }

 private:
  void job(std::int64_t i) {
    const std::shared_ptr<const Problem> p = problems_.take(i / O_, O_);
    const auto [s1, s2] = plan_.sample_offsets[std::size_t(i % O_)];
    const bool keep = i == 0 && plan_.cross_check > 0 && plan_.has_engine("structured");
    auto seq = build_sequence(*p, plan_.shape);
    const std::string reference = decimal_sum(*p);
    const Instance in{seq, s1, s2, keep ? &plan_.cross_check_rows : nullptr};
    bool ok = true, agree = true;
    double min_margin = std::numeric_limits<double>::infinity();
    std::optional<Counterexample> failure;
    std::vector<std::uint8_t> first_pred;
    auto first = i == 0 ? std::make_shared<FirstInstance>() : nullptr;
    for (std::size_t e = 0; e < plan_.engines.size(); ++e) {
      EngineResult r = plan_.engines[e].run(model_, plan_.shape, in);
      const Verdict v = judge(r, seq, plan_.shape, reference);
      ok = ok && v.ok;
      min_margin = std::min(min_margin, v.min_margin);
      if (!v.ok && !failure) failure = counterexample_from(*p, s1, s2, v, r.engine);
      if (e == 0) first_pred = r.pred;
      else if (r.pred != first_pred) agree = false;
      if (first && keep && r.engine == "structured") first->structured = std::move(r);
    }
    if (first) {
      first->tokens = std::move(seq);
      first_promise_.set_value(std::move(first));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++s_.checked;
      s_.exact += ok;
      s_.agree = s_.agree && agree;
      s_.min_margin = std::min(s_.min_margin, min_margin);
      if (failure && (!first_failure_ || i < first_failure_->first)) first_failure_.emplace(i, std::move(*failure));
    }
    prog_.add();
    if (clock_.done()) prog_.finish();
  }
  const Plan& plan_;
  const BuiltModel& model_;
  std::int64_t O_;
  ProblemSource problems_;
  StageClock clock_;
  Progress prog_;
  std::mutex mu_;
  SamplesOutcome s_;
  std::optional<std::pair<std::int64_t, Counterexample>> first_failure_;  // the failing job of the smallest index
  std::promise<std::shared_ptr<FirstInstance>> first_promise_;
  std::shared_future<std::shared_ptr<FirstInstance>> first_;
};

// Rows of the first sample by the exact row engine, in batches; the engine is built (once) by the
// first batch to run, after the first sample's job.
class CrossTasks {
 public:
  CrossTasks(const Plan& plan, const BuiltModel& model, std::shared_future<std::shared_ptr<FirstInstance>> first)
      : plan_(plan), model_(model), first_(std::move(first)),
        R_(plan.cross_check > 0 ? row_result(plan.shape, plan.cross_check_rows) : EngineResult{}),
        n_(plan.cross_check > 0 ? row_batches(R_) : 0), clock_(n_) {}
  std::int64_t count() const { return n_; }
  void run(std::int64_t b) {
    std::call_once(built_, [&] {
      const std::shared_ptr<FirstInstance> f = first_.get();
      std::tie(s1_, s2_) = plan_.sample_offsets.front();
      S_ = f->structured ? std::move(*f->structured)
                         : run_structured(model_.M, model_.F, f->tokens, plan_.shape, s1_, s2_, &plan_.cross_check_rows);
      f->structured.reset();
      E_.emplace(model_.M, plan_.shape, s1_, s2_, f->tokens);
    });
    run_row_batch(*E_, model_.F, R_, b);
    clock_.done();
  }
  CrossCheckOutcome finish() {
    CrossCheckOutcome x;
    if (n_ == 0) return x;
    x.run = true;
    x.s1 = s1_;
    x.s2 = s2_;
    predict_from_logits(R_);
    MANYADD_INVARIANT(R_.rows == S_.interval_rows && S_.intervals.size() == R_.rows.size(),
                      "the cross-check rows of the two engines differ");
    x.rows = R_.rows.size();
    for (std::size_t i = 0; i < R_.rows.size(); ++i) {
      bool ok = R_.pred[i] == S_.pred[std::size_t(R_.rows[i] - S_.first)];
      for (int h = 0; h < 4; ++h) {
        // inside the interval up to the row engine's own rounding (relative 1e-12, see tests)
        const double v = R_.heads[i][std::size_t(h)], tol = 1e-12 * (1 + std::abs(v));
        const Interval& iv = S_.intervals[i][std::size_t(h)];
        if (v < iv.lo - tol || v > iv.hi + tol) ok = false;
      }
      x.agree += ok;
    }
    x.seconds = clock_.seconds();
    return x;
  }

 private:
  const Plan& plan_;
  const BuiltModel& model_;
  std::shared_future<std::shared_ptr<FirstInstance>> first_;
  EngineResult R_, S_;
  std::int64_t n_;
  StageClock clock_;
  std::once_flag built_;
  std::int64_t s1_ = 0, s2_ = 0;
  std::optional<RowEngine> E_;
};

template <class Tasks>
void run_alone(const Plan& plan, Tasks& t) {
  parallel_for(plan.threads, t.count(), [&](int, std::int64_t i) { t.run(i); }, Schedule::dynamic);
}
}  // namespace

CertifyOutcome certify_offsets(const Plan& plan, const BuiltModel& model) {
  CertifyTasks t(plan, model);
  run_alone(plan, t);
  return t.finish();
}

SamplesOutcome run_samples(const Plan& plan, const BuiltModel& model) {
  SampleTasks t(plan, model);
  run_alone(plan, t);
  return t.finish(true);
}

CrossCheckOutcome cross_check(const Plan& plan, const BuiltModel& model, SamplesOutcome& samples) {
  if (plan.cross_check <= 0 || samples.first_tokens.empty()) return {};
  std::promise<std::shared_ptr<FirstInstance>> given;
  given.set_value(std::make_shared<FirstInstance>(FirstInstance{samples.first_tokens, std::move(samples.first_structured)}));
  samples.first_structured.reset();
  CrossTasks t(plan, model, given.get_future().share());
  run_alone(plan, t);
  return t.finish();
}

int run_plan(const Plan& plan, std::ostream& out) {
  const auto t0 = std::chrono::steady_clock::now();
  const BuiltModel model = build_model_stage(plan);
  nlohmann::json json;
  Outcomes r;
  if (plan.exhaustive) r.exhaustive = run_exhaustive(plan, model);
  if (!plan.dump.empty()) dump_instance(plan, model, out, json);
  run_pooled(plan, model, r);
  r.seconds = seconds_since(t0);
  return report_outcomes(plan, model, r, json, out);
}

void run_pooled(const Plan& plan, const BuiltModel& model, Outcomes& r) {
  // tasks are taken in this order, so the cross-check's batches come after every sample job has
  // started (and wait, if need be, for the first one to end)
  CertifyTasks cert(plan, model);
  SampleTasks samples(plan, model);
  CrossTasks cross(plan, model, samples.first());
  const std::int64_t nc = cert.count(), ns = samples.count(), nx = cross.count();
  parallel_for(
      plan.threads, nc + ns + nx,
      [&](int, std::int64_t i) {
        if (i < nc) cert.run(i);
        else if (i < nc + ns) samples.run(i - nc);
        else cross.run(i - nc - ns);
      },
      Schedule::dynamic);
  r.certificate = cert.finish();
  r.samples = samples.finish(false);
  r.cross_check = cross.finish();
}

}  // namespace manyadd
