// Gradient checks of the grid universal transformer (learn/include/manyadd/learn/grid/grid_layers.hpp,
// grid_model.hpp, grid_train.hpp's group loss): every new layer's backward against central finite
// differences in double (grad_check.hpp: step 1e-5, relative tolerance 1e-6, and why), Seq2Grid and
// the halting distribution against their definitions written again here, and the whole model's
// gradient -- the group loss of PonderNet training with both regularizers, and fixed-time training --
// on a tiny grid, every parameter.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <random>

#include "manyadd/learn/grid/grid_layers.hpp"
#include "manyadd/learn/grid/grid_model.hpp"
#include "manyadd/learn/grid/grid_train.hpp"

#include "grad_check.hpp"

using namespace manyadd;
using namespace manyadd::learn;
using namespace manyadd::learn::grid;
using namespace manyadd::testing;

// Each layer: loss = <out, R> for a random R, so d loss / d out = R.
RC_GTEST_PROP(GridGrad, LinearWithBias, ()) {
  const int R = *rc::gen::inRange(1, 6), C = *rc::gen::inRange(1, 7), OC = *rc::gen::inRange(1, 7);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  auto x = randn(g, std::size_t(R * C)), w = randn(g, std::size_t(OC * C)), b = randn(g, std::size_t(OC)),
       Rr = randn(g, std::size_t(R * OC));
  std::vector<double> out(Rr.size());
  auto f = [&] {
    linear_forward(out.data(), x.data(), w.data(), b.data(), R, C, OC);
    return dot(out, Rr);
  };
  f();
  std::vector<double> dx(x.size(), 0.0), dw(w.size(), 0.0), db(b.size(), 0.0);
  linear_backward(dx.data(), dw.data(), db.data(), Rr.data(), x.data(), w.data(), R, C, OC);
  RC_ASSERT(check(x, dx, f) <= kTol);
  RC_ASSERT(check(w, dw, f) <= kTol);
  RC_ASSERT(check(b, db, f) <= kTol);
}

RC_GTEST_PROP(GridGrad, SiluAndSoftmax, ()) {
  const int R = *rc::gen::inRange(1, 5), N = *rc::gen::inRange(1, 6);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  auto x = randn(g, std::size_t(R * N), 2.0), Rr = randn(g, std::size_t(R * N));
  std::vector<double> out(x.size());
  auto fs = [&] {
    silu_forward(out.data(), x.data(), std::int64_t(x.size()));
    return dot(out, Rr);
  };
  fs();
  std::vector<double> dx(x.size(), 0.0);
  silu_backward(dx.data(), Rr.data(), x.data(), std::int64_t(x.size()));
  RC_ASSERT(check(x, dx, fs) <= kTol);
  auto fm = [&] {
    softmax_rows_forward(out.data(), x.data(), R, N);
    return dot(out, Rr);
  };
  fm();
  std::fill(dx.begin(), dx.end(), 0.0);
  softmax_rows_backward(dx.data(), Rr.data(), out.data(), R, N);
  RC_ASSERT(check(x, dx, fm) <= kTol);
}

