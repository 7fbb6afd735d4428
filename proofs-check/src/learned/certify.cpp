// learned/certify.hpp: the branch and bound over a shape's digits, one response row at a time.
#include "manyadd/learned/certify.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_map>

#include <malloc.h>

#include <fmt/format.h>

#include "affine.hpp"
#include "manyadd/core/error.hpp"
#include "manyadd/core/parallel.hpp"

namespace manyadd::learned {

const char* row_status_name(RowStatus s) {
  switch (s) {
    case RowStatus::proven: return "proven";
    case RowStatus::failing: return "failing";
    case RowStatus::unknown: return "unknown";
  }
  return "?";
}

namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;
using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using clock_type = std::chrono::steady_clock;

Eigen::Map<const RowMat> mat(const std::vector<double>& v, int rows, int cols) { return {v.data(), rows, cols}; }
Eigen::Map<const VectorXd> vec(const std::vector<double>& v) { return {v.data(), Eigen::Index(v.size())}; }

// Everything about a shape that does not depend on the row or the node: per embedding class (one for
// models without a position table; every position otherwise) and token, the queries, keys and values,
// each head's value through its slice of Wo, and the fp32 attention allowance.
struct ShapeTables {
  const OneLayer& w;
  const DigitVars& dv;
  const Positions& pos;
  const Rounding R;
  int V, C, H, dh, D, F;
  std::int64_t N;
  int ncls;
  std::vector<double> q, k;  // (ncls, V, D)
  std::vector<double> u;     // (ncls, V, H, C): Wo_h v_h
  std::vector<double> x0;    // (ncls, V, C)
  std::vector<double> x0err; // (ncls, V, C): |fl(x0) - x0|
  std::vector<double> v;     // (ncls, V, D)
  // fp32 per class and token: |fl(q) - q|, |fl(k) - k|, |fl(v) - v| (ncls, V, D)
  std::vector<double> err_q, err_k, err_v;
  std::vector<double> bias_max;  // (H): the largest |bias| a key can get
  Fp32Allowance allowance;   // the shape's worst case over every token pair (reported)
  MatrixXd Wi, Wf, readout, Wo, absWo, absWi, absWf;
  VectorXd n2, n3, n4, nf;

