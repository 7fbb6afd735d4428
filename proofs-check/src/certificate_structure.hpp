// The certificate's Part 1 (certificate.hpp): the classes of response positions of a shape and
// offsets, the structure every margin is computed on. Private to proofs-check/src (certificate.cpp and
// certificate_whole_claim.cpp); the names live in manyadd::cert_detail.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "manyadd/certificate.hpp"
#include "manyadd/structured.hpp"

namespace manyadd::cert_detail {

// ---- Part 1: classes of response positions ---------------------------------------------------
enum Kind { kD2 = 0, kD1, kD0, kZ, kM, kKinds };  // digit query t >= 2, t = 1, separator; B_0; MSD

struct ClassKey {
  int kind, expect;
  std::int64_t x3, x4;
  bool operator<(const ClassKey& o) const {
    return std::tie(kind, expect, x3, x4) < std::tie(o.kind, o.expect, o.x3, o.x4);
  }
};
struct ClassInfo {
  std::int64_t u3 = 0, u4 = 0, first = -1, count = 0;
};
// The most keys (BOS included) head 1 or 2 matches at any query: part 3 needs it where the
// certificate does not pin these heads down (their enclosure grows with the matched count in
// floating point): at the most significant digit, and where they see separators only. From the
// closed form's families (closed::max_matched_keys: 6); the structure pass checks it per shape.
inline std::int64_t head12_keys() {
  static const std::int64_t x = [] {
    const std::int64_t a = closed::max_matched_keys(0), b = closed::max_matched_keys(1);
    if (a < 1 || b < 1) throw std::logic_error("certificate: a head-1/2 family spans several blocks");
    return std::max(a, b);
  }();
  return x;
}

struct Structure {
  std::map<ClassKey, ClassInfo> classes;  // filled from `fast` at the end
  std::int64_t u1 = 0, u2 = 0;  // worst unmatched counts of heads 1-2 over all response positions
  std::int64_t positions = 0;
  std::optional<CertFailure> failure;
};

inline Structure analyze(const Shape& s, std::int64_t s1, std::int64_t s2, int P1, int P2) {
  Structure st;
  std::map<ClassKey, ClassInfo>& fast = st.classes;  // consecutive positions mostly share a class
  ClassInfo* last_c = nullptr;
  ClassKey last_key{-1, -1, -1, -1};
  StructuredStream stream(s, s1, s2, P1, P2);
  const std::int64_t eq = s.eq_index(), L = s.l + 1;
  stream.run(nullptr, [&](const QueryMatch& q) {
    ++st.positions;
    const std::int64_t rel = q.j - eq, i = rel / L, t = rel % L;  // query at B_i digit t (t = 0: separator)
    const HeadMatch &h1 = q.h[0], &h2 = q.h[1];
    st.u1 = std::max(st.u1, h1.u);
    st.u2 = std::max(st.u2, h2.u);
    int kind;
    std::string bad;
    const std::int64_t X12 = head12_keys();
    auto too_many = [&](const char* where) {
      for (int h = 0; h < 2; ++h)
        if (q.h[std::size_t(h)].x > X12)
          return fmt::format("head {} matches {} keys {}; part 3 bounds its output for at most {}", h + 1, q.h[std::size_t(h)].x,
                             where, X12);
      return std::string();
    };
    if (t == s.l) {
      // predicts '>' or '$': heads 1-2 only need their outputs in the enclosure of an average of
      // values in [0, 27] over at most X12 matched keys (digit_tables)
      kind = kM;
      bad = too_many("at a most significant digit");
    } else if (i == 0) {
      kind = kZ;
      if (!h1.only_separators) bad = "head 1 matches a digit key where B_0 (all zeros) is predicted";
      else if (!h2.only_separators) bad = "head 2 matches a digit key where B_0 (all zeros) is predicted";
      else bad = too_many("where B_0 is predicted");
    } else {
      kind = t >= 2 ? kD2 : t == 1 ? kD1 : kD0;
      if (!(h1.x == 3 && h1.pairs == 1 && h1.pair_t == t + 1 && h1.pair_j == i - 1))
        bad = fmt::format("head 1 must match exactly A_{0}[{1}] and B_{2}[{1}] (+ BOS); it matches {3} keys", i, t + 1,
                          i - 1, h1.x - 1);
      else if (t >= 1 && !(h2.x == 3 && h2.pairs == 1 && h2.pair_t == t && h2.pair_j == i - 1))
        bad = fmt::format("head 2 must match exactly A_{0}[{1}] and B_{2}[{1}] (+ BOS); it matches {3} keys", i, t, i - 1,
                          h2.x - 1);
      else if (t == 0 && !h2.only_separators)
        bad = "head 2 matches a digit key at a separator query";
      else if (t == 0)
        bad = too_many("at a separator query");
    }
    if (!bad.empty()) {
      if (!st.failure) st.failure = CertFailure{q.j, "structure", bad};
      return;
    }
    const int expect = kind == kM ? (i < s.m ? int(kArrow) : int(kDollar)) : -1;
    const ClassKey key{kind, expect, q.h[2].x, q.h[3].x};
    if (!(last_c && !(key < last_key) && !(last_key < key))) {
      last_c = &fast[key];
      last_key = key;
    }
    auto& c = *last_c;
    c.u3 = std::max(c.u3, q.h[2].u);
    c.u4 = std::max(c.u4, q.h[3].u);
    if (c.first < 0) c.first = q.j;
    ++c.count;
  });
  return st;
}

}  // namespace manyadd::cert_detail