// Dropout: the mask is a fixed function of the stream; kept units are scaled by 1 / (1 - p).
TEST(GridLayers, DropoutMaskIsTheStreamsAndScaled) {
  std::vector<double> m1(10001), m2(10001);
  DropoutStream s1(42), s2(42);
  dropout_mask(m1.data(), std::int64_t(m1.size()), 0.1, s1);
  dropout_mask(m2.data(), std::int64_t(m2.size()), 0.1, s2);
  EXPECT_EQ(m1, m2);
  int dropped = 0;
  for (double v : m1) {
    EXPECT_TRUE(v == 0.0 || std::abs(v - 1.0 / 0.9) < 1e-15);
    dropped += v == 0.0;
  }
  // 10001 Bernoulli(0.1) draws: mean 1000, sd 30; 5 sd either side
  EXPECT_NEAR(dropped, 1000, 150);
  // the float masks (the fast device's kernels, 8 draws per vector) are the same stream, bit for bit,
  // at every length (whole vectors, tails, odd counts) and leave the stream where the loop leaves it
  for (const std::int64_t n : {1, 2, 15, 16, 17, 31, 33, 100, 10001}) {
    std::vector<double> md(std::size_t(n) + 1, -1.0);
    std::vector<float> mf(std::size_t(n) + 1, -1.f);
    DropoutStream sd(7 + std::uint64_t(n)), sf(7 + std::uint64_t(n));
    dropout_mask(md.data(), n, 0.3, sd);
    dropout_mask(mf.data(), n, 0.3, sf);
    for (std::size_t i = 0; i <= std::size_t(n); ++i) ASSERT_EQ(double(mf[i]), double(float(md[i]))) << n << ": " << i;
    EXPECT_EQ(sd.state, sf.state) << n;
  }
  std::vector<double> x = {1, 2, 3}, out(3), dx(3, 0.0), mask = {0.0, 2.0, 1.0};
  dropout_forward(out.data(), x.data(), mask.data(), 3);
  EXPECT_EQ(out, (std::vector<double>{0, 4, 3}));
  dropout_backward(dx.data(), x.data(), mask.data(), 3);
  EXPECT_EQ(dx, (std::vector<double>{0, 4, 3}));
}

namespace {
// Eq. 3 written again from its definition (1-based in the paper; 0-based here): TLU and NLP as whole
// grids, then the weighted sum.
std::vector<double> tlu(const std::vector<double>& G, const double* x, int H, int W, int C) {
  std::vector<double> out = G;
  for (int j = 0; j < W; ++j)
    for (int c = 0; c < C; ++c) out[std::size_t(j * C + c)] = j == W - 1 ? x[c] : G[std::size_t((j + 1) * C + c)];
  (void)H;
  return out;
}
std::vector<double> nlp(const std::vector<double>& G, const double* x, int H, int W, int C) {
  std::vector<double> out(G.size(), 0.0);
  for (int c = 0; c < C; ++c) out[std::size_t((W - 1) * C + c)] = x[c];
  for (int i = 1; i < H; ++i)
    for (int e = 0; e < W * C; ++e) out[std::size_t(i * W * C + e)] = G[std::size_t((i - 1) * W * C + e)];
  return out;
}
}  // namespace

RC_GTEST_PROP(GridGrad, Seq2GridIsEq3AndItsGradient, ()) {
  const int S = *rc::gen::inRange(1, 6), H = *rc::gen::inRange(1, 4), W = *rc::gen::inRange(1, 5),
            C = *rc::gen::inRange(1, 4);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  auto x = randn(g, std::size_t(S * C)), act = randn(g, std::size_t(S * 3)), Rr = randn(g, std::size_t(H * W * C));
  const std::size_t n = std::size_t(H * W * C);
  // the definition
  std::vector<double> G(n, 0.0);
  for (int t = 0; t < S; ++t) {
    const double* a = act.data() + t * 3;
    const auto T = tlu(G, x.data() + t * C, H, W, C), Nn = nlp(G, x.data() + t * C, H, W, C);
    for (std::size_t e = 0; e < n; ++e) G[e] = a[0] * T[e] + a[1] * Nn[e] + a[2] * G[e];
  }
  std::vector<double> grids((std::size_t(S) + 1) * n), last(n);
  seq2grid_forward(grids.data(), x.data(), act.data(), S, H, W, C, true);
  seq2grid_forward(last.data(), x.data(), act.data(), S, H, W, C, false);
  for (std::size_t e = 0; e < n; ++e) {
    RC_ASSERT(std::abs(grids[std::size_t(S) * n + e] - G[e]) <= 1e-12 * (1 + std::abs(G[e])));
    RC_ASSERT(last[e] == grids[std::size_t(S) * n + e]);
  }
  auto f = [&] {
    seq2grid_forward(grids.data(), x.data(), act.data(), S, H, W, C, true);
    return dot(std::vector<double>(grids.end() - std::int64_t(n), grids.end()), Rr);
  };
  f();
  std::vector<double> dx(x.size(), 0.0), dact(act.size(), 0.0), dgrid = Rr, scratch(n);
  seq2grid_backward(dx.data(), dact.data(), dgrid.data(), scratch.data(), grids.data(), x.data(), act.data(), S, H, W, C);
  RC_ASSERT(check(x, dx, f) <= kTol);
  RC_ASSERT(check(act, dact, f) <= kTol);
}

