// Structured O(N) engine, compiled FFN, and the exact row engine; see structured.hpp.
#include "manyadd/structured.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace manyadd {

namespace {
std::int64_t code(std::int64_t p, int P) { return (p - 1) & ((std::int64_t(1) << P) - 1); }

// CSR of real IDs base + o (o = 0..count-1) grouped by code(base + o + shift).
void build_lists(std::int64_t base, std::int64_t count, std::int64_t shift, int P, std::vector<std::int32_t>& start,
                 std::vector<std::int32_t>& ids) {
  const std::int64_t C = std::int64_t(1) << P;
  start.assign(std::size_t(C + 1), 0);
  for (std::int64_t o = 0; o < count; ++o) ++start[std::size_t(code(base + o + shift, P) + 1)];
  for (std::int64_t c = 0; c < C; ++c) start[std::size_t(c + 1)] += start[std::size_t(c)];
  ids.assign(std::size_t(count), 0);
  std::vector<std::int32_t> fill(start.begin(), start.end() - 1);
  for (std::int64_t o = 0; o < count; ++o) ids[std::size_t(fill[std::size_t(code(base + o + shift, P))]++)] = std::int32_t(o);
}

// The canonical head weights for (P1, P2, lambda_h): the structure every engine here assumes.
bool same_matrix(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() && a == b;
}
}  // namespace

StructuredStream::StructuredStream(const Shape& shape, std::int64_t s1, std::int64_t s2, int P1, int P2)
    : shape_(shape), s1_(s1), s2_(s2), P1_(P1), P2_(P2) {
  if (s1 < 1 || s2 < 1) throw InputError(fmt::format("offsets must be >= 1 (got s1={}, s2={})", s1, s2));
  build_lists(s1, shape.l + 1, 0, P1, l1_start_, l1_ids_);
  build_lists(s2, shape.m + 1, 0, P2, l2_start_, l2_ids_);
  build_lists(s2, shape.m + 1, 1, P2, l2n_start_, l2n_ids_);
}

double StructuredStream::estimate_bytes(const Shape& s) {
  // two bytes per real ID pair (count <= 2, value sum <= 54), the level-1 counts, the lists
  return 2.0 * double(s.l + 1) * double(s.m + 1) + 8.0 * double(s.l + 1) + 64.0 * double(s.l + s.m + 2);
}

