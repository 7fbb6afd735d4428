// Part 1 of the certificate in closed form, for every shape and every offset pair at once.
// A response query is named by (i, t): column t of B_i (t = 0: the separator before B_i, which is
// '=' for i = 0). The keys a head matches there are BOS plus a few *families* of keys: a token kind,
// a range of blocks and one significance, all linear in (l, m, s1, s2, i, t) and the hypercube sizes
// C1 = 2^P1, C2 = 2^P2, each guarded by a conjunction of linear conditions. The solver proof
// (closed_form_smt.hpp) shows that the families are exactly the top-scoring keys of the built model
// for every (l, m, s1, s2, query, key) in range; the tests compare them with the structure pass at
// every shape and offset for small P. Offsets enter only through the wrap of the level-1 "next"
// vector (v_{2^P1 + 1} = v_1), i.e. through the condition l = C1 - 1 (whose only offset is s1 = 1).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace manyadd {
namespace closed {

// Symbols of the linear expressions. BLK and SIG are a token's own block and significance (used
// by the token layout only).
enum Sym : int { L, M, S1, S2, I, T, C1, C2, BLK, SIG, ONE, kSyms };
using Values = std::array<std::int64_t, kSyms>;
const char* sym_name(int s);

struct Lin {
  std::array<std::int64_t, kSyms> c{};
  std::int64_t eval(const Values& v) const;
  std::string str() const;
};
Lin sym(Sym s, std::int64_t k = 1);
Lin konst(std::int64_t k);
Lin operator+(Lin a, const Lin& b);
Lin operator-(Lin a, const Lin& b);
Lin operator+(Lin a, std::int64_t k);
Lin operator-(Lin a, std::int64_t k);

// e == 0 or e >= 0.
struct Atom {
  Lin e;
  bool eq = false;
  bool holds(const Values& v) const;
  std::string str() const;
};
Atom eq0(const Lin& e);
Atom ge0(const Lin& e);

// ---- The token layout (format.hpp's sequence and position IDs) as data --------------------------
// Every token of `$ A_1 + ... + A_m = B_0 > B_1 > ... > B_m` is one kind with a block and a
// significance: ADIG (a, r) is A_a's digit of significance r, PLUS (a) the '+' after A_a (a < m),
// EQ the '=' (block m), BSEP (b) the '>' before B_b, BDIG (b, t) B_b's digit of significance t.
enum class TokKind : int { BOS = 0, ADIG, PLUS, EQ, BSEP, BDIG, kCount };
const char* tok_name(TokKind k);
struct KindLayout {
  TokKind kind;
  std::vector<Atom> valid;  // which (BLK, SIG) are tokens of the shape
  Lin p1, p2;               // level-1 / level-2 position IDs (0 for BOS: a zero embedding)
  int sec;                  // causal order = lexicographic (sec, blk, pos): 0 BOS, 1 query, 2 response
  Lin blk, pos;
};
const std::vector<KindLayout>& layout();
// Values with the shape's symbols set (L, M, S1, S2, C1, C2, ONE); I, T, BLK, SIG zero.
Values shape_values(std::int64_t l, std::int64_t m, std::int64_t s1, std::int64_t s2, int P1, int P2);
// The 0-based index of token (kind, blk, sig) of the shape in `v` (the lexicographic order unrolled).
std::int64_t token_index(const Values& v, TokKind kind, std::int64_t blk, std::int64_t sig);
// The response query at 0-based index j (j >= m (l + 1)) as (i, t), written into v[I], v[T].
void set_query(Values& v, std::int64_t j);

// ---- The closed form ------------------------------------------------------------------------------
struct Family {
  std::string name;        // e.g. "h1.A" (head 1, digit of A_i)
  int head = 0;            // 0-based
  std::vector<Atom> when;  // conditions on the query and the shape
  TokKind kind = TokKind::ADIG;
  Lin lo, hi;              // block range [lo, hi]
  bool has_sig = false;
  Lin sig;                 // significance (digits only)
  bool wrap = false;       // exists only through the wrap v_{2^P1 + 1} = v_1
  std::string why;         // the derivation, one line
};
// All four heads' families. BOS is matched by every head at every query and is not a family.
const std::vector<Family>& families();

// Number of keys of family f at the query in v (0 when its conditions fail).
std::int64_t family_count(const Family& f, const Values& v);
// Matched keys per head at the query in v, BOS included: x_h = 1 + sum of its families' counts.
std::array<std::int64_t, 4> matched_counts(const Values& v, const std::vector<Family>& fams = families());
// An upper bound of head h's matched keys at any query of any shape, BOS included: 1 + the number of
// its families, when every one of them is a single block (lo = hi as linear forms) of one
// significance or one separator, so that it holds at most one key; -1 when some family may hold more.
// (Heads 1-2: 6. The certificate needs it where it does not pin these heads' matches down: at the
// most significant digit and where they see only separators.)
std::int64_t max_matched_keys(int head, const std::vector<Family>& fams = families());
// The matched keys (excluding BOS) of head h at the query in v, as 0-based token indices.
std::vector<std::int64_t> matched_keys(const Values& v, int head, const std::vector<Family>& fams = families());

}  // namespace closed
}  // namespace manyadd
