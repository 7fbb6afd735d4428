// The MMA probe (kernels/include/manyadd/kernels/mma_probe.hpp): the one hardware assumption behind
// precision float32-cuda, made testable. On the CPU: the oracle against an independent enumeration in
// exact rationals (GMP) of every tree and every alignment and rounding choice; the oracle's hull
// inside step 1's bound (kernel_rounding.hpp: the derivation the certificate uses); simulated devices
// that the assumption allows (classified inside on every probe) and broken ones (caught, so the probe
// can fail); the report naming the simulated device. On a GPU (MmaProbeGpu, skipped without one): the
// device's own answers, and its report (printed; also written to $MANYADD_MMA_PROBE_REPORT if set).
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/multiprecision/gmp.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "manyadd/kernels/device.hpp"
#include "manyadd/kernels/mma_probe.hpp"
#include "mma_tf32.cuh"  // kernels/src: the instruction's register layout

namespace {

using namespace manyadd::kernels::mma_probe;
using Q = boost::multiprecision::mpq_rational;
using Z = boost::multiprecision::mpz_int;

// The probe set and its oracle, computed once per process (~2 s on 2 cores).
struct Shared {
  ProbeSet set = probe_set();
  std::vector<Allowed> allowed = allowed_all(set.tiles);
};
const Shared& shared() {
  static const Shared s;
  return s;
}

Model model(const std::string& name, Tree tree, int bits, Round align, Round result) {
  Model m;
  m.name = name, m.tree = std::move(tree), m.bits = bits, m.align = align, m.result = result;
  return m;
}

// ---- exact rationals: the twin of the oracle ----
Z floor_div(const Z& n, const Z& d) {  // d > 0
  Z q = n / d;                         // truncates toward zero
  if (q * d > n) q -= 1;
  return q;
}
Q floor_to(const Q& x, const Q& g) {  // the largest multiple of g <= x
  const Q r = x / g;
  return Q(floor_div(numerator(r), denominator(r))) * g;
}
Q ceil_to(const Q& x, const Q& g) { return -floor_to(-x, g); }
int exponent(const Q& x) {  // floor(log2 |x|) of a dyadic x != 0 that double holds exactly
  const double d = x.convert_to<double>();
  EXPECT_EQ(Q(d), x) << "twin: a value double does not hold";
  return std::ilogb(d);
}
Q float_below(const Q& x) {  // the largest float <= x
  float f = float(x.convert_to<double>());
  while (Q(double(f)) > x) f = std::nextafter(f, -INFINITY);
  while (Q(double(std::nextafter(f, INFINITY))) <= x) f = std::nextafter(f, INFINITY);
  return Q(double(f));
}
Q float_above(const Q& x) { return -float_below(-x); }

// Every value some tree of fused sums on the leaf set S can give, when each node aligns each input to
// one of its two neighbours on the grid 2^(e - 23) of its actual largest input and rounds its sum to
// one of the sum's two float neighbours: the assumption with exactly 24 bits, enumerated.
class Enumerate {
 public:
  explicit Enumerate(const std::vector<Q>& leaves) : leaf_(leaves), reach_(1u << leaves.size()) {
    const unsigned full = (1u << leaves.size()) - 1;
    for (unsigned S = 1; S <= full; ++S) {
      if ((S & (S - 1)) == 0) {
        reach_[S] = {leaf_[__builtin_ctz(S)]};
        continue;
      }
      std::vector<unsigned> blocks;
      partitions(S, S, blocks);
    }
  }
  const std::set<Q>& all() const { return reach_.back(); }

 private:
  void partitions(unsigned S, unsigned rest, std::vector<unsigned>& blocks) {
    if (rest == 0) {
      if (blocks.size() >= 2) {
        std::vector<Q> vals;
        node(S, blocks, 0, vals);
      }
      return;
    }
    const unsigned low = rest & (~rest + 1u), others = rest ^ low;
    for (unsigned sub = others;; sub = (sub - 1) & others) {
      blocks.push_back(low | sub);
      partitions(S, rest ^ (low | sub), blocks);
      blocks.pop_back();
      if (sub == 0) break;
    }
  }
  void node(unsigned S, const std::vector<unsigned>& blocks, std::size_t b, std::vector<Q>& vals) {
    if (b < blocks.size()) {
      for (const Q& v : reach_[blocks[b]]) {
        vals.push_back(v);
        node(S, blocks, b + 1, vals);
        vals.pop_back();
      }
      return;
    }
    Q m = 0;
    for (const Q& v : vals) m = std::max(m, Q(abs(v)));
    if (m == 0) {
      reach_[S].insert(Q(0));
      return;
    }
    const Q g = Q(std::ldexp(1.0, exponent(m) - 23));
    std::vector<std::pair<Q, Q>> choice;
    for (const Q& v : vals) choice.push_back({floor_to(v, g), ceil_to(v, g)});
    for (unsigned pick = 0; pick < (1u << vals.size()); ++pick) {
      Q s = 0;
      for (std::size_t i = 0; i < vals.size(); ++i) s += (pick >> i) & 1 ? choice[i].second : choice[i].first;
      reach_[S].insert(float_below(s));
      reach_[S].insert(float_above(s));
    }
  }

