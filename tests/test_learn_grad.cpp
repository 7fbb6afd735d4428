// Gradient checks of learn/: every layer's backward and the whole model's, for every position mode and
// every combination of the architecture options that change the graph (attention scale, tied readout,
// final LayerNorm; FIRE's threshold, input injection), against central finite differences in double.
//
// Finite differences and their tolerance: grad_check.hpp.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <functional>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/decoder/layers.hpp"
#include "manyadd/learn/decoder/model.hpp"

#include "grad_check.hpp"

using namespace manyadd;
using namespace manyadd::learn;
using namespace manyadd::testing;

// Each layer: loss = <out, R> for a random R, so d loss / d out = R.
RC_GTEST_PROP(LearnGrad, Matmul, ()) {
  const int T = *rc::gen::inRange(1, 6), C = *rc::gen::inRange(1, 7), OC = *rc::gen::inRange(1, 7);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  auto inp = randn(g, std::size_t(T * C)), w = randn(g, std::size_t(OC * C)), R = randn(g, std::size_t(T * OC));
  std::vector<double> out(std::size_t(T * OC));
  auto f = [&] {
    matmul_forward(out.data(), inp.data(), w.data(), T, C, OC);
    return dot(out, R);
  };
  std::vector<double> dinp(inp.size(), 0.0), dw(w.size(), 0.0);
  f();
  matmul_backward(dinp.data(), dw.data(), R.data(), inp.data(), w.data(), T, C, OC);
  RC_ASSERT(check(inp, dinp, f) <= kTol);
  RC_ASSERT(check(w, dw, f) <= kTol);
}

RC_GTEST_PROP(LearnGrad, RmsNorm, ()) {
  const int T = *rc::gen::inRange(1, 5), C = *rc::gen::inRange(1, 9);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  auto inp = randn(g, std::size_t(T * C)), w = randn(g, std::size_t(C)), R = randn(g, std::size_t(T * C));
  // Rows with rms near sqrt(eps) make RMSNorm a near-step function whose curvature defeats any finite
  // difference; rescale each row to rms in [0.5, 2] (the regime training sees) so the check is fair.
  for (int t = 0; t < T; ++t) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += inp[std::size_t(t * C + c)] * inp[std::size_t(t * C + c)];
    const double target = 0.5 + 1.5 * double(g() % 1000) / 1000.0;
    const double k = target / std::sqrt(ss / C + 1e-300);
    for (int c = 0; c < C; ++c) inp[std::size_t(t * C + c)] *= k;
  }
  std::vector<double> out(inp.size()), rstd(static_cast<std::size_t>(T));
  auto f = [&] {
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), T, C, 1e-6);
    return dot(out, R);
  };
  f();
  std::vector<double> dinp(inp.size(), 0.0), dw(w.size(), 0.0);
  rmsnorm_backward(dinp.data(), dw.data(), R.data(), inp.data(), w.data(), rstd.data(), T, C);
  RC_ASSERT(check(inp, dinp, f) <= kTol);
  RC_ASSERT(check(w, dw, f) <= kTol);
}

// LayerNorm (the final norm of the authors' model), weight and bias. Rows are rescaled to a standard
// deviation in [0.5, 2] for the reason given at RmsNorm (near-constant rows make it a step function).
RC_GTEST_PROP(LearnGrad, LayerNorm, ()) {
  const int T = *rc::gen::inRange(1, 5), C = *rc::gen::inRange(2, 9);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  auto inp = randn(g, std::size_t(T * C)), w = randn(g, std::size_t(C)), b = randn(g, std::size_t(C)),
       R = randn(g, std::size_t(T * C));
  for (int t = 0; t < T; ++t) {
    double m = 0, ss = 0;
    for (int c = 0; c < C; ++c) m += inp[std::size_t(t * C + c)] / C;
    for (int c = 0; c < C; ++c) ss += (inp[std::size_t(t * C + c)] - m) * (inp[std::size_t(t * C + c)] - m) / C;
    const double target = 0.5 + 1.5 * double(g() % 1000) / 1000.0, k = target / std::sqrt(ss + 1e-300);
    for (int c = 0; c < C; ++c) inp[std::size_t(t * C + c)] = m + (inp[std::size_t(t * C + c)] - m) * k;
  }
  std::vector<double> out(inp.size()), mean(static_cast<std::size_t>(T)), rstd(static_cast<std::size_t>(T));
  auto f = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), T, C, 1e-6);
    return dot(out, R);
  };
  f();
  std::vector<double> dinp(inp.size(), 0.0), dw(w.size(), 0.0), db(b.size(), 0.0);
  layernorm_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), mean.data(), rstd.data(), T, C);
  RC_ASSERT(check(inp, dinp, f) <= kTol);
  RC_ASSERT(check(w, dw, f) <= kTol);
  RC_ASSERT(check(b, db, f) <= kTol);
  // The forward is LayerNorm: each output row, unweighted (w = 1, b = 0), has mean 0 and variance
  // var r^2 = (1/r^2 - eps) r^2 = 1 - eps r^2 (1e-12: a few dozen double roundings of O(1) values).
  std::vector<double> ones(std::size_t(C), 1.0), zeros(std::size_t(C), 0.0);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), ones.data(), zeros.data(), T, C, 1e-6);
  for (int t = 0; t < T; ++t) {
    double m = 0, var = 0;
    for (int c = 0; c < C; ++c) m += out[std::size_t(t * C + c)] / C;
    for (int c = 0; c < C; ++c) var += (out[std::size_t(t * C + c)] - m) * (out[std::size_t(t * C + c)] - m) / C;
    RC_ASSERT(std::abs(m) < 1e-12);
    const double want = 1.0 - 1e-6 * rstd[std::size_t(t)] * rstd[std::size_t(t)];
    RC_ASSERT(std::abs(var - want) < 1e-12);
  }
}

RC_GTEST_PROP(LearnGrad, Attention, ()) {
  const int T = *rc::gen::inRange(1, 7), NH = *rc::gen::inRange(1, 4), HS = *rc::gen::inRange(1, 5);
  const std::size_t n = std::size_t(T * NH * HS);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  auto q = randn(g, n), k = randn(g, n), v = randn(g, n), R = randn(g, n);
  // Both scales of the model (1/sqrt(HS) and T5's 1), the 1/sqrt(HS) overload, and a score bias (FIRE's),
  // read from the top-left corner of a (NH, TB, TB) array, TB >= T, as a shorter sequence of a varlen batch
  // reads the batch's bias (the entries outside the corner get no gradient on either side).
  const int which = *rc::gen::inRange(0, 4), TB = T + *rc::gen::inRange(0, 3);
  const double scale = which == 1 ? 1.0 : 1.0 / std::sqrt(double(HS));
  auto bias = randn(g, std::size_t(NH * TB * TB));
  std::vector<double> out(n), att(std::size_t(NH * T * T)), scratch(std::size_t(T * T));
  auto f = [&] {
    if (which == 2) attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), T, T, NH, HS);
    else attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), T, T, NH, HS, scale,
                           which == 3 ? bias.data() : nullptr, TB, TB);
    return dot(out, R);
  };
  f();
  std::vector<double> dq(n, 0.0), dk(n, 0.0), dv(n, 0.0), db(bias.size(), 0.0);
  if (which == 2)
    attention_backward(dq.data(), dk.data(), dv.data(), scratch.data(), R.data(), att.data(), q.data(), k.data(),
                       v.data(), T, NH, HS);
  else
    attention_backward(dq.data(), dk.data(), dv.data(), scratch.data(), R.data(), att.data(), q.data(), k.data(),
                       v.data(), T, NH, HS, scale, which == 3 ? db.data() : nullptr, TB);
  RC_ASSERT(check(q, dq, f) <= kTol);
  RC_ASSERT(check(k, dk, f) <= kTol);
  RC_ASSERT(check(v, dv, f) <= kTol);
  if (which == 3) RC_ASSERT(check(bias, db, f) <= kTol);  // zero above the diagonal and outside the corner
  // Causality: row i of every head sums to 1 and is zero beyond i.
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < T; ++i) {
      double s = 0;
      for (int j = 0; j < T; ++j) {
        const double a = att[std::size_t((h * T + i) * T + j)];
        if (j > i) RC_ASSERT(a == 0.0);
        s += a;
      }
      RC_ASSERT(std::abs(s - 1.0) < 1e-12);
    }
}

