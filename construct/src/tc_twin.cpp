// The tensor-core attention kernel's CPU twin (TcTwin, cuda_engine.hpp) and the constructed model's
// q/k/v plan. The twin follows kernels/src/constructed_attention.cu's tc_attention step by step; the
// comments name the kernel's step each block replays. Three values travel through a row: nominal,
// lo and hi (see cuda_engine.hpp for why the interval encloses the device's result).
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "manyadd/cuda_engine.hpp"
#include "manyadd/structured.hpp"

namespace manyadd {

kernels::QkvPlan qkv_plan(const ConstructedModel& M, bool skip_far_tiles) {
  CompiledFFN::build(M);  // throws InputError unless the heads have the Theorem 4.1 structure
  const Layout& L = M.layout;
  kernels::QkvPlan P;
  P.d = M.d();
  P.vocab = kVocab;
  int D = 0;
  for (const Head& h : M.heads) {
    if (h.V.rows() != 1 || h.U.cols() != 1) throw InputError("qkv_plan: expects one value dimension per head");
    D = std::max<int>(D, int(h.Q.rows()));
  }
  P.D = (D + 7) / 8 * 8;
  if (P.D > kernels::kMaxD)
    throw InputError(fmt::format("cuda_forward: query/key width {} above the engine's {}", P.D, kernels::kMaxD));
  P.emb.resize(std::size_t(kVocab) * std::size_t(P.d));
  for (int t = 0; t < kVocab; ++t)
    for (int c = 0; c < P.d; ++c) P.emb[std::size_t(t * P.d + c)] = M.tok_emb(t, c);
  // Eqs. 5-6 (write_position): [v_p ; v_{p+1}] per level, nothing for ID 0 (BOS).
  P.codes = {{0, 0, L.P1, L.POS_1()}, {0, 1, L.P1, L.POS_1_NEXT()}, {1, 0, L.P2, L.POS_2()}, {1, 1, L.P2, L.POS_2_NEXT()}};
  P.col_code.assign(std::size_t(P.d), -1);
  for (std::size_t ci = 0; ci < P.codes.size(); ++ci)
    for (int b = 0; b < P.codes[ci].bits; ++b) P.col_code[std::size_t(P.codes[ci].col + b)] = std::int32_t(ci);
  P.row_start.push_back(0);
  auto add_row = [&](const Eigen::MatrixXd* A, Eigen::Index r) {
    if (A && r < A->rows())
      for (Eigen::Index c = 0; c < A->cols(); ++c)
        if ((*A)(r, c) != 0) {
          P.nz_col.push_back(std::int32_t(c));
          P.nz_w.push_back((*A)(r, c));
        }
    P.row_start.push_back(std::int32_t(P.nz_col.size()));
  };
  for (const Head& h : M.heads)
    for (int r = 0; r < P.D; ++r) add_row(&h.Q, r);
  for (const Head& h : M.heads)
    for (int r = 0; r < P.D; ++r) add_row(&h.K, r);
  for (const Head& h : M.heads) add_row(&h.V, 0);
  if (skip_far_tiles)
    for (int h = 0; h < 4; ++h)
      P.skip[std::size_t(h)] = kernels::tc::tile_skip_threshold(M.heads[std::size_t(h)].lambda, int(M.heads[std::size_t(h)].Q.rows()) - 1);
  P.check();
  return P;
}

namespace {
namespace tc = kernels::tc;
constexpr float kInf = std::numeric_limits<float>::infinity();

float step(float x, float to, int n) {
  for (int s = 0; s < n; ++s) x = std::nextafter(x, to);
  return x;
}
// exp2f on the device: <= 2 ulp; exact at 0 and -inf.
float exp2_nom(float x) {
  if (x == 0) return 1.f;
  if (x == -kInf) return 0.f;
  return float(std::exp2(double(x)));
}
constexpr int kExpSteps = 6;
float exp2_lo(float x) {
  if (x == 0 || x == -kInf) return exp2_nom(x);
  return std::max(0.f, step(exp2_nom(x), 0.f, kExpSteps));
}
float exp2_hi(float x) {
  if (x == 0 || x == -kInf) return exp2_nom(x);
  return step(exp2_nom(x), kInf, kExpSteps);
}

// A float value with an enclosure of the device's.
struct F3 {
  float n, lo, hi;
};

// One lane's (t) state for one (row, head).
struct Lane {
  F3 l{0, 0, 0}, acc{0, 0, 0};
};
struct RowHead {
  F3 m{-kInf, -kInf, -kInf};
  Lane lane[4];
  int tiles = 0, rises = 0, skipped = 0;
  double bound = 0;
};

// Hull of the four products / quotients of interval ends, each rounded to nearest (float).
template <class Op>
void corners(float alo, float ahi, float blo, float bhi, Op op, float& lo, float& hi) {
  const float c[4] = {op(alo, blo), op(alo, bhi), op(ahi, blo), op(ahi, bhi)};
  lo = std::min(std::min(c[0], c[1]), std::min(c[2], c[3]));
  hi = std::max(std::max(c[0], c[1]), std::max(c[2], c[3]));
}

// Row i's scores against the tile of keys j0.. (b: the tile's split k of this head, (key, head, dim)):
// the MMA steps of tc::Part order, each step RN(exact) nominal, its error bound accumulated into an
// enclosure; keys past i are -inf (masked). R.bound keeps the largest bound.
void tile_scores(const tc::Split* a, const tc::Split* ks, int h, int D, int BN, std::int64_t i, std::int64_t j0, RowHead& R,
                 std::vector<F3>& s) {
  const int KS = D / 8;
  for (int kk = 0; kk < BN; ++kk) {
    if (j0 + kk > i) {
      s[std::size_t(kk)] = {-kInf, -kInf, -kInf};
      continue;
    }
    const tc::Split* b = &ks[(std::size_t(kk) * 4 + std::size_t(h)) * std::size_t(D)];
    float c = 0.f;
    double bound = 0;
    for (int part = 0; part < 3; ++part)
      for (int k8 = 0; k8 < KS; ++k8) {
        double sum = c, mx = std::abs(double(c)), absum = mx;
        int n = 0;  // nonzero products
        for (int e = 0; e < 8; ++e) {
          const tc::Split &x = a[k8 * 8 + e], &y = b[k8 * 8 + e];
          const double t = part == 0 ? double(x.lo) * double(y.hi) : part == 1 ? double(x.hi) * double(y.lo)
                                                                                : double(x.hi) * double(y.hi);
          sum += t;
          mx = std::max(mx, std::abs(t));
          absum += std::abs(t);
          n += t != 0;
        }
        c = float(sum);
        if (n > 0) {
          // n aligned inputs (< 1 ulp24 of their node's largest <= mx each), n node results
          // rounded (each <= absum), the double sum's own error
          const double sb = n * std::ldexp(1.0, std::ilogb(mx) - 23) + n * std::ldexp(1.0, std::ilogb(absum) - 23) +
                            std::ldexp(1.0, std::ilogb(mx) - 40);
          bound += 2 * sb;
        }
      }
    R.bound = std::max(R.bound, bound);
    const double dlo = double(c) - bound, dhi = double(c) + bound;
    float lo = float(dlo), hi = float(dhi);
    if (double(lo) > dlo) lo = std::nextafter(lo, -kInf);
    if (double(hi) < dhi) hi = std::nextafter(hi, kInf);
    s[std::size_t(kk)] = {c, lo, hi};
  }
}

// The rise of the running max to the tile's max mt: the lanes rescaled by exp2(m - mt), nominal
// branch; the interval takes both branches' hull where undecided. Then m = max(m, mt).
void rise(RowHead& R, const F3& mt) {
  if (mt.n > R.m.n) {
    const float sc = exp2_nom(R.m.n - mt.n);
    for (Lane& L : R.lane) L.l.n *= sc, L.acc.n *= sc;
    if (R.tiles > 0) ++R.rises;
  }
  const bool sure = mt.lo > R.m.hi, never = mt.hi <= R.m.lo;
  if (!never) {
    const float dlo = R.m.lo - mt.hi, dhi = R.m.hi - mt.lo;
    const float sclo = exp2_lo(dlo), schi = dhi < 0 ? exp2_hi(dhi) : step(1.f, kInf, kExpSteps);
    for (Lane& L : R.lane) {
      float alo, ahi;
      corners(L.acc.lo, L.acc.hi, sclo, schi, [](float x, float y) { return x * y; }, alo, ahi);
      float llo = L.l.lo * sclo, lhi = L.l.hi * schi;
      if (!sure) alo = std::min(alo, L.acc.lo), ahi = std::max(ahi, L.acc.hi), llo = std::min(llo, L.l.lo),
                 lhi = std::max(lhi, L.l.hi);
      L.l.lo = llo, L.l.hi = lhi, L.acc.lo = alo, L.acc.hi = ahi;
    }
  }
  R.m = {std::max(R.m.n, mt.n), std::max(R.m.lo, mt.lo), std::max(R.m.hi, mt.hi)};
}

// Lane t's keys nb * 8 + 2t + e of the tile in order: p = exp2(s - m), l += p, acc = fma(p, v, acc)
// (v: the tile's values of this head, (key, head)). skip_n: the nominal branch skips the tile;
// skip_maybe: the device may skip it (the nominal branch's value, both branches' hull).
void accumulate(RowHead& R, const std::vector<F3>& s, const std::vector<float>& vs, int h, bool skip_n, bool skip_maybe) {
  const F3 mu = R.m.n == -kInf ? F3{0, 0, 0} : R.m;
  for (int t = 0; t < 4; ++t) {
    Lane& L = R.lane[t];
    for (int nb = 0; nb < 8; ++nb)
      for (int e = 0; e < 2; ++e) {
        const int kk = nb * 8 + 2 * t + e;
        const F3& x = s[std::size_t(kk)];
        const float v = vs[std::size_t(kk) * 4 + std::size_t(h)];
        const float p = exp2_nom(x.n - mu.n), plo = exp2_lo(x.lo - mu.hi), phi = exp2_hi(x.hi - mu.lo);
        const Lane add{{L.l.n + p, L.l.lo + plo, L.l.hi + phi},
                       {std::fma(p, v, L.acc.n), std::fma(v >= 0 ? plo : phi, v, L.acc.lo),
                        std::fma(v >= 0 ? phi : plo, v, L.acc.hi)}};
        if (!skip_maybe) {
          L = add;
          continue;
        }
        const Lane keep = L;
        L.l = {skip_n ? keep.l.n : add.l.n, std::min(keep.l.lo, add.l.lo), std::max(keep.l.hi, add.l.hi)};
        L.acc = {skip_n ? keep.acc.n : add.acc.n, std::min(keep.acc.lo, add.acc.lo), std::max(keep.acc.hi, add.acc.hi)};
      }
  }
}

// The quad sums (l0 + l1) + (l2 + l3) and out = acc / l of one row's four heads.
TcRow finish_row(std::int64_t i, const std::array<RowHead, 4>& heads) {
  TcRow out;
  out.i = i;
  for (int h = 0; h < 4; ++h) {
    const RowHead& R = heads[std::size_t(h)];
    auto quad = [&](auto get) { return (get(R.lane[0]) + get(R.lane[1])) + (get(R.lane[2]) + get(R.lane[3])); };
    const float L = quad([](const Lane& x) { return x.l.n; }), Llo = quad([](const Lane& x) { return x.l.lo; }),
                Lhi = quad([](const Lane& x) { return x.l.hi; });
    const float A = quad([](const Lane& x) { return x.acc.n; }), Alo = quad([](const Lane& x) { return x.acc.lo; }),
                Ahi = quad([](const Lane& x) { return x.acc.hi; });
    if (!(Llo > 0)) throw InvariantError("TcTwin: the softmax denominator's enclosure reaches 0");
    out.out[std::size_t(h)] = A / L;
    corners(Alo, Ahi, Llo, Lhi, [](float x, float y) { return x / y; }, out.lo[std::size_t(h)], out.hi[std::size_t(h)]);
    out.rises[std::size_t(h)] = R.rises;
    out.skipped[std::size_t(h)] = R.skipped;
    out.score_bound[std::size_t(h)] = R.bound;
  }
  return out;
}
}  // namespace

TcTwin::TcTwin(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens, const Shape& shape,
               std::int64_t s1, std::int64_t s2, bool skip_far_tiles)
    : plan_(qkv_plan(model, skip_far_tiles)), tokens_(tokens), N_(shape.N()) {
  if (std::int64_t(tokens.size()) != N_) throw InputError("TcTwin: token count differs from the shape's N");
  for (std::uint8_t t : tokens)
    if (t >= kVocab) throw InputError("TcTwin: a token outside the vocabulary");
  ids_.resize(2 * std::size_t(N_));
  for_each_id(shape, s1, s2, [&](std::int64_t k, std::int64_t p1, std::int64_t p2) {
    ids_[2 * std::size_t(k)] = std::int32_t(p1);
    ids_[2 * std::size_t(k) + 1] = std::int32_t(p2);
  });
}

std::vector<TcRow> TcTwin::rows(const std::vector<std::int64_t>& rows) const {
  const tc::PlanView P = plan_.view();
  const int D = P.D, BN = tc::kTileKeys;
  std::int64_t last = -1;
  for (std::int64_t i : rows) {
    if (i < 0 || i >= N_) throw InputError(fmt::format("TcTwin: row {} outside [0, {})", i, N_));
    last = std::max(last, i);
  }
  // the plan's row r of token k (q: h D + c, k: 4 D + h D + c, v: 8 D + h); keys past N are zeros
  const auto plan = [&](std::int64_t k, int r) {
    return k < N_ ? tc::plan_row(P, tokens_[std::size_t(k)], &ids_[2 * std::size_t(k)], r) : 0.f;
  };
  std::vector<std::array<RowHead, 4>> st(rows.size());
  // q of every asked row, split (tc_attention's A fragments).
  std::vector<tc::Split> qs(rows.size() * 4 * std::size_t(D));
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < D; ++c)
        qs[(r * 4 + std::size_t(h)) * std::size_t(D) + std::size_t(c)] = tc::split_tf32(plan(rows[r], h * D + c));
  std::vector<tc::Split> ks(static_cast<std::size_t>(BN) * 4 * static_cast<std::size_t>(D));  // (key, head, dim) of the tile
  std::vector<float> vs(static_cast<std::size_t>(BN) * 4);
  std::vector<F3> s(static_cast<std::size_t>(BN));
  for (std::int64_t j0 = 0; j0 <= last; j0 += BN) {
    // The tile load: k split into tf32 hi / lo, v.
    for (int kk = 0; kk < BN; ++kk)
      for (int h = 0; h < 4; ++h) {
        for (int c = 0; c < D; ++c)
          ks[(std::size_t(kk) * 4 + std::size_t(h)) * std::size_t(D) + std::size_t(c)] =
              tc::split_tf32(plan(j0 + kk, 4 * D + h * D + c));
        vs[std::size_t(kk) * 4 + std::size_t(h)] = plan(j0 + kk, 8 * D + h);
      }
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const std::int64_t i = rows[r];
      if (j0 > i) continue;  // the kernel's fully masked tiles are exact no-ops
      for (int h = 0; h < 4; ++h) {
        RowHead& R = st[r][std::size_t(h)];
        tile_scores(&qs[(r * 4 + std::size_t(h)) * std::size_t(D)], ks.data(), h, D, BN, i, j0, R, s);
        // Tile max over the row's 64 keys (exact in any order), then the rise.
        F3 mt{-kInf, -kInf, -kInf};
        for (const F3& x : s) mt = {std::max(mt.n, x.n), std::max(mt.lo, x.lo), std::max(mt.hi, x.hi)};
        rise(R, mt);
        ++R.tiles;
        // The far-tile skip: RN(m - mt) > skip, the nominal branch; the device's difference lies in
        // [RN(m.lo - mt.hi), RN(m.hi - mt.lo)] (float subtraction is monotone), so the interval takes
        // both branches' hull where that range straddles the threshold.
        const float skip = plan_.skip[std::size_t(h)];
        const bool skip_n = R.m.n - mt.n > skip, skip_sure = R.m.lo - mt.hi > skip, skip_maybe = R.m.hi - mt.lo > skip;
        R.skipped += skip_n;
        if (skip_sure) continue;  // implies skip_n
        accumulate(R, s, vs, h, skip_n, skip_maybe);
      }
    }
  }
  std::vector<TcRow> out;
  for (std::size_t r = 0; r < rows.size(); ++r) out.push_back(finish_row(rows[r], st[r]));
  return out;
}

}  // namespace manyadd