  std::vector<Q> leaf_;
  std::vector<std::set<Q>> reach_;
};

Q exact_of(const Input& in) {
  Q s = 0;
  for (int i = 0; i < kLeaves; ++i) s += Q(in.leaf(i));
  return s;
}
Q bound_of(const Input& in) {  // step 1: 2 n 2^-23 M, M = (|c| + sum |p|)(1 + 2^-18)
  Q m = 0;
  int n = 0;
  for (int i = 0; i < kLeaves; ++i) {
    m += abs(Q(in.leaf(i)));
    n += i > 0 && in.leaf(i) != 0;
  }
  return Q(2 * n) * Q(std::ldexp(1.0, -23)) * m * (1 + Q(std::ldexp(1.0, -18)));
}

// Random inputs with L nonzero leaves at random positions, exponents spread over 30 binades below a
// random top, random signs, and now and then an exactly cancelling pair.
std::vector<Input> twin_inputs(unsigned seed, int count) {
  std::mt19937_64 g(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
  std::vector<Input> out;
  while (int(out.size()) < count) {
    Input in;
    const int L = pick(2, 5), top = pick(-8, 8);
    std::vector<int> pos{0, 1, 2, 3, 4, 5, 6, 7, 8};
    std::shuffle(pos.begin(), pos.end(), g);
    for (int n = 0; n < L; ++n) {
      const int e = top - pick(0, 30);
      const float s = pick(0, 1) ? -1.f : 1.f;
      if (pos[n] == 0) {
        in.c = s * std::ldexp(float((1 << 23) + pick(0, (1 << 23) - 1)), e - 23);
      } else {
        in.a[pos[n] - 1] = s * std::ldexp(float(1024 + pick(0, 1023)), e - 10);
        in.b[pos[n] - 1] = std::ldexp(float(1024 + pick(0, 1023)), -10 + pick(-2, 2));
      }
    }
    if (L >= 3 && pick(0, 2) == 0 && pos[0] != 0 && pos[1] != 0) {  // p[pos1] = -p[pos0]
      in.a[pos[1] - 1] = -in.a[pos[0] - 1];
      in.b[pos[1] - 1] = in.b[pos[0] - 1];
    }
    out.push_back(in);
  }
  return out;
}

// ---- CPU tests ----

TEST(MmaProbe, FragmentLayoutCoversEveryElementOnce) {
  // A wrong index here would make every probe wrong; the GPU test's integer tile catches it on a device,
  // this catches a typo without one.
  int a[16][8] = {}, b[8][8] = {}, c[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 4; ++e) {
      ++a[manyadd::kernels::tc::frag_a_row(lane, e)][manyadd::kernels::tc::frag_a_col(lane, e)];
      ++c[manyadd::kernels::tc::frag_c_row(lane, e)][manyadd::kernels::tc::frag_c_col(lane, e)];
    }
    for (int e = 0; e < 2; ++e) ++b[manyadd::kernels::tc::frag_b_row(lane, e)][manyadd::kernels::tc::frag_b_col(lane)];
  }
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 8; ++k) EXPECT_EQ(a[r][k], 1) << "A (" << r << ", " << k << ")";
  for (int k = 0; k < 8; ++k)
    for (int n = 0; n < 8; ++n) EXPECT_EQ(b[k][n], 1) << "B (" << k << ", " << n << ")";
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) EXPECT_EQ(c[r][n], 1) << "C (" << r << ", " << n << ")";
  // The attention kernel's own expressions (constructed_attention.cu): A row g + 8 (e & 1), col t + 4 (e >> 1);
  // B dim t (+ 4), key g; C row g + 8 (e >> 1), key 2t + (e & 1).
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; ++e) {
      EXPECT_EQ(manyadd::kernels::tc::frag_a_row(lane, e), g + 8 * (e & 1));
      EXPECT_EQ(manyadd::kernels::tc::frag_a_col(lane, e), t + 4 * (e >> 1));
      EXPECT_EQ(manyadd::kernels::tc::frag_c_row(lane, e), g + 8 * (e >> 1));
      EXPECT_EQ(manyadd::kernels::tc::frag_c_col(lane, e), 2 * t + (e & 1));
    }
    EXPECT_EQ(manyadd::kernels::tc::frag_b_row(lane, 1), t + 4);
    EXPECT_EQ(manyadd::kernels::tc::frag_b_col(lane), g);
  }
}