// Hard actions lay out "523+102+9416=" as the paper's Fig. 4 describes it: digits appended to the top
// row (TLU), '+' pushing a new row (NLP) which it opens, '=' and PAD ignored (NOP) -- the column method.
TEST(GridLayers, Seq2GridWithHardActionsWritesTheColumnMethod) {
  const std::string s = "523+102+9416=__";
  const int H = 4, W = 6, C = 1, S = int(s.size());
  std::vector<double> x(static_cast<std::size_t>(S)), act(std::size_t(S) * 3, 0.0);
  for (int t = 0; t < S; ++t) {
    const char ch = s[std::size_t(t)];
    x[std::size_t(t)] = ch >= '0' && ch <= '9' ? ch - '0' : ch == '+' ? 10 : 20;
    act[std::size_t(t * 3 + (ch >= '0' && ch <= '9' ? 0 : ch == '+' ? 1 : 2))] = 1;
  }
  std::vector<double> G(std::size_t(H * W * C));
  seq2grid_forward(G.data(), x.data(), act.data(), S, H, W, C, false);
  const std::vector<double> want = {0, 10, 9, 4, 1, 6,  // top row: the last operand right-aligned, its '+' before it
                                    0, 0, 10, 1, 0, 2,  // the second
                                    0, 0, 0, 5, 2, 3,   // the first operand, pushed down twice
                                    0, 0, 0, 0, 0, 0};
  EXPECT_EQ(G, want);
}

RC_GTEST_PROP(GridGrad, GroupedLinear, ()) {
  const int R = *rc::gen::inRange(1, 5), G = *rc::gen::inRange(1, 4), CG = *rc::gen::inRange(1, 4), C = G * CG;
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  auto x = randn(g, std::size_t(R * C)), w = randn(g, std::size_t(C * CG)), Rr = randn(g, std::size_t(R * C));
  std::vector<double> out(Rr.size());
  auto f = [&] {
    grouped_linear_forward(out.data(), x.data(), w.data(), R, C, G);
    return dot(out, Rr);
  };
  f();
  // the definition: output channel o reads the input channels of its group through row o of w
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < C; ++o) {
      double s = 0;
      for (int c = 0; c < CG; ++c) s += w[std::size_t(o * CG + c)] * x[std::size_t(r * C + (o / CG) * CG + c)];
      RC_ASSERT(std::abs(s - out[std::size_t(r * C + o)]) <= 1e-12 * (1 + std::abs(s)));
    }
  std::vector<double> dx(x.size(), 0.0), dw(w.size(), 0.0);
  grouped_linear_backward(dx.data(), dw.data(), Rr.data(), x.data(), w.data(), R, C, G);
  RC_ASSERT(check(x, dx, f) <= kTol);
  RC_ASSERT(check(w, dw, f) <= kTol);
}