  ShapeTables(const OneLayer& w_, const DigitVars& dv_, const Positions& pos_, const Rounding& r);
  int cls(std::int64_t j) const { return w.tables ? int(j) : 0; }
  // rel_far_mask: key j is not attended by query i (weight exactly 0 in real arithmetic and in fp32, where
  // exp(-inf) = 0 and adding a zero rounds nothing): left out of every sum and bound below.
  bool masked(std::int64_t i, std::int64_t j) const {
    if (!w.rel_far_mask) return false;
    const std::int32_t* ids[2] = {pos.level[0].data(), pos.level[1].data()};
    return w.rel_masked(ids, i, j);
  }
  double bias(int h, std::int64_t i, std::int64_t j) const {
    if (masked(i, j)) return -std::numeric_limits<double>::infinity();
    if (w.rel_levels == 0) return 0;
    const int nb = 2 * w.rel_window + 1 + (w.rel_far ? 1 : 0);
    double b = 0;
    for (int lv = 0; lv < w.rel_levels; ++lv) {
      const int bk = w.rel_bucket(pos.level[lv][std::size_t(i)], pos.level[lv][std::size_t(j)]);
      if (bk < 0) continue;
      const double g = w.rel[std::size_t((h * w.rel_levels + lv) * nb + bk)];
      b += bk == 2 * w.rel_window + 1 && w.rel_far_norm ? g - far_shift[lv][std::size_t(i)] : g;
    }
    return b;
  }
  // rel_far_norm: ln of query i's far keys on each level (0 below 2), the float learn's forward uses (a
  // constant of the model, like the score scale); the far term g - shift is exact here, its fp32 rounding
  // is in bias_max (below).
  std::vector<double> far_shift[2];
  // A code of the bias buckets of key j at query i (keys with equal codes get equal biases and, with
  // rel_value, equal relative values): the digits bucket + 1 of each level in base nb + 1, below ncodes.
  int bias_code(std::int64_t i, std::int64_t j) const {
    if (w.rel_levels == 0) return 0;
    int code = 0;
    for (int lv = 0; lv < w.rel_levels; ++lv)
      code = code * (rel_nb + 1) + (w.rel_bucket(pos.level[lv][std::size_t(i)], pos.level[lv][std::size_t(j)]) + 1);
    return code;
  }
  int rel_nb = 0, ncodes = 1;  // coupled_rel: buckets per level; codes
  double nr_terms = 0;        // rel_value: the products its forward adds per row and head (levels x buckets)
  // model.rel_value per head and code: the key's relative value r (dh; the sum over levels of its buckets'),
  // rabs (H, dh): the sum over levels of each level's largest |r[h, lv, b]| per dimension (at least any |r| of a
  // code; and what bounds the forward's sum of bucket masses times r: each level's masses sum to the row's
  // weights), 0 without rel_value; and Z = Wo_h r (C).
  std::vector<double> rsum, zval, rabs;
  const double* Z(int h, int code) const { return &zval[(std::size_t(h) * ncodes + code) * C]; }
  const double* Rv(int h, int code) const { return &rsum[(std::size_t(h) * ncodes + code) * dh]; }
  void relative_values();  // the constructor's part for the above
  const double* U(int c, int t, int h) const { return &u[((std::size_t(c) * V + t) * H + h) * C]; }
  // What key j (class c, token t) gives head h of query i through Wo_h: U, plus with rel_value the Z of the
  // pair's code; into out (C). The one definition the fixed keys' sums and the free keys' options read.
  void key_u(int c, int t, int h, std::int64_t i, std::int64_t j, double* out) const {
    const double* a = U(c, t, h);
    std::copy(a, a + C, out);
    if (zval.empty()) return;
    const double* z = Z(h, bias_code(i, j));
    for (int e = 0; e < C; ++e) out[e] += z[e];
  }
  const double* Vv(int c, int t) const { return &v[(std::size_t(c) * V + t) * D]; }
  const double* dVv(int c, int t) const { return &err_v[(std::size_t(c) * V + t) * D]; }
};

void rms(const double* x, const double* w, int C, double eps, double* out, double* rho_out = nullptr) {
  double ss = 0;
  for (int c = 0; c < C; ++c) ss += x[c] * x[c];
  const double rho = 1.0 / std::sqrt(ss / C + eps);
  for (int c = 0; c < C; ++c) out[c] = w[c] * x[c] * rho;
  if (rho_out) *rho_out = rho;
}

ShapeTables::ShapeTables(const OneLayer& w_, const DigitVars& dv_, const Positions& pos_, const Rounding& r)
    : w(w_), dv(dv_), pos(pos_), R(r), V(w_.V), C(w_.C), H(w_.H), dh(w_.dh), D(w_.H * w_.dh), F(w_.F), N(dv_.N()) {
  ncls = w.tables ? int(N) : 1;
  q.assign(std::size_t(ncls) * V * D, 0), k = q, v = q;
  u.assign(std::size_t(ncls) * V * H * C, 0);
  x0.assign(std::size_t(ncls) * V * C, 0), x0err = x0;
  const auto Wq = mat(w.wq, D, C), Wk = mat(w.wk, D, C), Wv = mat(w.wv, D, C), Wo_ = mat(w.wo, C, D);
  // fp32 magnitudes and errors of q, k, v per dimension (maxima over classes and tokens)
  VectorXd Qm = VectorXd::Zero(D), dQ = Qm, Km = Qm, dK = Qm, Vm = Qm, dVv = Qm;
  err_q.assign(std::size_t(ncls) * V * D, 0), err_k = err_q, err_v = err_q;
  std::vector<double> n1(static_cast<std::size_t>(C)), dn1(static_cast<std::size_t>(C));
  for (int c = 0; c < ncls; ++c)
    for (int t = 0; t < V; ++t) {
      double* x = &x0[(std::size_t(c) * V + t) * C];
      double* xe = &x0err[(std::size_t(c) * V + t) * C];
      for (int e = 0; e < C; ++e) {
        double s = w.wte[std::size_t(t) * C + e], a = std::abs(s);
        for (int lv = 0; lv < w.tables; ++lv) {
          const double p = w.pos[lv][std::size_t(pos.level[lv][std::size_t(c)]) * C + e];
          s += p, a += std::abs(p);
        }
        x[e] = s;
        xe[e] = w.tables > 0 ? R.gamma(w.tables) * a : 0.0;
      }
      double rho = 0;
      rms(x, w.norm1.data(), C, w.eps, n1.data(), &rho);
      // |fl(n1) - n1|: the norm's own rounding plus, with a position table, the embedding's error through
      // the norm's Jacobian (|J d|_i <= |w_i| rho' (|d_i| + (|x_i| + |d_i|) rho' |d| / sqrt(C)), rho' at the
      // smallest norm within |d|)
      double den = 0, xn = 0;
      for (int e = 0; e < C; ++e) den += xe[e] * xe[e], xn += x[e] * x[e];
      den = std::sqrt(den), xn = std::sqrt(xn);
      const double rp = 1.0 / std::sqrt(std::pow(std::max(0.0, xn - den), 2) / C + w.eps);
      for (int e = 0; e < C; ++e) {
        const double prop = std::abs(w.norm1[std::size_t(e)]) * rp *
                            (xe[e] + (std::abs(x[e]) + xe[e]) * rp * den / std::sqrt(double(C)));
        dn1[std::size_t(e)] = prop + R.gamma(C + 6) * (std::abs(n1[std::size_t(e)]) + prop);
      }
      const Eigen::Map<const VectorXd> nv(n1.data(), C), dnv(dn1.data(), C);
      Eigen::Map<VectorXd> qv(&q[(std::size_t(c) * V + t) * D], D), kv(&k[(std::size_t(c) * V + t) * D], D);
      qv = Wq * nv, kv = Wk * nv;
      Eigen::Map<VectorXd> vv(&v[(std::size_t(c) * V + t) * D], D);
      vv = Wv * nv;
      auto err = [&](const Eigen::Map<const RowMat>& W) {
        const VectorXd a = W.cwiseAbs() * dnv;
        return VectorXd(a + R.gamma(C) * (W.cwiseAbs() * (nv.cwiseAbs() + dnv)));
      };
      Qm = Qm.cwiseMax(qv.cwiseAbs()), Km = Km.cwiseMax(kv.cwiseAbs()), Vm = Vm.cwiseMax(vv.cwiseAbs());
      const VectorXd eq_ = err(Wq), ek_ = err(Wk), ev_ = err(Wv);
      dQ = dQ.cwiseMax(eq_), dK = dK.cwiseMax(ek_), dVv = dVv.cwiseMax(ev_);
      const std::size_t at = (std::size_t(c) * V + t) * D;
      Eigen::Map<VectorXd>(&err_q[at], D) = eq_, Eigen::Map<VectorXd>(&err_k[at], D) = ek_;
      Eigen::Map<VectorXd>(&err_v[at], D) = ev_;
      for (int h = 0; h < H; ++h) {
        Eigen::Map<VectorXd> uh(&u[((std::size_t(c) * V + t) * H + h) * C], C);
        uh = Wo_.middleCols(h * dh, dh) * vv.segment(h * dh, dh);
      }
    }
  // Scores: s = fl(fl(fl(q.k) scale) + fl(bias)); softmax fl(exp(fl(s - max))) / sum (learn's
  // attention_forward); output fl(sum_j p_j v_j) then fl(Wo o).
  const double T = double(N);
  VectorXd dO = VectorXd::Zero(D);
  double shift_max[2] = {0, 0};
  for (int lv = 0; lv < w.rel_levels && w.rel_far_norm; ++lv) {
    far_shift[lv].assign(std::size_t(N), 0);
    for (std::int64_t i = 0; i < N; ++i) {
      far_shift[lv][std::size_t(i)] = w.rel_far_shift(pos.level[lv].data(), int(i + 1));
      shift_max[lv] = std::max(shift_max[lv], far_shift[lv][std::size_t(i)]);
    }
  }
  // Per head: the largest |bias| (a sum over levels of the largest |term|), what the score's rounding bounds
  // read as "u bias_max" (the one rounding of fp32's level sum). rel_far_norm: a far term is g - shift, at
  // most |g| + shift, and fp32 rounds it once more before the sum: that error, u (1 + u) of the sum, is
  // covered by using (2 + u) bias_max (every use of bias_max is u bias_max or a magnitude: both larger).
  bias_max.assign(std::size_t(H), 0);
  for (int h = 0; h < H && w.rel_levels > 0; ++h) {
    const int nb = 2 * w.rel_window + 1 + (w.rel_far ? 1 : 0);
    for (int lv = 0; lv < w.rel_levels; ++lv) {
      double mx = 0;
      for (int b = 0; b < nb; ++b) {
        const double g = std::abs(w.rel[std::size_t((h * w.rel_levels + lv) * nb + b)]);
        mx = std::max(mx, b == 2 * w.rel_window + 1 && w.rel_far_norm ? g + shift_max[lv] : g);
      }
      bias_max[std::size_t(h)] += mx;
    }
    if (w.rel_far_norm) bias_max[std::size_t(h)] *= 2 + R.u;
  }
  relative_values();
  double kappa_max = 0, es_max = 0;
  for (int h = 0; h < H; ++h) {
    double qk = 0, e1 = 0, qk_tilde = 0;
    for (int d = h * dh; d < (h + 1) * dh; ++d) {
      qk += Qm(d) * Km(d);
      e1 += Qm(d) * dK(d) + Km(d) * dQ(d) + dQ(d) * dK(d);
      qk_tilde += (Qm(d) + dQ(d)) * (Km(d) + dK(d));
    }
    e1 += R.gamma(dh) * qk_tilde;
    const double sc = w.score_scale, smax = sc * qk, bmax = bias_max[std::size_t(h)];
    const double e2 = sc * e1 + R.u * sc * qk_tilde;
    const double es = e2 + R.u * bmax + R.u * (smax + e2 + bmax * (1 + R.u));
    const double eps_j = es + R.u * 2 * (smax + bmax + es);
    const double uu = R.u;
    const double up = std::exp(2 * eps_j) * (1 + 4 * uu) * (1 + uu) * (1 + uu) / ((1 - 4 * uu) * (1 - R.gamma(T)));
    const double dn = std::exp(-2 * eps_j) * (1 - 4 * uu) * (1 - uu) * (1 - uu) / ((1 + 4 * uu) * (1 + R.gamma(T)));
    const double kappa = std::max(up - 1, 1 - dn);
    kappa_max = std::max(kappa_max, kappa), es_max = std::max(es_max, es);
    for (int d = h * dh; d < (h + 1) * dh; ++d) {
      const double ra = rabs[std::size_t(h) * dh + std::size_t(d - h * dh)];
      dO(d) = kappa * (Vm(d) + ra) + (1 + kappa) * dVv(d) + R.gamma(T) * (1 + kappa) * (Vm(d) + dVv(d) + ra);
      if (nr_terms > 0) dO(d) += R.gamma(nr_terms + 1) * (1 + R.gamma(T)) * (1 + kappa) * (Vm(d) + dVv(d) + ra);
      Vm(d) += ra;  // the output's magnitude, for the projection's rounding below
    }
  }
  const VectorXd attn_err = Wo_.cwiseAbs() * (dO + R.gamma(D) * (Vm + dO));
  allowance.score_error = es_max, allowance.softmax_rel = kappa_max, allowance.attn_error = attn_err.maxCoeff();
  this->Wo = mat(w.wo, C, D);
  absWo = this->Wo.cwiseAbs();
  Wi = mat(w.wi, 2 * F, C), Wf = mat(w.wf, C, F), readout = mat(w.readout, V, C);
  absWi = Wi.cwiseAbs(), absWf = Wf.cwiseAbs();
  n2 = vec(w.norm2), n3 = vec(w.norm3), n4 = vec(w.norm4), nf = vec(w.normf);
}

// The bias codes (rel_nb, ncodes) and, with rel_value, every code's r, Z = Wo_h r, rabs and nr_terms.
void ShapeTables::relative_values() {
  const auto wo = mat(w.wo, C, D);
  // rel_value: every code's relative value and its image through Wo_h (code digits: bucket + 1 per level)
  if (w.rel_levels > 0) {
    rel_nb = 2 * w.rel_window + 1 + (w.rel_far ? 1 : 0);
    for (int lv = 0; lv < w.rel_levels; ++lv) ncodes *= rel_nb + 1;
  }
  rabs.assign(std::size_t(H) * dh, 0);
  if (!w.rel_value.empty()) {
    rsum.assign(std::size_t(H) * ncodes * dh, 0), zval.assign(std::size_t(H) * ncodes * C, 0);
    for (int h = 0; h < H; ++h)
      for (int code = 0; code < ncodes; ++code) {
        double* rs = &rsum[(std::size_t(h) * ncodes + code) * dh];
        for (int lv = w.rel_levels - 1, rest = code; lv >= 0; --lv, rest /= rel_nb + 1) {
          const int b = rest % (rel_nb + 1) - 1;
          if (b < 0) continue;
          const double* rv = &w.rel_value[((std::size_t(h) * w.rel_levels + lv) * rel_nb + b) * dh];
          for (int d = 0; d < dh; ++d) rs[d] += rv[d];
        }
        Eigen::Map<VectorXd>(&zval[(std::size_t(h) * ncodes + code) * C], C) =
            wo.middleCols(h * dh, dh) * Eigen::Map<const VectorXd>(rs, dh);
      }
    for (int h = 0; h < H; ++h)
      for (int lv = 0; lv < w.rel_levels; ++lv)
        for (int d = 0; d < dh; ++d) {
          double mx = 0;
          for (int b = 0; b < rel_nb; ++b)
            mx = std::max(mx, std::abs(w.rel_value[((std::size_t(h) * w.rel_levels + lv) * rel_nb + b) * dh + d]));
          rabs[std::size_t(h) * dh + d] += mx;
        }
  }
  // rel_value's forward (layers.hpp coupled_rel_value): bucket masses summed from the weights, then nr = levels x
  // buckets products added to the P v already computed: its roundings within gamma(K) of the masses (positive
  // terms) and gamma(nr + 1) of |P v| + the products (the attention errors' terms, with the magnitudes rabs bounds).
  nr_terms = w.rel_value.empty() ? 0.0 : double(w.rel_levels * rel_nb);
}

// The rest of the layer after attention on an enclosure of the attention output (center ac, radius ar,
// one symbol per coordinate with ar > 0) for query token tq at embedding class cq; the margins target -
// other as affine forms over the symbols. false when the enclosure is too wide for the norms.
struct MarginForms {
  VectorXd c0;       // (V) per other token (the target's own entry unused)
  MatrixXd G;        // (V, K) coefficients of the input symbols
  VectorXd e;        // (V) everything else: fresh symbols, error box, fp32 rounding
  std::vector<int> sym_coord;  // K: the coordinate of each input symbol
  VectorXd sym_radius;         // K: its radius (the box's, plus the fp32 error's when carried as symbols)
};
// attn_err: the fp32 attention output's distance from the exact one (per coordinate); error_symbols: the
// input's error box as symbols of their own (signs kept through the linear maps: bounded nodes) rather
// than carried as a box (single inputs, where it is small).
bool tail_forms(const ShapeTables& S, int cq, int tq, const VectorXd& ac, const VectorXd& ar, const VectorXd& attn_err,
                int target, bool error_symbols, MarginForms& out, bool fresh = true) {
  const int C = S.C;
  std::vector<int> coords;
  for (int c = 0; c < C; ++c)
    if (ar(c) > 0) coords.push_back(c);
  Aff x;
  const Eigen::Map<const VectorXd> x0(&S.x0[(std::size_t(cq) * S.V + tq) * C], C);
  const Eigen::Map<const VectorXd> x0e(&S.x0err[(std::size_t(cq) * S.V + tq) * C], C);
  x.c = x0 + ac;
  const VectorXd err0 = attn_err + x0e + S.R.u * (x0.cwiseAbs() + x0e + ac.cwiseAbs() + ar + attn_err);
  // error_symbols: coordinate c's symbol carries its box and its error together (radius ar + err0: the
  // fp32 value lies in that interval); out.sym_radius says how much of it is the box.
  if (error_symbols) {
    coords.clear();
    for (int c = 0; c < C; ++c)
      if (ar(c) + err0(c) > 0) coords.push_back(c);
  }
  const int Ks = int(coords.size());
  x.G = MatrixXd::Zero(C, Ks);
  for (int k = 0; k < Ks; ++k) {
    const int c = coords[std::size_t(k)];
    x.G(c, k) = ar(c) + (error_symbols ? err0(c) : 0.0);
  }
  x.e = error_symbols ? VectorXd::Zero(C) : err0;
  Aff x1, n3, x2, xf;
  if (!aff_rmsnorm(x, S.n2, S.w.eps, S.R, x1)) return false;
  if (!aff_rmsnorm(x1, S.n3, S.w.eps, S.R, n3)) return false;
  const Aff h = aff_linear(n3, S.Wi, S.absWi, S.R);
  const Aff g = aff_geglu(h, S.R, fresh && (error_symbols || Ks > 0));
  const Aff fo = aff_linear(g, S.Wf, S.absWf, S.R);
  const Aff r2 = aff_add(x1, fo, S.R);
  if (!aff_rmsnorm(r2, S.n4, S.w.eps, S.R, x2)) return false;
  if (!aff_rmsnorm(x2, S.nf, S.w.eps, S.R, xf)) return false;
  const int V = S.V;
  const VectorXd mag = xf.mag();
  const int K = Ks;
  out.c0.resize(V), out.G.resize(V, K), out.e.resize(V);
  const Eigen::RowVectorXd ry = S.readout.row(target);
  const double ey = S.R.gamma(C) * ry.cwiseAbs().dot(mag);
  for (int o = 0; o < V; ++o) {
    const Eigen::RowVectorXd r = ry - S.readout.row(o);
    out.c0(o) = r.dot(xf.c);
    const Eigen::RowVectorXd g_all = r * xf.G;
    out.G.row(o) = g_all.head(K);
    out.e(o) = g_all.tail(xf.K() - K).cwiseAbs().sum() + r.cwiseAbs().dot(xf.e) + ey +
               S.R.gamma(C) * S.readout.row(o).cwiseAbs().dot(mag);
  }
  out.sym_coord = coords;
  out.sym_radius.resize(K);
  for (int k = 0; k < K; ++k) out.sym_radius(k) = x.G(coords[std::size_t(k)], k);
  return true;
}

// One node's attention at query row i: the fixed keys summed per head, the free keys as groups of
// interchangeable keys with their token options.
struct Option {
  double w;         // exp(score - shift)
  const double* u;  // the value through Wo (C)
};
struct Group {
  double count;
  int begin, end;   // options [begin, end)
};
struct HeadSet {
  VectorXd N0;      // (C)
  double D0 = 0, Dlo = 0;
  double shift = 0; // the weights are exp(score - shift)
  std::vector<Option> opts;
  std::vector<Group> groups;
  std::vector<double> ustore;  // rel_value: each option's u + Z (C each, in option order)
};

// max over the free keys' choices of (n0 + sum cnt w x) / (d0 + sum cnt w), x_k = proj(k): Dinkelbach's
// iteration; the returned value is an upper bound whatever the iteration count (lambda + max(F, 0) / Dlo).
template <class Proj>
double dinkelbach_max(const HeadSet& hs, double n0, const Proj& proj) {
  double lambda = n0 / hs.D0;
  for (int it = 0; it < 200; ++it) {
    double Nn = n0, Dd = hs.D0;
    for (const Group& g : hs.groups) {
      double best = -std::numeric_limits<double>::infinity(), bw = 0, bx = 0;
      for (int k = g.begin; k < g.end; ++k) {
        const double x = proj(k), v = hs.opts[std::size_t(k)].w * (x - lambda);
        if (v > best) best = v, bw = hs.opts[std::size_t(k)].w, bx = x;
      }
      Nn += g.count * bw * bx, Dd += g.count * bw;
    }
    const double Fv = Nn - lambda * Dd;
    if (Fv <= 1e-14 * (std::abs(Nn) + std::abs(lambda) * Dd)) return lambda + std::max(Fv, 0.0) / hs.Dlo;
    lambda = Nn / Dd;
  }
  // not converged: still an upper bound
  double Fv = n0 - lambda * hs.D0;
  for (const Group& g : hs.groups) {
    double best = -std::numeric_limits<double>::infinity();
    for (int k = g.begin; k < g.end; ++k) best = std::max(best, hs.opts[std::size_t(k)].w * (proj(k) - lambda));
    Fv += g.count * best;
  }
  return lambda + std::max(Fv, 0.0) / hs.Dlo;
}

struct RowWorker {
  const ShapeTables& S;
  const CertOptions& opt;
  std::int64_t i;  // query position
  int target_var, query_var;
  std::uint8_t target_sym, query_sym;
  std::vector<int> ctx_var;  // per key position j <= i: its variable or -1
  // score tables per query token: sc[(tq * H + h) * (i + 1) * V + j * V + t]
  std::vector<std::vector<double>> sc_cache;
  clock_type::time_point deadline;
  bool has_deadline;