TEST(MmaProbe, OracleHullContainsEveryEnumeratedTree) {
  // The twin: every tree, every alignment choice, every rounding, in GMP rationals, on 2..5 nonzero
  // leaves (all 236 trees at 5). Every value must lie in the oracle's [lo, hi]; with two leaves (one
  // tree) the hull must be exactly the enumerated range, so it is not loose where it can be tight.
  std::vector<Input> inputs = twin_inputs(14, 160);
  const ProbeSet& set = shared().set;
  for (std::size_t t = 0; t < set.designed.size(); t += 29) inputs.push_back(set.designed[t].in);
  std::size_t values = 0, two_leaf = 0;
  for (const Input& in : inputs) {
    std::vector<Q> leaves;
    for (int i = 0; i < kLeaves; ++i)
      if (in.leaf(i) != 0) leaves.push_back(Q(in.leaf(i)));
    if (leaves.empty() || leaves.size() > 5) continue;
    const Allowed a = allowed(in);
    const Enumerate en(leaves);
    for (const Q& v : en.all()) {
      ++values;
      ASSERT_TRUE(v >= Q(double(a.lo)) && v <= Q(double(a.hi)))
          << "an enumerated tree gives " << v.convert_to<double>() << " outside [" << a.lo << ", " << a.hi << "]";
    }
    if (leaves.size() == 2) {
      ++two_leaf;
      EXPECT_EQ(*en.all().begin(), Q(double(a.lo)));
      EXPECT_EQ(*en.all().rbegin(), Q(double(a.hi)));
    }
    const double exact = exact_of(in).convert_to<double>();  // for messages only: a few ulps of double
    EXPECT_NEAR(a.exact, exact, std::ldexp(std::fabs(exact), -50));
  }
  std::cout << "[ twin ] " << values << " enumerated values inside the hull, " << two_leaf << " two-leaf hulls exact\n";
  EXPECT_GT(two_leaf, 50u);
}

TEST(MmaProbe, BoundVerdictAgreesWithRationals) {
  // classify's outside_bound decision (Shewchuk expansions) against |d - exact| < bound in GMP, on
  // the float neighbours of exact +- bound, where the two answers differ if the arithmetic is wrong.
  std::size_t decided = 0;
  for (const Input& in : twin_inputs(15, 400)) {
    const Allowed a = allowed(in);
    const Q exact = exact_of(in), bound = bound_of(in);
    for (int side : {-1, 1}) {
      const Q edge = exact + side * bound;
      for (const Q& dq : {float_below(edge), float_above(edge)}) {
        const float d = float(dq.convert_to<double>());
        const Verdict v = classify(in, d, a);
        if (v == Verdict::inside) continue;
        ++decided;
        EXPECT_EQ(v == Verdict::outside_assumption, abs(Q(double(d)) - exact) < bound)
            << "d = " << d << " exact " << exact.convert_to<double>() << " bound " << bound.convert_to<double>();
      }
    }
  }
  EXPECT_GT(decided, 500u);
}

TEST(MmaProbe, HullInsideStepOnesBound) {
  // kernel_rounding.hpp step 1 derives |d - exact| < 2 n 2^-23 M from the assumption; the certificate
  // uses only that. Both ends of every probe's hull must satisfy it (checked in GMP), or the
  // derivation is wrong.
  const Shared& s = shared();
  for (std::size_t t = 0; t < s.set.tiles.size(); ++t)
    for (int row = 0; row < 16; ++row)
      for (int col = 0; col < 8; ++col) {
        const Input in = input_at(s.set.tiles[t], row, col);
        const Allowed& a = s.allowed[(t * 16 + row) * 8 + col];
        const Q exact = exact_of(in), bound = bound_of(in);
        for (float end : {a.lo, a.hi}) {
          const Q err = abs(Q(double(end)) - exact);
          ASSERT_TRUE(bound == 0 ? err == 0 : err < bound)
              << "tile " << t << " (" << row << ", " << col << "): hull end " << end << " off by "
              << err.convert_to<double>() << ", bound " << bound.convert_to<double>();
        }
      }
}