void StructuredStream::run(const std::uint8_t* tokens, const std::function<void(const QueryMatch&)>& visit) const {
  const std::int64_t W = shape_.m + 1;  // row width of the pair table (p1 - s1, p2 - s2)
  // Per real ID pair, the keys seen so far: at most 2 share a pair (A_{i+1} and B_i digits of one
  // significance; '+' after A_{i+1} and the separator before B_i), so bytes suffice.
  std::vector<std::uint8_t> cnt(std::size_t((shape_.l + 1) * W), 0), val(std::size_t((shape_.l + 1) * W), 0);
  std::vector<std::int64_t> cnt1(std::size_t(shape_.l + 1), 0);
  std::int64_t prefix_value = 0;
  const std::int64_t eq = shape_.eq_index();
  QueryMatch q;

  auto pairs = [&](const std::vector<std::int32_t>& s1v, const std::vector<std::int32_t>& i1, std::int64_t c1,
                   const std::vector<std::int32_t>& s2v, const std::vector<std::int32_t>& i2, std::int64_t c2,
                   HeadMatch& h) {
    h.x = 1;
    h.vsum = 0;
    h.pairs = 0;
    h.pair_t = h.pair_j = -1;
    h.only_separators = true;
    for (std::int32_t a = s1v[std::size_t(c1)]; a < s1v[std::size_t(c1 + 1)]; ++a)
      for (std::int32_t b = s2v[std::size_t(c2)]; b < s2v[std::size_t(c2 + 1)]; ++b) {
        const std::size_t cell = std::size_t(std::int64_t(i1[std::size_t(a)]) * W + i2[std::size_t(b)]);
        if (!cnt[cell]) continue;
        h.x += cnt[cell];
        h.vsum += val[cell];
        ++h.pairs;
        h.pair_t = i1[std::size_t(a)];
        h.pair_j = i2[std::size_t(b)];
        if (h.pair_t != 0) h.only_separators = false;  // level-1 offset 0 = separators only
      }
  };

  for_each_id(shape_, s1_, s2_, [&](std::int64_t k, std::int64_t p1, std::int64_t p2) {
    const int tok = tokens ? tokens[k] : 0;
    const int v = tok < 10 ? 3 * tok : 0;  // V1 = V2 = 3 e_NUM (Eqs. 9, 13)
    if (k > 0) {  // insert key k (causal: a query sees itself)
      const std::size_t cell = std::size_t((p1 - s1_) * W + (p2 - s2_));
      ++cnt[cell];
      val[cell] = std::uint8_t(val[cell] + v);
      ++cnt1[std::size_t(p1 - s1_)];
      prefix_value += v;
    }
    if (k < eq) return;
    q.j = k;
    const std::int64_t c1 = code(p1, P1_), c1n = code(p1 + 1, P1_), c2 = code(p2, P2_);
    // head 1: key (POS_1, POS_2_NEXT) = query (POS_1_NEXT, POS_2)   (Eqs. 7-8)
    pairs(l1_start_, l1_ids_, c1n, l2n_start_, l2n_ids_, c2, q.h[0]);
    // head 2: key (POS_1, POS_2_NEXT) = query (POS_1, POS_2)        (Eqs. 11-12)
    pairs(l1_start_, l1_ids_, c1, l2n_start_, l2n_ids_, c2, q.h[1]);
    // head 4: key (POS_1, POS_2) = query (POS_1, POS_2)             (Eqs. 19-20)
    pairs(l1_start_, l1_ids_, c1, l2_start_, l2_ids_, c2, q.h[3]);
    // head 3: key POS_1 = query POS_1_NEXT                           (Eqs. 15-16)
    HeadMatch& h3 = q.h[2];
    h3.x = 1;
    for (std::int32_t a = l1_start_[std::size_t(c1n)]; a < l1_start_[std::size_t(c1n + 1)]; ++a)
      h3.x += cnt1[std::size_t(l1_ids_[std::size_t(a)])];
    for (int h = 0; h < 4; ++h) q.h[std::size_t(h)].u = k + 1 - q.h[std::size_t(h)].x;
    for (int h : {0, 1}) q.h[std::size_t(h)].usum = prefix_value - q.h[std::size_t(h)].vsum;
    // heads 3-4 carry IS_BOS: value 1 on BOS (always matched), 0 elsewhere
    for (int h : {2, 3}) {
      q.h[std::size_t(h)].vsum = 1;
      q.h[std::size_t(h)].usum = 0;
    }
    visit(q);
  });
}

