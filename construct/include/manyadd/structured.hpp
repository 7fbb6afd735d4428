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
#include <algorithm>
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

// Hypercube code of a position ID: v_p = v_{code + 1} (the wrap rule of hypercube()).
inline std::int64_t stream_code(std::int64_t p, int P) { return (p - 1) & ((std::int64_t(1) << P) - 1); }

// The digit-independent part of the stream: IDs, code classes, aggregates.
class StructuredStream {
 public:
  StructuredStream(const Shape& shape, std::int64_t s1, std::int64_t s2, int P1, int P2);
  // Streams over all N positions in order; calls visit(match) for every response position
  // (index >= shape.eq_index()). `tokens` may be null: then values are all taken as 0 (the
  // certificate's structure pass needs only counts and pairs). With kPairs false, the heads' pair
  // fields (pairs, pair_t, pair_j, only_separators) are not kept up to date: all a forward pass needs.
  template <bool kPairs = true, class Visit>
  void run(const std::uint8_t* tokens, Visit&& visit) const;
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
  // When no code holds two real IDs (no aliasing), each query's target is at most one real ID per
  // level: the ID offsets a query at level-1 offset o / level-2 offset j looks for, -1 for none.
  bool single_ = false;
  std::vector<std::int32_t> same1_, next1_;  // code(s1 + a) == code(s1 + o), == code(s1 + o + 1)
  std::vector<std::int32_t> same2_, prev2_;  // code(s2 + b) == code(s2 + j), code(s2 + b + 1) == code(s2 + j)
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
  std::vector<int> order;                      // units in evaluation order (grouped)
  std::vector<int> cs_start, cs_tok;           // per unit in `order`: its nonzero readout coefficients
  std::vector<double> cs_coef;
  std::array<double, kVocab> c0{};       // Wout b2
  static CompiledFFN build(const ConstructedModel& M);  // throws InputError on other structures
  std::array<double, kVocab> logits(const std::array<double, 7>& y) const;
  // Adds the contribution of the groups that read (digit_side) or do not read NUM, PRE_SUM,
  // PRE_CARRY; logits(y) = c0 + both parts. Lets the structured engine cache the digit side.
  void add_groups(const std::array<double, 7>& y, bool digit_side, std::array<double, kVocab>& out) const;
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
  std::vector<std::array<Interval, 4>> iv; // finite-mode intervals per response position (if kept), or
                                           // per entry of StructuredOptions::rows when that is given
  std::int64_t first_mismatch = -1;        // 0-based query index of the first wrong prediction
  double min_margin = 0;                   // over response positions, limit mode
};

struct StructuredOptions {
  bool keep_outputs = false;
  bool finite = false;  // also compute the finite-lambda intervals
  // When non-empty (sorted 0-based query indices >= eq_index), keep intervals only for these rows:
  // O(rows) memory instead of O(N) at full size.
  std::vector<std::int64_t> rows;
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
  // Keeps a reference to the model; the tokens are copied (N bytes), and the digit sums of the
  // block pairs that share a level-2 ID are kept (N/2 bytes).
  RowEngine(const ConstructedModel& M, const Shape& shape, std::int64_t s1, std::int64_t s2,
            const std::vector<std::uint8_t>& tokens);
  RowResult row(std::int64_t j, const CompiledFFN& F) const;
  // Several rows with one pass over the digits (the same results as row() one by one, bit for bit):
  // the cross-check's unit of work, since a row alone reads N/2 bytes from memory.
  std::vector<RowResult> rows(const std::vector<std::int64_t>& js, const CompiledFFN& F) const;

