// verify_construction's stages after the plan (verify/plan.hpp), each a function of the plan and of
// what the earlier stages produced; report() turns their outcomes into the printed summary, the
// JSON report and the exit code.
//   build_model_stage  the model (and --export)
//   certify_offsets    the certificate at every offset pair; on failure a concrete counterexample
//   run_exhaustive     --exhaustive: every instance at every offset pair
//   dump_instance      --dump: the residual stream or the attention of the --problem instance
//   run_samples        random instances through every engine of the plan, judged against the reference
//   cross_check        rows of the first sample by the exact row engine against the structured intervals
//   dims_table         --dims-table (its own mode)
//   whole_claim_stage  --whole-claim (its own mode; whole_claim.hpp)
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "manyadd/certificate.hpp"
#include "manyadd/structured.hpp"
#include "manyadd/verify/plan.hpp"

namespace manyadd {

struct BuiltModel {
  ConstructedModel M;
  CompiledFFN F;
};
BuiltModel build_model_stage(const Plan& plan);

// A concrete instance the model gets wrong.
struct Counterexample {
  Problem problem;
  std::int64_t s1 = 0, s2 = 0;
  std::int64_t position = 0;  // 1-based token whose prediction fails; <= 0 when only the answer differs
  int expected = -1, got = -1;
  std::string confirmed_by;   // the engine
};
Counterexample counterexample_from(const Problem& p, std::int64_t s1, std::int64_t s2, const Verdict& v,
                                   const std::string& engine);

nlohmann::json counterexample_json(const Counterexample& c);

// Does the real model (finite lambda, double) get this instance wrong? The dense engine when N <= 4000,
// else the exact row engine at the given positions (the certificate's risky ones).
std::optional<Counterexample> confirm_counterexample(const ConstructedModel& M, const CompiledFFN& F, const Problem& p,
                                                     const Shape& shape, std::int64_t s1, std::int64_t s2,
                                                     const std::vector<std::int64_t>& risky);

// Searches candidates (all nines, all ones, random instances) for one that the dense engine (N <= 4000)
// or the row engine at `risky` positions confirms, then shrinks it (small N only).
std::optional<Counterexample> find_counterexample(const ConstructedModel& M, const CompiledFFN& F, const Shape& shape,
                                                  std::int64_t s1, std::int64_t s2,
                                                  const std::vector<std::int64_t>& risky, std::uint64_t seed);

struct CertifyOutcome {
  bool run = false;
  bool proven = false;
  std::vector<CertResult> results;  // per offset pair of the plan
  std::optional<std::size_t> failed;  // index of the first offset pair that failed
  std::optional<Counterexample> counterexample;
  double seconds = 0;
};
CertifyOutcome certify_offsets(const Plan& plan, const BuiltModel& model);

struct ExhaustiveOutcome {
  bool run = false;
  std::uint64_t instances = 0, failures = 0;
  std::uint64_t enumerated_pairs = 0, inherited_pairs = 0;  // offset pairs enumerated / inheriting their wrap case's verdict
  std::optional<Counterexample> first;  // the failing instance of the smallest enumeration index (first enumerated pair)
  double seconds = 0;
};
ExhaustiveOutcome run_exhaustive(const Plan& plan, const BuiltModel& model);

// Prints the dump of the --problem instance at every sample offset pair; the last one goes into
// the report ("residual" or "attention").
void dump_instance(const Plan& plan, const BuiltModel& model, std::ostream& out, nlohmann::json& report);

struct SamplesOutcome {
  std::int64_t checked = 0, exact = 0;
  bool agree = true;
  double min_margin = 0;
  std::optional<Counterexample> first;    // the first failing (instance, offset pair, engine)
  std::vector<std::uint8_t> first_tokens; // the first instance's sequence (for the cross-check)
  std::optional<EngineResult> first_structured;  // its structured result with intervals, when run
};
SamplesOutcome run_samples(const Plan& plan, const BuiltModel& model);

struct CrossCheckOutcome {
  bool run = false;
  std::size_t rows = 0, agree = 0;
  std::int64_t s1 = 0, s2 = 0;
  double seconds = 0;
};
CrossCheckOutcome cross_check(const Plan& plan, const BuiltModel& model, SamplesOutcome& samples);

struct Outcomes {
  CertifyOutcome certificate;
  ExhaustiveOutcome exhaustive;
  SamplesOutcome samples;
  CrossCheckOutcome cross_check;
  double seconds = 0;
};
// Prints the summary, writes --json, returns the exit code (0 verified, 1 failed).
int report_outcomes(const Plan& plan, const BuiltModel& model, const Outcomes& r, nlohmann::json& json,
                    std::ostream& out);

// Every stage of a verification run; returns the exit code.
int run_plan(const Plan& plan, std::ostream& out);
// The certificate, the samples and the cross-check as one pool of --threads workers (run_plan's
// way): the same outcomes as certify_offsets, run_samples and cross_check one after the other, with
// no worker idle while a lone offset pair is certified or the problems are drawn; each stage's
// seconds run from the pool's start to its own last task.
void run_pooled(const Plan& plan, const BuiltModel& model, Outcomes& r);

// --dims-table: prints the table, writes --json; 0 when a proven (P1, P2) was found for every shape.
int dims_table(const DimsTablePlan& plan, std::ostream& out);

// --whole-claim: prints the claim (or the lambda window table), writes --json; 0 when the claimed
// range is proven (the table: always), 1 when it fails.
int whole_claim_stage(const WholeClaimPlan& plan, std::ostream& out);

}  // namespace manyadd
