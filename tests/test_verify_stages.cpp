// The pieces of verify_construction: judge() on every engine's result for the same instance, a
// worker's exception reaching the error policy (exit 3 with the message, never an abort), and
// --help showing the defaults the code uses.
#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "manyadd/core/error.hpp"
#include "manyadd/verify/engines.hpp"
#include "manyadd/verify/plan.hpp"
#include "manyadd/verify/stages.hpp"
#include "manyadd/verify_cli.hpp"

using namespace manyadd;

namespace {

struct Case {
  Shape shape;
  ConstructedModel M;
  CompiledFFN F;
  std::vector<std::uint8_t> seq;
  std::string reference;
};

Case make_case(const Shape& shape, const Dims& dims, const Problem& p) {
  Case c{shape, build_model(dims.P1, dims.P2, default_lambda(shape.N())), {}, build_sequence(p, shape),
         reference_sum(p).str()};
  c.F = CompiledFFN::build(c.M);
  return c;
}

// Every engine of the project on one instance at offsets (1, 1), as EngineResults.
std::vector<EngineResult> every_engine(const Case& c) {
  std::vector<std::int64_t> all_rows;
  for (std::int64_t j = c.shape.eq_index(); j < c.shape.N(); ++j) all_rows.push_back(j);
  std::vector<EngineResult> rs;
  rs.push_back(run_dense(c.M, c.seq, c.shape, 1, 1, Precision::float64));
  rs.push_back(run_dense(c.M, c.seq, c.shape, 1, 1, Precision::float32));
  rs.push_back(run_structured(c.M, c.F, c.seq, c.shape, 1, 1));             // limit mode
  rs.push_back(run_structured(c.M, c.F, c.seq, c.shape, 1, 1, &all_rows));  // finite mode (intervals)
  rs.push_back(run_cuda(c.M, c.seq, c.shape, 1, 1, CudaRun::cpu_twin));
  rs.push_back(run_rows(RowEngine(c.M, c.shape, 1, 1, c.seq), c.F, c.shape, all_rows, 2));
  return rs;
}

}  // namespace

// A verified instance: every engine's verdict is "right", with the reference as the answer and the
// same predictions; margins are positive where the engine gives them.
TEST(Judge, EveryEngineAgreesOnAVerifiedInstance) {
  const Shape s = Shape::make(3, 4);
  Rng rng(3);
  const Case c = make_case(s, dims_ours(s), sample_TA(rng, 3, 4));
  const auto rs = every_engine(c);
  for (const auto& r : rs) {
    const Verdict v = judge(r, c.seq, c.shape, c.reference);
    EXPECT_TRUE(v.ok) << r.engine;
    EXPECT_FALSE(v.mismatch.has_value()) << r.engine;
    EXPECT_EQ(v.answer, c.reference) << r.engine;
    EXPECT_GT(v.min_margin, 0.0) << r.engine;
    EXPECT_EQ(r.pred, rs.front().pred) << r.engine;
  }
  // A wrong reference fails every engine through the answer alone.
  for (const auto& r : rs) EXPECT_FALSE(judge(r, c.seq, c.shape, "1").ok) << r.engine;
  // Engines that give no margins say so (+infinity), never a made-up number.
  EXPECT_TRUE(std::isinf(judge(rs[4], c.seq, c.shape).min_margin));
}

// The paper's dimension rule at n = 2, m = 3 fails on every instance: token 16 (B_0's last digit)
// predicts '0' where '>' comes. Every engine's verdict names the same position, token and rival.
TEST(Judge, EveryEngineFindsTheSameMismatch) {
  const Shape s = Shape::make(2, 3);
  const Case c = make_case(s, dims_paper(s), parse_problem("0+0+0"));
  for (const auto& r : every_engine(c)) {
    const Verdict v = judge(r, c.seq, c.shape, c.reference);
    EXPECT_FALSE(v.ok) << r.engine;
    ASSERT_TRUE(v.mismatch.has_value()) << r.engine;
    EXPECT_EQ(v.mismatch->position, 16) << r.engine;
    EXPECT_EQ(v.mismatch->expected, int(kArrow)) << r.engine;
    EXPECT_EQ(v.mismatch->got, 0) << r.engine;
    if (r.logits.size() > 0 || r.margins) {
      EXPECT_LT(v.min_margin, 0.0) << r.engine;
    }
  }
}