// The key/value-cache form of attention_forward (queries = the last Tq positions, keys = all Tk, what
// greedy decoding runs) equals the last Tq rows of the full causal attention over the Tk positions:
// outputs and attention rows. Double; the score products run on different shapes (Tq or Tk rows), so
// equal up to rounding, ~1e-16 relative: 1e-12 of the largest entry, while a wrong mask offset or a
// shifted row gives O(1) differences.
RC_GTEST_PROP(LearnLayers, CachedAttentionEqualsTheLastRowsOfFullAttention, ()) {
  const int Tk = *rc::gen::inRange(1, 9), Tq = *rc::gen::inRange(1, Tk + 1), NH = *rc::gen::inRange(1, 4),
            HS = *rc::gen::inRange(1, 5), D = NH * HS;
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  const auto q = randn(g, std::size_t(Tk * D), 2.0), k = randn(g, std::size_t(Tk * D), 2.0), v = randn(g, std::size_t(Tk * D));
  std::vector<double> out(std::size_t(Tk * D)), att(std::size_t(NH * Tk * Tk));
  // with a score bias half of the time (FIRE's): the cached call reads the last Tq rows of the full one's
  const bool with_bias = *rc::gen::arbitrary<bool>();
  const auto bias = randn(g, std::size_t(NH * Tk * Tk));
  const double sc = 1.0 / std::sqrt(double(HS));
  attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), Tk, Tk, NH, HS, sc,
                    with_bias ? bias.data() : nullptr);
  std::vector<double> outc(std::size_t(Tq * D)), attc(std::size_t(NH * Tq * Tk));
  const int past = Tk - Tq;
  std::vector<double> biasc(std::size_t(NH * Tq * Tk));
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < Tq; ++i)
      for (int j = 0; j < Tk; ++j)
        biasc[std::size_t((h * Tq + i) * Tk + j)] = bias[std::size_t((h * Tk + past + i) * Tk + j)];
  attention_forward(outc.data(), attc.data(), q.data() + past * D, k.data(), v.data(), Tq, Tk, NH, HS, sc,
                    with_bias ? biasc.data() : nullptr);
  double scale = 0;
  for (double x : out) scale = std::max(scale, std::abs(x));
  for (int i = 0; i < Tq; ++i)
    for (int d = 0; d < D; ++d)
      RC_ASSERT(std::abs(outc[std::size_t(i * D + d)] - out[std::size_t((past + i) * D + d)]) <= 1e-12 * scale);
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < Tq; ++i)
      for (int j = 0; j < Tk; ++j)
        RC_ASSERT(std::abs(attc[std::size_t((h * Tq + i) * Tk + j)] - att[std::size_t((h * Tk + past + i) * Tk + j)]) <=
                  1e-12);
}

// RoPE: the rotation's backward (d x = R^T d x') against finite differences, over B sequences of T rows
// at positions past..past+T-1 (one call per sequence); and what makes it a relative encoding (Su et al., Eq. 16): the score of a
// rotated query at position p and key at p' depends on p - p' only (shifting both by s changes it by
// rounding alone, ~1e-16 relative in double; 1e-12 of the product of the norms).
RC_GTEST_PROP(LearnGrad, Rope, ()) {
  const int B = *rc::gen::inRange(1, 3), T = *rc::gen::inRange(1, 6), past = *rc::gen::inRange(0, 40),
            NH = *rc::gen::inRange(1, 3), HS = 2 * *rc::gen::inRange(1, 4);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  const std::size_t n = std::size_t(B * T * NH * HS);
  auto x = randn(g, n), R = randn(g, n);
  std::vector<double> cs, sn, y(n);
  rope_tables(cs, sn, past, T, HS, kRopeBase);
  auto f = [&] {
    y = x;
    for (int b = 0; b < B; ++b) rope_rotate(y.data() + b * T * NH * HS, cs, sn, T, NH, HS, +1);
    return dot(y, R);
  };
  f();
  std::vector<double> dx = R;
  for (int b = 0; b < B; ++b) rope_rotate(dx.data() + b * T * NH * HS, cs, sn, T, NH, HS, -1);
  RC_ASSERT(check(x, dx, f) <= kTol);
  // relative: one head, query at p, key at p2, both shifted by s
  const int p = *rc::gen::inRange(0, 200), p2 = *rc::gen::inRange(0, 200), s = *rc::gen::inRange(0, 1000);
  const auto q = randn(g, std::size_t(HS)), k = randn(g, std::size_t(HS));
  auto score = [&](int pq, int pk) {
    std::vector<double> c1, s1, c2, s2, a = q, b = k;
    rope_tables(c1, s1, pq, 1, HS, kRopeBase);
    rope_tables(c2, s2, pk, 1, HS, kRopeBase);
    rope_rotate(a.data(), c1, s1, 1, 1, HS, +1);
    rope_rotate(b.data(), c2, s2, 1, 1, HS, +1);
    return dot(a, b);
  };
  RC_ASSERT(std::abs(score(p, p2) - score(p + s, p2 + s)) <= 1e-12 * std::sqrt(dot(q, q) * dot(k, k)));
}

