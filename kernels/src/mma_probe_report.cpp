// The MMA probe's inputs and its reading of a device (mma_probe.hpp): the probe set (targeted probes
// after Fasi et al. 2021, kernel-like steps and random tiles), the check of every output against the
// oracle, and the report of what the device does. Built with and without CUDA.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "manyadd/kernels/mma_probe.hpp"

namespace manyadd::kernels::mma_probe {

namespace {

// splitmix64: the same probes on every machine and standard library.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int below(int n) { return int(next() % std::uint64_t(n)); }
  int in(int lo, int hi) { return lo + below(hi - lo + 1); }
  float sign() { return (next() & 1) ? -1.f : 1.f; }
};

// A random tf32 value in the binade [2^e, 2^(e + 1)) (11 significand bits), and a random float (24).
float tf32_in(Rng& r, int e) { return std::ldexp(float(1024 + r.below(1024)), e - 10); }
float float_in(Rng& r, int e) { return std::ldexp(float((1 << 23) + r.below(1 << 23)), e - 23); }

// Leaf `pos` of `in` set to a value: c takes any float; a product position takes a tf32 value times 1.
void set_leaf(Input& in, int pos, float v) {
  if (pos == 0) {
    in.c = v;
  } else {
    in.a[pos - 1] = v;
    in.b[pos - 1] = 1.f;
  }
}
// A random leaf near 2^e: a 24-bit float at c, a product of two random tf32 values elsewhere.
void random_leaf(Rng& r, Input& in, int pos, int e) {
  if (pos == 0) {
    in.c = r.sign() * float_in(r, e);
  } else {
    const int eb = r.in(-3, 3);
    in.a[pos - 1] = r.sign() * tf32_in(r, e - eb);
    in.b[pos - 1] = tf32_in(r, eb);
  }
}

std::size_t out_index(std::size_t tile, int row, int col) { return (tile * 16 + row) * 8 + col; }

// Tile 0: small integers, every partial sum an integer below 2^8, exact under any arithmetic that
// keeps 8 bits: a wrong d here is a wrong register layout or launch, not rounding.
Tile integer_tile(Rng& r) {
  Tile t{};
  for (auto& row : t.a)
    for (float& x : row) x = float(r.in(-4, 4));
  for (auto& row : t.b)
    for (float& x : row) x = float(r.in(-4, 4));
  for (auto& row : t.c)
    for (float& x : row) x = float(r.in(-64, 64));
  return t;
}

// Eight designed probes: probe t at (t, t), its negation at (8 + t, t); C column j holds +-c of probe j.
Tile designed_tile(const Probe* p) {
  Tile t{};
  for (int i = 0; i < 8; ++i) {
    for (int k = 0; k < 8; ++k) {
      t.a[i][k] = p[i].in.a[k];
      t.a[8 + i][k] = -p[i].in.a[k];
      t.b[k][i] = p[i].in.b[k];
    }
    for (int j = 0; j < 8; ++j) {
      t.c[i][j] = p[j].in.c;
      t.c[8 + i][j] = -p[j].in.c;
    }
  }
  return t;
}

// A k8 step of tc_attention's score sum (constructed_tc.hpp, Part): q entries +-sqrt(lambda) log2 e on
// P position dims and sqrt(lambda) P log2 e on dim P (the BOS dim), k entries +-sqrt(lambda) and
// sqrt(lambda) on dim P for BOS, zero above; split into tf32 hi/lo; c the float running sum of the
// steps before it in the kernel's order (lo.hi over all steps, hi.lo, hi.hi).
Input kernel_like(Rng& r) {
  const double lambda = 1 + r.below(1 << 20) * (15.0 / (1 << 20)), log2e = 1.4426950408889634074;
  const int P = r.in(7, 44), D = 8 * ((P + 1 + 7) / 8);
  const bool bos = r.below(4) == 0;
  std::vector<float> q(D, 0.f), k(D, 0.f);
  for (int d = 0; d < P; ++d) {
    q[d] = float(r.sign() * std::sqrt(lambda) * log2e);
    k[d] = bos ? 0.f : float(r.sign() * std::sqrt(lambda));
  }
  q[P] = float(std::sqrt(lambda) * P * log2e);
  k[P] = bos ? float(std::sqrt(lambda)) : 0.f;
  auto hi = [](float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    u += 0xfffu + ((u >> 13) & 1u);  // tf32 to nearest, as tc::tf32_rn
    u &= 0xffffe000u;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  const int KS = D / 8, steps = 3 * KS, s = r.below(steps), part = s / KS, ks = s % KS;
  double acc = 0;
  for (int t = 0; t < s; ++t)
    for (int d = 8 * (t % KS); d < 8 * (t % KS) + 8; ++d) {
      const float qh = hi(q[d]), ql = hi(q[d] - qh), kh = hi(k[d]), kl = hi(k[d] - kh);
      const int pt = t / KS;
      acc += pt == 0 ? double(ql) * kh : pt == 1 ? double(qh) * kl : double(qh) * kh;
    }
  Input in;
  in.c = float(acc);
  for (int j = 0; j < 8; ++j) {
    const int d = 8 * ks + j;
    const float qh = hi(q[d]), ql = hi(q[d] - qh), kh = hi(k[d]), kl = hi(k[d] - kh);
    in.a[j] = part == 0 ? ql : qh;
    in.b[j] = part == 1 ? kl : kh;
  }
  return in;
}

// The exact float neighbours of s (exact double) and the five roundings a result may use.
float fdown(double x) {
  float f = static_cast<float>(x);
  if (double(f) > x) f = std::nextafter(f, -INFINITY);
  return f;
}
float fup(double x) {
  float f = static_cast<float>(x);
  if (double(f) < x) f = std::nextafter(f, INFINITY);
  return f;
}
const char* const kModes[] = {"nearest_even", "nearest_away", "toward_zero", "down", "up"};
float round_mode(double s, int mode) {
  const float lo = fdown(s), hi = fup(s);
  if (lo == hi) return lo;
  const double mid = (double(lo) + double(hi)) / 2;
  switch (mode) {
    case 0: return static_cast<float>(s);
    case 1: return s < mid ? lo : s > mid ? hi : (s > 0 ? hi : lo);
    case 2: return s > 0 ? lo : hi;
    case 3: return lo;
    default: return hi;
  }
}

std::string hexf(float x) {
  char b[64];
  std::snprintf(b, sizeof b, "%a", double(x));
  return b;
}
std::string num(double x) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", x);
  return b;
}

}  // namespace