RC_GTEST_PROP(GridGrad, LocalAttention, ()) {
  const int H = *rc::gen::inRange(1, 4), W = *rc::gen::inRange(1, 4), NH = *rc::gen::inRange(1, 4),
            DH = *rc::gen::inRange(1, 3), C = NH * DH, K = *rc::gen::element(1, 3);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  const std::size_t n = std::size_t(H * W * C);
  auto q = randn(g, n), k = randn(g, n), v = randn(g, n), rel = randn(g, std::size_t(K * K * C)),
       qe = randn(g, std::size_t(C)), Rr = randn(g, n);
  std::vector<double> out(n), att(std::size_t(H * W * NH * K * K));
  auto f = [&] {
    local_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), rel.data(), qe.data(), H, W, C, NH, K);
    return dot(out, Rr);
  };
  f();
  // Eq. 7 at one cell written again: (q + s).(k + r) over the window, cells outside contributing k = v = 0
  {
    const int i = H / 2, j = W / 2, P = K / 2;
    for (int m = 0; m < NH; ++m) {
      std::vector<double> sc;
      for (int u = 0; u < K; ++u)
        for (int vv = 0; vv < K; ++vv) {
          const int a = i + u - P, b = j + vv - P;
          const bool in = a >= 0 && a < H && b >= 0 && b < W;
          double s = 0;
          for (int c = m * DH; c < (m + 1) * DH; ++c)
            s += (q[std::size_t((i * W + j) * C + c)] + qe[std::size_t(c)]) *
                 ((in ? k[std::size_t((a * W + b) * C + c)] : 0.0) + rel[std::size_t((u * K + vv) * C + c)]);
          sc.push_back(s);
        }
      double mx = *std::max_element(sc.begin(), sc.end()), z = 0;
      for (double& s : sc) z += (s = std::exp(s - mx));
      for (int c = m * DH; c < (m + 1) * DH; ++c) {
        double y = 0;
        for (int u = 0; u < K; ++u)
          for (int vv = 0; vv < K; ++vv) {
            const int a = i + u - P, b = j + vv - P;
            if (a >= 0 && a < H && b >= 0 && b < W) y += sc[std::size_t(u * K + vv)] / z * v[std::size_t((a * W + b) * C + c)];
          }
        RC_ASSERT(std::abs(y - out[std::size_t((i * W + j) * C + c)]) <= 1e-12 * (1 + std::abs(y)));
      }
    }
  }
  std::vector<double> dq(n, 0.0), dk(n, 0.0), dv(n, 0.0), drel(rel.size(), 0.0), dqe(qe.size(), 0.0);
  local_attention_backward(dq.data(), dk.data(), dv.data(), drel.data(), dqe.data(), Rr.data(), att.data(), q.data(),
                           k.data(), v.data(), rel.data(), qe.data(), H, W, C, NH, K);
  RC_ASSERT(check(q, dq, f) <= kTol);
  RC_ASSERT(check(k, dk, f) <= kTol);
  RC_ASSERT(check(v, dv, f) <= kTol);
  RC_ASSERT(check(rel, drel, f) <= kTol);
  RC_ASSERT(check(qe, dqe, f) <= kTol);
}

