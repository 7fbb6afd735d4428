// The whole claim and what it shares with the per-shape path: one whole-claim run at P1 = P2 = P
// (part 1 by z3 with its non-vacuity checks, the class union, parts 2-3 at the largest N, the lambda
// windows, the failing ranges' counterexamples, the per-shape samples), its parts alone, the
// certificate of every offset pair of one shape with and without the shared structure pass, and
// one exact cross-check row. Compare ratios within one run (the box is shared).
#include <benchmark/benchmark.h>

#include "manyadd/certificate.hpp"
#include "manyadd/closed_form_smt.hpp"
#include "manyadd/structured.hpp"
#include "manyadd/whole_claim.hpp"

using namespace manyadd;

// verify_construction --whole-claim --p1 P --p2 P, as the CLI runs it (2 threads).
static void BM_WholeClaim(benchmark::State& st) {
  WholeClaimOptions o;
  o.P1 = o.P2 = int(st.range(0));
  WholeClaimResult r;
  for (auto _ : st) {
    r = whole_claim(o);
    benchmark::DoNotOptimize(r.proven);
  }
  st.counters["proven"] = r.proven;
  st.counters["classes"] = double(r.classes);
  st.counters["pairs"] = r.pairs_covered_approx;
  st.counters["part1_s"] = r.seconds_part1;
  st.counters["part23_s"] = r.seconds_part23;
  st.counters["windows_s"] = r.seconds_windows;
  st.counters["confirm_s"] = r.seconds_confirm;
  st.counters["samples_s"] = r.seconds_samples;
}
BENCHMARK(BM_WholeClaim)->Arg(6)->Arg(10)->Arg(14)->Unit(benchmark::kSecond)->Iterations(1)->Repetitions(3)->UseRealTime();

// Part 1 alone: the solver's 16 obligations, 22 witnesses and ~100 refutations.
static void BM_Part1Smt(benchmark::State& st) {
  const int P = int(st.range(0));
  const auto M = build_model(P, P, 10.0);
  const std::int64_t C = std::int64_t(1) << P;
  for (auto _ : st) benchmark::DoNotOptimize(prove_closed_form(M, {P, P, 1, C - 1, 1, C - 1}).proven);
}
BENCHMARK(BM_Part1Smt)->Arg(10)->Arg(14)->Arg(20)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

// Parts 2-3 alone at the claimed range's largest N (exact tables included).
static void BM_Parts23(benchmark::State& st) {
  const int P = int(st.range(0));
  const ShapeRange r{1, (std::int64_t(1) << P) - 2, 1, (std::int64_t(1) << P) - 1};
  const auto M = build_model(P, P, default_lambda(max_tokens(r)));
  for (auto _ : st) {
    ClassCertifier C(M, max_tokens(r));
    benchmark::DoNotOptimize(C.check(class_groups(r, P, P)).ok[2]);
  }
}
BENCHMARK(BM_Parts23)->Arg(10)->Arg(20)->Arg(30)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

// The certificate at every offset pair of n = m = 1000 (480 pairs), one structure pass per wrap
// case (arg 1) or per pair (arg 0); tables built outside the loop.
static void BM_CertificateAllOffsets(benchmark::State& st) {
  const auto s = Shape::make(1000, 1000);
  const auto dm = dims_ours(s);
  const auto M = build_model(dm.P1, dm.P2, default_lambda(s.N()));
  certify(M, s, 1, 1, CertOptions{true, false});  // the process-wide table cache
  for (auto _ : st) {
    Certifier C(M, s, CertOptions{true, false, st.range(0) == 1});
    bool all = true;
    for (std::int64_t s1 = 1; s1 <= max_s1(s, dm.P1); ++s1)
      for (std::int64_t s2 = 1; s2 <= max_s2(s, dm.P2); ++s2) all = all && C.run(s1, s2).proven;
    benchmark::DoNotOptimize(all);
  }
}
BENCHMARK(BM_CertificateAllOffsets)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

// One exact cross-check row (the row engine) at n = m = arg.
static void BM_RowEngineRow(benchmark::State& st) {
  const int nm = int(st.range(0));
  const auto s = Shape::make(nm, nm);
  const auto dm = dims_ours(s);
  const auto M = build_model(dm.P1, dm.P2, default_lambda(s.N()));
  const auto F = CompiledFFN::build(M);
  Rng rng(1);
  const RowEngine E(M, s, 1, 1, build_sequence(sample_TA(rng, nm, nm), s));
  std::int64_t j = s.N() - 2;
  for (auto _ : st) benchmark::DoNotOptimize(E.row(j, F).logits[0]);
  st.counters["N"] = double(s.N());
}
BENCHMARK(BM_RowEngineRow)->Arg(1000)->Arg(3000)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