  RowWorker(const ShapeTables& s, const CertOptions& o, std::int64_t row, clock_type::time_point dl, bool hdl)
      : S(s), opt(o), i(row), deadline(dl), has_deadline(hdl) {
    const DigitVars& dv = S.dv;
    query_var = dv.var_at(i), query_sym = dv.symbol_at(i);
    if (i + 1 < dv.N()) target_var = dv.var_at(i + 1), target_sym = dv.symbol_at(i + 1);
    else target_var = -1, target_sym = kDollar;
    for (std::int64_t j = 0; j <= i; ++j) ctx_var.push_back(dv.var_at(j));
    sc_cache.resize(std::size_t(S.V)), err_cache.resize(std::size_t(S.V));
  }

  // Per head, key and token: the exact score and the bound of |fl(fl(q.k) scale) - scale q.k| (the pair's
  // product error gamma(dh) sum |q~||k~| plus the q and k errors, and the scaling's rounding).
  std::vector<std::vector<double>> err_cache;
  const std::vector<double>& scores(int tq) {
    auto& t = sc_cache[std::size_t(tq)];
    if (!t.empty()) return t;
    auto& et = err_cache[std::size_t(tq)];
    const int V = S.V, H = S.H, dh = S.dh, D = S.D;
    const std::int64_t K = i + 1;
    t.resize(std::size_t(H) * K * V), et.resize(t.size());
    const int cq = S.cls(i);
    const double* qv = &S.q[(std::size_t(cq) * V + tq) * D];
    const double* qe = &S.err_q[(std::size_t(cq) * V + tq) * D];
    const double sc = S.w.score_scale;
    for (int h = 0; h < H; ++h)
      for (std::int64_t j = 0; j < K; ++j) {
        const double b = S.bias(h, i, j);
        const int cj = S.cls(j);
        for (int tk = 0; tk < V; ++tk) {
          const double* kv = &S.k[(std::size_t(cj) * V + tk) * D];
          const double* ke = &S.err_k[(std::size_t(cj) * V + tk) * D];
          double s = 0, e1 = 0, qk = 0;
          for (int d = h * dh; d < (h + 1) * dh; ++d) {
            s += qv[d] * kv[d];
            e1 += std::abs(qv[d]) * ke[d] + std::abs(kv[d]) * qe[d] + qe[d] * ke[d];
            qk += (std::abs(qv[d]) + qe[d]) * (std::abs(kv[d]) + ke[d]);
          }
          t[(std::size_t(h) * K + j) * V + tk] = sc * s + b;
          et[(std::size_t(h) * K + j) * V + tk] = sc * (e1 + S.R.gamma(dh) * qk) + S.R.u * sc * qk;
        }
      }
    return t;
  }