// FIRE's pieces (layers.hpp). The distinct pairs: every (row, key) reads the pair whose u is the
// definition's u(i, j) = psi(i - j) / (psi(n_i) + eps), n_i = max(i, L) or min(i, L), for any rows
// past..past+T-1 and any threshold L (equal bit for bit: the same expression on the same numbers), and
// rows whose n_i is L share one group (so the MLP runs on at most T + (pairs of the other rows) inputs).
RC_GTEST_PROP(LearnLayers, FirePairsAreTheDefinitionsDistances, ()) {
  const int past = *rc::gen::inRange(0, 30), T = *rc::gen::inRange(1, 12);
  const double L = double(*rc::gen::inRange(0, 4000)) / 100.0;  // integers included: ties with i
  const bool mx = *rc::gen::arbitrary<bool>();
  const double c = double(*rc::gen::inRange(-300, 300)) / 100.0;
  FirePairs fp;
  fire_pairs(fp, past, T, L, mx);
  std::vector<double> u(std::size_t(fp.pairs()));
  fire_distances(u.data(), fp, c);
  int shared_rows = 0;
  for (int t = 0; t < T; ++t) {
    const int i = past + t;
    const double n = mx ? std::max(double(i), L) : std::min(double(i), L);
    const bool onL = mx ? L > i : L < i;
    shared_rows += onL;
    for (int j = 0; j <= i; ++j) {
      const std::int64_t pr = fp.base[std::size_t(t)] + i - j;
      RC_ASSERT(pr >= 0 && pr < fp.pairs());
      RC_ASSERT(fp.dist[std::size_t(pr)] == i - j);
      const double want = std::log1p(std::abs(c) * (i - j)) / (std::log1p(std::abs(c) * n) + kFireEps);
      RC_ASSERT(u[std::size_t(pr)] == want);
    }
  }
  RC_ASSERT(std::int64_t(fp.norm.size()) == T - shared_rows + (shared_rows > 0));
}

// FIRE's MLP (three bias-free linear maps with ReLUs) and its distances' parameters c and L_sqrt: loss
// <f(u(c, L_sqrt)), R> against finite differences in W1, W2, W3, c and L_sqrt. Thresholds away from
// the integers (the kink of max/min at L = i), c of either sign (psi reads |c|).
RC_GTEST_PROP(LearnGrad, Fire, ()) {
  const int past = *rc::gen::inRange(0, 6), T = *rc::gen::inRange(1, 8), H = *rc::gen::inRange(1, 6),
            NH = *rc::gen::inRange(1, 4);
  const bool mx = *rc::gen::arbitrary<bool>();
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  std::vector<double> c{(*rc::gen::arbitrary<bool>() ? 1 : -1) * (0.05 + double(*rc::gen::inRange(0, 100)) / 100.0)};
  std::vector<double> Ls{std::sqrt(double(*rc::gen::inRange(0, past + T + 2)) + 0.37)};
  auto w1 = randn(g, std::size_t(H)), w2 = randn(g, std::size_t(H * H)), w3 = randn(g, std::size_t(NH * H));
  FirePairs fp;
  std::vector<double> u, h1, h2, out, bias;
  const int Tk = past + T;
  const auto R = randn(g, std::size_t(NH * T * Tk));
  auto f = [&] {
    fire_pairs(fp, past, T, Ls[0] * Ls[0], mx);
    const std::int64_t P = fp.pairs();
    u.resize(std::size_t(P)), h1.resize(std::size_t(P * H)), h2.resize(std::size_t(P * H)), out.resize(std::size_t(P * NH));
    fire_distances(u.data(), fp, c[0]);
    fire_mlp_forward(out.data(), h1.data(), h2.data(), u.data(), w1.data(), w2.data(), w3.data(), P, H, NH);
    bias.resize(R.size());
    fire_bias_scatter(bias.data(), out.data(), fp, past, T, Tk, NH);
    return dot(bias, R);
  };
  f();
  const std::int64_t P = fp.pairs();
  // A pre-activation within a step of a ReLU's kink would make the central difference straddle it:
  // draws with one closer than 1e-3 (100 steps) are discarded. Exact zeros stay zero under every
  // perturbation (u = 0 at distance 0; rows of h1 all zero).
  for (std::int64_t p = 0; p < P; ++p)
    for (int a = 0; a < H; ++a) {
      const double z1 = u[std::size_t(p)] * w1[std::size_t(a)];
      double z2 = 0;
      for (int b = 0; b < H; ++b) z2 += h1[std::size_t(p * H + b)] * w2[std::size_t(a * H + b)];
      RC_PRE(z1 == 0.0 || std::abs(z1) > 1e-3);
      RC_PRE(z2 == 0.0 || std::abs(z2) > 1e-3);
    }
  // d bias -> d out: the scatter's reverse (fire_bias_gather reads (NH, T, T) rows of training, past 0;
  // here the rows of a call with past > 0 are gathered the same way, key by key)
  std::vector<double> dout(std::size_t(P * NH), 0.0);
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j <= past + t; ++j)
        dout[std::size_t((fp.base[std::size_t(t)] + past + t - j) * NH + h)] += R[std::size_t((h * T + t) * Tk + j)];
  if (past == 0) {
    std::vector<double> dg(std::size_t(P * NH));
    fire_bias_gather(dg.data(), R.data(), fp, T, NH);
    RC_ASSERT(dg == dout);
  }
  std::vector<double> du(std::size_t(P), 0.0), dw1(w1.size(), 0.0), dw2(w2.size(), 0.0), dw3(w3.size(), 0.0),
      scratch(std::size_t(2 * P * H)), dc{0.0}, dL{0.0};
  fire_mlp_backward(du.data(), dw1.data(), dw2.data(), dw3.data(), scratch.data(), dout.data(), h1.data(), h2.data(),
                    u.data(), w1.data(), w2.data(), w3.data(), P, H, NH);
  fire_distances_backward(dc.data(), dL.data(), du.data(), fp, c[0], Ls[0]);
  RC_ASSERT(check(w1, dw1, f) <= kTol);
  RC_ASSERT(check(w2, dw2, f) <= kTol);
  RC_ASSERT(check(w3, dw3, f) <= kTol);
  RC_ASSERT(check(c, dc, f) <= kTol);
  RC_ASSERT(check(Ls, dL, f) <= kTol);
}

RC_GTEST_PROP(LearnGrad, Geglu, ()) {
  const int T = *rc::gen::inRange(1, 5), F = *rc::gen::inRange(1, 9);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  auto inp = randn(g, std::size_t(T * 2 * F), 2.0), R = randn(g, std::size_t(T * F));
  std::vector<double> out(R.size());
  auto f = [&] {
    geglu_forward(out.data(), inp.data(), T, F);
    return dot(out, R);
  };
  f();
  std::vector<double> dinp(inp.size(), 0.0);
  geglu_backward(dinp.data(), R.data(), inp.data(), T, F);
  RC_ASSERT(check(inp, dinp, f) <= kTol);
}

RC_GTEST_PROP(LearnGrad, Embedding, ()) {
  const int T = *rc::gen::inRange(1, 6), C = *rc::gen::inRange(1, 5), L = *rc::gen::inRange(0, 3);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  const int P = 5;
  auto wte = randn(g, std::size_t(kVocab * C)), R = randn(g, std::size_t(T * C));
  std::vector<std::vector<double>> wpe(2, randn(g, std::size_t(P * C)));
  std::vector<std::uint8_t> tok(static_cast<std::size_t>(T));
  std::vector<std::vector<std::int32_t>> pos(2, std::vector<std::int32_t>(static_cast<std::size_t>(T)));
  for (int t = 0; t < T; ++t) {
    tok[std::size_t(t)] = std::uint8_t(g() % kVocab);
    pos[0][std::size_t(t)] = std::int32_t(g() % P);
    pos[1][std::size_t(t)] = std::int32_t(g() % P);
  }
  std::vector<double> out(R.size());
  auto f = [&] {
    const std::int32_t* pp[2] = {pos[0].data(), pos[1].data()};
    const double* ww[2] = {wpe[0].data(), wpe[1].data()};
    embedding_forward(out.data(), tok.data(), pp, L, wte.data(), ww, T, C);
    return dot(out, R);
  };
  f();
  std::vector<double> dwte(wte.size(), 0.0);
  std::vector<std::vector<double>> dwpe(2, std::vector<double>(wpe[0].size(), 0.0));
  const std::int32_t* pp[2] = {pos[0].data(), pos[1].data()};
  double* dd[2] = {dwpe[0].data(), dwpe[1].data()};
  embedding_backward(dwte.data(), dd, R.data(), tok.data(), pp, L, T, C);
  RC_ASSERT(check(wte, dwte, f) <= kTol);
  for (int lv = 0; lv < 2; ++lv) RC_ASSERT(check(wpe[std::size_t(lv)], dwpe[std::size_t(lv)], f) <= kTol);
}