CompiledFFN CompiledFFN::build(const ConstructedModel& M) {
  const Layout& L = M.layout;
  const int d = L.d(), H = int(M.W1.rows());
  // Structure: heads read/write what the construction says (so Y's SUM/ARROW/EOS dims stay 0 and
  // only PRE_* change); W1 reads only NUM .. PRE_EOS; Wout reads only SUM .. EOS.
  for (int h = 0; h < 4; ++h) {
    const Head& hd = M.heads[std::size_t(h)];
    const auto ref = build_model(L.P1, L.P2, hd.lambda).heads[std::size_t(h)];
    if (!same_matrix(hd.Q, ref.Q) || !same_matrix(hd.K, ref.K) || !same_matrix(hd.V, ref.V) || !same_matrix(hd.U, ref.U))
      throw InputError(fmt::format("structured engine: head {} does not have the Theorem 4.1 structure", h + 1));
  }
  for (int c = 7; c < d; ++c)
    if (M.W1.col(c).cwiseAbs().maxCoeff() != 0)
      throw InputError("structured engine: the feed-forward layer reads beyond NUM .. PRE_EOS");
  for (int c = 0; c < d; ++c) {
    const bool out_dim = c >= Layout::SUM_0 && c <= Layout::EOS;
    if (!out_dim && M.Wout.col(c).cwiseAbs().maxCoeff() != 0)
      throw InputError("structured engine: the readout reads a dimension other than SUM_k, ARROW, EOS");
  }
  CompiledFFN F;
  F.b1.assign(std::size_t(H), 0);
  F.C.assign(std::size_t(H), {});
  const Eigen::MatrixXd Cm = M.Wout * M.W2;  // (14, H)
  const Eigen::VectorXd c0 = M.Wout * M.b2;
  for (int t = 0; t < kVocab; ++t) F.c0[std::size_t(t)] = c0(t);
  for (int u = 0; u < H; ++u) {
    F.b1[std::size_t(u)] = M.b1(u);
    for (int t = 0; t < kVocab; ++t) F.C[std::size_t(u)][std::size_t(t)] = Cm(t, u);
    std::array<double, 7> w{};
    for (int c = 0; c < 7; ++c) w[std::size_t(c)] = M.W1(u, c);
    auto g = std::find_if(F.groups.begin(), F.groups.end(), [&](const Group& G) { return G.w == w; });
    if (g == F.groups.end()) {
      F.groups.push_back(Group{w, {}});
      g = F.groups.end() - 1;
    }
    g->units.push_back(u);
  }
  return F;
}

std::array<double, kVocab> CompiledFFN::logits(const std::array<double, 7>& y) const {
  std::array<double, kVocab> out = c0;
  for (const Group& G : groups) {
    double z = 0;
    for (int c = 0; c < 7; ++c) z += G.w[std::size_t(c)] * y[std::size_t(c)];
    for (int u : G.units) {
      const double h = std::max(0.0, z + b1[std::size_t(u)]);
      if (h == 0) continue;
      const auto& Cu = C[std::size_t(u)];
      for (int t = 0; t < kVocab; ++t) out[std::size_t(t)] += Cu[std::size_t(t)] * h;
    }
  }
  return out;
}

Interval head_interval(const HeadMatch& m, double eps) {
  const double ue = double(m.u) * eps;
  return {double(m.vsum) / (double(m.x) + ue), (double(m.vsum) + double(m.usum) * eps) / double(m.x)};
}

StructuredResult structured_forward(const ConstructedModel& M, const CompiledFFN& F, const std::vector<std::uint8_t>& tokens,
                                    const Shape& shape, std::int64_t s1, std::int64_t s2, const StructuredOptions& opt) {
  if (std::int64_t(tokens.size()) != shape.N())
    throw InputError(fmt::format("structured_forward: {} tokens, shape has N = {}", tokens.size(), shape.N()));
  StructuredStream stream(shape, s1, s2, M.layout.P1, M.layout.P2);
  StructuredResult R;
  const std::int64_t eq = shape.eq_index(), N = shape.N();
  R.pred.resize(std::size_t(N - eq));
  if (opt.keep_outputs) R.out.resize(std::size_t(N - eq));
  if (opt.finite) R.iv.resize(std::size_t(N - eq));
  std::array<double, 4> eps{};
  for (int h = 0; h < 4; ++h) eps[std::size_t(h)] = std::nextafter(std::exp(-2.0 * M.heads[std::size_t(h)].lambda), 1.0) * (1 + 1e-15);
  R.min_margin = 1e300;
  stream.run(tokens.data(), [&](const QueryMatch& q) {
    std::array<double, 7> y{};
    const int tok = tokens[std::size_t(q.j)];
    y[Layout::NUM] = tok < 10 ? tok : 0;
    y[Layout::IS_BOS] = 0;
    y[Layout::FULL_ONES] = 1;
    for (int h = 0; h < 4; ++h) y[std::size_t(3 + h)] = double(q.h[std::size_t(h)].vsum) / double(q.h[std::size_t(h)].x);
    const auto lg = F.logits(y);
    const std::size_t r = std::size_t(q.j - eq);
    const int expected = q.j + 1 < N ? tokens[std::size_t(q.j + 1)] : int(kDollar);
    int best = 0;
    double other = -1e300;
    for (int t = 0; t < kVocab; ++t) {
      if (lg[std::size_t(t)] > lg[std::size_t(best)]) best = t;
      if (t != expected) other = std::max(other, lg[std::size_t(t)]);
    }
    R.pred[r] = std::uint8_t(best);
    const double margin = lg[std::size_t(expected)] - other;
    R.min_margin = std::min(R.min_margin, margin);
    if (!(margin > 0) && R.first_mismatch < 0) R.first_mismatch = q.j;
    if (opt.keep_outputs)
      for (int h = 0; h < 4; ++h) R.out[r][std::size_t(h)] = y[std::size_t(3 + h)];
    if (opt.finite)
      for (int h = 0; h < 4; ++h) R.iv[r][std::size_t(h)] = head_interval(q.h[std::size_t(h)], eps[std::size_t(h)]);
  });
  return R;
}

