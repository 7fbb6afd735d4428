// Structured O(N) engine. In the constructed model every attention score depends only on position
// IDs: a key either matches the query's target IDs (score = lambda P_h, tied with BOS) or scores at
// least 2 lambda lower (Eq. 4). So each head's output at a query follows from running per-ID
// aggregates (matched count, matched value sum), and the whole forward pass is O(N).
//   limit mode:  lambda -> infinity, each head averages uniformly over BOS + matched keys.
//   finite mode: the unmatched keys' total weight is at most u e^{-2 lambda} (u = their count), so
//                each head output is enclosed in an interval (see head_interval).
// The engine checks, when it is built, that the model has exactly the structure it relies on; it
// handles undersized hypercubes (IDs that alias modulo 2^P) exactly as the dense engine does.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "manyadd/model.hpp"

namespace manyadd {

// Per response query and head: the keys with the top score.
struct HeadMatch {
  std::int64_t x = 1;     // matched keys, BOS included
  std::int64_t u = 0;     // unmatched keys (all others at or before the query)
  std::int64_t vsum = 0;  // summed value of the matched keys (heads 1-2: 3 NUM; heads 3-4: 1 for BOS)
  std::int64_t usum = 0;  // summed value of the unmatched keys
  // Heads 1-2 only: which real ID pairs the matched non-BOS keys hold (for the certificate's
  // structure check): the number of distinct pairs with keys, the last such pair (as offsets
  // p1 - s1, p2 - s2), and whether all matched keys are separators (NUM = 0 whatever the digits).
  int pairs = 0;
  std::int32_t pair_t = -1, pair_j = -1;
  bool only_separators = true;
};

struct QueryMatch {
  std::int64_t j = 0;  // 0-based query index
  std::array<HeadMatch, 4> h;
};

// The digit-independent part of the stream: IDs, code classes, aggregates.
class StructuredStream {
 public:
  StructuredStream(const Shape& shape, std::int64_t s1, std::int64_t s2, int P1, int P2);
  // Streams over all N positions in order; calls visit(match) for every response position
  // (index >= shape.eq_index()). `tokens` may be null: then values are all taken as 0 (the
  // certificate's structure pass needs only counts and pairs).
  void run(const std::uint8_t* tokens, const std::function<void(const QueryMatch&)>& visit) const;
  // Estimated peak memory of run(), in bytes (the aggregate tables).
  static double estimate_bytes(const Shape& shape);
  const Shape& shape() const { return shape_; }

 private:
  Shape shape_;
  std::int64_t s1_, s2_;
  int P1_, P2_;
  // CSR lists: for each hypercube code c, the real IDs (as offsets from s) with that code.
  std::vector<std::int32_t> l1_start_, l1_ids_;    // level 1: code(p1) == c
  std::vector<std::int32_t> l2_start_, l2_ids_;    // level 2: code(p2) == c
  std::vector<std::int32_t> l2n_start_, l2n_ids_;  // level 2: code(p2 + 1) == c
};

// The feed-forward layer and readout compiled for evaluation at one token from its 7 input
// dimensions (NUM .. PRE_EOS); hidden units that read the same linear form share its evaluation.
// Building it checks the structure the structured engine and the certificate rely on.
struct CompiledFFN {
  struct Group {
    std::array<double, 7> w{};           // the shared linear form over NUM .. PRE_EOS
    std::vector<int> units;              // hidden units reading it
  };
  std::vector<Group> groups;
  std::vector<double> b1;                // (H)
  std::vector<std::array<double, kVocab>> C;  // (H) rows: Wout W2 column u
  std::array<double, kVocab> c0{};       // Wout b2
  static CompiledFFN build(const ConstructedModel& M);  // throws InputError on other structures
  std::array<double, kVocab> logits(const std::array<double, 7>& y) const;
};

// Interval of a head output with finite lambda: matched keys share the top weight 1, each of the
// u unmatched keys has weight in [0, eps] with eps >= e^{-2 lambda}, and values are >= 0:
//   out in [ vsum / (x + u eps),  (vsum + usum eps) / x ].
struct Interval {
  double lo = 0, hi = 0;
};
Interval head_interval(const HeadMatch& m, double eps);

struct StructuredResult {
  std::vector<std::uint8_t> pred;          // prediction at each response position (index - eq_index)
  std::vector<std::array<double, 4>> out;  // limit-mode head outputs per response position (if kept)
  std::vector<std::array<Interval, 4>> iv; // finite-mode intervals per response position (if kept)
  std::int64_t first_mismatch = -1;        // 0-based query index of the first wrong prediction
  double min_margin = 0;                   // over response positions, limit mode
};

struct StructuredOptions {
  bool keep_outputs = false;
  bool finite = false;  // also compute the finite-lambda intervals
};

// The forward pass over a teacher-forced sequence, O(N).
StructuredResult structured_forward(const ConstructedModel& M, const CompiledFFN& F, const std::vector<std::uint8_t>& tokens,
                                    const Shape& shape, std::int64_t s1, std::int64_t s2, const StructuredOptions& opt = {});

// The exact finite-lambda softmax of one query row over all its keys, in double, O(N): the
// independent check of the structured engine at full size. Scores are built from the model's Q/K
// blocks applied to hypercube vectors (score = level-1 part + level-2 part + BOS part), weights are
// exp(score - top) with top = the BOS score. Returns the 4 head outputs and the logits.
struct RowResult {
  std::array<double, 4> out{};
  std::array<double, kVocab> logits{};
};
class RowEngine {
 public:
  // Keeps a reference to the model; the tokens are copied as per-position values.
  RowEngine(const ConstructedModel& M, const Shape& shape, std::int64_t s1, std::int64_t s2,
            const std::vector<std::uint8_t>& tokens);
  RowResult row(std::int64_t j, const CompiledFFN& F) const;

 private:
  const ConstructedModel& M_;
  Shape shape_;
  std::int64_t s1_, s2_;
  std::vector<std::uint8_t> tokens_;
  std::vector<double> num_;  // NUM of every position (0 for non-digits)
};

// Calls f(k, p1, p2) for k = 0 .. N-1 in order, with the IDs of position_id_at, in O(1) each.
template <class F>
void for_each_id(const Shape& s, std::int64_t s1, std::int64_t s2, F&& f) {
  std::int64_t k = 0;
  f(k++, std::int64_t(0), std::int64_t(0));
  for (std::int64_t i = 1; i <= s.m; ++i) {
    for (std::int64_t r = 0; r < s.l; ++r) f(k++, s1 + s.l - r, s2 + i - 1);
    f(k++, s1, i < s.m ? s2 + i - 1 : s2);
  }
  for (std::int64_t j = 0; j <= s.m; ++j) {
    if (j > 0) f(k++, s1, s2 + j);
    for (std::int64_t t = 1; t <= s.l; ++t) f(k++, s1 + t, s2 + j);
  }
}

}  // namespace manyadd