RC_GTEST_PROP(LearnGrad, CrossEntropy, ()) {
  const int T = *rc::gen::inRange(1, 5);
  std::mt19937_64 g(*rc::gen::arbitrary<std::uint32_t>());
  auto logits = randn(g, std::size_t(T * kVocab), 3.0);
  std::vector<std::int32_t> targets(static_cast<std::size_t>(T));
  for (auto& t : targets) t = std::int32_t(g() % (kVocab + 1)) - 1;  // -1 = not counted
  std::vector<double> losses(static_cast<std::size_t>(T)), probs(logits.size());
  auto f = [&] { return crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), T, kVocab); };
  f();
  std::vector<double> d(logits.size());
  crossentropy_backward(d.data(), probs.data(), targets.data(), 1.0, T, kVocab);
  RC_ASSERT(check(logits, d, f) <= kTol);
}

namespace {
// Two layers (so the inter-block path is used), widths of a few units, init_std 0.5: large enough that
// every path carries gradient of order 1.
ModelConfig tiny_model(PosMode mode) {
  ModelConfig c;
  c.n_layers = 2;
  c.n_heads = 2;
  c.d_model = 6;
  c.d_head = mode == PosMode::rope ? 4 : 3;  // RoPE turns pairs
  c.d_ff = 5;
  c.pos_mode = mode;
  c.max_pos1 = mode == PosMode::absolute ? 40 : 8;
  c.max_pos2 = 6;
  c.abacus_k = 4;  // read by abacus only (IDs 2.. at offset 2: 57+8+96's numbers have at most 3 digits)
  c.fire_width = 4;
  c.init_std = 0.5f;
  return c;
}

// The whole model against central differences, every parameter tensor separately (so a failure names
// it), on one example. Norm weights are drawn N(1, 0.3) and LayerNorm biases N(0, 0.3), so an error
// invisible at weight 1 or bias 0 shows. Every tensor's gradient must also be nonzero somewhere (a test
// that cannot fail otherwise passes on a no-op backward; position rows never read are zero, so the
// tensor is looked at as a whole).
// The entropy term of train.attn_entropy on the last forward of a one-sequence batch: the sum over the
// rows with a target and the heads of -sum_j P_ij ln P_ij, from the forward's own weights (Acts::att).
double attention_entropy(const Acts<double>& a, const Example& ex, int NH) {
  const int T = int(ex.tokens.size());
  double H = 0;
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < T; ++i) {
      if (ex.targets[std::size_t(i)] < 0) continue;
      for (int j = 0; j <= i; ++j) {
        const double p = a.blocks[0].att[(std::size_t(h) * T + i) * T + j];
        if (p > 0) H -= p * std::log(p);
      }
    }
  return H;
}

// ent_w > 0: the objective is the loss plus ent_w times attention_entropy (one-layer models).
void check_whole_model(const ModelConfig& c, double ent_w = 0) {
  const Layout lay = Layout::make(c);
  auto P = init_params<double>(c, lay, 7);
  std::mt19937_64 g(3);
  std::normal_distribution<double> nd(1.0, 0.3), nb(0.0, 0.3);
  for (auto& t : lay.tensors)
    if (t.shape.size() == 1)
      for (std::int64_t i = 0; i < t.size; ++i)
        P[std::size_t(t.offset + i)] = t.name.find(".bias") != std::string::npos ? nb(g) : nd(g);
  // FIRE: c of order 1 and the threshold L = 9.61 inside the sequence (28 tokens), so that both
  // normalizers occur (n_i = L for some rows, i for the others) and L_sqrt has a gradient in either
  // direction of the threshold; L away from the integers (the kink at L = i).
  if (c.pos_mode == PosMode::fire) P[std::size_t(lay.fire_c)] = 0.7, P[std::size_t(lay.fire_L_sqrt)] = 3.1;
  // coupled_rel: gains of order 1 (they start at 0, where the bias would be checked at zero only)
  if (lay.rel_bias >= 0)
    for (std::int64_t i = 0; i < lay.find("rel_bias.weight").size; ++i) P[std::size_t(lay.rel_bias + i)] = nb(g) * 3;
  // rel_value: vectors of the values' order (they start at 0, where d P's term would be checked at zero only)
  if (lay.rel_value >= 0)
    for (std::int64_t i = 0; i < lay.find("rel_value.weight").size; ++i) P[std::size_t(lay.rel_value + i)] = nb(g);
  const Example ex = make_example(parse_problem("57+8+96"), c, 2, 2);
  Acts<double> a;
  GradScratch<double> gs;
  const ModelView<double> model{c, lay, P.data()};
  auto f = [&] {
    const double loss = model_forward(a, model, batch_of(ex));
    return ent_w > 0 ? loss + ent_w * attention_entropy(a, ex, c.n_heads) : loss;
  };
  f();
  std::vector<double> G(P.size(), 0.0);
  model_backward(G.data(), gs, a, model, batch_of(ex), 1.0, ent_w);
  for (auto& t : lay.tensors) {
    std::vector<double> x(P.begin() + t.offset, P.begin() + t.offset + t.size);
    std::vector<double> an(G.begin() + t.offset, G.begin() + t.offset + t.size);
    // a frozen position code is a constant of the model, and positional attention's q and k (scores times 0)
    // are unused: no gradient at all
    const bool unused = c.attn_scale == AttnScale::positional &&
                        (t.name.find("attn.q.") != std::string::npos || t.name.find("attn.k.") != std::string::npos);
    if (!t.trainable || unused) {
      for (double v : an) ASSERT_EQ(v, 0.0) << t.name << " is frozen or unused but has a gradient";
      continue;
    }
    auto ft = [&] {
      std::copy(x.begin(), x.end(), P.begin() + t.offset);
      return f();
    };
    const double err = check(x, an, ft);
    std::copy(x.begin(), x.end(), P.begin() + t.offset);
    EXPECT_LE(err, kTol) << t.name;
    double mx = 0;
    for (double v : an) mx = std::max(mx, std::abs(v));
    EXPECT_GT(mx, 1e-6) << t.name << " has an all-zero gradient";
  }
}
}  // namespace

// The whole model, every parameter, every position mode, two layers so the inter-block path is used.
class WholeModel : public ::testing::TestWithParam<PosMode> {};

TEST_P(WholeModel, GradientMatchesFiniteDifferences) { check_whole_model(tiny_model(GetParam())); }