// The fast device's local attention (one channel per head, heads = d_emb: the paper's h = 64) against the
// double layer above on the same (float) inputs: the forward's y and A, and the five gradients of the
// backward. fp32 per entry: a score is (q + s)(k + r), 3 roundings; exp's argument z - max is rounded
// (u32 |z - max|, |z| < 30 here) and the polynomial adds 2 ulp, so each A_uv is within (30 + 8) u32 relative;
// y and the gradients sum at most 49 such terms (K = 7) with a few more roundings each: within
// 128 u32 (~7.6e-6) of the sum of the terms' magnitudes, which the bound takes as the tensor's largest
// exact entry plus 1 (the inputs are N(0, 1)). Channel counts 1-40 run whole 16-channel vectors and tails.
RC_GTEST_PROP(GridGrad, FastLocalAttentionIsTheDoubleOneInFloat, ()) {
  const int H = *rc::gen::inRange(1, 6), W = *rc::gen::inRange(1, 6), C = *rc::gen::inRange(1, 41),
            K = *rc::gen::element(1, 3, 5, 7);
  RC_ASSERT(fast_local_attention_runs(C, C, K));
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  const std::size_t n = std::size_t(H * W * C), nr = std::size_t(K * K * C), na = std::size_t(H * W * C * K * K);
  auto rounded = [](std::vector<double> x) {
    for (double& e : x) e = double(float(e));
    return x;
  };
  const auto q = rounded(randn(g, n)), k = rounded(randn(g, n)), v = rounded(randn(g, n)),
             rel = rounded(randn(g, nr)), qe = rounded(randn(g, std::size_t(C))), dy = rounded(randn(g, n));
  auto f32 = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  const auto qf = f32(q), kf = f32(k), vf = f32(v), relf = f32(rel), qef = f32(qe), dyf = f32(dy);
  std::vector<double> out(n), att(na), dq(n, 0.0), dk(n, 0.0), dv(n, 0.0), drel(nr, 0.0), dqe(std::size_t(C), 0.0);
  local_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), rel.data(), qe.data(), H, W, C, C, K);
  local_attention_backward(dq.data(), dk.data(), dv.data(), drel.data(), dqe.data(), dy.data(), att.data(), q.data(),
                           k.data(), v.data(), rel.data(), qe.data(), H, W, C, C, K);
  // the float gradients start from 1 everywhere: the backward accumulates
  std::vector<float> outf(n), attf(na), dqf(n, 1.f), dkf(n, 1.f), dvf(n, 1.f), drelf(nr, 1.f), dqef(std::size_t(C), 1.f);
  local_attention_forward(outf.data(), attf.data(), qf.data(), kf.data(), vf.data(), relf.data(), qef.data(), H, W, C,
                          C, K, true);
  local_attention_backward(dqf.data(), dkf.data(), dvf.data(), drelf.data(), dqef.data(), dyf.data(), attf.data(),
                           qf.data(), kf.data(), vf.data(), relf.data(), qef.data(), H, W, C, C, K, true);
  auto agree = [](const std::vector<float>& got, const std::vector<double>& want, double start, const char* what) {
    double mx = 0;
    for (double w : want) mx = std::max(mx, std::abs(w));
    for (std::size_t i = 0; i < want.size(); ++i)
      if (!(std::abs(double(got[i]) - start - want[i]) <= 128 * 0x1p-24 * (1 + mx)))
        RC_FAIL(std::string(what) + " differs beyond the fp32 bound at " + std::to_string(i));
  };
  agree(outf, out, 0, "y");
  agree(attf, att, 0, "A");
  agree(dqf, dq, 1, "dq");
  agree(dkf, dk, 1, "dk");
  agree(dvf, dv, 1, "dv");
  agree(drelf, drel, 1, "drel");
  agree(dqef, dqe, 1, "ds");
}

// ALiBi's slopes as Press et al. define them: 2^(-8/n) geometric for a power of two (8 heads: 1/2 ..
// 1/256), and for 6 heads the 4-head slopes then every other 8-head slope.
TEST(GridLayers, AlibiSlopes) {
  const auto s8 = alibi_slopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(s8[std::size_t(h)], std::pow(0.5, h + 1));
  const auto s6 = alibi_slopes(6);
  const std::vector<double> want = {std::pow(2.0, -2), std::pow(2.0, -4), std::pow(2.0, -6), std::pow(2.0, -8),
                                    std::pow(2.0, -1), std::pow(2.0, -3)};
  ASSERT_EQ(s6.size(), want.size());
  for (std::size_t h = 0; h < want.size(); ++h) EXPECT_DOUBLE_EQ(s6[h], want[h]);
}

