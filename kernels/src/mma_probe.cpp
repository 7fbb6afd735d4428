// The host side of the MMA probe (mma_probe.hpp): the domain check, the exact oracle of the
// assumption and its classification of a device's answer, and the simulated devices. Built with and
// without CUDA; the probe set, the check and the report are in mma_probe_report.cpp.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "manyadd/kernels/mma_probe.hpp"

namespace manyadd::kernels::mma_probe {

namespace {

std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
bool is_tf32(float x) { return std::isfinite(x) && (float_bits(x) & 0x1fffu) == 0; }

constexpr double kMin = 0x1p-100, kMax = 0x1p100;  // the domain's magnitudes (check_input)

// The float neighbours of a double: the largest float <= x and the smallest float >= x (x inside the
// domain: no overflow, no subnormal).
float float_down(double x) {
  float f = static_cast<float>(x);
  if (double(f) > x) f = std::nextafter(f, -INFINITY);
  return f;
}
float float_up(double x) {
  float f = static_cast<float>(x);
  if (double(f) < x) f = std::nextafter(f, INFINITY);
  return f;
}

// ---- exact sums (Shewchuk, "Adaptive precision floating-point arithmetic and fast robust geometric
// predicates", 1997): a sum of doubles kept as a nonoverlapping expansion, components in increasing
// magnitude, zeros dropped; its sign is the sign of its largest component. Exact barring overflow and
// underflow, which the domain excludes.
void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  const double bv = s - a, av = s - bv;
  e = (a - av) + (b - bv);
}
void grow(std::vector<double>& x, double b) {  // GROW-EXPANSION with zero elimination
  double q = b;
  std::size_t w = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    double s, e;
    two_sum(q, x[i], s, e);
    q = s;
    if (e != 0) x[w++] = e;
  }
  x.resize(w);
  if (q != 0) x.push_back(q);
}
int sign(const std::vector<double>& x) { return x.empty() ? 0 : (x.back() > 0 ? 1 : -1); }
double approx(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return s;
}

// d - (c + sum of products), exactly.
std::vector<double> error_expansion(const Input& in, double d) {
  std::vector<double> e;
  grow(e, d);
  for (int i = 0; i < kLeaves; ++i) grow(e, -in.leaf(i));
  return e;
}

// |d - exact| < 2 n 2^-23 M with M = (|c| + sum |p|)(1 + 2^-18): step 1's bound, decided exactly.
// Why this M: every partial result of every allowed tree is a partial sum of the leaves plus the errors
// so far, < 2 n 2^-23 M <= 2^-19 M (n <= 8), so M >= (sum |leaves|) / (1 - 2^-19) bounds every input
// and partial result; (1 + 2^-18) exceeds 1 / (1 - 2^-19).
bool within_bound(const Input& in, double d, int n) {
  std::vector<double> e = error_expansion(in, d);
  const int s = sign(e);
  if (s == 0) return true;
  if (n == 0) return false;  // c plus zeros: the bound says exact
  if (s < 0)
    for (double& v : e) v = -v;
  const double k = 2.0 * n * 0x1p-23;
  for (int i = 0; i < kLeaves; ++i) {
    const double t = std::fabs(in.leaf(i)) * k;  // <= 24 x 5 significant bits: exact
    grow(e, -t);
    grow(e, -t * 0x1p-18);
  }
  return sign(e) < 0;
}

// ---- the oracle: the hull of every tree's result (Allowed) ----
struct Iv {
  double lo, hi;
};

// One fused sum of interval inputs whose largest magnitude is m > 0, e = floor(log2 m). Every input
// aligned to the grid g = 2^(e - 23) lies in [floor(lo / g) g, ceil(hi / g) g] (truncated or rounded,
// and keeping more bits only moves it inside); the sum then lies between the sums of the ends, and the
// result between the float neighbours of those. Using the largest e any input can have is the widest
// grid, so the interval holds whichever input is the largest. Exact in double: every aligned end is a
// multiple of g of magnitude <= 2^(e + 1), so <= 9 of them sum to a multiple of g below 2^28 g.
Iv fused_sum(const Iv* in, int n, double m) {
  if (m == 0) return {0, 0};
  const int e = std::ilogb(m);
  const double g = std::ldexp(1.0, e - 23), inv = std::ldexp(1.0, 23 - e);
  double lo = 0, hi = 0;
  for (int i = 0; i < n; ++i) {
    lo += std::floor(in[i].lo * inv) * g;
    hi += std::ceil(in[i].hi * inv) * g;
  }
  return {float_down(lo), float_up(hi)};
}