  std::uint16_t mask_of(const Domains& d, std::int64_t j) const {
    const int v = ctx_var[std::size_t(j)];
    return v >= 0 ? d[std::size_t(v)] : std::uint16_t(1u << S.dv.symbol_at(j));
  }

  VectorXd attn_err;  // the node's fp32 attention error (build)

  // The node's attention structure (every head) for query token tq, and its fp32 attention error:
  // per head the score error eps (the pair's product error, the bias's and the subtraction's roundings),
  // the softmax as a reweighting of the exact weights by factors within exp(+-eps)(1 +- 4u) (so it moves
  // the output by at most (1 - 1/rho) times the values' range, rho = exp(2 eps)(1 + 4u)/(1 - 4u)), the
  // normalization's and P V's roundings, the values' own errors; then through Wo.
  void build(const Domains& d, int tq, std::vector<HeadSet>& hs, std::vector<std::int64_t>& free_keys) {
    const int V = S.V, H = S.H, C = S.C;
    const std::int64_t K = i + 1;
    const auto& sc = scores(tq);
    free_keys.clear();
    for (std::int64_t j = 0; j < K; ++j)
      if (j != i && popcount16(mask_of(d, j)) > 1 && !S.masked(i, j)) free_keys.push_back(j);
    // groups: (class, bias code, mask)
    std::unordered_map<std::uint64_t, int> gid;
    std::vector<std::int64_t> rep;
    std::vector<int> key_group(free_keys.size());
    std::vector<double> counts;
    for (std::size_t f = 0; f < free_keys.size(); ++f) {
      const std::int64_t j = free_keys[f];
      const std::uint64_t sig = (std::uint64_t(S.cls(j)) << 40) ^ (std::uint64_t(S.bias_code(i, j)) << 16) ^ mask_of(d, j);
      auto it = gid.find(sig);
      if (it == gid.end()) {
        it = gid.emplace(sig, int(rep.size())).first;
        rep.push_back(j), counts.push_back(0);
      }
      key_group[f] = it->second, counts[std::size_t(it->second)] += 1;
    }
    hs.resize(std::size_t(H));
    VectorXd ubuf(C);
    // The sums over keys (the softmax's normalization, P v, rel_value's masses) have Keff terms that can round:
    // a masked key's weight is exactly 0 (exp(-inf)), its product with a finite value is 0, and adding a zero
    // rounds nothing in any summation order, so the gamma of those sums counts the keys not masked.
    std::int64_t Keff = 0;
    for (std::int64_t j = 0; j < K; ++j) Keff += !S.masked(i, j);
    for (int h = 0; h < H; ++h) {
      HeadSet& s = hs[std::size_t(h)];
      const double* sh = &sc[std::size_t(h) * K * V];
      double shift = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < K; ++j) {
        if (S.masked(i, j)) continue;
        const std::uint16_t m = j == i ? std::uint16_t(1u << tq) : mask_of(d, j);
        for (int t = 0; t < V; ++t)
          if (m >> t & 1) shift = std::max(shift, sh[j * V + t]);
      }
      s.shift = shift;
      s.N0 = VectorXd::Zero(C), s.D0 = 0;
      for (std::int64_t j = 0; j < K; ++j) {
        const std::uint16_t m = j == i ? std::uint16_t(1u << tq) : mask_of(d, j);
        if (popcount16(m) != 1 || S.masked(i, j)) continue;
        const int t = lowest_bit(m);
        const double wgt = std::exp(sh[j * V + t] - shift);
        S.key_u(S.cls(j), t, h, i, j, ubuf.data());
        s.N0 += wgt * ubuf;
        s.D0 += wgt;
      }
      {
        const int dh = S.dh;
        double eps = 0, smin = std::numeric_limits<double>::infinity(), smax = 0;
        VectorXd vmax = VectorXd::Constant(dh, -std::numeric_limits<double>::infinity()), vmin = -vmax, dvm = VectorXd::Zero(dh);
        VectorXd vabs = VectorXd::Zero(dh);  // the largest |v| of the keys' tokens
        for (std::int64_t j = 0; j < K; ++j) {
          if (S.masked(i, j)) continue;
          const std::uint16_t m = j == i ? std::uint16_t(1u << tq) : mask_of(d, j);
          for (int t = 0; t < V; ++t)
            if (m >> t & 1) {
              const double sj = sh[j * V + t];
              eps = std::max(eps, err_cache[std::size_t(tq)][(std::size_t(h) * K + j) * V + t]);
              smin = std::min(smin, sj), smax = std::max(smax, std::abs(sj));
              VectorXd vv = Eigen::Map<const VectorXd>(S.Vv(S.cls(j), t) + h * dh, dh);
              vabs = vabs.cwiseMax(vv.cwiseAbs());
              if (!S.rsum.empty()) vv += Eigen::Map<const VectorXd>(S.Rv(h, S.bias_code(i, j)), dh);  // rel_value
              vmax = vmax.cwiseMax(vv), vmin = vmin.cwiseMin(vv);
              dvm = dvm.cwiseMax(Eigen::Map<const VectorXd>(S.dVv(S.cls(j), t) + h * dh, dh));
            }
        }
        const double uu = S.R.u, bm = S.bias_max[std::size_t(h)];
        eps += uu * (2 * smax + 3 * bm) + uu * (shift - smin + eps);
        const double rho = std::exp(2 * eps) * (1 + 4 * uu) / (1 - 4 * uu);
        const double beta = S.R.gamma(double(Keff)) + 3 * uu;
        // rel_value: vmax, vmin above are of v + r (the reweighting moves the average of those); the weights'
        // normalization and the forward's own roundings of the term (ShapeTables: masses, nr products and sums)
        // read the magnitudes |v| + rabs; 0 without it.
        const VectorXd ra = Eigen::Map<const VectorXd>(&S.rabs[std::size_t(h) * dh], dh);
        VectorXd dO = (1 - 1 / rho) * (vmax - vmin) + (beta + S.R.gamma(double(Keff)) * (1 + beta)) * (vabs + dvm + ra) +
                      (1 + beta) * dvm;
        if (S.nr_terms > 0) dO += S.R.gamma(S.nr_terms + 1) * (1 + S.R.gamma(double(Keff))) * (1 + beta) * (vabs + dvm + ra);
        const VectorXd contrib = S.absWo.middleCols(h * dh, dh) * (dO + S.R.gamma(S.D) * (vabs + ra + dO));
        if (h == 0) attn_err = contrib;
        else attn_err += contrib;
      }
      s.opts.clear(), s.groups.clear(), s.ustore.clear();
      s.Dlo = s.D0;
      for (std::size_t g = 0; g < rep.size(); ++g) {
        const std::int64_t j = rep[g];
        const std::uint16_t m = mask_of(d, j);
        Group gr{counts[g], int(s.opts.size()), 0};
        double wmin = std::numeric_limits<double>::infinity();
        for (int t = 0; t < V; ++t)
          if (m >> t & 1) {
            const double wgt = std::exp(sh[j * V + t] - shift);
            if (S.zval.empty()) {
              s.opts.push_back({wgt, S.U(S.cls(j), t, h)});
            } else {  // rel_value: U + Z stored with the head (pointers set below, once the store stops growing)
              s.ustore.resize(s.ustore.size() + std::size_t(C));
              S.key_u(S.cls(j), t, h, i, j, s.ustore.data() + s.ustore.size() - std::size_t(C));
              s.opts.push_back({wgt, nullptr});
            }
            wmin = std::min(wmin, wgt);
          }
        gr.end = int(s.opts.size());
        s.groups.push_back(gr);
        s.Dlo += gr.count * wmin;
      }
      if (!S.zval.empty())
        for (std::size_t k = 0; k < s.opts.size(); ++k) s.opts[k].u = &s.ustore[k * std::size_t(C)];
    }
  }