TEST(MmaProbe, DevicesTheAssumptionAllowsAreInside) {
  // Each of these is a tree of fused sums keeping >= 24 bits and rounding by < 1 ulp: Fasi et al.'s
  // V100 (one sum, truncation) and A100 (c + 4 products, then 4 more), round to nearest, pairwise
  // binary sums, a chain of exact fused multiply-adds, more bits than float. All must be inside on
  // every one of the probe set's outputs.
  const Shared& s = shared();
  const Model inside[] = {
      model("fused9 24 bits, to nearest", tree_fused(), 24, Round::nearest_even, Round::nearest_even),
      model("fused9 24 bits, truncating (V100-like)", tree_fused(), 24, Round::toward_zero, Round::toward_zero),
      model("c+4, +4, truncating (A100-like)", tree_groups(4), 24, Round::toward_zero, Round::toward_zero),
      model("pairs 24 bits, to nearest", tree_pairs(), 24, Round::nearest_even, Round::nearest_even),
      model("chain of FMAs", tree_groups(1), 48, Round::nearest_even, Round::nearest_even),
      model("fused9 27 bits, truncating", tree_fused(), 27, Round::toward_zero, Round::toward_zero),
      model("products first, 25 bits, two's complement", tree_products_first(), 25, Round::down, Round::toward_zero),
      model("c+2 ..., 24 bits, down", tree_groups(2), 24, Round::down, Round::down),
  };
  for (const Model& m : inside) {
    check_tree(m.tree);
    const Check c = check(s.set.tiles, s.allowed, simulate(m, s.set.tiles));
    EXPECT_EQ(c.layout_mismatches, 0u) << m.name;
    EXPECT_EQ(c.inside, c.outputs) << m.name << ": " << (c.first.empty() ? "" : describe(c.first[0]));
  }
  EXPECT_GT(s.set.tiles.size() * 128, 50000u);
}

TEST(MmaProbe, BrokenDevicesAreCaught) {
  // The probe must be able to fail. 20 bits: far outside, step 1's bound broken too (the float32-cuda
  // proofs void). 23 bits, a result off by 1..2 ulps, a product aligned one binade too high: outside
  // the assumption.
  const Shared& s = shared();
  struct Case {
    Model m;
    bool bound_broken;
  };
  Model window = model("A100-like, product exponents e_a + e_b + 1", tree_groups(4), 24, Round::toward_zero,
                       Round::toward_zero);
  window.product_window = true;
  Model extra = model("fused9 24 bits, result 1..2 ulps", tree_fused(), 24, Round::toward_zero, Round::toward_zero);
  extra.extra_ulps = 1;
  const Case cases[] = {
      {model("fused9 20 bits", tree_fused(), 20, Round::toward_zero, Round::toward_zero), true},
      {model("pairs 20 bits, to nearest", tree_pairs(), 20, Round::nearest_even, Round::nearest_even), true},
      {model("fused9 23 bits", tree_fused(), 23, Round::toward_zero, Round::toward_zero), false},
      {extra, false},
      {window, false},
  };
  for (const Case& k : cases) {
    const Check c = check(s.set.tiles, s.allowed, simulate(k.m, s.set.tiles));
    EXPECT_EQ(c.layout_mismatches, 0u) << k.m.name;
    EXPECT_GT(c.outside_assumption + c.outside_bound, 0u) << k.m.name << " passed every probe";
    if (k.bound_broken) {
      EXPECT_GT(c.outside_bound, 0u) << k.m.name;
    }
    ASSERT_FALSE(c.first.empty());
    std::cout << "[ caught ] " << k.m.name << ": " << c.outside_assumption << " outside the assumption, "
              << c.outside_bound << " outside the bound, of " << c.outputs << "; first:\n"
              << describe(c.first[0]);
  }
}

TEST(MmaProbe, LayoutErrorIsNamed) {
  // A device that transposes B (a register layout error) must be told apart from a rounding finding.
  const Shared& s = shared();
  std::vector<Tile> swapped = s.set.tiles;
  for (Tile& t : swapped)
    for (int k = 0; k < 8; ++k)
      for (int n = 0; n < k; ++n) std::swap(t.b[k][n], t.b[n][k]);
  const Model m = model("fused9", tree_fused(), 24, Round::nearest_even, Round::nearest_even);
  const Check c = check(s.set.tiles, s.allowed, simulate(m, swapped));
  EXPECT_GT(c.layout_mismatches, 0u);
  EXPECT_NE(report(s.set, simulate(m, swapped)).find("register layout or launch error"), std::string::npos);
}