// H[S] = the hull over every tree on the leaf set S (bit mask), by sets of increasing size: the root of
// a tree on S is one fused sum of >= 2 subtrees on the blocks of a partition of S, each inside its
// block's H (the fused sum is inclusion-monotone, so the hull of the subtrees' hulls is a superset of
// every tree's result: sound; exact for a single tree of point inputs). Cost: the set partitions of
// every subset, sum_S (Bell(|S|) - 1) ~ 1.2e5 fused sums at 9 nonzero leaves.
class TreeHull {
 public:
  Iv run(const double* leaf, int L) {
    const unsigned full = (1u << L) - 1;
    for (unsigned S = 1; S <= full; ++S) {
      if ((S & (S - 1)) == 0) {
        const double v = leaf[__builtin_ctz(S)];
        H_[S] = {v, v};
      } else {
        acc_ = {INFINITY, -INFINITY};
        nb_ = 0;
        partitions(S);
        H_[S] = acc_;
      }
      M_[S] = std::max(std::fabs(H_[S].lo), std::fabs(H_[S].hi));
    }
    return H_[full];
  }

 private:
  void partitions(unsigned rest) {
    if (rest == 0) {
      if (nb_ >= 2) evaluate();
      return;
    }
    const unsigned low = rest & (~rest + 1u), others = rest ^ low;
    for (unsigned sub = others;; sub = (sub - 1) & others) {
      block_[nb_++] = low | sub;
      partitions(rest ^ (low | sub));
      --nb_;
      if (sub == 0) break;
    }
  }
  void evaluate() {
    Iv in[kLeaves];
    double m = 0;
    for (int b = 0; b < nb_; ++b) {
      in[b] = H_[block_[b]];
      m = std::max(m, M_[block_[b]]);
    }
    const Iv r = fused_sum(in, nb_, m);
    acc_.lo = std::min(acc_.lo, r.lo);
    acc_.hi = std::max(acc_.hi, r.hi);
  }

  std::array<Iv, 1u << kLeaves> H_{};
  std::array<double, 1u << kLeaves> M_{};
  unsigned block_[kLeaves] = {};
  int nb_ = 0;
  Iv acc_{};
};

// ---- simulated devices ----
double cut(double q, Round r) {
  switch (r) {
    case Round::toward_zero: return std::trunc(q);
    case Round::nearest_even: return std::nearbyint(q);  // the default rounding mode: ties to even
    case Round::down: return std::floor(q);
  }
  return q;
}
float to_float(double s, Round r) {
  switch (r) {
    case Round::toward_zero: return s >= 0 ? float_down(s) : float_up(s);
    case Round::nearest_even: return static_cast<float>(s);
    case Round::down: return float_down(s);
  }
  return float(s);
}

}  // namespace

Input input_at(const Tile& t, int row, int col) {
  Input in;
  in.c = t.c[row][col];
  for (int k = 0; k < 8; ++k) {
    in.a[k] = t.a[row][k];
    in.b[k] = t.b[k][col];
  }
  return in;
}

void check_input(const Input& in) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("mma probe: " + what); };
  const double c = std::fabs(in.c);
  if (!std::isfinite(in.c)) bad("c is not finite");
  if (c != 0 && (c < kMin || c > kMax)) bad("c = " + std::to_string(in.c) + " is outside [2^-100, 2^100]");
  for (int k = 0; k < 8; ++k) {
    const std::string ks = std::to_string(k);
    if (!is_tf32(in.a[k])) bad("a[" + ks + "] is not a finite tf32 value (low 13 bits must be zero)");
    if (!is_tf32(in.b[k])) bad("b[" + ks + "] is not a finite tf32 value (low 13 bits must be zero)");
    const double p = std::fabs(in.leaf(1 + k));
    if (p != 0 && (p < kMin || p > kMax)) bad("product a[" + ks + "] b[" + ks + "] is outside [2^-100, 2^100]");
  }
}

