// The closed form of part 1 (see closed_form.hpp): the token layout and the key families of each
// head, with the derivation of each family beside it.
#include "manyadd/closed_form.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace manyadd {
namespace closed {

const char* sym_name(int s) {
  static const char* names[] = {"l", "m", "s1", "s2", "i", "t", "C1", "C2", "blk", "sig", "1"};
  return s >= 0 && s < kSyms ? names[s] : "?";
}

std::int64_t Lin::eval(const Values& v) const {
  std::int64_t r = 0;
  for (int s = 0; s < kSyms; ++s) r += c[std::size_t(s)] * v[std::size_t(s)];
  return r;
}

std::string Lin::str() const {
  std::string r;
  for (int s = 0; s < kSyms; ++s) {
    const std::int64_t k = c[std::size_t(s)];
    if (k == 0) continue;
    const bool one = s == ONE;
    if (!r.empty()) r += k < 0 ? " - " : " + ";
    else if (k < 0) r += "-";
    const std::int64_t a = k < 0 ? -k : k;
    if (one) r += std::to_string(a);
    else r += (a == 1 ? std::string() : std::to_string(a)) + sym_name(s);
  }
  return r.empty() ? "0" : r;
}

Lin sym(Sym s, std::int64_t k) {
  Lin e;
  e.c[std::size_t(s)] = k;
  return e;
}
Lin konst(std::int64_t k) { return sym(ONE, k); }
Lin operator+(Lin a, const Lin& b) {
  for (int s = 0; s < kSyms; ++s) a.c[std::size_t(s)] += b.c[std::size_t(s)];
  return a;
}
Lin operator-(Lin a, const Lin& b) {
  for (int s = 0; s < kSyms; ++s) a.c[std::size_t(s)] -= b.c[std::size_t(s)];
  return a;
}
Lin operator+(Lin a, std::int64_t k) { return a + konst(k); }
Lin operator-(Lin a, std::int64_t k) { return a - konst(k); }

bool Atom::holds(const Values& v) const {
  const std::int64_t x = e.eval(v);
  return eq ? x == 0 : x >= 0;
}
std::string Atom::str() const { return e.str() + (eq ? " == 0" : " >= 0"); }
Atom eq0(const Lin& e) { return {e, true}; }
Atom ge0(const Lin& e) { return {e, false}; }

const char* tok_name(TokKind k) {
  static const char* names[] = {"BOS", "A-digit", "'+'", "'='", "'>'", "B-digit"};
  const int i = int(k);
  return i >= 0 && i < int(TokKind::kCount) ? names[i] : "?";
}

namespace {
// a <= b, a == b as atoms
Atom le(const Lin& a, const Lin& b) { return ge0(b - a); }
Atom same(const Lin& a, const Lin& b) { return eq0(a - b); }
const Lin l = sym(L), m = sym(M), s1 = sym(S1), s2 = sym(S2), i = sym(I), t = sym(T), c1 = sym(C1), blk = sym(BLK),
          sg = sym(SIG);
}  // namespace

// Position IDs as format.cpp assigns them (Appendix D.4.2, Eqs. 1-2): level 1 is s1 + significance
// for digits, s1 for separators; level 2 is s2 + a - 1 in A_a and the '+' after it, s2 at '=', and
// s2 + b at B_b and the '>' before it. The tests check this table against position_ids().
const std::vector<KindLayout>& layout() {
  static const std::vector<KindLayout> L = {
      {TokKind::BOS, {same(blk, konst(0)), same(sg, konst(0))}, konst(0), konst(0), 0, konst(0), konst(0)},
      {TokKind::ADIG, {le(konst(1), blk), le(blk, m), le(konst(1), sg), le(sg, l)}, s1 + sg, s2 + blk - 1, 1, blk, l - sg},
      {TokKind::PLUS, {le(konst(1), blk), le(blk, m - 1), same(sg, konst(0))}, s1, s2 + blk - 1, 1, blk, l},
      {TokKind::EQ, {same(blk, m), same(sg, konst(0))}, s1, s2, 1, blk, l},
      {TokKind::BSEP, {le(konst(1), blk), le(blk, m), same(sg, konst(0))}, s1, s2 + blk, 2, blk, konst(0)},
      {TokKind::BDIG, {le(konst(0), blk), le(blk, m), le(konst(1), sg), le(sg, l)}, s1 + sg, s2 + blk, 2, blk, sg},
  };
  return L;
}

Values shape_values(std::int64_t l_, std::int64_t m_, std::int64_t s1_, std::int64_t s2_, int P1, int P2) {
  Values v{};
  v[L] = l_;
  v[M] = m_;
  v[S1] = s1_;
  v[S2] = s2_;
  v[C1] = std::int64_t(1) << P1;
  v[C2] = std::int64_t(1) << P2;
  v[ONE] = 1;
  return v;
}

std::int64_t token_index(const Values& v0, TokKind kind, std::int64_t b, std::int64_t s) {
  Values v = v0;
  v[BLK] = b;
  v[SIG] = s;
  const KindLayout& K = layout()[std::size_t(kind)];
  for (const Atom& a : K.valid)
    if (!a.holds(v)) throw std::logic_error(fmt::format("token_index: {} ({}, {}) is not a token", tok_name(kind), b, s));
  const std::int64_t LL = v[L] + 1, pos = K.pos.eval(v), bb = K.blk.eval(v);
  if (K.sec == 0) return 0;
  if (K.sec == 1) return (bb - 1) * LL + 1 + pos;
  return (v[M] + bb) * LL + pos;
}

void set_query(Values& v, std::int64_t j) {
  const std::int64_t LL = v[L] + 1, rel = j - v[M] * LL;
  if (rel < 0 || rel >= (v[M] + 1) * LL) throw std::logic_error("set_query: not a response position");
  v[I] = rel / LL;
  v[T] = rel % LL;
}

// The families. Notation: the query at column t of B_i has IDs (p1, p2) = (s1 + t, s2 + i) (t = 0
// and the separators: p1 = s1). Each head matches the keys whose hypercube codes equal the query's
// target codes at every level it reads (Eq. 4); codes are injective on [1, C] and only the "next"
// vector of ID C wraps to v_1. Level-1 IDs lie in [s1, s1 + l] <= C1 and level-2 IDs in
// [s2, s2 + m] <= C2, so a "next" code equals the code of ID p + 1, or of ID 1 when p = C.
const std::vector<Family>& families() {
  // The wrap needs an ID at C1 (s1 + l = C1) and a key at ID 1 (s1 = 1): both hold iff l = C1 - 1,
  // whose only offset is s1 = 1.
  const Lin lwrap = l - (c1 - 1);
  static const std::vector<Family> F = {
      // Head 1 (digit sum, Eqs. 7-10): key POS_1 = query POS_1_NEXT (p1 + 1) and key POS_2_NEXT =
      // query POS_2 (key p2 = s2 + i - 1).
      {"h1.A", 0, {ge0(i - 1), ge0(l - 1 - t)}, TokKind::ADIG, i, i, true, t + 1, false,
       "A_i's digit of significance t+1: p1 = s1 + t + 1, p2 = s2 + i - 1"},
      {"h1.B", 0, {ge0(i - 1), ge0(l - 1 - t)}, TokKind::BDIG, i - 1, i - 1, true, t + 1, false,
       "B_{i-1}'s digit of significance t+1 (p2 = s2 + i - 1; B_0 has p2 = s2)"},
      {"h1.wrap+", 0, {eq0(t - l), eq0(lwrap), ge0(i - 1), ge0(m - 1 - i)}, TokKind::PLUS, i, i, false, {}, true,
       "at the MSD (p1 = s1 + l = C1) POS_1_NEXT wraps to v_1 = the separators' ID when s1 = 1: the '+' after A_i"},
      {"h1.wrap=", 0, {eq0(t - l), eq0(lwrap), eq0(i - 1)}, TokKind::EQ, m, m, false, {}, true,
       "the same wrap: '=' has p2 = s2 = s2 + i - 1 when i = 1"},
      {"h1.wrap>", 0, {eq0(t - l), eq0(lwrap), ge0(i - 2)}, TokKind::BSEP, i - 1, i - 1, false, {}, true,
       "the same wrap: the '>' before B_{i-1}"},
      // Head 2 (carry, Eqs. 11-14): key POS_1 = query POS_1, key POS_2_NEXT = query POS_2.
      {"h2.A", 1, {ge0(i - 1), ge0(t - 1)}, TokKind::ADIG, i, i, true, t, false, "A_i's digit of significance t"},
      {"h2.B", 1, {ge0(i - 1), ge0(t - 1)}, TokKind::BDIG, i - 1, i - 1, true, t, false, "B_{i-1}'s digit of significance t"},
      {"h2.sep+", 1, {ge0(i - 1), eq0(t), ge0(m - 1 - i)}, TokKind::PLUS, i, i, false, {}, false,
       "separator query (p1 = s1): the '+' after A_i (p2 = s2 + i - 1)"},
      {"h2.sep=", 1, {eq0(i - 1), eq0(t)}, TokKind::EQ, m, m, false, {}, false, "separator query: '=' (p2 = s2) when i = 1"},
      {"h2.sep>", 1, {ge0(i - 2), eq0(t)}, TokKind::BSEP, i - 1, i - 1, false, {}, false,
       "separator query: the '>' before B_{i-1}"},
      // Head 3 (arrow, Eqs. 15-18): key POS_1 = query POS_1_NEXT, level 1 only.
      {"h3.A", 2, {ge0(l - 1 - t)}, TokKind::ADIG, konst(1), m, true, t + 1, false, "every A_a's digit of significance t+1"},
      {"h3.B", 2, {ge0(l - 1 - t)}, TokKind::BDIG, konst(0), i - 1, true, t + 1, false,
       "B_0 .. B_{i-1}'s digits of significance t+1 (B_i's comes later)"},
      {"h3.wrap+", 2, {eq0(t - l), eq0(lwrap)}, TokKind::PLUS, konst(1), m - 1, false, {}, true,
       "at the MSD, the wrap to v_1 = ID s1 = 1: every '+'"},
      {"h3.wrap=", 2, {eq0(t - l), eq0(lwrap)}, TokKind::EQ, m, m, false, {}, true, "the same wrap: '='"},
      {"h3.wrap>", 2, {eq0(t - l), eq0(lwrap)}, TokKind::BSEP, konst(1), i, false, {}, true,
       "the same wrap: the '>' before B_1 .. B_i"},
      // Head 4 (EOS, Eqs. 19-22): key (POS_1, POS_2) = query (POS_1, POS_2), no "next" vector.
      {"h4.A", 3, {ge0(t - 1), ge0(m - 1 - i)}, TokKind::ADIG, i + 1, i + 1, true, t, false,
       "A_{i+1}'s digit of significance t (p2 = s2 + i), when i < m"},
      {"h4.B", 3, {ge0(t - 1)}, TokKind::BDIG, i, i, true, t, false, "the query itself"},
      {"h4.=+", 3, {eq0(t), eq0(i), ge0(m - 2)}, TokKind::PLUS, konst(1), konst(1), false, {}, false,
       "at '=' (p2 = s2): the '+' after A_1, when m >= 2"},
      {"h4.=", 3, {eq0(t), eq0(i)}, TokKind::EQ, m, m, false, {}, false, "at '=': itself"},
      {"h4.>+", 3, {eq0(t), ge0(i - 1), ge0(m - 2 - i)}, TokKind::PLUS, i + 1, i + 1, false, {}, false,
       "at the '>' before B_i (p2 = s2 + i): the '+' after A_{i+1}, when i + 1 < m"},
      {"h4.>", 3, {eq0(t), ge0(i - 1)}, TokKind::BSEP, i, i, false, {}, false, "at the '>' before B_i: itself"},
  };
  return F;
}

std::int64_t family_count(const Family& f, const Values& v) {
  for (const Atom& a : f.when)
    if (!a.holds(v)) return 0;
  return std::max<std::int64_t>(0, f.hi.eval(v) - f.lo.eval(v) + 1);
}

std::array<std::int64_t, 4> matched_counts(const Values& v, const std::vector<Family>& fams) {
  std::array<std::int64_t, 4> x{1, 1, 1, 1};
  for (const Family& f : fams) x[std::size_t(f.head)] += family_count(f, v);
  return x;
}

std::int64_t max_matched_keys(int head, const std::vector<Family>& fams) {
  std::int64_t x = 1;
  for (const Family& f : fams) {
    if (f.head != head) continue;
    if ((f.hi - f.lo).c != Lin{}.c) return -1;  // a range of blocks: no bound from the list alone
    ++x;  // one block: one digit of significance `sig`, or its one separator
  }
  return x;
}

std::vector<std::int64_t> matched_keys(const Values& v, int head, const std::vector<Family>& fams) {
  std::vector<std::int64_t> out;
  for (const Family& f : fams) {
    if (f.head != head || family_count(f, v) == 0) continue;
    for (std::int64_t b = f.lo.eval(v); b <= f.hi.eval(v); ++b) out.push_back(token_index(v, f.kind, b, f.has_sig ? f.sig.eval(v) : 0));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace closed
}  // namespace manyadd
