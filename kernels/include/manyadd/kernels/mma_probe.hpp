// A probe of the one undocumented operation behind precision `float32-cuda`: the accumulation inside
// `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`, the score instruction of the tensor-core
// attention kernel (src/constructed_attention.cu). The certificate assumes (constructed_tc.hpp,
// proofs-check/include/manyadd/kernel_rounding.hpp step 1) that a k8 step d = c + sum_k a_k b_k is
// some tree of fused sums, each keeping >= 24 bits of every input aligned to its largest input and
// rounding its result by < 1 ulp of float. This header runs single steps on the device
// (src/mma_probe.cu), computes on the host, exactly, what the assumption allows for each
// (src/mma_probe.cpp), classifies the device's answers, and describes what the device does (bits kept,
// rounding, grouping: the probes of Fasi, Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA
// tensor cores", PeerJ CS 2021). Simulated devices (`Model`) test the oracle without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace manyadd::kernels::mma_probe {

// One output of one k8 step: d = c + sum_{k<8} a[k] b[k]. Its 9 inputs ("leaves"): leaf 0 is c,
// leaf 1 + k the product a[k] b[k] (exact in double and in float: 11 x 11 significand bits).
struct Input {
  float c = 0;
  float a[8] = {}, b[8] = {};
  double leaf(int i) const { return i == 0 ? double(c) : double(a[i - 1]) * double(b[i - 1]); }
};
constexpr int kLeaves = 9;

// The operands of one mma.sync: A (16 x 8, row-major), B (8 x 8, [k][n]), C (16 x 8, row-major); D is
// 16 x 8 row-major. Output (row, col) is the Input (c[row][col], a[row][.], b[.][col]).
struct Tile {
  float a[16][8];
  float b[8][8];
  float c[16][8];
};
Input input_at(const Tile& t, int row, int col);

// The probe's domain, checked before anything runs (std::invalid_argument naming the operand): a and
// b exact tf32 values (low 13 bits zero, finite), c finite; every nonzero c and product of magnitude
// in [2^-100, 2^100]. Inside it every value the oracle forms is a normal float or exact in double.
void check_input(const Input& in);
void check_tiles(const std::vector<Tile>& tiles);

// One mma.sync per tile on the device, the kernel's own instruction and register layout
// (src/mma_tf32.cuh); returns D, tiles.size() x 16 x 8. Validates first (check_tiles, 1..2^20 tiles);
// throws std::runtime_error on CUDA errors or in a build without CUDA.
std::vector<float> run_on_device(const std::vector<Tile>& tiles);

// ---- the oracle ----
// Every result the assumption allows, as an interval [lo, hi]: the hull, over every tree of fused sums
// on the nonzero leaves (zeros are exact and change no alignment), of the results of that tree when
// each node aligns every input to its largest input's exponent e keeping >= 24 bits (truncated or
// rounded: an aligned input lies between the neighbours of the input on the grid 2^(e - 23)) and
// rounds its sum to float or wider with error < 1 ulp (between the float neighbours of the sum). A
// device outside it is outside the assumption; one inside it may still follow no single tree (a hull).
struct Allowed {
  float lo = 0, hi = 0;
  double exact = 0;  // c + sum of the products, rounded to double (for messages)
  double bound = 0;  // step 1's bound 2 n 2^-23 M, M = (|c| + sum |products|)(1 + 2^-18) (for messages)
  int products = 0;  // n: nonzero products
};
Allowed allowed(const Input& in);

// inside: in [lo, hi]. outside_assumption: outside, but |d - exact| < 2 n 2^-23 M still holds, the
// bound kernel_rounding.hpp step 1 derives from the assumption and the certificate uses.
// outside_bound: that bound fails too (decided exactly), or d is not finite: the step-1 derivation does
// not hold for this device and the float32-cuda proofs are void.
enum class Verdict { inside, outside_assumption, outside_bound };
const char* verdict_name(Verdict v);
Verdict classify(const Input& in, float d, const Allowed& allowed);

// ---- simulated devices ----
// A tree of fused sums: nodes in evaluation order, node i = its children; a child < 9 is a leaf, a
// child >= 9 is node child - 9; the last node is the root. Each leaf appears once.
using Tree = std::vector<std::vector<int>>;
Tree tree_fused();          // (c p0 .. p7): one 9-input sum
Tree tree_groups(int g);    // c with p0..p(g-1), then that result with the next g products, ...
                            // g = 4: ((c p0 p1 p2 p3) p4 p5 p6 p7), A100's measured grouping; g = 1: a chain
