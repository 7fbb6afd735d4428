// Structured O(N) engine, compiled FFN, and the exact row engine; see structured.hpp.
#include "manyadd/structured.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <fmt/format.h>

namespace manyadd {

namespace {
std::int64_t code(std::int64_t p, int P) { return stream_code(p, P); }

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
  // the targets of each query offset, when every code holds at most one real ID
  auto one = [](const std::vector<std::int32_t>& start, const std::vector<std::int32_t>& ids, std::int64_t c, bool& ok) {
    const std::int32_t a = start[std::size_t(c)], b = start[std::size_t(c + 1)];
    ok = ok && b - a <= 1;
    return b > a ? ids[std::size_t(a)] : -1;
  };
  bool ok = true;
  for (std::int64_t o = 0; o <= shape.l; ++o) {
    same1_.push_back(one(l1_start_, l1_ids_, code(s1 + o, P1), ok));
    next1_.push_back(one(l1_start_, l1_ids_, code(s1 + o + 1, P1), ok));
  }
  for (std::int64_t j = 0; j <= shape.m; ++j) {
    same2_.push_back(one(l2_start_, l2_ids_, code(s2 + j, P2), ok));
    prev2_.push_back(one(l2n_start_, l2n_ids_, code(s2 + j, P2), ok));
  }
  single_ = ok;
}

double StructuredStream::estimate_bytes(const Shape& s) {
  // two bytes per real ID pair (count <= 2, value sum <= 54), the level-1 counts, the lists
  return 2.0 * double(s.l + 1) * double(s.m + 1) + 8.0 * double(s.l + 1) + 64.0 * double(s.l + s.m + 2);
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
  if (!same_matrix(M.tok_emb, build_model(L.P1, L.P2, 1.0).tok_emb))
    throw InputError("structured engine: the token embedding is not the construction's (D.4.1)");
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
  // Flat evaluation order: units grouped, each with its nonzero readout coefficients.
  F.cs_start.push_back(0);
  for (const Group& G : F.groups)
    for (int u : G.units) {
      F.order.push_back(u);
      for (int t = 0; t < kVocab; ++t)
        if (Cm(t, u) != 0) {
          F.cs_tok.push_back(t);
          F.cs_coef.push_back(Cm(t, u));
        }
      F.cs_start.push_back(int(F.cs_tok.size()));
    }
  return F;
}

void CompiledFFN::add_groups(const std::array<double, 7>& y, bool digit_side, std::array<double, kVocab>& out) const {
  std::size_t pos = 0;
  for (const Group& G : groups) {
    const bool digit = G.w[Layout::NUM] != 0 || G.w[Layout::PRE_SUM] != 0 || G.w[Layout::PRE_CARRY] != 0;
    if (digit != digit_side) {
      pos += G.units.size();
      continue;
    }
    double z = 0;
    for (int c = 0; c < 7; ++c) z += G.w[std::size_t(c)] * y[std::size_t(c)];
    for (std::size_t e = pos + G.units.size(); pos < e; ++pos) {
      const double h = z + b1[std::size_t(order[pos])];
      if (h <= 0) continue;
      for (int q = cs_start[pos]; q < cs_start[pos + 1]; ++q) out[std::size_t(cs_tok[std::size_t(q)])] += cs_coef[std::size_t(q)] * h;
    }
  }
}

std::array<double, kVocab> CompiledFFN::logits(const std::array<double, 7>& y) const {
  std::array<double, kVocab> out = c0;
  add_groups(y, true, out);
  add_groups(y, false, out);
  return out;
}

Interval head_interval(const HeadMatch& m, double eps) {
  const double ue = double(m.u) * eps;
  return {double(m.vsum) / (double(m.x) + ue), (double(m.vsum) + double(m.usum) * eps) / double(m.x)};
}

namespace {
// Limit-mode head outputs: each head averages its matched keys' values uniformly.
std::array<double, 4> limit_head_outputs(const QueryMatch& q) {
  std::array<double, 4> o{};
  for (int h = 0; h < 4; ++h) o[std::size_t(h)] = double(q.h[std::size_t(h)].vsum) / double(q.h[std::size_t(h)].x);
  return o;
}

// The logits at one query and what the verdict needs of them: the lowest-index argmax and the
// two largest values (the largest other than `top` may equal it on a tie).
struct LogitSummary {
  std::array<double, kVocab> lg{};
  int top = 0;
  double v1 = 0, v2 = 0;
  void summarize() {
    // the largest value by two independent chains (no loop-carried reload of lg[top]), then its
    // first index, then the largest of the others
    static_assert(kVocab % 2 == 0, "two maxima over token pairs");
    double a = lg[0], b = lg[1];
    for (int t = 2; t < kVocab; t += 2) {
      a = std::max(a, lg[std::size_t(t)]);
      b = std::max(b, lg[std::size_t(t + 1)]);
    }
    v1 = std::max(a, b);
    top = 0;
    while (top + 1 < kVocab && lg[std::size_t(top)] != v1) ++top;  // bounded: a NaN never equals
    a = b = -std::numeric_limits<double>::infinity();
    for (int t = 0; t < kVocab; t += 2) {
      a = std::max(a, t == top ? a : lg[std::size_t(t)]);
      b = std::max(b, t + 1 == top ? b : lg[std::size_t(t + 1)]);
    }
    v2 = std::max(a, b);
  }
  // logit of e minus the largest logit of another token
  double margin(int e) const { return e == top ? v1 - v2 : lg[std::size_t(e)] - v1; }
};

// The readout at the response queries of one pass, logits = (c0 + digit side) + other side:
//  - the digit-side groups see only (NUM, PRE_SUM, PRE_CARRY), which in limit mode take few values:
//    a direct-mapped cache keyed by the exact integers (NUM, vsum_1, x_1, vsum_2, x_2) keeps them;
//  - the other groups read IS_BOS, FULL_ONES, PRE_ARROW, PRE_EOS, which in limit mode are 1/x3, 1/x4
//    and change only between numbers: their part is kept for the last (x3, x4), and a generation
//    counts the distinct parts met in a row;
//  - a slot also keeps the summary of its full logits for the generation it was made in, so a
//    query that hits costs a key, a hash and a compare.
// Every logit is the same sum in the same order whether it comes from the cache or not.
class Readout {
 public:
  explicit Readout(const CompiledFFN& F) : F_(F), slots_(4096) {}
  const LogitSummary& at(int tok, const QueryMatch& q) {
    if (q.h[2].x != other_x3_ || q.h[3].x != other_x4_) {
      other_x3_ = q.h[2].x;
      other_x4_ = q.h[3].x;
      std::array<double, kVocab> other{};
      F_.add_groups(inputs(tok, q), false, other);
      // a new generation only when the part differs (its units are mostly off, 1/x3 and 1/x4
      // far below their thresholds, so most numbers share one): every kept summary stays exact
      if (gen_ == 0 || other != other_) {
        other_ = other;
        ++gen_;
      }
    }
    const HeadMatch &m1 = q.h[0], &m2 = q.h[1];
    const int num = tok < 10 ? tok : 0;
    if (!(m1.x < 256 && m2.x < 256 && m1.vsum < 4096 && m2.vsum < 4096)) {
      digit_logits(tok, q, scratch_digit_);
      combine(scratch_digit_, scratch_);
      return scratch_;
    }
    const std::uint64_t key = 1 + (std::uint64_t(num) | std::uint64_t(m1.x) << 4 | std::uint64_t(m1.vsum) << 12 |
                                   std::uint64_t(m2.x) << 24 | std::uint64_t(m2.vsum) << 32);
    Slot& s = slots_[std::size_t((key * 0x9E3779B97F4A7C15ULL) >> 52)];  // 4096 slots
    if (s.key != key) {
      s.key = key;
      s.gen = 0;
      digit_logits(tok, q, s.digit);
    }
    if (s.gen != gen_) {
      s.gen = gen_;
      combine(s.digit, s.sum);
    }
    return s.sum;
  }