  // Lower bound of the node's smallest margin (target over every other token); also reports the
  // estimated radius. -inf when the enclosure is too wide.
  double bound(const std::vector<HeadSet>& hs, int cq, int tq, int target) {
    const int C = S.C, H = S.H, V = S.V;
    VectorXd lo = VectorXd::Zero(C), hi = VectorXd::Zero(C);
    for (int h = 0; h < H; ++h) {
      const HeadSet& s = hs[std::size_t(h)];
      for (int c = 0; c < C; ++c) {
        hi(c) += dinkelbach_max(s, s.N0(c), [&](int k) { return s.opts[std::size_t(k)].u[c]; });
        lo(c) -= dinkelbach_max(s, -s.N0(c), [&](int k) { return -s.opts[std::size_t(k)].u[c]; });
      }
    }
    const VectorXd ac = 0.5 * (lo + hi), ar = (0.5 * (hi - lo)).cwiseMax(0.0) + 1e-12 * (lo.cwiseAbs() + hi.cwiseAbs());
    MarginForms mf;
    if (!tail_forms(S, cq, tq, ac, ar, attn_err, target, true, mf)) return -std::numeric_limits<double>::infinity();
    const int K = int(mf.sym_coord.size());
    double best = std::numeric_limits<double>::infinity();
    VectorXd coef(C);
    for (int o = 0; o < V; ++o) {
      if (o == target) continue;
      const double box = mf.c0(o) - mf.G.row(o).cwiseAbs().sum() - mf.e(o);
      // exact support of the symbols' part over the attention set: coef . a, coef_c = g_k / ar_c
      // symbol k = ((a_c - ac_c) + r_c) / R_k with R_k = ar_c + err_c, |r_c| <= err_c: its term is
      // coef_c (a_c - ac_c) + coef_c r_c, coef_c = g_k / R_k, the second at most |coef_c| err_c
      coef.setZero();
      double err_part = 0;
      for (int k = 0; k < K; ++k) {
        const int c = mf.sym_coord[std::size_t(k)];
        coef(c) = mf.G(o, k) / mf.sym_radius(k);
        err_part += std::abs(coef(c)) * (mf.sym_radius(k) - ar(c));
      }
      double lin = -coef.dot(ac) - err_part;
      for (int h = 0; h < H; ++h) {
        const HeadSet& s = hs[std::size_t(h)];
        std::vector<double> pr(s.opts.size());
        for (std::size_t k = 0; k < s.opts.size(); ++k)
          pr[k] = -coef.dot(Eigen::Map<const VectorXd>(s.opts[k].u, C));
        lin -= dinkelbach_max(s, -coef.dot(s.N0), [&](int k) { return pr[std::size_t(k)]; });
      }
      const double exact = mf.c0(o) + lin - mf.e(o);
      best = std::min(best, std::max(box, exact));
    }
    return best;
  }