// The triple scan: k = 20..30 finds the bits an aligned input keeps (24 expected; Fasi et al.: no
// guard bits on V100/T4/A100), 40 and 60 are beyond any plausible accumulator, so 2^-60 survives only
// when l is summed apart from the cancelling pair: the grouping.
static const int kTripleK[] = {20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 40, 60};
static const int kQuarterK[] = {22, 23, 24, 25, 26, 27};

ProbeSet probe_set(std::uint64_t seed) {
  Rng r{seed};
  ProbeSet set;
  std::vector<Probe>& P = set.designed;
  auto pad = [&]() {
    while (P.size() % 8) P.push_back(Probe{});
  };
  // Triples: every pair i < j of leaves, every other l, +1 at i, -1 at j.
  for (Kind kind : {Kind::triple, Kind::triple_quarter}) {
    for (int i = 0; i < kLeaves; ++i)
      for (int j = i + 1; j < kLeaves; ++j)
        for (int l = 0; l < kLeaves; ++l) {
          if (l == i || l == j) continue;
          const int* ks = kind == Kind::triple ? kTripleK : kQuarterK;
          const int nk = kind == Kind::triple ? int(std::size(kTripleK)) : int(std::size(kQuarterK));
          for (int n = 0; n < nk; ++n) {
            Probe p;
            p.kind = kind, p.i = i, p.j = j, p.l = l, p.k = ks[n];
            set_leaf(p.in, i, 1.f);
            set_leaf(p.in, j, -1.f);
            set_leaf(p.in, l, std::ldexp(kind == Kind::triple ? 1.f : 0.75f, -ks[n]));
            P.push_back(p);
          }
        }
    pad();
  }
  // Singles: a large leaf at i and one 2^-k below it at j, k around float's 24 bits.
  for (int i = 0; i < kLeaves; ++i)
    for (int j = 0; j < kLeaves; ++j) {
      if (i == j) continue;
      for (int k = 20; k <= 28; ++k) {
        Probe p;
        p.kind = Kind::single, p.i = i, p.j = j, p.k = k;
        const int e = r.in(-10, 10);
        random_leaf(r, p.in, i, e);
        random_leaf(r, p.in, j, std::ilogb(p.in.leaf(i)) - k);
        P.push_back(p);
      }
    }
  pad();
  // Inexact pairs: the small leaf on the large one's 24-bit grid (so every device inside the
  // assumption forms the exact sum) and the float sum inexact (a carry into the next binade): these
  // read the result's rounding, ties included.
  for (int i = 0; i < kLeaves; ++i)
    for (int j = 0; j < kLeaves; ++j) {
      if (i == j) continue;
      for (int found = 0, tries = 0; found < 4 && tries < 4000; ++tries) {
        Probe p;
        p.kind = Kind::pair_inexact, p.i = i, p.j = j;
        random_leaf(r, p.in, i, r.in(-6, 6));
        if (i > 0) p.in.a[i - 1] = std::fabs(p.in.a[i - 1]);
        const double big = p.in.leaf(i);
        const int e = std::ilogb(big);
        random_leaf(r, p.in, j, e - r.in(0, 3));
        if (j > 0) p.in.a[j - 1] = std::fabs(p.in.a[j - 1]);
        else p.in.c = std::fabs(p.in.c);
        const double small = p.in.leaf(j), grid = std::ldexp(1.0, e - 23);
        if (std::fabs(small) > std::fabs(big) || std::fmod(small, grid) != 0) continue;
        const double s = big + small;  // exact: both on the grid, below 2^(e + 2)
        if (double(float(s)) == s) continue;
        P.push_back(p);
        ++found;
      }
    }
  pad();
  // Many small: one large leaf, the eight others +-2^-k of it, k in 22..26 (both sides of 24 bits).
  for (int n = 0; n < 48; ++n) {
    Probe p;
    p.kind = Kind::many_small, p.i = n % kLeaves;
    const int e = r.in(-8, 10);
    random_leaf(r, p.in, p.i, e);
    for (int l = 0; l < kLeaves; ++l)
      if (l != p.i) random_leaf(r, p.in, l, e - r.in(22, 26));
    P.push_back(p);
  }
  pad();
  // Cancellation: x at i, -(x + one tf32 ulp of x) at j, small leaves around x's alignment boundary.
  for (int n = 0; n < 48; ++n) {
    Probe p;
    p.kind = Kind::cancel, p.i = r.below(kLeaves);
    do p.j = r.below(kLeaves);
    while (p.j == p.i);
    const int e = r.in(-8, 10);
    const float x = r.sign() * tf32_in(r, e);
    set_leaf(p.in, p.i, x);
    set_leaf(p.in, p.j, -(x + std::copysign(std::ldexp(1.f, e - 10), x) * float(r.in(-2, 2))));
    for (int l = 0; l < kLeaves; ++l)
      if (l != p.i && l != p.j) {
        if (r.below(4) == 0) continue;
        random_leaf(r, p.in, l, e - r.in(18, 27));
      }
    P.push_back(p);
  }
  pad();
  for (int n = 0; n < 64; ++n) {
    Probe p;
    p.kind = Kind::kernel_like;
    p.in = kernel_like(r);
    P.push_back(p);
  }
  pad();
  for (int n = 0; n < 32; ++n) {
    Probe p;
    p.kind = Kind::random;
    for (int l = 0; l < kLeaves; ++l)
      if (r.below(5)) random_leaf(r, p.in, l, r.in(-30, 12));
    P.push_back(p);
  }
  pad();

  set.tiles.push_back(integer_tile(r));
  for (std::size_t t = 0; t < P.size(); t += 8) set.tiles.push_back(designed_tile(&P[t]));
  // Random tiles: every entry random (products 2^-30 .. 2^13, a fifth of them zero), 128 more inputs each.
  for (int n = 0; n < 4; ++n) {
    Tile t{};
    for (auto& row : t.a)
      for (float& x : row) x = r.below(5) ? r.sign() * tf32_in(r, r.in(-15, 6)) : 0.f;
    for (auto& row : t.b)
      for (float& x : row) x = r.below(5) ? r.sign() * tf32_in(r, r.in(-15, 6)) : 0.f;
    for (auto& row : t.c)
      for (float& x : row) x = r.below(5) ? r.sign() * float_in(r, r.in(-30, 12)) : 0.f;
    set.tiles.push_back(t);
  }
  check_tiles(set.tiles);
  return set;
}