 private:
  const ConstructedModel& M_;
  Shape shape_;
  std::int64_t s1_, s2_;
  std::vector<std::uint8_t> tokens_;    // NUM of a digit token is the token itself
  std::vector<std::uint8_t> pair_sum_;  // (m, l): A_{b+1} + B_b digits by significance
  // Position parts of a residual column per real ID: level 1 (l+1, d) and level 2 (m+1, d).
  Eigen::MatrixXd pe1_, pe2_;
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

template <bool kPairs, class Visit>
void StructuredStream::run(const std::uint8_t* tokens, Visit&& visit) const {
  // The pair table is indexed (p2 - s2) * W + (p1 - s1): consecutive tokens of a number share p2
  // and step p1 by one, so both the keys inserted and the cells queried walk it sequentially.
  const std::int64_t W = shape_.l + 1;
  // Per real ID pair, the keys seen so far: at most 2 share a pair (A_{i+1} and B_i digits of one
  // significance; '+' after A_{i+1} and the separator before B_i), so bytes suffice: their count in
  // the low byte and their value sum (<= 54) in the high byte of one 16-bit cell (one load a lookup).
  std::vector<std::uint16_t> cv(std::size_t((shape_.m + 1) * W), 0);
  std::vector<std::int64_t> cnt1(std::size_t(shape_.l + 1), 0);
  std::int64_t prefix_value = 0;
  const std::int64_t eq = shape_.eq_index();
  QueryMatch q;

  auto pairs = [&](const std::vector<std::int32_t>& s1v, const std::vector<std::int32_t>& i1, std::int64_t c1,
                   const std::vector<std::int32_t>& s2v, const std::vector<std::int32_t>& i2, std::int64_t c2,
                   HeadMatch& h) {
    h.x = 1;
    h.vsum = 0;
    h.pairs = 0;
    h.pair_t = h.pair_j = -1;
    h.only_separators = true;
    for (std::int32_t a = s1v[std::size_t(c1)]; a < s1v[std::size_t(c1 + 1)]; ++a)
      for (std::int32_t b = s2v[std::size_t(c2)]; b < s2v[std::size_t(c2 + 1)]; ++b) {
        const std::size_t cell = std::size_t(std::int64_t(i2[std::size_t(b)]) * W + i1[std::size_t(a)]);
        if (!(cv[cell] & 0xff)) continue;
        h.x += cv[cell] & 0xff;
        h.vsum += cv[cell] >> 8;
        ++h.pairs;
        h.pair_t = i1[std::size_t(a)];
        h.pair_j = i2[std::size_t(b)];
        if (h.pair_t != 0) h.only_separators = false;  // level-1 offset 0 = separators only
      }
  };

  // the same for at most one matching ID pair (single_): one cell, no list walks
  auto pair1 = [&](std::int32_t a, std::int32_t b, HeadMatch& h) {
    h.x = 1;
    h.vsum = 0;
    if constexpr (kPairs) {
      h.pairs = 0;
      h.pair_t = h.pair_j = -1;
      h.only_separators = true;
    }
    if (a < 0 || b < 0) return;
    const std::size_t cell = std::size_t(std::int64_t(b) * W + a);
    const std::uint16_t c = cv[cell];
    h.x += c & 0xff;
    h.vsum += c >> 8;
    if constexpr (kPairs)
      if (c & 0xff) {
        h.pairs = 1;
        h.pair_t = a;
        h.pair_j = b;
        h.only_separators = a == 0;
      }
  };

  for_each_id(shape_, s1_, s2_, [&](std::int64_t k, std::int64_t p1, std::int64_t p2) {
    const int tok = tokens ? tokens[k] : 0;
    const int v = tok < 10 ? 3 * tok : 0;  // V1 = V2 = 3 e_NUM (Eqs. 9, 13)
    if (k > 0) {  // insert key k (causal: a query sees itself)
      const std::size_t cell = std::size_t((p2 - s2_) * W + (p1 - s1_));
      cv[cell] = std::uint16_t(cv[cell] + 1 + (v << 8));
      ++cnt1[std::size_t(p1 - s1_)];
      prefix_value += v;
    }
    if (k < eq) return;
    q.j = k;
    if (single_) {
      const std::size_t o = std::size_t(p1 - s1_), j = std::size_t(p2 - s2_);
      pair1(next1_[o], prev2_[j], q.h[0]);  // head 1 (Eqs. 7-8)
      pair1(same1_[o], prev2_[j], q.h[1]);  // head 2 (Eqs. 11-12)
      pair1(same1_[o], same2_[j], q.h[3]);  // head 4 (Eqs. 19-20)
      q.h[2].x = 1 + (next1_[o] >= 0 ? cnt1[std::size_t(next1_[o])] : 0);  // head 3 (Eqs. 15-16)
    } else {
    const std::int64_t c1 = stream_code(p1, P1_), c1n = stream_code(p1 + 1, P1_), c2 = stream_code(p2, P2_);
    // head 1: key (POS_1, POS_2_NEXT) = query (POS_1_NEXT, POS_2)   (Eqs. 7-8)
    pairs(l1_start_, l1_ids_, c1n, l2n_start_, l2n_ids_, c2, q.h[0]);
    // head 2: key (POS_1, POS_2_NEXT) = query (POS_1, POS_2)        (Eqs. 11-12)
    pairs(l1_start_, l1_ids_, c1, l2n_start_, l2n_ids_, c2, q.h[1]);
    // head 4: key (POS_1, POS_2) = query (POS_1, POS_2)             (Eqs. 19-20)
    pairs(l1_start_, l1_ids_, c1, l2_start_, l2_ids_, c2, q.h[3]);
    // head 3: key POS_1 = query POS_1_NEXT                           (Eqs. 15-16)
    HeadMatch& h3 = q.h[2];
    h3.x = 1;
    for (std::int32_t a = l1_start_[std::size_t(c1n)]; a < l1_start_[std::size_t(c1n + 1)]; ++a)
      h3.x += cnt1[std::size_t(l1_ids_[std::size_t(a)])];
    }
    for (int h = 0; h < 4; ++h) q.h[std::size_t(h)].u = k + 1 - q.h[std::size_t(h)].x;
    for (int h : {0, 1}) q.h[std::size_t(h)].usum = prefix_value - q.h[std::size_t(h)].vsum;
    // heads 3-4 carry IS_BOS: value 1 on BOS (always matched), 0 elsewhere
    for (int h : {2, 3}) {
      q.h[std::size_t(h)].vsum = 1;
      q.h[std::size_t(h)].usum = 0;
    }
    visit(q);
  });
}


}  // namespace manyadd