TEST(MmaProbe, ReportNamesSimulatedDevices) {
  const Shared& s = shared();
  struct Case {
    Model m;
    const char* cut;
  };
  const Case cases[] = {
      {model("a100", tree_groups(4), 24, Round::toward_zero, Round::toward_zero), "toward zero: "},
      {model("v100", tree_fused(), 24, Round::toward_zero, Round::toward_zero), "toward zero: "},
      {model("pairs", tree_pairs(), 24, Round::nearest_even, Round::nearest_even), "to nearest (or away from zero): "},
      {model("products first", tree_products_first(), 25, Round::down, Round::toward_zero), "down (two's complement"},
  };
  for (const Case& k : cases) {
    const std::string r = report(s.set, simulate(k.m, s.set.tiles));
    EXPECT_NE(r.find("grouping (2^-60 at l survives +1 at i, -1 at j iff l joins them after they cancel): " +
                     tree_string(k.m.tree) + "\n"),
              std::string::npos)
        << k.m.name << ":\n" << r;
    EXPECT_NE(r.find("k = " + std::to_string(k.m.bits) + ": "), std::string::npos) << k.m.name << ":\n" << r;
    EXPECT_NE(r.find(k.cut), std::string::npos) << k.m.name << ":\n" << r;
    // The family member with the same tree, bits and roundings reproduces every designed output.
    std::string name;
    for (const Model& f : model_family())
      if (f.tree == k.m.tree && f.bits == k.m.bits && f.align == k.m.align && f.result == k.m.result) name = f.name;
    ASSERT_FALSE(name.empty());
    EXPECT_NE(r.find("\n  " + name + ", tree"), std::string::npos) << k.m.name << ":\n" << r;
  }
}

TEST(MmaProbe, RejectsInputsOutsideTheDomain) {
  Input in;
  in.a[0] = 1.f + 0x1p-20f;  // 21 significant bits: not tf32
  in.b[0] = 1.f;
  EXPECT_THROW(allowed(in), std::invalid_argument);
  in.a[0] = 0x1p-60f, in.b[0] = 0x1p-60f;  // product 2^-120: below the domain
  EXPECT_THROW(allowed(in), std::invalid_argument);
  in.a[0] = 1.f, in.c = NAN;
  EXPECT_THROW(allowed(in), std::invalid_argument);
  EXPECT_THROW(check_tiles({}), std::invalid_argument);
  std::vector<Tile> bad(1, Tile{});
  bad[0].b[3][5] = 1.f + 0x1p-15f;
  try {
    run_on_device(bad);  // validated before any device call, with or without CUDA
    FAIL() << "a non-tf32 operand was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("b[3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tree_groups(3), std::invalid_argument);
  EXPECT_THROW(check_tree({{0, 1}, {1, 2}}), std::invalid_argument);
}

// ---- on the device ----

TEST(MmaProbeNoDevice, RunThrowsWithTheReason) {
  std::string why;
  if (manyadd::kernels::device_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(run_on_device(probe_set().tiles), std::runtime_error);
}

TEST(MmaProbeGpu, AccumulationWithinAssumption) {
  std::string why;
  if (!manyadd::kernels::device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Shared& s = shared();
  const std::vector<float> d = run_on_device(s.set.tiles);
  const std::string rep = report(s.set, d);
  std::cout << "[ mma probe ] " << s.set.tiles.size() << " tiles, " << d.size() << " outputs\n" << rep;
  if (const char* path = std::getenv("MANYADD_MMA_PROBE_REPORT")) std::ofstream(path) << rep;
  const Check c = check(s.set.tiles, s.allowed, d);
  std::cout << "[ mma probe ] inside " << c.inside << ", outside the assumption " << c.outside_assumption
            << ", outside step 1's bound " << c.outside_bound << " (of " << c.outputs << ")\n";
  ASSERT_EQ(c.layout_mismatches, 0u) << "the integer tile is wrong: a register layout or launch error, not a "
                                        "finding about the MMA";
  if (!c.first.empty())
    ADD_FAILURE() << (c.outside_bound ? "the device breaks step 1's bound: the float32-cuda proofs are void.\n"
                                      : "the device is outside the stated assumption (step 1's bound still holds "
                                        "on every probe).\n")
                  << describe(c.first[0]);
  // The same instruction on the same operands twice: the twin and the tests assume a deterministic MMA.
  const std::vector<float> again = run_on_device(s.set.tiles);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < d.size(); ++i) differ += std::memcmp(&d[i], &again[i], 4) != 0;
  EXPECT_EQ(differ, 0u) << "outputs that changed between two runs";
}

}  // namespace