RC_GTEST_PROP(GridGrad, ContextAttentionWithGridAlibi, ()) {
  const int SC = *rc::gen::inRange(1, 4), H = *rc::gen::inRange(1, 4), W = *rc::gen::inRange(1, 4), T = H * W,
            NH = *rc::gen::inRange(1, 4), DH = *rc::gen::inRange(1, 3), C = NH * DH;
  const bool alibi = *rc::gen::arbitrary<bool>();
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  auto q = randn(g, std::size_t(SC * C)), k = randn(g, std::size_t(T * C)), v = randn(g, std::size_t(T * C)),
       Rr = randn(g, std::size_t(SC * C));
  const auto slopes = alibi_slopes(NH);
  std::vector<double> out(Rr.size()), att(std::size_t(NH * SC * T));
  auto f = [&] {
    context_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), alibi ? slopes.data() : nullptr,
                              SC, T, W, C, NH);
    return dot(out, Rr);
  };
  f();
  // Eq. 13 at (head 0, query 0): scores q.k / sqrt(DH) - slope row(t)
  {
    std::vector<double> sc(static_cast<std::size_t>(T));
    for (int t = 0; t < T; ++t) {
      double s = 0;
      for (int c = 0; c < DH; ++c) s += q[std::size_t(c)] * k[std::size_t(t * C + c)];
      sc[std::size_t(t)] = s / std::sqrt(double(DH)) - (alibi ? slopes[0] * (t / W) : 0.0);
    }
    double mx = *std::max_element(sc.begin(), sc.end()), z = 0;
    for (double& s : sc) z += (s = std::exp(s - mx));
    for (int t = 0; t < T; ++t) RC_ASSERT(std::abs(sc[std::size_t(t)] / z - att[std::size_t(t)]) <= 1e-12);
  }
  std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0), scr(std::size_t(SC * T));
  context_attention_backward(dq.data(), dk.data(), dv.data(), scr.data(), Rr.data(), att.data(), q.data(), k.data(),
                             v.data(), SC, T, C, NH);
  RC_ASSERT(check(q, dq, f) <= kTol);
  RC_ASSERT(check(k, dk, f) <= kTol);
  RC_ASSERT(check(v, dv, f) <= kTol);
}

RC_GTEST_PROP(GridGrad, HaltingDistribution, ()) {
  const int N = *rc::gen::inRange(0, 7);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  std::uniform_real_distribution<double> u(0.05, 0.95);
  std::vector<double> lam(std::size_t(N) + 1), p(std::size_t(N) + 1);
  for (double& l : lam) l = u(g);
  auto Rr = randn(g, p.size());
  auto f = [&] {
    halting_distribution_forward(p.data(), lam.data(), N);
    return dot(p, Rr);
  };
  f();
  // Eq. 10: p_n = lambda_n prod (1 - lambda_i), the last the product alone; the whole sums to 1
  double q = 1, sum = 0;
  for (int n = 0; n < N; ++n) {
    RC_ASSERT(std::abs(p[std::size_t(n)] - lam[std::size_t(n)] * q) <= 1e-15);
    q *= 1 - lam[std::size_t(n)];
  }
  for (double x : p) sum += x;
  RC_ASSERT(std::abs(p[std::size_t(N)] - q) <= 1e-14);
  RC_ASSERT(std::abs(sum - 1) <= 1e-14);
  std::vector<double> dlam(lam.size(), 0.0);
  halting_distribution_backward(dlam.data(), Rr.data(), lam.data(), N);
  RC_ASSERT(check(lam, dlam, f) <= kTol);
}

RC_GTEST_PROP(GridGrad, Regularizers, ()) {
  const int N = *rc::gen::inRange(0, 7);
  const Regularizer kind = *rc::gen::element(Regularizer::er, Regularizer::kl);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  std::uniform_real_distribution<double> u(0.01, 1.0);
  std::vector<double> p(std::size_t(N) + 1);
  for (double& x : p) x = u(g);
  const double a = u(g), lp = 0.1;
  auto f = [&] { return halting_regularizer<double>(nullptr, p.data(), N, kind, a, lp, 1.0); };
  std::vector<double> dp(p.size(), 0.0);
  halting_regularizer(dp.data(), p.data(), N, kind, a, lp, 1.0);
  RC_ASSERT(check(p, dp, f) <= kTol);
  // ER at a = 0 is minus the entropy (up to the tol inside the log), at a = 1 E[log(1 + n)]
  if (kind == Regularizer::er) {
    double negH = 0, elog = 0;
    for (int n = 0; n <= N; ++n) negH += p[std::size_t(n)] * std::log(p[std::size_t(n)] + kRegTol), elog += p[std::size_t(n)] * std::log(1.0 + n);
    RC_ASSERT(std::abs(halting_regularizer<double>(nullptr, p.data(), N, kind, 0.0, lp, 1.0) - negH) <= 1e-12);
    RC_ASSERT(std::abs(halting_regularizer<double>(nullptr, p.data(), N, kind, 1.0, lp, 1.0) - elog) <= 1e-12);
  }
}