std::vector<Allowed> allowed_all(const std::vector<Tile>& tiles, unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = unsigned(std::max<std::size_t>(1, std::min<std::size_t>(threads, tiles.size())));
  std::vector<Allowed> a(tiles.size() * 128);
  std::vector<std::string> error(threads);
  auto work = [&](unsigned w) {
    try {
      for (std::size_t t = w; t < tiles.size(); t += threads)
        for (int row = 0; row < 16; ++row)
          for (int col = 0; col < 8; ++col) a[out_index(t, row, col)] = allowed(input_at(tiles[t], row, col));
    } catch (const std::exception& e) {
      error[w] = e.what();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned w = 1; w < threads; ++w) pool.emplace_back(work, w);
  work(0);
  for (auto& th : pool) th.join();
  for (const std::string& e : error)
    if (!e.empty()) throw std::invalid_argument(e);
  return a;
}

Check check(const std::vector<Tile>& tiles, const std::vector<Allowed>& allowed, const std::vector<float>& d,
            std::size_t keep) {
  if (d.size() != tiles.size() * 128 || allowed.size() != d.size())
    throw std::invalid_argument("mma probe check: d or allowed is not tiles x 128");
  Check c;
  for (std::size_t t = 0; t < tiles.size(); ++t)
    for (int row = 0; row < 16; ++row)
      for (int col = 0; col < 8; ++col) {
        const std::size_t o = out_index(t, row, col);
        const Input in = input_at(tiles[t], row, col);
        const Verdict v = classify(in, d[o], allowed[o]);
        ++c.outputs;
        if (t == 0 && double(d[o]) != allowed[o].exact) ++c.layout_mismatches;  // small integers: exact
        if (v == Verdict::inside) {
          ++c.inside;
          continue;
        }
        ++(v == Verdict::outside_bound ? c.outside_bound : c.outside_assumption);
        if (c.first.size() < keep) c.first.push_back({t, row, col, in, d[o], allowed[o], v});
      }
  return c;
}

Check check(const std::vector<Tile>& tiles, const std::vector<float>& d, std::size_t keep) {
  return check(tiles, allowed_all(tiles), d, keep);
}

std::string describe(const Finding& f) {
  std::ostringstream o;
  o << "tile " << f.tile << " output (" << f.row << ", " << f.col << "): " << verdict_name(f.verdict) << "\n";
  o << "  c = " << num(f.in.c) << " (" << hexf(f.in.c) << ")\n";
  for (int k = 0; k < 8; ++k)
    if (f.in.a[k] != 0 && f.in.b[k] != 0)
      o << "  a[" << k << "] b[" << k << "] = " << hexf(f.in.a[k]) << " * " << hexf(f.in.b[k]) << " = "
        << num(f.in.leaf(1 + k)) << "\n";
  o << "  device d = " << num(f.d) << " (" << hexf(f.d) << ")\n";
  o << "  allowed [" << num(f.allowed.lo) << ", " << num(f.allowed.hi) << "] = [" << hexf(f.allowed.lo) << ", "
    << hexf(f.allowed.hi) << "]\n";
  o << "  exact " << num(f.allowed.exact) << ", |d - exact| = " << num(std::fabs(f.d - f.allowed.exact))
    << ", step 1's bound 2 n 2^-23 M = " << num(f.allowed.bound) << " (n = " << f.allowed.products << ")\n";
  return o.str();
}

namespace {

const char* leaf_name(int i) {
  static const char* const n[] = {"c", "p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"};
  return n[i];
}

// Aho, Sagiv, Szymanski, Ullman (1981) BUILD: the rooted tree with the triplets ij|l ("i and j are
// summed before l joins them"), restricted to S: the components of the graph joining i and j whenever
// ij|l for some l in S are the root's children. Empty when S admits no tree (one component).
std::string build(const std::vector<int>& S, const bool sep[kLeaves][kLeaves][kLeaves]) {
  if (S.size() == 1) return leaf_name(S[0]);
  std::vector<int> comp(S.size());
  for (std::size_t a = 0; a < S.size(); ++a) comp[a] = int(a);
  auto find = [&](int x) {
    while (comp[x] != x) x = comp[x] = comp[comp[x]];
    return x;
  };
  for (std::size_t a = 0; a < S.size(); ++a)
    for (std::size_t b = a + 1; b < S.size(); ++b)
      for (int l : S)
        if (l != S[a] && l != S[b] && sep[S[a]][S[b]][l]) comp[find(int(a))] = find(int(b));
  std::map<int, std::vector<int>> parts;
  for (std::size_t a = 0; a < S.size(); ++a) parts[find(int(a))].push_back(S[a]);
  if (parts.size() == 1) return "";
  std::vector<std::vector<int>> children;
  for (auto& [root, members] : parts) children.push_back(members);
  std::sort(children.begin(), children.end());
  std::string out = "(";
  for (std::size_t c = 0; c < children.size(); ++c) {
    const std::string sub = build(children[c], sep);
    if (sub.empty()) return "";
    out += (c ? " " : "") + sub;
  }
  return out + ")";
}

}  // namespace

std::string report(const ProbeSet& set, const std::vector<float>& d) {
  if (d.size() != set.tiles.size() * 128) throw std::invalid_argument("mma probe report: d is not tiles x 128");
  std::ostringstream o;
  auto dev = [&](std::size_t t, bool negated) {
    return d[out_index(1 + t / 8, int(t % 8) + (negated ? 8 : 0), int(t % 8))];
  };
  const std::vector<Probe>& P = set.designed;

  std::size_t layout = 0;
  for (int row = 0; row < 16; ++row)
    for (int col = 0; col < 8; ++col) {
      const Input in = input_at(set.tiles[0], row, col);
      double s = 0;
      for (int i = 0; i < kLeaves; ++i) s += in.leaf(i);  // small integers: exact
      if (double(d[out_index(0, row, col)]) != s) ++layout;
    }
  o << "layout: the integer tile (every result exact under any arithmetic): " << layout << " of 128 outputs wrong"
    << (layout ? " -- a register layout or launch error; nothing below is meaningful\n" : "\n");

  // Grouping: ij|l iff 2^-60 at l survives +1 at i and -1 at j.
  bool sep[kLeaves][kLeaves][kLeaves] = {};
  int first_loss[kLeaves][kLeaves][kLeaves];
  std::fill(&first_loss[0][0][0], &first_loss[0][0][0] + kLeaves * kLeaves * kLeaves, 0);
  std::size_t sign_asym = 0;
  for (std::size_t t = 0; t < P.size(); ++t) {
    const Probe& p = P[t];
    if (p.kind != Kind::triple) continue;
    const float small = std::ldexp(1.f, -p.k);
    const bool kept = dev(t, false) == small;
    if (kept != (dev(t, true) == -small)) ++sign_asym;
    if (p.k == 60) sep[p.i][p.j][p.l] = sep[p.j][p.i][p.l] = kept;
    int& fl = first_loss[p.i][p.j][p.l];
    if (!kept && (fl == 0 || p.k < fl)) fl = p.k;
  }
  std::vector<int> all(kLeaves);
  for (int i = 0; i < kLeaves; ++i) all[i] = i;
  const std::string tree = build(all, sep);
  o << "grouping (2^-60 at l survives +1 at i, -1 at j iff l joins them after they cancel): ";
  if (tree.empty())
    o << "no tree of fused sums has these triplets (the device is not a fixed tree, or keeps > 60 bits)\n";
  else
    o << tree << "\n";
  if (sign_asym) o << "  " << sign_asym << " triple probes answered differently from their negation\n";

  // Bits kept: the first k whose 2^-k is lost, over the triples whose three leaves meet in one sum (no
  // two of them summed before the third joins), and over those where l first joins one of the pair in
  // an inner sum: there the loss is the inner sum's result precision (float: 24).
  std::map<int, int> hist, inner;
  for (int i = 0; i < kLeaves; ++i)
    for (int j = i + 1; j < kLeaves; ++j)
      for (int l = 0; l < kLeaves; ++l) {
        if (l == i || l == j || sep[i][j][l]) continue;
        ++(sep[i][l][j] || sep[j][l][i] ? inner : hist)[first_loss[i][j][l]];
      }
  o << "bits an aligned input keeps (first k whose 2^-k is lost against +1 and -1 in one sum; k bits kept):";
  for (auto [k, n] : hist) o << " k = " << k << ": " << n << " triples;";
  o << (hist.empty() ? " no three leaves meet in one sum\n" : "\n");
  if (!inner.empty()) {
    o << "bits of an inner sum's result (2^-k added to +-1 in an inner sum, the other +-1 after it):";
    for (auto [k, n] : inner) o << " k = " << k << ": " << n << " triples;";
    o << "\n";
  }
  // With no three leaves in one sum (binary sums) the inner sums stand in: alignment and their
  // result's rounding together.
  const bool one_sum = !hist.empty();
  int K = 0, most = 0;
  for (auto [k, n] : one_sum ? hist : inner)
    if (n > most && k > 0) K = k, most = n;

  // How an aligned input is cut: 0.75 2^-(K - 1) against a grid of 2^-(K - 1).
  std::map<std::string, int> cuts;
  for (std::size_t t = 0; t < P.size(); ++t) {
    const Probe& p = P[t];
    if (p.kind != Kind::triple_quarter || p.k != K - 1 || sep[p.i][p.j][p.l] ||
        one_sum == (sep[p.i][p.l][p.j] || sep[p.j][p.l][p.i]))
      continue;
    const float g = std::ldexp(1.f, -p.k), pos = dev(t, false), neg = dev(t, true);
    std::string what = pos == 0 && neg == 0     ? "toward zero"
                       : pos == g && neg == -g  ? "to nearest (or away from zero)"
                       : pos == 0 && neg == -g  ? "down (two's complement truncation)"
                       : pos == g && neg == 0   ? "up"
                                                : "other (+" + num(pos) + ", " + num(neg) + ")";
    ++cuts[what];
  }
  o << "how an aligned input is cut (+-0.75 of the last kept bit" << (one_sum ? "" : ", in an inner sum") << "):";
  if (cuts.empty()) o << " not probed (bits kept outside 23..28)";
  for (auto& [w, n] : cuts) o << " " << w << ": " << n << ";";
  o << "\n";

  // The result's rounding: two-leaf sums every device inside the assumption forms exactly.
  int match[5] = {}, total = 0, ties = 0;
  for (std::size_t t = 0; t < P.size(); ++t) {
    const Probe& p = P[t];
    if (p.kind != Kind::pair_inexact) continue;
    for (bool neg : {false, true}) {
      const double s = (neg ? -1 : 1) * (p.in.leaf(p.i) + p.in.leaf(p.j));
      ++total;
      const float lo = fdown(s), hi = fup(s);
      if (s == (double(lo) + double(hi)) / 2) ++ties;
      for (int m = 0; m < 5; ++m) match[m] += round_mode(s, m) == dev(t, neg);
    }
  }
  o << "result rounding (" << total << " inexact two-leaf sums, " << ties << " of them ties; answers matching):";
  for (int m = 0; m < 5; ++m) o << " " << kModes[m] << " " << match[m] << ";";
  o << "\n";

  // The models of model_family() that give every designed output (probe and negation) bit for bit.
  const std::vector<Model> family = model_family();
  std::vector<std::pair<std::size_t, std::size_t>> fits;  // (outputs differing, model)
  for (std::size_t mi = 0; mi < family.size(); ++mi) {
    const Model& m = family[mi];
    std::size_t miss = 0;
    for (std::size_t t = 0; t < P.size(); ++t) {
      const float s = simulate(m, P[t].in);
      Input neg = P[t].in;
      neg.c = -neg.c;
      for (float& a : neg.a) a = -a;
      miss += (s != dev(t, false)) + (simulate(m, neg) != dev(t, true));
    }
    fits.push_back({miss, mi});
  }
  std::stable_sort(fits.begin(), fits.end());
  o << "models of model_family() reproducing all " << 2 * P.size() << " designed outputs:";
  std::size_t shown = 0;
  for (auto& [miss, mi] : fits)
    if (miss == 0) o << "\n  " << family[mi].name << ", tree " << tree_string(family[mi].tree), ++shown;
  if (!shown) {
    o << " none; the closest:";
    for (std::size_t i = 0; i < 3 && i < fits.size(); ++i)
      o << "\n  " << family[fits[i].second].name << ", tree " << tree_string(family[fits[i].second].tree) << ": "
        << fits[i].first << " outputs differ";
  }
  o << "\n";
  return o.str();
}

}  // namespace manyadd::kernels::mma_probe