// check_instance is judge() on a dense logit matrix.
TEST(Judge, CheckInstanceIsJudgeOnDenseLogits) {
  const Shape s = Shape::make(2, 3);
  Rng rng(4);
  const Case c = make_case(s, dims_ours(s), sample_TA(rng, 2, 3));
  const auto R = dense_forward<double>(c.M, embed(c.M, c.seq, position_ids(s, 1, 1)));
  const Verdict a = check_instance(c.seq, s, R.logits);
  const Verdict b = judge(run_dense(c.M, c.seq, s, 1, 1, Precision::float64), c.seq, s);
  EXPECT_EQ(a.ok, b.ok);
  EXPECT_EQ(a.answer, b.answer);
  EXPECT_EQ(a.min_margin, b.min_margin);
}

// An exception inside a parallel worker (here an engine that fails, as a lost device would) reaches
// the error policy: exit 3 with the message, and the process goes on.
TEST(Stages, WorkerExceptionIsExitThree) {
  Options o;
  const char* argv[] = {"verify_construction", "--n", "3", "--m", "3", "--samples", "6", "--threads", "2", "--no-certify"};
  std::ostringstream out, err;
  ASSERT_EQ(parse_options(10, argv, o, out, err), -1) << err.str();
  Plan plan = make_plan(o);
  plan.engines.push_back({"failing", [](const BuiltModel&, const Shape&, const Instance&) -> EngineResult {
                            throw std::runtime_error("device lost");
                          }});
  const int rc = run_tool("verify_construction", err, [&] { return run_plan(plan, out); });
  EXPECT_EQ(rc, 3);
  EXPECT_NE(err.str().find("verify_construction: internal error: device lost"), std::string::npos) << err.str();
}

// --help states the defaults the code starts from, and the exit codes.
TEST(Options, HelpShowsTheDefaultsInUse) {
  const char* argv[] = {"verify_construction", "--help"};
  std::ostringstream out, err;
  ASSERT_EQ(verify_construction_main(2, argv, out, err), 0);
  const std::string help = out.str();
  const Options d;
  auto line_of = [&](const std::string& opt) {
    const auto at = help.find("    " + opt + " ");
    return at == std::string::npos ? std::string() : help.substr(at, help.find('\n', at) - at);
  };
  EXPECT_NE(line_of("--samples").find(fmt::format("(default {})", d.samples)), std::string::npos) << help;
  EXPECT_NE(line_of("--cross-check").find(fmt::format("(default {})", d.cross_check)), std::string::npos) << help;
  EXPECT_NE(line_of("--threads").find(fmt::format("(default {})", d.threads)), std::string::npos) << help;
  EXPECT_NE(line_of("--seed").find(fmt::format("(default {})", d.seed)), std::string::npos) << help;
  EXPECT_NE(line_of("--engine").find(fmt::format("(default {})", d.engine)), std::string::npos) << help;
  EXPECT_NE(line_of("--offsets").find(fmt::format("(default {})", d.offsets)), std::string::npos) << help;
  EXPECT_NE(help.find(fmt::format("{:.0f} s for --exhaustive", kExhaustiveSecondsLimit)), std::string::npos) << help;
  EXPECT_NE(help.find("Exit codes: 0"), std::string::npos) << help;
}