// ---- the whole model ----------------------------------------------------------------------------------------

namespace {
GridConfig tiny(Halting h, int groups, int heads) {
  GridConfig c;
  c.d_emb = 8, c.d_s2g = 6, c.kernel = 3, c.groups = groups, c.heads = heads, c.d_ffn = 6;
  c.context_len = 2, c.context_heads = 2, c.d_ctx_ffn = 5, c.d_halt = 7;
  c.halting = h;
  c.max_steps_train = h == Halting::fixed ? 2 : 6;
  c.halt_eps = 0.3;  // the threshold stops some samples before max_steps on this tiny run
  c.dropout = 0.1;
  return c;
}

// The group loss (task + beta R) of three problems on a 3 x 4 grid, and its gradient in every parameter,
// against central differences. The halting steps must not move under the perturbations (they are
// piecewise constant; the check would straddle a jump otherwise): verified on every evaluation.
void check_whole_model(const GridConfig& c, Regularizer reg) {
  const GridLayout L = GridLayout::make(c);
  std::vector<double> p = grid_init_params<double>(c, L, 7);
  std::vector<Problem> ps = {parse_grid_problem("12+3"), parse_grid_problem("7+45+06"), parse_grid_problem("9")};
  const GridBatch b = make_batch(ps, 3, 4);
  const std::vector<double> acc = {0.25, 0.5, 1.0};
  LossOptions o;
  o.reg = reg;
  o.beta = 0.3;  // larger than the paper's 0.05 so the regularizer's gradient weighs in the check
  Workspaces<double> ws;
  std::vector<double> grads(p.size(), 0.0);
  const GridView<double> m{c, L, p.data()};
  const GroupResult base = group_loss(grads.data(), m, b, acc, o, 99, 1.0, 1, ws);
  if (c.halting == Halting::ponder) {
    EXPECT_NE(base.reg, 0.0);
    // where the step limit is above 1, the threshold stops every sample before it on this tiny run;
    // at 1 the limit stops them all (both ends of Eq. 10's truncation are checked)
    for (int n : base.steps) EXPECT_EQ(n < c.max_steps_train, c.max_steps_train > 1);
  }
  auto f = [&] {
    const GroupResult r = group_loss<double>(nullptr, m, b, acc, o, 99, 1.0, 1, ws);
    EXPECT_EQ(r.steps, base.steps) << "a halting step moved under a perturbation: choose another seed";
    return r.task + r.reg;
  };
  EXPECT_NEAR(f(), base.task + base.reg, 1e-15);
  EXPECT_LE(check(p, grads, f), kTol);
  // every tensor got a gradient somewhere (no pass left out)
  for (const TensorSpec& t : L.lay.tensors) {
    double s = 0;
    for (std::int64_t i = 0; i < t.size; ++i) s += std::abs(grads[std::size_t(t.offset + i)]);
    EXPECT_GT(s, 0.0) << t.name;
  }
}
}  // namespace