void check_tiles(const std::vector<Tile>& tiles) {
  if (tiles.empty() || tiles.size() > (std::size_t(1) << 16))
    throw std::invalid_argument("mma probe: the number of tiles is outside [1, 65536]");
  for (std::size_t t = 0; t < tiles.size(); ++t)
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 8; ++c) {
        try {
          check_input(input_at(tiles[t], r, c));
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument(std::string(e.what()) + " (tile " + std::to_string(t) + ", output (" +
                                      std::to_string(r) + ", " + std::to_string(c) + "))");
        }
      }
}

Allowed allowed(const Input& in) {
  check_input(in);
  double leaf[kLeaves];
  int L = 0;
  Allowed a;
  for (int i = 0; i < kLeaves; ++i) {
    const double v = in.leaf(i);
    if (v == 0) continue;
    leaf[L++] = v;
    if (i > 0) ++a.products;
  }
  if (L > 0) {
    TreeHull h;
    const Iv r = h.run(leaf, L);
    a.lo = float(r.lo), a.hi = float(r.hi);  // floats already (fused_sum's ends, or a leaf: <= 24 bits)
  }
  a.exact = -approx(error_expansion(in, 0.0));
  double m = 0;
  for (int i = 0; i < kLeaves; ++i) m += std::fabs(in.leaf(i));
  a.bound = 2.0 * a.products * 0x1p-23 * m * (1 + 0x1p-18);
  return a;
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::inside: return "inside the assumption";
    case Verdict::outside_assumption: return "OUTSIDE the assumption (inside step 1's bound)";
    case Verdict::outside_bound: return "OUTSIDE the assumption and step 1's bound";
  }
  return "?";
}

Verdict classify(const Input& in, float d, const Allowed& a) {
  if (!std::isfinite(d)) return Verdict::outside_bound;
  if (d >= a.lo && d <= a.hi) return Verdict::inside;
  return within_bound(in, d, a.products) ? Verdict::outside_assumption : Verdict::outside_bound;
}

// ---- trees and models ----
Tree tree_fused() { return {{0, 1, 2, 3, 4, 5, 6, 7, 8}}; }
Tree tree_groups(int g) {
  if (g < 1 || 8 % g) throw std::invalid_argument("mma probe: a group size must divide 8");
  Tree t;
  for (int first = 1; first <= 8; first += g) {
    std::vector<int> node{t.empty() ? 0 : kLeaves + int(t.size()) - 1};
    for (int k = first; k < first + g; ++k) node.push_back(k);
    t.push_back(node);
  }
  return t;
}
Tree tree_pairs() {
  Tree t;
  std::vector<int> level{0, 1, 2, 3, 4, 5, 6, 7, 8};
  while (level.size() > 1) {
    std::vector<int> next;
    for (std::size_t i = 0; i + 1 < level.size(); i += 2) {
      t.push_back({level[i], level[i + 1]});
      next.push_back(kLeaves + int(t.size()) - 1);
    }
    if (level.size() % 2) next.push_back(level.back());
    level = next;
  }
  return t;
}
Tree tree_products_first() { return {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 0}}; }

void check_tree(const Tree& t) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("mma probe tree: " + what); };
  if (t.empty()) bad("no node");
  std::vector<int> uses(kLeaves + t.size(), 0);
  for (std::size_t n = 0; n < t.size(); ++n) {
    if (t[n].empty()) bad("an empty node");
    for (int ch : t[n]) {
      if (ch < 0 || ch >= kLeaves + int(n)) bad("a child that is neither a leaf nor an earlier node");
      ++uses[ch];
    }
  }
  for (std::size_t i = 0; i + 1 < uses.size(); ++i)
    if (uses[i] != 1) bad(i < kLeaves ? "a leaf not used exactly once" : "a node not used exactly once");
}