// FIRE with the authors' threshold (n_i = min(i, L)), and input injection with positions of every kind
// (tables, none, a score bias, rotated q and k): every parameter as above.
TEST(WholeModelVariants, FireThresholdMin) {
  ModelConfig c = tiny_model(PosMode::fire);
  c.fire_threshold = FireThreshold::min;
  check_whole_model(c);
}
TEST(WholeModelVariants, InputInjection) {
  for (PosMode mode : {PosMode::coupled, PosMode::none, PosMode::fire, PosMode::rope}) {
    SCOPED_TRACE(pos_mode_name(mode));
    ModelConfig c = tiny_model(mode);
    c.input_injection = true;
    check_whole_model(c);
    c.n_layers = 3;  // x0's gradient from two injections
    check_whole_model(c);
  }
}

// coupled_rel with its far gain (rel_far), windows 1 and 0: pairs beyond the window on both levels of the
// example (level-1 IDs 2..4, level-2 2..5), so the far gains take a gradient of their own; 2 layers.
namespace {
void float_matches_double(ModelConfig c);
}  // namespace
TEST(WholeModelVariants, CoupledRelFar) {
  for (int W : {1, 0}) {
    SCOPED_TRACE(W);
    ModelConfig c = tiny_model(PosMode::coupled_rel);
    c.rel_window = W, c.rel_far = true;
    check_whole_model(c);
    c.n_layers = 2;
    check_whole_model(c);
    float_matches_double(c);
    c.rel_far_norm = true;  // the shift is a constant of the IDs: the same gradient form, another bias
    check_whole_model(c);
    float_matches_double(c);
  }
}

// rel_far_norm's bias against its definition, written out: g - ln N on the far pairs, N the query's far keys
// j <= i on the level (N < 2: no shift); with a cache (past > 0) the same rows as the whole sequence's.
TEST(CoupledRelBias, FarNormIsTheDefinition) {
  const int W = 1, NH = 2, L = 2, T = 9, nb = 2 * W + 2;
  const std::int32_t id0[T] = {0, 1, 2, 3, 4, 1, 2, 3, 4}, id1[T] = {0, 1, 1, 1, 1, 2, 2, 2, 2};
  const std::int32_t* ids[2] = {id0, id1};
  std::vector<double> g(std::size_t(NH) * L * nb);
  for (std::size_t k = 0; k < g.size(); ++k) g[k] = 0.1 * double(k) - 0.7;
  std::vector<double> plain(std::size_t(NH) * T * T), normed = plain;
  coupled_rel_bias(plain.data(), g.data(), ids, L, T, 0, NH, W, true, false);
  coupled_rel_bias(normed.data(), g.data(), ids, L, T, 0, NH, W, true, true);
  int shifted = 0;
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < T; ++i)
      for (int j = 0; j <= i; ++j) {
        double want = plain[(std::size_t(h) * T + i) * T + j];
        for (int lv = 0; lv < L; ++lv) {
          if (coupled_rel_bucket(ids[lv][i], ids[lv][j], W, true) != 2 * W + 1) continue;
          int n = 0;
          for (int k = 0; k <= i; ++k) n += ids[lv][i] > 0 && ids[lv][k] > 0 && std::abs(ids[lv][k] - ids[lv][i]) > W;
          if (n >= 2) want -= std::log(double(n)), ++shifted;
        }
        EXPECT_NEAR(normed[(std::size_t(h) * T + i) * T + j], want, 1e-12) << h << " " << i << " " << j;
      }
  EXPECT_GT(shifted, 10);  // the example has far pairs with N >= 2 on both levels
  // decoding the last 3 rows against a cache of 6: the same rows
  const int past = 6;
  const std::int32_t* tail[2] = {id0 + past, id1 + past};
  std::vector<double> dec(std::size_t(NH) * 3 * T);
  coupled_rel_bias(dec.data(), g.data(), tail, L, 3, past, NH, W, true, true);
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j <= past + i; ++j)
        EXPECT_EQ(dec[(std::size_t(h) * 3 + i) * T + j], normed[(std::size_t(h) * T + past + i) * T + j]);
}

// rel_far_mask: the whole model's gradient (the masked pairs take none: their weight is exactly 0) and fp32
// against double, windows 1 and 0 (the example has pairs far on one level and near on the other).
TEST(WholeModelVariants, CoupledRelFarMask) {
  for (int W : {1, 0}) {
    SCOPED_TRACE(W);
    ModelConfig c = tiny_model(PosMode::coupled_rel);
    c.rel_window = W, c.rel_far_mask = true;
    check_whole_model(c);
    c.n_layers = 2;
    check_whole_model(c);
    float_matches_double(c);
  }
}

// attn_scale positional (the scores the coupled_rel bias alone): the whole model's gradient, windows 1 with
// the far mask and 2 with the far gain, one and two layers; q and k take none. Other position modes refuse it.
TEST(WholeModelVariants, PositionalAttention) {
  for (int W : {1, 2}) {
    SCOPED_TRACE(W);
    ModelConfig c = tiny_model(PosMode::coupled_rel);
    c.attn_scale = AttnScale::positional, c.rel_window = W;
    (W == 1 ? c.rel_far_mask : c.rel_far) = true;
    EXPECT_NO_THROW(c.validate());
    check_whole_model(c);
    c.n_layers = 1;
    check_whole_model(c);
    check_whole_model(c, 0.7);  // with train.attn_entropy's term
  }
  ModelConfig bad = tiny_model(PosMode::coupled);
  bad.attn_scale = AttnScale::positional;
  EXPECT_THROW(bad.validate(), InputError);
}

// model.rel_value: the relative values' gradient and their term of d P (every other tensor's gradient through
// it) against central differences, with the gains of either window kind, content and positional scores, one and
// two layers, and with the entropy term; refused without coupled_rel and in bf16.
TEST(WholeModelVariants, RelativeValues) {
  for (int W : {1, 2}) {
    SCOPED_TRACE(W);
    ModelConfig c = tiny_model(PosMode::coupled_rel);
    c.rel_value = true, c.rel_window = W;
    (W == 1 ? c.rel_far_mask : c.rel_far) = true;
    EXPECT_NO_THROW(c.validate());
    check_whole_model(c);
    c.attn_scale = AttnScale::positional;
    check_whole_model(c);
    c.n_layers = 1;
    check_whole_model(c, 0.7);
  }
  ModelConfig bad = tiny_model(PosMode::coupled);
  bad.rel_value = true;
  EXPECT_THROW(bad.validate(), InputError);
  ModelConfig c = tiny_model(PosMode::coupled_rel);
  c.rel_value = true;
  const Layout lay = Layout::make(c);
  // init 0, and every other tensor drawn as the model without the term draws it
  ModelConfig plain = c;
  plain.rel_value = false;
  const Layout lay0 = Layout::make(plain);
  const auto P = init_params<float>(c, lay, 5), P0 = init_params<float>(plain, lay0, 5);
  for (const auto& t : lay.tensors) {
    if (t.name == "rel_value.weight") {
      for (std::int64_t i = 0; i < t.size; ++i) ASSERT_EQ(P[std::size_t(t.offset + i)], 0.f);
      continue;
    }
    const TensorSpec& t0 = lay0.find(t.name);
    for (std::int64_t i = 0; i < t.size; ++i) ASSERT_EQ(P[std::size_t(t.offset + i)], P0[std::size_t(t0.offset + i)]) << t.name;
  }
  Acts<float> a;
  const Example ex = make_example(parse_problem("57+8+96"), c, 2, 2);
  EXPECT_THROW(model_forward(a, ModelView<float>{c, lay, P.data(), Precision::bf16}, batch_of(ex)), InputError);
}