  // The exact margin at a leaf (every key a single value) and its certified lower bound: first with the
  // fp32 error carried as a box (cheap), then, when that does not prove it, as symbols of their own (the
  // FFN's remainders in the box, then as symbols too).
  void leaf(const std::vector<HeadSet>& hs, int cq, int tq, int target, double& exact, double& lb) {
    const int C = S.C;
    VectorXd a = VectorXd::Zero(C);
    for (const HeadSet& s : hs) a += s.N0 / s.D0;
    MarginForms mf;
    for (int mode = 0; mode < 3; ++mode) {
      exact = lb = -std::numeric_limits<double>::infinity();
      if (!tail_forms(S, cq, tq, a, VectorXd::Zero(C), attn_err, target, mode > 0, mf, mode == 2)) continue;
      exact = lb = std::numeric_limits<double>::infinity();
      for (int o = 0; o < S.V; ++o) {
        if (o == target) continue;
        exact = std::min(exact, mf.c0(o));
        lb = std::min(lb, mf.c0(o) - mf.e(o));
      }
      if (lb > kSlack) return;
    }
  }

  // Influence of each free key on the attention output (for branching and the radius estimate).
  double influence(const std::vector<HeadSet>& hs, const Domains& d, std::int64_t j, int tq) {
    const int V = S.V, C = S.C;
    const std::int64_t K = i + 1;
    const auto& sc = scores(tq);
    const std::uint16_t m = mask_of(d, j);
    double total = 0;
    for (int h = 0; h < S.H; ++h) {
      const HeadSet& s = hs[std::size_t(h)];
      const double* sh = &sc[std::size_t(h) * K * V];
      const double shift = s.shift;
      double wmax = 0;
      VectorXd umin = VectorXd::Constant(C, std::numeric_limits<double>::infinity()), umax = -umin;
      for (int t = 0; t < V; ++t)
        if (m >> t & 1) {
          wmax = std::max(wmax, std::exp(sh[j * V + t] - shift));
          const Eigen::Map<const VectorXd> uu(S.U(S.cls(j), t, h), C);
          umin = umin.cwiseMin(uu), umax = umax.cwiseMax(uu);
        }
      total += wmax / s.Dlo * (umax - umin).norm();
    }
    return total;
  }