RowEngine::RowEngine(const ConstructedModel& M, const Shape& shape, std::int64_t s1, std::int64_t s2,
                     const std::vector<std::uint8_t>& tokens)
    : M_(M), shape_(shape), s1_(s1), s2_(s2), tokens_(tokens), num_(tokens.size()) {
  if (std::int64_t(tokens.size()) != shape.N()) throw InputError("RowEngine: token count differs from the shape's N");
  for (std::size_t k = 0; k < tokens.size(); ++k) num_[k] = tokens[k] < 10 ? tokens[k] : 0;
}

RowResult RowEngine::row(std::int64_t j, const CompiledFFN& F) const {
  const Layout& L = M_.layout;
  const int d = L.d();
  const std::int64_t l = shape_.l, m = shape_.m, LL = l + 1, N = shape_.N();
  if (j < 0 || j >= N) throw InputError("RowEngine: query index outside the sequence");
  std::int32_t qp1, qp2;
  position_id_at(shape_, s1_, s2_, j, qp1, qp2);
  // Key k's index range: BOS 0; A_i (i = 1..m) digits at (i-1)LL + 1 + r (r = 0..l-1, level-1
  // offset l - r), its separator at i LL; B_b (b = 0..m) separator at (m+b) LL (b >= 1; b = 0 is
  // the '=' already counted as A_m's separator), digits at (m+b) LL + t (offset t = 1..l).
  RowResult R;
  Eigen::VectorXd xq = Eigen::VectorXd::Zero(d);
  xq(Layout::FULL_ONES) = 1;
  write_position(L, qp1, qp2, xq.data());
  for (int h = 0; h < 4; ++h) {
    const Head& H = M_.heads[std::size_t(h)];
    const Eigen::VectorXd q = H.Q * xq;
    // K is linear: a key's score = level-1 part + level-2 part + token part, each from the weights.
    auto part = [&](std::int32_t p1, std::int32_t p2) {
      Eigen::VectorXd x = Eigen::VectorXd::Zero(d);
      write_position(L, p1, p2, x.data());
      return (H.K * x).dot(q);
    };
    std::vector<double> a1(std::size_t(l + 1)), a2(std::size_t(m + 1));
    for (std::int64_t o = 0; o <= l; ++o) a1[std::size_t(o)] = part(std::int32_t(s1_ + o), 0);
    for (std::int64_t o = 0; o <= m; ++o) a2[std::size_t(o)] = part(0, std::int32_t(s2_ + o));
    Eigen::VectorXd xt = Eigen::VectorXd::Zero(d);
    xt(Layout::FULL_ONES) = 1;
    const double tokpart = (H.K * xt).dot(q);
    xt(Layout::IS_BOS) = 1;
    const double bos = (H.K * xt).dot(q);
    const double vnum = H.V(0, Layout::NUM), vone = H.V(0, Layout::FULL_ONES), vbos = H.V(0, Layout::IS_BOS);

    // The keys, as (level-1 offset o, level-2 offset b, index k), visited by blocks; the first
    // pass finds the top score (max-subtracted softmax, as the dense engine), the second sums.
    const double A1max = *std::max_element(a1.begin(), a1.end());
    double top = bos;
    auto visit_blocks = [&](auto&& block, auto&& single) {
      // query blocks A_1 .. A_m
      for (std::int64_t i = 1; i <= m; ++i) {
        const std::int64_t k0 = (i - 1) * LL + 1, sep = i * LL;
        if (k0 > j) return;
        const std::int64_t b = i - 1;
        if (sep <= j) block(k0, l, b, true);
        else
          for (std::int64_t k = k0; k <= j; ++k) single(k, l - (k - k0), b);
        if (sep <= j) single(sep, 0, i < m ? b : 0);
      }
      for (std::int64_t bb = 0; bb <= m; ++bb) {
        const std::int64_t base = (m + bb) * LL;
        if (bb > 0) {
          if (base > j) return;
          single(base, 0, bb);
        }
        const std::int64_t k0 = base + 1;
        if (k0 > j) return;
        if (base + l <= j) block(k0, l, bb, false);
        else
          for (std::int64_t k = k0; k <= j; ++k) single(k, k - base, bb);
      }
    };
    visit_blocks([&](std::int64_t, std::int64_t, std::int64_t b, bool) { top = std::max(top, A1max + a2[std::size_t(b)] + tokpart); },
                 [&](std::int64_t, std::int64_t o, std::int64_t b) { top = std::max(top, a1[std::size_t(o)] + a2[std::size_t(b)] + tokpart); });
    // weight = exp(a1[o] - A1max) * exp(a2[b] + tokpart + A1max - top): both factors <= 1.
    std::vector<double> e1(a1.size()), e1rev(a1.size()), e2(a2.size());
    for (std::size_t o = 0; o < a1.size(); ++o) e1[o] = std::exp(a1[o] - A1max);
    for (std::int64_t r = 0; r < l; ++r) e1rev[std::size_t(r)] = e1[std::size_t(l - r)];  // A blocks: offsets l .. 1
    for (std::size_t o = 0; o < a2.size(); ++o) e2[o] = std::exp(std::min(0.0, a2[o] + tokpart + A1max - top));
    double sumDigits = 0;
    for (std::int64_t o = 1; o <= l; ++o) sumDigits += e1[std::size_t(o)];
    const double wb = std::exp(bos - top);
    double z = wb, acc = wb * (vbos + vone);
    visit_blocks(
        [&](std::int64_t k0, std::int64_t len, std::int64_t b, bool isA) {
          const double* v = num_.data() + k0;
          const double* e = isA ? e1rev.data() : e1.data() + 1;
          double dot = 0;
          for (std::int64_t r = 0; r < len; ++r) dot += e[r] * v[r];
          z += e2[std::size_t(b)] * sumDigits;
          acc += e2[std::size_t(b)] * (vnum * dot + vone * sumDigits);
        },
        [&](std::int64_t k, std::int64_t o, std::int64_t b) {
          const double w = e1[std::size_t(o)] * e2[std::size_t(b)];
          z += w;
          acc += w * (vnum * num_[std::size_t(k)] + vone);
        });
    R.out[std::size_t(h)] = acc / z;
  }
  std::array<double, 7> y{};
  y[Layout::NUM] = num_[std::size_t(j)];
  y[Layout::FULL_ONES] = 1;
  for (int h = 0; h < 4; ++h) y[std::size_t(3 + h)] = R.out[std::size_t(h)];
  R.logits = F.logits(y);
  return R;
}

}  // namespace manyadd