TEST(GridGradWholeModel, PonderExploreReinforce) { check_whole_model(tiny(Halting::ponder, 2, 4), Regularizer::er); }
TEST(GridGradWholeModel, PonderKl) { check_whole_model(tiny(Halting::ponder, 2, 4), Regularizer::kl); }
TEST(GridGradWholeModel, PonderOneHeadPerChannelNoGroups) {  // the paper's h = d_emb, and noGroups' g = 1
  check_whole_model(tiny(Halting::ponder, 1, 8), Regularizer::er);
}
TEST(GridGradWholeModel, PonderStepLimit) {
  GridConfig c = tiny(Halting::ponder, 2, 4);
  c.max_steps_train = 1;
  check_whole_model(c, Regularizer::er);
}
TEST(GridGradWholeModel, FixedTime) { check_whole_model(tiny(Halting::fixed, 2, 4), Regularizer::er); }
TEST(GridGradWholeModel, NoAlibi) {
  GridConfig c = tiny(Halting::ponder, 2, 4);
  c.alibi = false;
  check_whole_model(c, Regularizer::er);
}

// float and double runs of the same model agree (the float model is the double model rounded), with the
// Eigen products and with the fast ones (GridView::fast: oneDNN in another summation order): the group
// loss to 1e-4 relative and the whole gradient to 1e-4 of its norm (float's 2^-24 per operation over a
// few thousand operations in a chain of at most 7 steps, with the halting steps equal), so the two float
// paths differ from each other by rounding alone. Both the grouped (g = 2) and the noGroups (g = 1,
// whose q/k/v projections are plain products and take the fast path too) models; without oneDNN the
// Eigen path is checked alone.
TEST(GridGradWholeModel, FloatAgreesWithDouble) {
  const bool fast = fast_products_unavailable().empty();
  for (const GridConfig& c : {tiny(Halting::ponder, 2, 4), tiny(Halting::ponder, 1, 8)}) {
    const GridLayout L = GridLayout::make(c);
    const auto pd = grid_init_params<double>(c, L, 7);
    const auto pf = grid_init_params<float>(c, L, 7);
    const GridBatch b = make_batch({parse_grid_problem("12+3"), parse_grid_problem("7+45+06")}, 3, 4);
    Workspaces<double> wd;
    Workspaces<float> wf;
    std::vector<double> gd(pd.size(), 0.0);
    std::vector<float> ge(pf.size(), 0.f), gx(pf.size(), 0.f);
    const GroupResult rd = group_loss<double>(gd.data(), {c, L, pd.data()}, b, {0.5, 0.5}, {}, 3, 1.0, 1, wd);
    const GroupResult re = group_loss<float>(ge.data(), {c, L, pf.data(), false}, b, {0.5, 0.5}, {}, 3, 1.f, 1, wf);
    std::vector<std::pair<const GroupResult*, const std::vector<float>*>> paths;
    paths.push_back({&re, &ge});
    GroupResult rx;
    if (fast) {
      rx = group_loss<float>(gx.data(), {c, L, pf.data(), true}, b, {0.5, 0.5}, {}, 3, 1.f, 1, wf);
      paths.push_back({&rx, &gx});
    }
    double nd = 0;
    for (double g : gd) nd += g * g;
    for (std::size_t k = 0; k < paths.size(); ++k) {
      const GroupResult& r = *paths[k].first;
      const std::vector<float>& g = *paths[k].second;
      const std::string what = std::string(k ? "fast" : "eigen") + ", groups " + std::to_string(c.groups);
      EXPECT_EQ(rd.steps, r.steps) << what;
      EXPECT_NEAR(r.task, rd.task, 1e-4 * rd.task) << what;
      EXPECT_NEAR(r.reg, rd.reg, 1e-4 * std::abs(rd.reg) + 1e-6) << what;
      double d = 0;
      for (std::size_t i = 0; i < gd.size(); ++i) d += (double(g[i]) - gd[i]) * (double(g[i]) - gd[i]);
      EXPECT_LE(std::sqrt(d), 1e-4 * std::sqrt(nd)) << what;
    }
    if (fast) {
      double ex = 0;
      for (std::size_t i = 0; i < gd.size(); ++i) ex += std::abs(double(gx[i]) - double(ge[i]));
      EXPECT_GT(ex, 0.0) << "the fast path ran the Eigen products (no rounding differs anywhere)";
    }
  }
}
