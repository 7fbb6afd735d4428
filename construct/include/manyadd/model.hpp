// The 1-layer 4-head transformer of Theorem 4.1 (Cho et al., ICLR 2025, Appendix D) as real weights
// (docs/construction.md restates the construction).
// The residual stream is a sum of named subspaces (the paper's names); every weight is built from
// what it does to named directions, and cites the equation it implements.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "manyadd/format.hpp"

namespace manyadd {

// Hypercube vector v^D_k (Eq. 3): coordinate i (1 = first) is (-1)^(bit i of the D-bit binary
// representation of k-1, most significant first). ||v_k||^2 = D, <v_k, v_j> <= D - 2 for k != j
// (Eq. 4). The paper defines k in [1, 2^D] and uses v_1 for "v_{2^D + 1}"; we extend that rule to
// every k >= 1 as v_k = v_{((k-1) mod 2^D) + 1}, so IDs beyond 2^D alias (this is what an
// undersized D does, and what --dims paper must be able to reproduce).
std::vector<int> hypercube(int D, std::int64_t k);

// Residual layout, d = 19 + 2 P1 + 2 P2 (D.4.1, D.4.2). 0-based indices in code.
struct Layout {
  enum : int {
    NUM = 0, IS_BOS = 1, FULL_ONES = 2, PRE_SUM = 3, PRE_CARRY = 4, PRE_ARROW = 5, PRE_EOS = 6,
    SUM_0 = 7,  // SUM_k = 7 + k, k = 0..9
    ARROW = 17, EOS = 18, POS_BASE = 19
  };
  int P1 = 0, P2 = 0;
  int d() const { return 19 + 2 * P1 + 2 * P2; }
  int POS_1() const { return POS_BASE; }
  int POS_1_NEXT() const { return POS_BASE + P1; }
  int POS_2() const { return POS_BASE + 2 * P1; }
  int POS_2_NEXT() const { return POS_BASE + 2 * P1 + P2; }
  static int SUM(int k) { return SUM_0 + k; }
  // "NUM", ..., "SUM_0".."SUM_9", "ARROW", "EOS", "POS_1[0]" .. "POS_2_NEXT[P2-1]".
  std::vector<std::string> names() const;
};

// One attention head: score(query j, key i) = (K x_i) . (Q x_j); output U V X A (Eq. 23).
struct Head {
  std::string name;    // digit_sum, carry, arrow, eos
  double lambda = 0;   // the scale lambda_h, already folded into Q and K (sqrt on each side)
  Eigen::MatrixXd Q;   // (d_qk, d)
  Eigen::MatrixXd K;   // (d_qk, d)
  Eigen::MatrixXd V;   // (d_v = 1, d)
  Eigen::MatrixXd U;   // (d, d_v = 1)
  int target = 0;      // the residual dimension U writes
};

// The whole model, built from (P1, P2, lambda). The feed-forward layer is one hidden ReLU layer:
// FF(y) = W2 relu(W1 y + b1) + b2 (D.6), and X1 = Y + FF(Y) (D.6.4). Readout: logits = Wout X1
// (Table 24), next token = argmax.
struct ConstructedModel {
  Layout layout;
  std::array<Head, 4> heads;
  Eigen::MatrixXd W1;    // (H, d)   H = 82 hidden units
  Eigen::VectorXd b1;    // (H)
  Eigen::MatrixXd W2;    // (d, H)
  Eigen::VectorXd b2;    // (d)
  Eigen::MatrixXd Wout;  // (14, d)
  std::vector<std::string> hidden_names;  // one per hidden unit, e.g. "f_3[k+9.5]"
  // Embedding tables (D.4): X0[:, k] = tok_emb[token] + pos1_emb[p1] + pos2_emb[p2].
  Eigen::MatrixXd tok_emb;   // (14, d)
  int d() const { return layout.d(); }
};

ConstructedModel build_model(int P1, int P2, const std::array<double, 4>& lambdas);
inline ConstructedModel build_model(int P1, int P2, double lambda) {
  return build_model(P1, P2, {lambda, lambda, lambda, lambda});
}

// The initial residual stream X0 (d, N) of a token sequence with position IDs (Table 4).
Eigen::MatrixXd embed(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                      const PositionIds& ids);
// The position part of one column: [v_p ; v_{p+1}] for p > 0, zero for p = 0 (Eqs. 5-6).
void write_position(const Layout& L, std::int32_t p1, std::int32_t p2, double* column);

// Dimension rules. Ours (the defaults): the smallest P1, P2 whose hypercube holds every position
// ID without aliasing AND whose "next" wrap (v_1 after v_{2^P1}) never meets a real ID 1:
//   P1 = ceil(log2(l + 2)),  P2 = ceil(log2(m + 1)).
// The paper's (D.4.2): P1 = ceil(log2(l)), P2 = ceil(log2(m + 1)) with l = n + 1 + floor(log10 m).
struct Dims {
  int P1 = 0, P2 = 0;
};
int ceil_log2(std::int64_t x);  // smallest P >= 0 with 2^P >= x (x >= 1)
Dims dims_ours(const Shape& s);
Dims dims_paper(const Shape& s);

// Valid offsets with max_pos_i = 2^P_i (D.4.2): s1 in [1, 2^P1 - l], s2 in [1, 2^P2 - m].
std::int64_t max_s1(const Shape& s, int P1);
std::int64_t max_s2(const Shape& s, int P2);

// A sufficient attention scale for sequences of N tokens, from the bound derived in model.cpp
// (unmatched keys carry total weight <= N e^{-2 lambda}); the certificate replaces it by a proof.
double default_lambda(std::int64_t N);

}  // namespace manyadd