  RowResult run() {
    RowResult r;
    r.row = i;
    r.min_bound = std::numeric_limits<double>::infinity();
    r.min_exact = std::numeric_limits<double>::infinity();
    const DigitVars& dv = S.dv;
    std::vector<Domains> stack{dv.root()};
    std::vector<HeadSet> hs;
    std::vector<std::int64_t> free_keys;
    while (!stack.empty()) {
      Domains d = std::move(stack.back());
      stack.pop_back();
      if (++r.nodes > opt.max_nodes) {
        r.status = RowStatus::unknown;
        r.why = fmt::format("node budget ({}) spent", opt.max_nodes);
        return r;
      }
      if (has_deadline && (r.nodes & 63) == 0 && clock_type::now() > deadline) {
        r.status = RowStatus::unknown;
        r.why = "time budget spent";
        return r;
      }
      if (!dv.propagate(d)) {
        ++r.pruned;
        continue;
      }
      // the target and the query token first: a node is bounded only when both are single values
      int split = -1;
      for (int v : {target_var, query_var})
        if (split < 0 && v >= 0 && popcount16(d[std::size_t(v)]) > 1) split = v;
      if (split >= 0) {
        for (int t = 0; t < 10; ++t)
          if (d[std::size_t(split)] >> t & 1) {
            Domains c = d;
            c[std::size_t(split)] = std::uint16_t(1u << t);
            stack.push_back(std::move(c));
          }
        continue;
      }
      const int tq = query_var >= 0 ? lowest_bit(d[std::size_t(query_var)]) : query_sym;
      const int target = target_var >= 0 ? lowest_bit(d[std::size_t(target_var)]) : target_sym;
      const int cq = S.cls(i);
      build(d, tq, hs, free_keys);
      if (free_keys.empty()) {
        ++r.leaves;
        double exact = 0, lb = 0;
        leaf(hs, cq, tq, target, exact, lb);
        r.min_exact = std::min(r.min_exact, exact);
        if (lb > kSlack) {
          r.min_bound = std::min(r.min_bound, lb);
          continue;
        }
        // A leaf fixes the keys the query attends: with rel_far_mask, operand digits outside the window may
        // still be free (every input of the set has this margin); the witness is one input of the set.
        Domains one = d;
        if (!dv.narrow_to_one_input(one)) {
          r.status = RowStatus::unknown;
          r.why = "a leaf set with a margin below its bound whose input the greedy completion did not find";
          r.min_bound = lb;
          return r;
        }
        r.status = RowStatus::failing;
        r.witness = dv.problem_of(one);
        r.witness_margin = exact;
        r.min_bound = lb;
        return r;
      }
      std::vector<double> infl(free_keys.size());
      double est = 0;
      for (std::size_t f = 0; f < free_keys.size(); ++f) est += infl[f] = influence(hs, d, free_keys[f], tq);
      if (est <= opt.bound_radius) {
        const double lb = bound(hs, cq, tq, target);
        if (lb > kSlack) {
          ++r.bounded;
          r.min_bound = std::min(r.min_bound, lb);
          continue;
        }
      }
      // branch on the most influential free key: its domain in two halves (digit order)
      const std::size_t f = std::size_t(std::max_element(infl.begin(), infl.end()) - infl.begin());
      const int v = ctx_var[std::size_t(free_keys[f])];
      const std::uint16_t m = d[std::size_t(v)];
      const int half = popcount16(m) / 2;
      std::uint16_t lowm = 0;
      int seen = 0;
      for (int t = 0; t < 10 && seen < half; ++t)
        if (m >> t & 1) lowm |= std::uint16_t(1u << t), ++seen;
      Domains a = d, b = std::move(d);
      a[std::size_t(v)] = lowm;
      b[std::size_t(v)] = std::uint16_t(m & ~lowm);
      stack.push_back(std::move(b));
      stack.push_back(std::move(a));
    }
    r.status = RowStatus::proven;
    return r;
  }
};

}  // namespace

