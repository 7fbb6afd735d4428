// The machine-checked argument for part 1 of the whole claim: an SMT solver (z3, linear integer
// arithmetic) proves that for every shape (l, m), offset pair (s1, s2), response query and causal
// key in range, each head's top-scoring keys are exactly BOS plus its closed-form families
// (closed_form.hpp), that every other key scores at least 2 lambda_h lower, and that the families
// are causal, valid and disjoint (so the matched counts are sums of range lengths). The scores come
// from the built model's Q and K (score_structure), with the hypercube inner product written out
// bit by bit; the token layout is closed::layout(). Non-vacuity: satisfiable witnesses (the domain
// is not empty, every family occurs where the evaluator says it does — the wraps exactly where the
// range holds l = 2^P1 - 1), and deliberately wrong key lists and wrong models that the solver must
// refute.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "manyadd/closed_form.hpp"
#include "manyadd/model.hpp"

namespace manyadd {

// score / lambda_h of a response query against a key, read off the head's Q and K:
//   sum over position blocks (query block a, key block b) of pos[a][b] <x_a(query), x_b(key)>
//   + ones_bos [key is BOS] + ones_ones,
// blocks 0..3 = POS_1, POS_1_NEXT, POS_2, POS_2_NEXT. Throws InputError when Q^T K / lambda_h has
// any other form (non-integer or non-identity blocks, NUM read, a position block against a constant).
struct ScoreStructure {
  std::array<std::array<int, 4>, 4> pos{};
  int ones_bos = 0, ones_ones = 0;
};
ScoreStructure score_structure(const ConstructedModel& M, int head);

struct SmtRange {
  int P1 = 0, P2 = 0;
  std::int64_t l_lo = 1, l_hi = 0, m_lo = 1, m_hi = 0;  // offsets: s1 in [1, 2^P1 - l], s2 in [1, 2^P2 - m]
};

struct SmtCheck {
  std::string name;
  std::string role;     // "proof" (must be unsat), "witness" (sat or unsat as expected), "mutant" (must be refuted)
  bool expect_sat = false;
  std::string result;   // "sat", "unsat", "unknown"
  bool ok = false;
  std::string model;    // the assignment found (a counterexample to a proof, a witness, a refutation)
  double seconds = 0;
};

struct SmtReport {
  bool proven = false;       // every proof obligation unsat
  bool non_vacuous = false;  // every witness as expected and every mutant refuted
  std::vector<SmtCheck> checks;
  int proofs = 0, witnesses = 0, mutants = 0;
  double seconds = 0;
  std::string solver;        // "z3 4.8.12"
};

struct SmtOptions {
  bool witnesses = true;
  bool mutants = true;
  int threads = 2;
  unsigned timeout_ms = 120000;  // per query; "unknown" fails the check
};

SmtReport prove_closed_form(const ConstructedModel& M, const SmtRange& range,
                            const std::vector<closed::Family>& fams = closed::families(), const SmtOptions& opt = {});

}  // namespace manyadd