// train.attn_entropy: the gradient of loss + w sum_{target rows, heads} H_i (H the attention weights'
// entropy) against central differences of that objective, every tensor, one layer: coupled_rel with the far
// mask (window 1: masked keys take no term), coupled_rel plain and a position-table model. w = 0.7 makes the
// term of the loss's order, so a backward that drops it, or applies it to rows without a target, fails the
// check; and the gradient differs from the one without the term.
namespace {
// The whole model's gradient on 57+8+96 (seed-7 weights) with train.attn_entropy's weight ent_w.
std::vector<double> whole_gradient(const ModelConfig& c, double ent_w) {
  const Layout lay = Layout::make(c);
  const auto P = init_params<double>(c, lay, 7);
  const Example ex = make_example(parse_problem("57+8+96"), c, 2, 2);
  const ModelView<double> model{c, lay, P.data()};
  Acts<double> a;
  GradScratch<double> gs;
  std::vector<double> G(P.size(), 0.0);
  model_forward(a, model, batch_of(ex));
  model_backward(G.data(), gs, a, model, batch_of(ex), 1.0, ent_w);
  return G;
}
}  // namespace

TEST(WholeModelVariants, AttentionEntropyTerm) {
  for (PosMode mode : {PosMode::coupled_rel, PosMode::coupled}) {
    for (bool mask : {true, false}) {
      if (mask && mode != PosMode::coupled_rel) continue;
      SCOPED_TRACE(std::string(pos_mode_name(mode)) + (mask ? " far mask W1" : ""));
      ModelConfig c = tiny_model(mode);
      c.n_layers = 1;
      if (mask) c.rel_window = 1, c.rel_far_mask = true;
      check_whole_model(c, 0.7);
      // the term is live: the gradients with and without it differ
      const std::vector<double> G0 = whole_gradient(c, 0), G1 = whole_gradient(c, 0.7);
      double d = 0;
      for (std::size_t i = 0; i < G0.size(); ++i) d = std::max(d, std::abs(G1[i] - G0[i]));
      EXPECT_GT(d, 1e-3);
    }
  }
  // defined for one layer in fp32/double only: two layers are refused, not half-computed
  EXPECT_THROW(whole_gradient(tiny_model(PosMode::coupled_rel), 0.7), InvariantError);
}

// rel_far_mask's bias against its definition: -inf where the pair is far on either level (both IDs > 0,
// |d| > W), else the bias without it; BOS and the query itself never masked; with a cache the same rows.
TEST(CoupledRelBias, FarMaskIsTheDefinition) {
  const int W = 1, NH = 2, L = 2, T = 9, nb = 2 * W + 1;
  const std::int32_t id0[T] = {0, 1, 2, 3, 4, 1, 2, 3, 4}, id1[T] = {0, 1, 1, 1, 1, 2, 2, 4, 4};
  const std::int32_t* ids[2] = {id0, id1};
  std::vector<double> g(std::size_t(NH) * L * nb);
  for (std::size_t k = 0; k < g.size(); ++k) g[k] = 0.1 * double(k) - 0.7;
  std::vector<double> plain(std::size_t(NH) * T * T), masked = plain;
  coupled_rel_bias(plain.data(), g.data(), ids, L, T, 0, NH, W, false);
  coupled_rel_bias(masked.data(), g.data(), ids, L, T, 0, NH, W, false, false, true);
  int n_masked = 0, n_kept = 0;
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < T; ++i)
      for (int j = 0; j <= i; ++j) {
        bool far = false;
        for (int lv = 0; lv < L; ++lv) far |= ids[lv][i] > 0 && ids[lv][j] > 0 && std::abs(ids[lv][j] - ids[lv][i]) > W;
        const double b = masked[(std::size_t(h) * T + i) * T + j];
        if (far) {
          EXPECT_EQ(b, -std::numeric_limits<double>::infinity()) << h << " " << i << " " << j;
          ++n_masked;
        } else {
          EXPECT_EQ(b, plain[(std::size_t(h) * T + i) * T + j]) << h << " " << i << " " << j;
          ++n_kept;
        }
        if (j == 0 || j == i) {
          EXPECT_FALSE(far);
        }
      }
  EXPECT_GT(n_masked, 10);
  EXPECT_GT(n_kept, 10);
  const int past = 6;
  const std::int32_t* tail[2] = {id0 + past, id1 + past};
  std::vector<double> dec(std::size_t(NH) * 3 * T);
  coupled_rel_bias(dec.data(), g.data(), tail, L, 3, past, NH, W, false, false, true);
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j <= past + i; ++j)
        EXPECT_EQ(dec[(std::size_t(h) * 3 + i) * T + j], masked[(std::size_t(h) * T + past + i) * T + j]);
}

// Position codes (model.pos_codes): every trainable tensor's gradient against finite differences, the
// frozen tables' gradient exactly zero (check_whole_model), for each kind on either level and per level.
// d_model 20 holds both hypercube blocks (2 x 4 + 2 x 3 dimensions for max_pos 8 and 6).
TEST(WholeModelVariants, PosCodes) {
  for (const char* codes : {"frozen", "hypercube", "shuffled", "learned,shuffled", "hypercube,learned", "frozen,hypercube"}) {
    SCOPED_TRACE(codes);
    ModelConfig c = tiny_model(PosMode::coupled);
    c.d_model = 20;
    from_json(nlohmann::json{{"pos_codes", codes}, {"pos_code_scale", 0.7}}, c);
    ASSERT_EQ(c.pos_codes_string(), codes);
    int frozen = 0;
    for (const auto& t : Layout::make(c).tensors) frozen += !t.trainable;
    EXPECT_EQ(frozen, std::string(codes).find("learned") == std::string::npos ? 2 : 1);
    check_whole_model(c);
  }
}

// fp32 forward agrees with the double forward: the loss sum is O(10), fp32 rounding per operation is
// ~6e-8 relative, over a few hundred accumulations per value ~1e-5 relative; we allow 1e-4 relative.
namespace {
void float_matches_double(ModelConfig c) {
  c.max_pos1 = c.pos_mode == PosMode::absolute ? 60 : 12;
  c.max_pos2 = 8;
  c.abacus_k = 4;
  const Layout lay = Layout::make(c);
  auto Pd = init_params<double>(c, lay, 11);
  std::vector<float> Pf(Pd.begin(), Pd.end());
  for (std::size_t i = 0; i < Pd.size(); ++i) Pd[i] = double(Pf[i]);
  const Example ex = make_example(parse_problem("123+45+6+999"), c, 1, 1);
  Acts<double> ad;
  Acts<float> af;
  const double ld = model_forward(ad, ModelView<double>{c, lay, Pd.data()}, batch_of(ex));
  const float lf = model_forward(af, ModelView<float>{c, lay, Pf.data()}, batch_of(ex));
  EXPECT_NEAR(double(lf), ld, 1e-4 * std::abs(ld));
}
}  // namespace
TEST_P(WholeModel, FloatMatchesDouble) {
  ModelConfig c;
  c.pos_mode = GetParam();
  float_matches_double(c);
}
TEST(WholeModelVariants, FloatMatchesDouble) {
  ModelConfig c;
  c.pos_mode = PosMode::fire;
  c.fire_threshold = FireThreshold::min;
  float_matches_double(c);
  c.n_layers = 2;
  c.input_injection = true;
  for (PosMode mode : {PosMode::coupled, PosMode::fire, PosMode::rope}) {
    c.pos_mode = mode;
    float_matches_double(c);
  }
}