// Children in the order of their smallest leaf (c, then p0, ...): one string per tree, whatever the
// order its nodes list them in (the report's rebuilt tree is written the same way).
std::string tree_string(const Tree& t) {
  auto name = [](int leaf) { return leaf == 0 ? std::string("c") : "p" + std::to_string(leaf - 1); };
  std::vector<std::pair<int, std::string>> s;  // per node: (smallest leaf, string)
  for (const auto& node : t) {
    std::vector<std::pair<int, std::string>> ch;
    for (int c : node) ch.push_back(c < kLeaves ? std::make_pair(c, name(c)) : s[c - kLeaves]);
    std::sort(ch.begin(), ch.end());
    std::string r = "(";
    for (std::size_t i = 0; i < ch.size(); ++i) r += (i ? " " : "") + ch[i].second;
    s.push_back({ch.front().first, r + ")"});
  }
  return s.back().second;
}

const char* round_name(Round r) {
  switch (r) {
    case Round::toward_zero: return "toward_zero";
    case Round::nearest_even: return "nearest_even";
    case Round::down: return "down";
  }
  return "?";
}

// Exact in double: a node's inputs are floats or products (<= 24 significant bits) of magnitude
// < 2^(e + 1); aligned to 2^(e - bits + 1) they are integers times the grid below 2^bits, and <= 9 of
// them sum below 2^(bits + 4) <= 2^52 grid steps (bits <= 48). (product_window: e may exceed the
// true exponent by one; the aligned values only get coarser.)
float simulate(const Model& m, const Input& in) {
  if (m.bits < 8 || m.bits > 48) throw std::invalid_argument("mma probe model: bits outside [8, 48]");
  double v[64];  // leaves, then node results
  int ex[64];    // the exponent each takes in alignment
  if (m.tree.size() > 64 - kLeaves) throw std::invalid_argument("mma probe model: more than 55 nodes");
  for (int i = 0; i < kLeaves; ++i) {
    v[i] = in.leaf(i);
    ex[i] = v[i] == 0 ? 0 : std::ilogb(v[i]);
    if (m.product_window && i > 0 && v[i] != 0) ex[i] = std::ilogb(in.a[i - 1]) + std::ilogb(in.b[i - 1]) + 1;
  }
  for (std::size_t n = 0; n < m.tree.size(); ++n) {
    bool any = false;
    int e = 0;
    for (int ch : m.tree[n]) {
      if (ch < 0 || ch >= kLeaves + int(n)) throw std::invalid_argument("mma probe model: a child after its node");
      if (v[ch] != 0) e = any ? std::max(e, ex[ch]) : ex[ch], any = true;
    }
    if (!any) {
      v[kLeaves + n] = ex[kLeaves + n] = 0;
      continue;
    }
    const double scale = std::ldexp(1.0, m.bits - 1 - e), g = std::ldexp(1.0, e - m.bits + 1);
    double s = 0;
    for (int ch : m.tree[n]) s += cut(v[ch] * scale, m.align) * g;
    float f = to_float(s, m.result);
    if (double(f) != s)
      for (int i = 0; i < m.extra_ulps; ++i) f = std::nextafter(f, 0.0f);
    v[kLeaves + n] = f;
    ex[kLeaves + n] = f == 0 ? 0 : std::ilogb(f);
  }
  return float(v[kLeaves + m.tree.size() - 1]);
}

std::vector<float> simulate(const Model& m, const std::vector<Tile>& tiles) {
  std::vector<float> d(tiles.size() * 128);
  for (std::size_t t = 0; t < tiles.size(); ++t)
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 8; ++c) d[t * 128 + r * 8 + c] = simulate(m, input_at(tiles[t], r, c));
  return d;
}

std::vector<Model> model_family() {
  const std::pair<const char*, Tree> trees[] = {
      {"fused9", tree_fused()},   {"groups4", tree_groups(4)}, {"groups2", tree_groups(2)},
      {"chain", tree_groups(1)}, {"pairs", tree_pairs()},     {"products_first", tree_products_first()}};
  std::vector<Model> family;
  for (const auto& [tname, tree] : trees)
    for (int bits : {22, 23, 24, 25, 26, 27, 28, 48})
      for (Round al : {Round::toward_zero, Round::nearest_even, Round::down})
        for (Round res : {Round::toward_zero, Round::nearest_even}) {
          Model m;
          m.name = std::string(tname) + " bits=" + std::to_string(bits) + " align=" + round_name(al) +
                   " result=" + round_name(res);
          m.tree = tree, m.bits = bits, m.align = al, m.result = res;
          family.push_back(m);
        }
  return family;
}

}  // namespace manyadd::kernels::mma_probe