Tree tree_pairs();          // pairwise: ((c p0)(p1 p2))((p3 p4)(p5 p6)) ... p7, binary fused sums
Tree tree_products_first(); // ((p0 p1 p2 p3)(p4 p5 p6 p7) c)
std::string tree_string(const Tree& t);
void check_tree(const Tree& t);  // std::invalid_argument unless every leaf appears once and children precede

enum class Round { toward_zero, nearest_even, down };
const char* round_name(Round r);
// A device: each node aligns its inputs to the largest one's exponent e keeping `bits` bits (grid
// 2^(e - bits + 1), by `align`), adds exactly and rounds the sum to float by `result`; `extra_ulps`
// then moves an inexact result that many floats further toward zero (a broken device). bits in
// [8, 48] (48: as good as exact here). product_window: a broken device that takes a product's
// exponent as e_a + e_b + 1 (room for a significand in [2, 4)) instead of its own, so that against a
// product whose significand is below 2 it keeps one bit less.
struct Model {
  std::string name;
  Tree tree;
  int bits = 24;
  Round align = Round::toward_zero, result = Round::toward_zero;
  int extra_ulps = 0;
  bool product_window = false;
};
float simulate(const Model& m, const Input& in);
std::vector<float> simulate(const Model& m, const std::vector<Tile>& tiles);
// The candidates the report matches the device against: trees x bits {22..28, 48} x alignment
// {toward zero, nearest, down} x result {toward zero, nearest}.
std::vector<Model> model_family();

// ---- the probe set ----
// Designed probes (8 per tile: probe t at (t, t), its negation at (8 + t, t); C[i][j] = +-c of probe
// j, so the other 112 outputs are further inputs, all checked), after tile 0 (small integers: every
// result exact under any arithmetic, so a mismatch there is a layout or launch error), then random tiles.
enum class Kind {
  triple,         // +1 at leaf i, -1 at leaf j, 2^-k at leaf l: 2^-k survives iff l is not aligned against them
  triple_quarter, // the same with 0.75 2^-k: how an aligned input is cut (toward zero or to nearest)
  single,         // one large leaf and one small one 2^-k below it: bits kept, no grouping involved
  pair_inexact,   // two leaves, the small on the large one's 24-bit grid, float sum inexact: the result's rounding
  many_small,     // one large leaf and eight small ones near its alignment boundary
  cancel,         // two nearly cancelling large leaves and small ones
  kernel_like,    // a k8 step of the attention kernel's score sum (3xTF32 parts, its accumulator)
  random,
};
struct Probe {
  Input in;
  Kind kind = Kind::random;
  int i = -1, j = -1, l = -1, k = 0;  // triple*: positions and k; single, pair_inexact: i large, j small
};
struct ProbeSet {
  std::vector<Probe> designed;  // probe t: tile 1 + t / 8, output (t % 8, t % 8); negated (8 + t % 8, t % 8)
  std::vector<Tile> tiles;
};
ProbeSet probe_set(std::uint64_t seed = 1);

// ---- checking and describing a device ----
struct Finding {
  std::size_t tile = 0;
  int row = 0, col = 0;
  Input in;
  float d = 0;
  Allowed allowed;
  Verdict verdict = Verdict::inside;
};
struct Check {
  std::size_t outputs = 0, inside = 0, outside_assumption = 0, outside_bound = 0;
  std::size_t layout_mismatches = 0;  // tile 0 (the probe set's integer tile): d != the exact sum
  std::vector<Finding> first;         // the first few outputs outside (tile order)
};
// The oracle of every output of every tile (tiles.size() x 128, row-major per tile), on up to `threads`
// threads (0: the hardware's): the expensive part (~1 ms per output with 9 nonzero leaves), shared by
// every device checked against the same tiles.
std::vector<Allowed> allowed_all(const std::vector<Tile>& tiles, unsigned threads = 0);
// Every output (d: tiles.size() x 128, as run_on_device returns) classified; the first tile must be
// probe_set's integer tile.
Check check(const std::vector<Tile>& tiles, const std::vector<Allowed>& allowed, const std::vector<float>& d,
            std::size_t keep = 5);
Check check(const std::vector<Tile>& tiles, const std::vector<float>& d, std::size_t keep = 5);
std::string describe(const Finding& f);  // the input (decimal and hex), d, [lo, hi], exact, bound, verdict

// What the device does, from the designed probes: the grouping read off the triples (a tree rebuilt
// from which leaves meet in which sum, Aho et al.'s BUILD), the bits an aligned input keeps, how it is
// cut, how the result is rounded, and which models of model_family() reproduce every designed output.
std::string report(const ProbeSet& set, const std::vector<float>& d);

}  // namespace manyadd::kernels::mma_probe