// Every mode but coupled3, which reads three levels: the addition example couples two (coupled3 runs the
// same embedding code with one more table).
INSTANTIATE_TEST_SUITE_P(AllModes, WholeModel, ::testing::ValuesIn([] {
                           std::vector<PosMode> v;
                           for (PosMode m : kPosModes)
                             if (m != PosMode::coupled3) v.push_back(m);
                           return v;
                         }()),
                         [](const ::testing::TestParamInfo<PosMode>& p) { return std::string(pos_mode_name(p.param)); });

// The whole model under every combination of the options that change the graph (attention scale,
// tied readout, final LayerNorm), each with both initializations: every parameter against central
// differences, as WholeModel above (same tolerance and argument). Two layers, coupled positions.
struct Options {
  AttnScale scale;
  bool tie;
  NormKind norm;
  InitScheme init;
};
class WholeModelOptions : public ::testing::TestWithParam<Options> {};

TEST_P(WholeModelOptions, GradientMatchesFiniteDifferences) {
  const Options o = GetParam();
  ModelConfig c = tiny_model(PosMode::coupled);
  c.attn_scale = o.scale;
  c.tie_readout = o.tie;
  c.final_norm = o.norm;
  c.init = o.init;
  const Layout lay = Layout::make(c);
  // The layout follows the options: no lm_head when tied, a final_norm.bias with LayerNorm.
  EXPECT_EQ(lay.lm_head < 0, o.tie);
  EXPECT_EQ(lay.final_norm_bias >= 0, o.norm == NormKind::layer);
  EXPECT_EQ(lay.tensors.back().name, o.tie ? (o.norm == NormKind::layer ? "final_norm.bias" : "final_norm.weight")
                                           : "lm_head.weight");
  check_whole_model(c);
}

INSTANTIATE_TEST_SUITE_P(
    AllCombinations, WholeModelOptions,
    ::testing::ValuesIn([] {
      std::vector<Options> v;
      for (AttnScale s : {AttnScale::inv_sqrt_dhead, AttnScale::none})
        for (bool tie : {false, true})
          for (NormKind n : {NormKind::rms, NormKind::layer})
            for (InitScheme i : {InitScheme::normal, InitScheme::t5}) v.push_back({s, tie, n, i});
      return v;
    }()),
    [](const ::testing::TestParamInfo<Options>& p) {
      return std::string(attn_scale_name(p.param.scale)) + (p.param.tie ? "_tied_" : "_untied_") +
             norm_kind_name(p.param.norm) + "_" + init_name(p.param.init);
    });

// T5 initialization draws each matrix with its own std (model.hpp): the sample std of every tensor
// of a d_model 256 model is its formula's within 5% (each has >= 256 x 64 = 16k draws: the sample
// std's relative error is ~1/sqrt(2 n) < 0.6%, so 5% is 8 sigma); norm weights 1, LayerNorm bias 0.
// Both schemes scale the same standard-normal draws, in layout order: with one seed the token table
// (the first tensor) of the normal scheme is init_std times the T5 one.
TEST(LearnInit, T5StdsPerTensor) {
  ModelConfig c;
  c.d_model = 256, c.n_heads = 4, c.d_head = 64, c.d_ff = 1024, c.max_pos1 = 40, c.max_pos2 = 40;
  c.init = InitScheme::t5;
  c.final_norm = NormKind::layer;
  const Layout lay = Layout::make(c);
  const auto P = init_params<double>(c, lay, 5);
  auto sd = [&](const std::string& name) {
    const auto& t = lay.find(name);
    double ss = 0;
    for (std::int64_t i = 0; i < t.size; ++i) ss += P[std::size_t(t.offset + i)] * P[std::size_t(t.offset + i)];
    return std::sqrt(ss / double(t.size));
  };
  const double C = 256, HS = 64, D = 256, F = 1024;
  const std::pair<const char*, double> want[] = {
      {"tok_emb.weight", 1.0}, {"pos_emb.0.weight", 1.0}, {"pos_emb.1.weight", 1.0},
      {"layers.0.attn.q.weight", 1 / std::sqrt(C * HS)}, {"layers.0.attn.k.weight", 1 / std::sqrt(C)},
      {"layers.0.attn.v.weight", 1 / std::sqrt(C)}, {"layers.0.attn.o.weight", 1 / std::sqrt(D)},
      {"layers.0.ffn.wi.weight", 1 / std::sqrt(C)}, {"layers.0.ffn.wo.weight", 1 / std::sqrt(F)},
      {"lm_head.weight", 1.0}};
  for (auto& [name, s] : want) EXPECT_NEAR(sd(name), s, 0.05 * s) << name;
  for (auto& t : lay.tensors) {
    if (t.shape.size() != 1) continue;
    for (std::int64_t i = 0; i < t.size; ++i)
      ASSERT_EQ(P[std::size_t(t.offset + i)], t.name == "final_norm.bias" ? 0.0 : 1.0) << t.name;
  }
  // Same seed, normal scheme: the token table (first tensor, first draws) is init_std times the T5 one.
  ModelConfig n = c;
  n.init = InitScheme::normal;
  const auto Pn = init_params<double>(n, Layout::make(n), 5);
  const auto& te = lay.find("tok_emb.weight");
  for (std::int64_t i = 0; i < te.size; ++i)
    ASSERT_DOUBLE_EQ(Pn[std::size_t(i)], double(n.init_std) * P[std::size_t(i)]);
}