 private:
  struct Slot {
    std::uint64_t key = 0, gen = 0;  // key 0 and generation 0: empty
    std::array<double, kVocab> digit{};
    LogitSummary sum;
  };
  static std::array<double, 7> inputs(int tok, const QueryMatch& q) {
    std::array<double, 7> y{};
    y[Layout::NUM] = tok < 10 ? tok : 0;
    y[Layout::IS_BOS] = 0;
    y[Layout::FULL_ONES] = 1;
    const std::array<double, 4> o = limit_head_outputs(q);
    for (int h = 0; h < 4; ++h) y[std::size_t(3 + h)] = o[std::size_t(h)];
    return y;
  }
  void digit_logits(int tok, const QueryMatch& q, std::array<double, kVocab>& out) const {
    out = F_.c0;
    F_.add_groups(inputs(tok, q), true, out);
  }
  void combine(const std::array<double, kVocab>& digit, LogitSummary& s) const {
    for (int t = 0; t < kVocab; ++t) s.lg[std::size_t(t)] = digit[std::size_t(t)] + other_[std::size_t(t)];
    s.summarize();
  }
  const CompiledFFN& F_;
  std::vector<Slot> slots_;
  std::uint64_t gen_ = 0;
  std::int64_t other_x3_ = -1, other_x4_ = -1;
  std::array<double, kVocab> other_{}, scratch_digit_{};
  LogitSummary scratch_;
};
}  // namespace

StructuredResult structured_forward(const ConstructedModel& M, const CompiledFFN& F, const std::vector<std::uint8_t>& tokens,
                                    const Shape& shape, std::int64_t s1, std::int64_t s2, const StructuredOptions& opt) {
  if (std::int64_t(tokens.size()) != shape.N())
    throw InputError(fmt::format("structured_forward: {} tokens, shape has N = {}", tokens.size(), shape.N()));
  StructuredStream stream(shape, s1, s2, M.layout.P1, M.layout.P2);
  StructuredResult R;
  const std::int64_t eq = shape.eq_index(), N = shape.N();
  R.pred.resize(std::size_t(N - eq));
  if (opt.keep_outputs) R.out.resize(std::size_t(N - eq));
  if (opt.finite) R.iv.resize(opt.rows.empty() ? std::size_t(N - eq) : opt.rows.size());
  std::size_t next_row = 0;
  std::array<double, 4> eps{};
  for (int h = 0; h < 4; ++h) eps[std::size_t(h)] = std::nextafter(std::exp(-2.0 * M.heads[std::size_t(h)].lambda), 1.0) * (1 + 1e-15);
  R.min_margin = 1e300;
  Readout readout(F);
  stream.run<false>(tokens.data(), [&](const QueryMatch& q) {  // no pair fields: the readout reads x and vsum
    const int tok = tokens[std::size_t(q.j)];
    const LogitSummary& lg = readout.at(tok, q);
    const std::size_t r = std::size_t(q.j - eq);
    const int expected = q.j + 1 < N ? tokens[std::size_t(q.j + 1)] : int(kDollar);
    // The prediction is the lowest-index argmax; the margin of the expected token is its logit
    // minus the largest other one (<= 0 exactly when the prediction is wrong or tied).
    R.pred[r] = std::uint8_t(lg.top);
    const double margin = lg.margin(expected);
    R.min_margin = std::min(R.min_margin, margin);
    if (!(margin > 0) && R.first_mismatch < 0) R.first_mismatch = q.j;
    if (opt.keep_outputs) R.out[r] = limit_head_outputs(q);
    if (opt.finite) {
      if (opt.rows.empty()) {
        for (int h = 0; h < 4; ++h) R.iv[r][std::size_t(h)] = head_interval(q.h[std::size_t(h)], eps[std::size_t(h)]);
      } else {
        for (; next_row < opt.rows.size() && opt.rows[next_row] == q.j; ++next_row)
          for (int h = 0; h < 4; ++h) R.iv[next_row][std::size_t(h)] = head_interval(q.h[std::size_t(h)], eps[std::size_t(h)]);
      }
    }
  });
  return R;
}

RowEngine::RowEngine(const ConstructedModel& M, const Shape& shape, std::int64_t s1, std::int64_t s2,
                     const std::vector<std::uint8_t>& tokens)
    : M_(M), shape_(shape), s1_(s1), s2_(s2), tokens_(tokens) {
  if (std::int64_t(tokens.size()) != shape.N()) throw InputError("RowEngine: token count differs from the shape's N");
  // A_{b+1} and B_b share their level-2 ID (s2 + b), so every row weighs them alike: their digit
  // sums by significance t, B's order (values <= 18), for the rows that see both whole.
  const std::int64_t l = shape.l, LL = l + 1, m = shape.m;
  pair_sum_.resize(std::size_t(m * l));
  for (std::int64_t b = 0; b < m; ++b)
    for (std::int64_t t = 1; t <= l; ++t)
      pair_sum_[std::size_t(b * l + t - 1)] =
          std::uint8_t(tokens[std::size_t(b * LL + 1 + (l - t))] + tokens[std::size_t((m + b) * LL + t)]);
  const int d = M.d();
  pe1_ = Eigen::MatrixXd::Zero(shape.l + 1, d);
  pe2_ = Eigen::MatrixXd::Zero(shape.m + 1, d);
  Eigen::VectorXd x(d);
  for (std::int64_t o = 0; o <= shape.l; ++o) {
    x.setZero();
    write_position(M.layout, std::int32_t(s1 + o), 0, x.data());
    pe1_.row(o) = x.transpose();
  }
  for (std::int64_t o = 0; o <= shape.m; ++o) {
    x.setZero();
    write_position(M.layout, 0, std::int32_t(s2 + o), x.data());
    pe2_.row(o) = x.transpose();
  }
}

namespace {
// The keys of row j, as (level-1 offset o, level-2 offset b, index k), visited by blocks: a whole digit
// block at once (block(k0, b, is_A)), the rest (separators, the query's own partial block) one key at a
// time (single(k, o, b)). Key k's index range: BOS 0 (not visited); A_i (i = 1..m) digits at
// (i-1)LL + 1 + r (r = 0..l-1, level-1 offset l - r), its separator at i LL; B_b (b = 0..m) separator
// at (m+b) LL (b >= 1; b = 0 is the '=' already counted as A_m's separator), digits at (m+b) LL + t
// (offset t = 1..l).
template <class Block, class Single>
void visit_key_blocks(std::int64_t j, std::int64_t l, std::int64_t m, Block&& block, Single&& single) {
  const std::int64_t LL = l + 1;
  // query blocks A_1 .. A_m
  for (std::int64_t i = 1; i <= m; ++i) {
    const std::int64_t k0 = (i - 1) * LL + 1, sep = i * LL;
    if (k0 > j) return;
    const std::int64_t b = i - 1;
    if (sep <= j) block(k0, b, true);
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
    if (base + l <= j) block(k0, bb, false);
    else
      for (std::int64_t k = k0; k <= j; ++k) single(k, k - base, bb);
  }
}

// One head's sums for a row: weight = exp(a1[o] - A1max) * exp(a2[b] + tokpart + A1max - top) (both
// factors <= 1, max-subtracted as the dense engine); z and the value sum acc without the digit blocks'
// NUM part (add_digit_blocks adds it); e1, e1rev, e2 the factors by offset.
struct RowHeadSums {
  std::vector<double> e1, e1rev, e2;
  double z = 0, acc = 0, vnum = 0;
};

RowHeadSums head_sums(const Head& Hd, const Layout& L, const Eigen::VectorXd& xq, const Eigen::MatrixXd& pe1,
                      const Eigen::MatrixXd& pe2, const std::vector<std::uint8_t>& tokens, std::int64_t j, std::int64_t l,
                      std::int64_t m) {
  const int d = L.d();
  auto num = [&](std::int64_t k) { return tokens[std::size_t(k)] < 10 ? double(tokens[std::size_t(k)]) : 0.0; };
  RowHeadSums P;
  const Eigen::VectorXd q = Hd.Q * xq;
  // K is linear: a key's score = level-1 part + level-2 part + token part, each from the weights:
  // part = (K x_part) . q = x_part . (K^T q).
  const Eigen::VectorXd kq = Hd.K.transpose() * q;
  // (the position rows of pe1/pe2 are zero outside their level's blocks)
  const Eigen::VectorXd a1v = pe1.middleCols(L.POS_1(), 2 * L.P1) * kq.segment(L.POS_1(), 2 * L.P1);
  const Eigen::VectorXd a2v = pe2.middleCols(L.POS_2(), 2 * L.P2) * kq.segment(L.POS_2(), 2 * L.P2);
  const std::vector<double> a1(a1v.data(), a1v.data() + a1v.size()), a2(a2v.data(), a2v.data() + a2v.size());
  Eigen::VectorXd xt = Eigen::VectorXd::Zero(d);
  xt(Layout::FULL_ONES) = 1;
  const double tokpart = (Hd.K * xt).dot(q);
  xt(Layout::IS_BOS) = 1;
  const double bos = (Hd.K * xt).dot(q);
  P.vnum = Hd.V(0, Layout::NUM);
  const double vone = Hd.V(0, Layout::FULL_ONES), vbos = Hd.V(0, Layout::IS_BOS);
  // the first pass finds the top score, the second sums
  const double A1max = *std::max_element(a1.begin(), a1.end());
  double top = bos;
  visit_key_blocks(
      j, l, m, [&](std::int64_t, std::int64_t b, bool) { top = std::max(top, A1max + a2[std::size_t(b)] + tokpart); },
      [&](std::int64_t, std::int64_t o, std::int64_t b) { top = std::max(top, a1[std::size_t(o)] + a2[std::size_t(b)] + tokpart); });
  P.e1.resize(a1.size());
  P.e1rev.resize(a1.size());
  P.e2.resize(a2.size());
  for (std::size_t o = 0; o < a1.size(); ++o) P.e1[o] = std::exp(a1[o] - A1max);
  for (std::int64_t r = 0; r < l; ++r) P.e1rev[std::size_t(r)] = P.e1[std::size_t(l - r)];  // A blocks: offsets l .. 1
  for (std::size_t o = 0; o < a2.size(); ++o) P.e2[o] = std::exp(std::min(0.0, a2[o] + tokpart + A1max - top));
  double sumDigits = 0;
  for (std::int64_t o = 1; o <= l; ++o) sumDigits += P.e1[std::size_t(o)];
  const double wb = std::exp(bos - top);
  P.z = wb;
  P.acc = wb * (vbos + vone);
  visit_key_blocks(
      j, l, m,
      [&](std::int64_t, std::int64_t b, bool) {
        P.z += P.e2[std::size_t(b)] * sumDigits;
        P.acc += P.e2[std::size_t(b)] * vone * sumDigits;
      },
      [&](std::int64_t k, std::int64_t o, std::int64_t b) {
        const double w = P.e1[std::size_t(o)] * P.e2[std::size_t(b)];
        P.z += w;
        P.acc += w * (P.vnum * num(k) + vone);
      });
  return P;
}

// s[r] += t[r], the row engine's inner loop (~40% of a cross-check), into 16-bit sums that
// add_wide empties into 32-bit ones before they can overflow: integer sums, so every clone gives
// the same result; the wide clones are picked at load time on CPUs that have them.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
void add_bytes(std::uint16_t* s, const std::uint8_t* t, std::int64_t n) {
  for (std::int64_t r = 0; r < n; ++r) s[r] = std::uint16_t(s[r] + t[r]);
}
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
void add_wide(std::int32_t* s, std::uint16_t* t, std::int64_t n) {
  for (std::int64_t r = 0; r < n; ++r) {
    s[r] += t[r];
    t[r] = 0;
  }
}

// The digit blocks' NUM part of the heads that read NUM: sum_b e2[b] sum_r e[r] digit(b, r). A
// block's level-2 weights take one value per hypercube distance (<= P2 + 1 values), so the blocks
// are grouped by them and the digits of a group summed exactly as integers, one pass over the
// digits for all such heads: O(N) bytes per row instead of O(N) multiply-adds per head. The pass is
// shared by a batch of rows (sum_digit_blocks): the digits are read from memory once per batch, not
// once per row (a row alone is bound by memory bandwidth at N = 2e8). pair_sum: A_{b+1} + B_b by
// significance (RowEngine's pair_sum_).
struct DigitBlocks {
  std::vector<int> reads;                    // the heads that read NUM
  std::vector<std::vector<double>> group_e2; // per group: those heads' level-2 factor
  // full blocks by level-2 offset b: A_{b+1} (index b) and B_b share it, so share a group
  std::vector<int> groupA, groupB;
  std::vector<std::int32_t> sums;            // [A/B][group][r]; at most 9 (m + 1) each
  std::vector<std::uint16_t> recent;         // the same over the blocks since the last flush into sums
};

DigitBlocks plan_digit_blocks(const std::array<RowHeadSums, 4>& H, std::int64_t j, std::int64_t l, std::int64_t m) {
  DigitBlocks D;
  for (int h = 0; h < 4; ++h)
    if (H[std::size_t(h)].vnum != 0) D.reads.push_back(h);
  if (D.reads.empty()) return D;
  std::map<std::vector<double>, int> group_of;
  D.groupA.assign(std::size_t(m + 1), -1);
  D.groupB.assign(std::size_t(m + 1), -1);
  visit_key_blocks(
      j, l, m,
      [&](std::int64_t, std::int64_t b, bool isA) {
        std::vector<double> key;
        for (int h : D.reads) key.push_back(H[std::size_t(h)].e2[std::size_t(b)]);
        auto it = group_of.find(key);
        if (it == group_of.end()) {
          it = group_of.emplace(key, int(D.group_e2.size())).first;
          D.group_e2.push_back(key);
        }
        (isA ? D.groupA : D.groupB)[std::size_t(b)] = it->second;
      },
      [](std::int64_t, std::int64_t, std::int64_t) {});
  D.sums.assign(2 * D.group_e2.size() * std::size_t(l), 0);
  D.recent.assign(D.sums.size(), 0);
  return D;
}

void sum_digit_blocks(std::vector<DigitBlocks>& batch, const std::vector<std::uint8_t>& tokens,
                      const std::vector<std::uint8_t>& pair_sum, std::int64_t l, std::int64_t m) {
  const std::int64_t LL = l + 1;
  // a block adds at most 18 to a 16-bit sum (a pair A_{b+1} + B_b): 3640 blocks stay below 65536
  constexpr std::int64_t kFlushEvery = 65535 / 18;
  auto flush = [&] {
    for (DigitBlocks& D : batch) add_wide(D.sums.data(), D.recent.data(), std::int64_t(D.sums.size()));
  };
  for (std::int64_t b = 0; b <= m; ++b) {
    if (b > 0 && b % kFlushEvery == 0) flush();
    for (DigitBlocks& D : batch) {
      if (D.reads.empty()) continue;
      const std::size_t G = D.group_e2.size();
      auto add = [&](const std::uint8_t* t, bool isA, int g) {  // full blocks hold digits only
        add_bytes(D.recent.data() + (std::size_t(isA ? 0 : 1) * G + std::size_t(g)) * std::size_t(l), t, l);
      };
      const int ga = D.groupA[std::size_t(b)], gb = D.groupB[std::size_t(b)];
      if (ga >= 0 && gb >= 0 && b < m) {
        add(pair_sum.data() + b * l, false, gb);  // A_{b+1} + B_b by significance: one pass for both
      } else {
        if (ga >= 0) add(tokens.data() + b * LL + 1, true, ga);
        if (gb >= 0) add(tokens.data() + (m + b) * LL + 1, false, gb);
      }
    }
  }
  flush();
}

void add_digit_blocks(std::array<RowHeadSums, 4>& H, const DigitBlocks& D, std::int64_t l) {
  const std::size_t G = D.group_e2.size();
  for (std::size_t hi = 0; hi < D.reads.size(); ++hi) {
    RowHeadSums& P = H[std::size_t(D.reads[hi])];
    for (std::size_t g = 0; g < G; ++g) {
      const std::int32_t* sa = D.sums.data() + g * std::size_t(l);
      const std::int32_t* sb = D.sums.data() + (G + g) * std::size_t(l);
      double dot = 0;
      for (std::int64_t r = 0; r < l; ++r) dot += P.e1rev[std::size_t(r)] * sa[r] + P.e1[std::size_t(r + 1)] * sb[r];
      P.acc += P.vnum * D.group_e2[g][hi] * dot;
    }
  }
}
}  // namespace

RowResult RowEngine::row(std::int64_t j, const CompiledFFN& F) const { return rows({j}, F).front(); }

std::vector<RowResult> RowEngine::rows(const std::vector<std::int64_t>& js, const CompiledFFN& F) const {
  const Layout& L = M_.layout;
  const std::int64_t l = shape_.l, m = shape_.m, N = shape_.N();
  for (std::int64_t j : js)
    if (j < 0 || j >= N) throw InputError("RowEngine: query index outside the sequence");
  std::vector<std::array<RowHeadSums, 4>> H(js.size());
  std::vector<DigitBlocks> D(js.size());
  for (std::size_t i = 0; i < js.size(); ++i) {
    std::int32_t qp1, qp2;
    position_id_at(shape_, s1_, s2_, js[i], qp1, qp2);
    Eigen::VectorXd xq = Eigen::VectorXd::Zero(L.d());
    xq(Layout::FULL_ONES) = 1;
    write_position(L, qp1, qp2, xq.data());
    for (int h = 0; h < 4; ++h)
      H[i][std::size_t(h)] = head_sums(M_.heads[std::size_t(h)], L, xq, pe1_, pe2_, tokens_, js[i], l, m);
    D[i] = plan_digit_blocks(H[i], js[i], l, m);
  }
  sum_digit_blocks(D, tokens_, pair_sum_, l, m);
  std::vector<RowResult> out(js.size());
  for (std::size_t i = 0; i < js.size(); ++i) {
    add_digit_blocks(H[i], D[i], l);
    RowResult& R = out[i];
    for (int h = 0; h < 4; ++h) R.out[std::size_t(h)] = H[i][std::size_t(h)].acc / H[i][std::size_t(h)].z;
    std::array<double, 7> y{};
    const std::uint8_t tok = tokens_[std::size_t(js[i])];
    y[Layout::NUM] = tok < 10 ? double(tok) : 0.0;
    y[Layout::FULL_ONES] = 1;
    for (int h = 0; h < 4; ++h) y[std::size_t(3 + h)] = R.out[std::size_t(h)];
    R.logits = F.logits(y);
  }
  return out;
}

}  // namespace manyadd