CertResult certify_shape(const OneLayer& w, const DigitVars& dv, const Positions& pos, const CertOptions& opt,
                         const ProgressOptions& progress) {
  // The enclosures allocate and free matrices of a few hundred KiB per node: keep them on the heap rather
  // than mapping and unmapping pages for each (glibc's defaults return them to the system).
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  const auto t0 = clock_type::now();
  const bool has_deadline = opt.seconds > 0;
  const auto deadline = t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(opt.seconds));
  const ShapeTables S(w, dv, pos, opt.fp32 ? Rounding{} : Rounding{0.0});
  const std::int64_t eq = dv.eq(), N = dv.N();
  CertResult res;
  res.fp32 = S.allowance;
  res.rows.resize(std::size_t(N - eq));
  Progress prog("certificate", N - eq, "rows", progress);
  std::atomic<std::int64_t> nodes{0};
  parallel_for(
      opt.threads, N - eq,
      [&](int, std::int64_t k) {
        RowWorker wk(S, opt, eq + k, deadline, has_deadline);
        res.rows[std::size_t(k)] = wk.run();
        nodes += res.rows[std::size_t(k)].nodes;
        prog.add();
      },
      Schedule::dynamic);
  prog.finish();
  res.status = RowStatus::proven;
  for (const auto& r : res.rows) {
    if (r.status == RowStatus::failing) res.status = RowStatus::failing;
    else if (r.status == RowStatus::unknown && res.status == RowStatus::proven) res.status = RowStatus::unknown;
  }
  res.nodes = nodes.load();
  res.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return res;
}

double bound_inputs(const OneLayer& w, const DigitVars& dv, const Positions& pos, const Domains& d, std::int64_t row) {
  if (row < dv.eq() || row >= dv.N()) throw InputError(fmt::format("row {} is not a response row", row));
  const ShapeTables S(w, dv, pos, Rounding{});
  CertOptions opt;
  RowWorker wk(S, opt, row, clock_type::now(), false);
  for (int v : {wk.query_var, wk.target_var})
    if (v >= 0 && popcount16(d[std::size_t(v)]) != 1) throw InputError("bound_inputs: the query and target must be single values");
  const int tq = wk.query_var >= 0 ? lowest_bit(d[std::size_t(wk.query_var)]) : wk.query_sym;
  const int target = wk.target_var >= 0 ? lowest_bit(d[std::size_t(wk.target_var)]) : wk.target_sym;
  std::vector<HeadSet> hs;
  std::vector<std::int64_t> free_keys;
  wk.build(d, tq, hs, free_keys);
  if (free_keys.empty()) {
    double exact = 0, lb = 0;
    wk.leaf(hs, S.cls(row), tq, target, exact, lb);
    return lb;
  }
  return wk.bound(hs, S.cls(row), tq, target);
}

LeafEval evaluate_leaf(const OneLayer& w, const DigitVars& dv, const Positions& pos, const Problem& p, std::int64_t row,
                       bool fp32) {
  if (row < dv.eq() || row >= dv.N()) throw InputError(fmt::format("row {} is not a response row", row));
  const ShapeTables S(w, dv, pos, fp32 ? Rounding{} : Rounding{0.0});
  CertOptions opt;
  RowWorker wk(S, opt, row, clock_type::now(), false);
  const Domains d = dv.of_problem(p);
  const int tq = wk.query_var >= 0 ? lowest_bit(d[std::size_t(wk.query_var)]) : wk.query_sym;
  const int target = wk.target_var >= 0 ? lowest_bit(d[std::size_t(wk.target_var)]) : wk.target_sym;
  std::vector<HeadSet> hs;
  std::vector<std::int64_t> free_keys;
  wk.build(d, tq, hs, free_keys);
  VectorXd a = VectorXd::Zero(S.C);
  for (const HeadSet& s : hs) a += s.N0 / s.D0;
  LeafEval out;
  out.target = target;
  out.margin.assign(std::size_t(S.V), 0);
  out.error.assign(std::size_t(S.V), std::numeric_limits<double>::infinity());
  // the margins (the forms' centers: exact at a single input), the error the best of the leaf's three forms
  // (the certificate's leaf takes the first that proves; each is a bound)
  bool any = false;
  for (int mode = 0; mode < 3; ++mode) {
    MarginForms mf;
    if (!tail_forms(S, S.cls(row), tq, a, VectorXd::Zero(S.C), wk.attn_err, target, mode > 0, mf, mode == 2)) continue;
    for (int o = 0; o < S.V; ++o)
      if (o != target) {
        out.margin[std::size_t(o)] = mf.c0(o);
        out.error[std::size_t(o)] = std::min(out.error[std::size_t(o)], mf.e(o));
      }
    any = true;
  }
  if (!any) {  // the enclosures failed: the exact margins from the real-arithmetic forms, no bound
    const ShapeTables Sr(w, dv, pos, Rounding{0.0});
    MarginForms mf;
    if (!tail_forms(Sr, Sr.cls(row), tq, a, VectorXd::Zero(S.C), VectorXd::Zero(S.C), target, false, mf))
      throw InvariantError("evaluate_leaf: the real-arithmetic forms failed at a single input");
    for (int o = 0; o < S.V; ++o)
      if (o != target) out.margin[std::size_t(o)] = mf.c0(o);
  }
  out.error[std::size_t(target)] = 0;
  return out;
}

}  // namespace manyadd::learned