// The codes as model.hpp defines them. hypercube: row p of level lv is s [v_p ; v_{p+1}] (Eq. 3's
// vertices, P = ceil(log2(max_pos + 1)) bits) in the level's block, row 0 and every other dimension
// zero; shuffled: the same shape, [v_sigma(p) ; v_sigma(p+1)] with sigma a permutation (distinct
// vertices, not the identity, another seed another permutation); frozen: the learned run's draws times
// pos_code_scale / init_std. Every other tensor equals the learned run's (one controlled change).
TEST(LearnInit, PosCodesAreTheirDefinitions) {
  ModelConfig base;
  base.d_model = 64, base.max_pos1 = 40, base.max_pos2 = 40;
  const auto learned = init_params<double>(base, Layout::make(base), 9);
  for (const char* codes : {"hypercube", "shuffled", "frozen", "learned,hypercube"}) {
    SCOPED_TRACE(codes);
    ModelConfig c = base;
    from_json(nlohmann::json{{"pos_codes", codes}, {"pos_code_scale", 0.5}}, c);
    const Layout lay = Layout::make(c);
    const auto P = init_params<double>(c, lay, 9);
    ASSERT_EQ(P.size(), learned.size());
    for (const auto& t : lay.tensors) {
      const bool table = t.name.rfind("pos_emb.", 0) == 0;
      const int lv = table ? t.name[8] - '0' : -1;
      if (!table || c.pos_codes[lv] == PosCode::learned) {
        for (std::int64_t i = 0; i < t.size; ++i) ASSERT_EQ(P[std::size_t(t.offset + i)], learned[std::size_t(t.offset + i)]) << t.name;
        continue;
      }
      EXPECT_FALSE(t.trainable) << t.name;
      if (c.pos_codes[lv] == PosCode::frozen) {
        for (std::int64_t i = 0; i < t.size; ++i)
          ASSERT_DOUBLE_EQ(P[std::size_t(t.offset + i)], learned[std::size_t(t.offset + i)] * 0.5 / double(c.init_std));
        continue;
      }
      const PosCodeBlock blk = pos_code_block(c, lv);
      ASSERT_EQ(blk.bits, 6);  // 2^6 = 64 >= 41 IDs + the successor of the last
      EXPECT_EQ(blk.offset, lv == 1 && c.pos_codes[0] != PosCode::learned ? 12 : 0);
      std::set<std::vector<double>> vertices;
      bool identity = true;
      for (int p = 0; p <= 40; ++p) {
        const double* r = P.data() + t.offset + std::int64_t(p) * 64;
        for (int d = 0; d < 64; ++d) {
          if (p == 0 || d < blk.offset || d >= blk.offset + 12) {
            ASSERT_EQ(r[d], 0.0) << p << " " << d;
          }
        }
        if (p == 0) continue;
        std::vector<double> v(r + blk.offset, r + blk.offset + 6), vn(r + blk.offset + 6, r + blk.offset + 12);
        for (double x : v) ASSERT_EQ(std::abs(x), 0.5);
        if (p < 40) {
          ASSERT_EQ(vn, std::vector<double>(r + 64 + blk.offset, r + 64 + blk.offset + 6)) << "successor of " << p;
        }
        vertices.insert(v);
        for (int i = 0; i < 6; ++i)  // the paper's Eq. 3, written here again: (-1)^(bit i of p - 1, MSB first)
          identity = identity && v[std::size_t(i)] == 0.5 * (((p - 1) >> (5 - i)) & 1 ? -1 : 1);
        if (p == 40) vertices.insert(vn);
      }
      EXPECT_EQ(vertices.size(), 41u) << "every ID and the last's successor a vertex of its own";
      EXPECT_EQ(identity, c.pos_codes[lv] == PosCode::hypercube);
      if (c.pos_codes[lv] == PosCode::shuffled) {  // the permutation depends on the seed
        EXPECT_NE(pos_code_table(c, lv, 9), pos_code_table(c, lv, 10));
      }
    }
  }
}

// pos_code_distance d: the vertices are the lexicode of distance d. For max_pos 40 and d = 4 it takes 11
// bits (the [11, 6, 4] lexicode has 64 words; 10 bits hold 40 < 41 + 1); every two distinct rows'
// codes (ID and successor halves alike) differ in >= 4 coordinates, the successor halves still chain,
// hypercube takes the words in lexicographic order (ID 1 = the zero word: all +s), and d = 1 is the
// plain hypercube (LearnInit.PosCodesAreTheirDefinitions).
TEST(LearnInit, PosCodeDistance) {
  for (const char* kind : {"hypercube", "shuffled"}) {
    SCOPED_TRACE(kind);
    ModelConfig c;
    c.d_model = 64, c.max_pos1 = 40, c.max_pos2 = 40;
    from_json(nlohmann::json{{"pos_codes", std::string("learned,") + kind}, {"pos_code_distance", 4}}, c);
    const PosCodeBlock blk = pos_code_block(c, 1);
    ASSERT_EQ(blk.bits, 11);
    EXPECT_EQ(blk.offset, 0);
    const auto t = pos_code_table(c, 1, 3);
    std::vector<std::vector<double>> words;
    for (int p = 1; p <= 40; ++p) {
      const double* r = t.data() + std::size_t(p) * 64;
      words.emplace_back(r, r + 11);
      if (p == 40) words.emplace_back(r + 11, r + 22);
      if (p < 40) {
        ASSERT_EQ(std::vector<double>(r + 11, r + 22), std::vector<double>(r + 64, r + 75)) << p;
      }
    }
    for (std::size_t a = 0; a < words.size(); ++a)
      for (std::size_t b = a + 1; b < words.size(); ++b) {
        int diff = 0;
        for (int i = 0; i < 11; ++i) diff += words[a][std::size_t(i)] != words[b][std::size_t(i)];
        ASSERT_GE(diff, 4) << "IDs " << a + 1 << " and " << b + 1;
      }
    if (std::string(kind) == "hypercube") {
      for (double x : words[0]) EXPECT_EQ(x, 1.0);
    }
  }
  ModelConfig wide;
  EXPECT_THROW(from_json(nlohmann::json{{"pos_codes", "shuffled"}, {"pos_code_distance", 9}}, wide), InputError);
  EXPECT_THROW(from_json(nlohmann::json{{"pos_codes", "shuffled"}, {"pos_code_distance", 4}, {"d_model", 32},
                                        {"max_pos1", 40}, {"max_pos2", 40}}, wide), InputError);  // 44 dims
}

// Position codes that cannot be: on a mode without tables, more kinds than levels, codes wider than
// the residual, an unknown kind, a scale out of range (all InputError, before any allocation).
TEST(LearnInit, PosCodesRefused) {
  auto refuse = [](nlohmann::json j) {
    ModelConfig c;
    EXPECT_THROW(from_json(j, c), InputError) << j.dump();
  };
  refuse({{"pos_mode", "none"}, {"pos_codes", "frozen"}});
  refuse({{"pos_mode", "digits"}, {"pos_codes", "learned,frozen"}});
  refuse({{"pos_codes", "learned,frozen,frozen"}});
  refuse({{"pos_codes", "onehot"}});
  refuse({{"pos_codes", ""}});
  refuse({{"pos_codes", "learned,"}});
  refuse({{"pos_codes", 3}});
  refuse({{"pos_codes", "hypercube"}, {"d_model", 16}, {"max_pos1", 40}, {"max_pos2", 40}});  // 24 dims
  refuse({{"pos_codes", "frozen"}, {"pos_code_scale", 0}});
  refuse({{"pos_codes", "frozen"}, {"pos_code_scale", 1e9}});
  ModelConfig ok;
  from_json(nlohmann::json{{"pos_mode", "none"}, {"pos_codes", "learned"}}, ok);
  EXPECT_FALSE(ok.any_pos_code());
}

// bf16 emulation rounds floats; a double forward has no bf16 mode (an internal error, not a silent fp32).
TEST(LearnPrecision, Bf16IsFloatOnly) {
  ModelConfig c;
  const Layout lay = Layout::make(c);
  const auto P = init_params<double>(c, lay, 1);
  const Example ex = make_example(parse_problem("12+34"), c, 1, 1);
  Acts<double> a;
  EXPECT_THROW(model_forward(a, ModelView<double>{c, lay, P.data(), Precision::bf16}, batch_of(ex)), InvariantError);
}