namespace {
Plan plan_of(std::vector<const char*> args) {
  args.insert(args.begin(), "verify_construction");
  Options o;
  std::ostringstream out, err;
  EXPECT_EQ(parse_options(int(args.size()), args.data(), o, out, err), -1) << err.str();
  Plan plan = make_plan(o);
  plan.progress = quiet_progress();
  return plan;
}

void expect_same(const Outcomes& a, const CertifyOutcome& c, const SamplesOutcome& s, const CrossCheckOutcome& x) {
  EXPECT_EQ(a.certificate.run, c.run);
  EXPECT_EQ(a.certificate.proven, c.proven);
  EXPECT_EQ(a.certificate.failed, c.failed);
  EXPECT_EQ(a.certificate.counterexample.has_value(), c.counterexample.has_value());
  ASSERT_EQ(a.certificate.results.size(), c.results.size());
  for (std::size_t i = 0; i < c.results.size(); ++i) EXPECT_EQ(a.certificate.results[i].proven, c.results[i].proven);
  EXPECT_EQ(a.samples.checked, s.checked);
  EXPECT_EQ(a.samples.exact, s.exact);
  EXPECT_EQ(a.samples.agree, s.agree);
  EXPECT_EQ(a.samples.min_margin, s.min_margin);
  ASSERT_EQ(a.samples.first.has_value(), s.first.has_value());
  if (s.first) {
    EXPECT_EQ(a.samples.first->problem.to_string(), s.first->problem.to_string());
    EXPECT_EQ(a.samples.first->s1, s.first->s1);
    EXPECT_EQ(a.samples.first->s2, s.first->s2);
    EXPECT_EQ(a.samples.first->position, s.first->position);
    EXPECT_EQ(a.samples.first->confirmed_by, s.first->confirmed_by);
  }
  EXPECT_EQ(a.cross_check.run, x.run);
  EXPECT_EQ(a.cross_check.rows, x.rows);
  EXPECT_EQ(a.cross_check.agree, x.agree);
  EXPECT_EQ(a.cross_check.s1, x.s1);
  EXPECT_EQ(a.cross_check.s2, x.s2);
}
}  // namespace

// run_plan's one pool gives what the stages give one after the other, at any thread count: a
// verified shape over several offset pairs; a model that fails (lambda too small: the certificate
// fails, every sample fails in the dense engines, the first failure by draw order, 2 of 16
// cross-check rows agree); every engine without a certificate.
TEST(Stages, PooledEqualsOneStageAfterAnother) {
  for (const char* threads : {"1", "3"}) {
    for (auto args : {std::vector<const char*>{"--n", "4", "--m", "5", "--offsets", "random:5", "--samples", "7",
                                               "--cross-check", "40", "--seed", "9", "--threads", threads},
                      std::vector<const char*>{"--n", "3", "--m", "6", "--lambda", "0.9", "--engine", "all",
                                               "--samples", "9", "--cross-check", "20", "--threads", threads},
                      std::vector<const char*>{"--n", "3", "--m", "4", "--engine", "all", "--samples", "5",
                                               "--no-certify", "--threads", threads}}) {
      const Plan plan = plan_of(args);
      const BuiltModel model = build_model_stage(plan);
      Outcomes pooled;
      run_pooled(plan, model, pooled);
      const CertifyOutcome c = certify_offsets(plan, model);
      SamplesOutcome s = run_samples(plan, model);
      const CrossCheckOutcome x = cross_check(plan, model, s);
      SCOPED_TRACE(fmt::format("threads {} args {} {} ...", threads, args[0], args[1]));
      expect_same(pooled, c, s, x);
    }
  }
}

// An engine that throws (in the first sample's job too), with the cross-check waiting on that job: the
// pool ends with the exception (no worker waits forever), at one thread and at several.
TEST(Stages, PooledFirstJobFailureReachesTheCaller) {
  for (const char* threads : {"1", "4"}) {
    Plan plan = plan_of({"--n", "3", "--m", "3", "--samples", "2", "--no-certify", "--threads", threads});
    plan.engines.insert(plan.engines.begin(), {"failing", [](const BuiltModel&, const Shape&, const Instance&) -> EngineResult {
                                                 throw std::runtime_error("device lost");
                                               }});
    const BuiltModel model = build_model_stage(plan);
    Outcomes r;
    EXPECT_THROW(run_pooled(plan, model, r), std::runtime_error);
  }
}

// The row engine's 16-bit digit sums are emptied into 32-bit ones every 3640 blocks: a shape with
// more blocks (m = 3700) crosses a flush, and every cross-check row (all after the operands, so
// each sums every operand block) still lies inside the structured engine's interval.
TEST(Stages, CrossCheckPastTheSixteenBitFlush) {
  const Plan plan = plan_of({"--n", "1", "--m", "3700", "--samples", "1", "--cross-check", "48", "--no-certify"});
  const BuiltModel model = build_model_stage(plan);
  Outcomes r;
  run_pooled(plan, model, r);
  EXPECT_TRUE(r.cross_check.run);
  EXPECT_EQ(r.cross_check.rows, 48u);
  EXPECT_EQ(r.cross_check.agree, r.cross_check.rows);
}
