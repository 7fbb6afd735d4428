// Attention maps and alignment scores: see attention.hpp.
#include "manyadd/learn/analysis/attention.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/dense.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/analysis/plot.hpp"
#include "manyadd/model.hpp"

namespace manyadd::learn {

const std::array<const char*, 4> kConstructedHeadNames = {"digit_sum", "carry", "arrow", "eos"};

AttentionMaps learned_attention(const LoadedModel& lm, const std::vector<Problem>& problems, std::int64_t s1,
                                std::int64_t s2, int threads, std::int64_t* acc_exact) {
  if (problems.empty()) throw InputError("learned_attention: no problems");
  return learned_attention(
      lm, std::int64_t(problems.size()),
      [&](std::int64_t i) { return make_example(problems[std::size_t(i)], lm.cfg, s1, s2); }, threads, acc_exact);
}

AttentionMaps learned_attention(const LoadedModel& lm, std::int64_t count,
                                const std::function<Example(std::int64_t)>& example, int threads,
                                std::int64_t* acc_exact) {
  const auto& c = lm.cfg;
  if (count < 1) throw InputError("learned_attention: no problems");
  const Example first = example(0);  // validates the offsets against max_pos
  const int T = first.T(), NH = c.n_heads, H = c.n_layers * NH;
  const std::size_t TT = std::size_t(T) * std::size_t(T);
  threads = int(std::max<std::int64_t>(1, std::min<std::int64_t>(threads, count)));
  // Per-thread sums in double, reduced in thread order (parallel_for gives each thread a fixed block).
  std::vector<std::vector<double>> sums(std::size_t(threads), std::vector<double>(std::size_t(H) * TT, 0.0));
  std::vector<Acts<float>> acts(static_cast<std::size_t>(threads));
  std::vector<char> ok(std::size_t(count), 0);
  parallel_for(threads, count, [&](int t, std::int64_t i) {
    const Example ex = example(i);
    if (ex.T() != T) throw InputError("learned_attention: the problems have different shapes");
    auto& a = acts[std::size_t(t)];
    ok[std::size_t(i)] = teacher_forced_correct(a, lm.view(), ex);
    auto& s = sums[std::size_t(t)];
    for (int l = 0; l < c.n_layers; ++l) {
      const auto& att = a.blocks[std::size_t(l)].att;
      double* dst = s.data() + std::size_t(l) * std::size_t(NH) * TT;
      for (std::size_t k = 0; k < std::size_t(NH) * TT; ++k) dst[k] += att[k];
    }
  });
  AttentionMaps out;
  out.T = T;
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < NH; ++h) {
      out.names.push_back(fmt::format("layers.{}.head.{}", l, h));
      std::vector<float> m(TT);
      const std::size_t base = (std::size_t(l) * std::size_t(NH) + std::size_t(h)) * TT;
      for (std::size_t k = 0; k < TT; ++k) {
        double v = 0;
        for (auto& s : sums) v += s[base + k];
        m[k] = float(v / double(count));
      }
      out.maps.push_back(std::move(m));
    }
  if (acc_exact) {
    *acc_exact = 0;
    for (char v : ok) *acc_exact += v;
  }
  return out;
}

ConstructedSetup constructed_setup(int n, int m, std::int64_t s1, std::int64_t s2, double lambda) {
  ConstructedSetup cs;
  cs.shape = Shape::make(n, m, Padding::minimal);
  if (s1 < 1 || s2 < 1) throw InputError("the offsets s1, s2 must be >= 1");
  const Dims d = dims_ours(cs.shape);
  // Grow P until the offsets fit (max_s = 2^P - l or 2^P - m). With P >= dims_ours the wrap of the
  // largest "next" ID can only reach v_1 when s > 1, where no real ID 1 exists.
  cs.P1 = d.P1;
  while (cs.P1 < 40 && max_s1(cs.shape, cs.P1) < s1) ++cs.P1;
  cs.P2 = d.P2;
  while (cs.P2 < 40 && max_s2(cs.shape, cs.P2) < s2) ++cs.P2;
  if (cs.P1 >= 40 || cs.P2 >= 40) throw InputError(fmt::format("offsets s1 = {}, s2 = {} are too large", s1, s2));
  cs.lambda = lambda > 0 ? lambda : default_lambda(cs.shape.N());
  return cs;
}

namespace {
Eigen::MatrixXd constructed_input(const ConstructedModel& model, const ConstructedSetup& cs, const Problem& p,
                                  std::int64_t s1, std::int64_t s2) {
  return embed(model, build_sequence(p, cs.shape), position_ids(cs.shape, s1, s2));
}
}  // namespace

AttentionMaps constructed_attention(const ConstructedSetup& cs, const Problem& p, std::int64_t s1, std::int64_t s2) {
  const ConstructedModel model = build_model(cs.P1, cs.P2, cs.lambda);
  DenseOptions opt;
  opt.keep_attention = true;
  const auto R = dense_forward<double>(model, constructed_input(model, cs, p, s1, s2), opt);
  AttentionMaps out;
  out.T = int(cs.shape.N());
  const std::size_t T = std::size_t(out.T);
  for (int h = 0; h < 4; ++h) {
    out.names.push_back(fmt::format("layers.0.head.{}", h));
    std::vector<float> m(T * T);
    const auto& A = R.attention[std::size_t(h)];
    for (std::size_t i = 0; i < T; ++i)
      for (std::size_t j = 0; j < T; ++j) m[i * T + j] = float(A(Eigen::Index(i), Eigen::Index(j)));
    out.maps.push_back(std::move(m));
  }
  return out;
}

std::vector<double> learned_logits(const LoadedModel& lm, const Problem& p, std::int64_t s1, std::int64_t s2) {
  const Example ex = make_example(p, lm.cfg, s1, s2);
  Acts<float> a;
  model_forward(a, lm.view(), batch_of(ex));
  return std::vector<double>(a.logits.begin(), a.logits.begin() + std::ptrdiff_t(ex.T()) * lm.cfg.vocab);
}

std::vector<double> constructed_logits(const ConstructedSetup& cs, const Problem& p, std::int64_t s1, std::int64_t s2) {
  const ConstructedModel model = build_model(cs.P1, cs.P2, cs.lambda);
  const auto R = dense_forward<double>(model, constructed_input(model, cs, p, s1, s2));
  const std::int64_t N = cs.shape.N();
  std::vector<double> out(std::size_t(N) * std::size_t(kVocab));
  for (std::int64_t j = 0; j < N; ++j)
    for (int v = 0; v < kVocab; ++v) out[std::size_t(j) * kVocab + std::size_t(v)] = R.logits(v, Eigen::Index(j));
  return out;
}

MatchedKeys constructed_matches(const ConstructedSetup& cs, std::int64_t s1, std::int64_t s2) {
  const ConstructedModel model = build_model(cs.P1, cs.P2, 1.0);
  // The scores depend on positions only; any digits do (tokens below are all zeros).
  Problem p;
  p.operands.assign(std::size_t(cs.shape.m), "0");
  const Eigen::MatrixXd X0 = constructed_input(model, cs, p, s1, s2);
  const std::int64_t N = cs.shape.N(), eq = cs.shape.eq_index();
  MatchedKeys M;
  for (int h = 0; h < 4; ++h) {
    const auto& head = model.heads[std::size_t(h)];
    const Eigen::MatrixXd Kx = head.K * X0, Qx = head.Q * X0;  // (d_qk, N)
    auto& rows = M[std::size_t(h)];
    rows.resize(std::size_t(N - eq));
    std::vector<double> sc(static_cast<std::size_t>(N));
    Eigen::MatrixXd S;  // scores of a block of queries: (keys 0..N-1, queries j0..j0+B-1)
    const std::int64_t B = 256;
    for (std::int64_t j = eq; j < N; ++j) {
      const std::int64_t j0 = eq + (j - eq) / B * B;
      if (j == j0 || j == eq) S = Kx.leftCols(std::min(N, j0 + B)).transpose() * Qx.middleCols(j0, std::min(B, N - j0));
      double top = -std::numeric_limits<double>::infinity();
      for (std::int64_t i = 0; i <= j; ++i) {
        sc[std::size_t(i)] = S(i, j - j0);
        top = std::max(top, sc[std::size_t(i)]);
      }
      double second = -std::numeric_limits<double>::infinity();
      auto& keys = rows[std::size_t(j - eq)];
      for (std::int64_t i = 0; i <= j; ++i) {
        if (sc[std::size_t(i)] >= top - 1.0) {
          if (i > 0) keys.push_back(std::int32_t(i));
        } else {
          second = std::max(second, sc[std::size_t(i)]);
        }
      }
      // Top-score keys must be tied (to rounding) and >= 2 above the rest (Eq. 4 at lambda = 1).
      for (std::int32_t i : keys)
        if (std::abs(sc[std::size_t(i)] - top) > 1e-9)
          throw std::logic_error(fmt::format("constructed_matches: head {} row {}: matched scores not tied", h + 1, j));
      if (top - second < 2.0 - 1e-9)
        throw std::logic_error(fmt::format("constructed_matches: head {} row {}: score gap {} < 2", h + 1, j, top - second));
    }
  }
  return M;
}

namespace {
// Jensen-Shannon divergence in bits between p (dense over keys 1..j, sums to 1) and the uniform
// distribution on `keys` (non-empty, subset of 1..j).
double js_bits(const float* row, double nonbos, std::int64_t j, const std::vector<std::int32_t>& keys,
               std::vector<char>& mark) {
  const double q = 1.0 / double(keys.size());
  for (std::int32_t i : keys) mark[std::size_t(i)] = 1;
  double d = 0;
  for (std::int64_t i = 1; i <= j; ++i) {
    const double p = double(row[i]) / nonbos;
    const double qi = mark[std::size_t(i)] ? q : 0.0;
    const double mid = 0.5 * (p + qi);
    if (p > 0) d += 0.5 * p * std::log2(p / mid);
    if (qi > 0) d += 0.5 * qi * std::log2(qi / mid);
  }
  for (std::int32_t i : keys) mark[std::size_t(i)] = 0;
  return std::min(1.0, std::max(0.0, d));
}
}  // namespace

PairScore score_pair(const std::vector<float>& A, int T, std::int64_t eq_index,
                     const std::vector<std::vector<std::int32_t>>& M) {
  PairScore r;
  r.row_share.assign(M.size(), std::numeric_limits<double>::quiet_NaN());
  r.row_on.assign(M.size(), 0.0);
  r.row_mass.assign(M.size(), 0.0);
  std::vector<char> mark(std::size_t(T), 0);
  double on = 0, mass = 0, js = 0;
  std::int64_t rows = 0;
  for (std::size_t k = 0; k < M.size(); ++k) {
    const auto& keys = M[k];
    if (keys.empty()) continue;
    const std::int64_t j = eq_index + std::int64_t(k);
    const float* row = A.data() + std::size_t(j) * std::size_t(T);
    double nonbos = 0, hit = 0;
    for (std::int64_t i = 1; i <= j; ++i) nonbos += row[i];
    for (std::int32_t i : keys) hit += row[i];
    on += hit;
    mass += nonbos;
    r.row_on[k] = hit;
    r.row_mass[k] = nonbos;
    ++rows;
    if (nonbos > 0) {
      r.row_share[k] = hit / nonbos;
      js += js_bits(row, nonbos, j, keys, mark);
    } else {
      js += 1.0;  // all mass on BOS: nothing in common with M_h(j)
    }
  }
  r.share = mass > 0 ? on / mass : 0.0;
  r.js = rows ? js / double(rows) : std::numeric_limits<double>::quiet_NaN();
  return r;
}

double bos_mass(const std::vector<float>& A, int T, std::int64_t eq_index) {
  double s = 0;
  for (std::int64_t j = eq_index; j < T; ++j) s += A[std::size_t(j) * std::size_t(T)];
  return s / double(T - eq_index);
}

double chance_share(std::int64_t eq_index, const std::vector<std::vector<std::int32_t>>& M) {
  double on = 0, mass = 0;
  for (std::size_t k = 0; k < M.size(); ++k) {
    if (M[k].empty()) continue;
    const double j = double(eq_index + std::int64_t(k));
    on += double(M[k].size()) / (j + 1);
    mass += j / (j + 1);
  }
  return mass > 0 ? on / mass : 0.0;
}

std::vector<std::pair<int, int>> best_matching(const std::vector<std::array<double, 4>>& score) {
  const int G = int(score.size());
  std::vector<std::pair<int, int>> best, cur;
  double best_v = -1;
  std::vector<char> used_l(std::size_t(G), 0), used_c(4, 0);
  // Exhaustive: choose the 4 constructed heads in order and a distinct learned head for each. The
  // constructed heads are taken in index order when G >= 4; when G < 4 every learned head picks a
  // distinct constructed head instead. Strict improvement keeps the lexicographically first optimum.
  std::function<void(int, double)> rec;
  if (G >= 4) {
    rec = [&](int c, double v) {
      if (c == 4) {
        if (v > best_v + 1e-12) best_v = v, best = cur;
        return;
      }
      for (int g = 0; g < G; ++g) {
        if (used_l[std::size_t(g)]) continue;
        used_l[std::size_t(g)] = 1;
        cur.emplace_back(g, c);
        rec(c + 1, v + score[std::size_t(g)][std::size_t(c)]);
        cur.pop_back();
        used_l[std::size_t(g)] = 0;
      }
    };
  } else {
    rec = [&](int g, double v) {
      if (g == G) {
        if (v > best_v + 1e-12) best_v = v, best = cur;
        return;
      }
      for (int c = 0; c < 4; ++c) {
        if (used_c[std::size_t(c)]) continue;
        used_c[std::size_t(c)] = 1;
        cur.emplace_back(g, c);
        rec(g + 1, v + score[std::size_t(g)][std::size_t(c)]);
        cur.pop_back();
        used_c[std::size_t(c)] = 0;
      }
    };
  }
  rec(0, 0.0);
  std::sort(best.begin(), best.end(), [](auto a, auto b) { return a.second < b.second; });
  return best;
}

Comparison compare_maps(const AttentionMaps& learned, const AttentionMaps& constructed, std::int64_t eq_index,
                        const MatchedKeys& M, int block_len) {
  if (learned.T != constructed.T) throw InputError("compare_maps: the maps have different sizes");
  const int T = learned.T, G = learned.heads();
  Comparison c;
  c.eq_index = eq_index;
  c.share.resize(std::size_t(G));
  c.js.resize(std::size_t(G));
  std::vector<std::array<PairScore, 4>> rows(static_cast<std::size_t>(G));
  for (int g = 0; g < G; ++g) {
    c.bos_learned.push_back(bos_mass(learned.maps[std::size_t(g)], T, eq_index));
    for (int h = 0; h < 4; ++h) {
      PairScore s = score_pair(learned.maps[std::size_t(g)], T, eq_index, M[std::size_t(h)]);
      c.share[std::size_t(g)][std::size_t(h)] = s.share;
      c.js[std::size_t(g)][std::size_t(h)] = s.js;
      rows[std::size_t(g)][std::size_t(h)] = std::move(s);
    }
  }
  for (int h = 0; h < 4; ++h) {
    c.bos_constructed[std::size_t(h)] = bos_mass(constructed.maps[std::size_t(h)], T, eq_index);
    c.chance[std::size_t(h)] = chance_share(eq_index, M[std::size_t(h)]);
    for (const auto& r : M[std::size_t(h)]) c.rows[std::size_t(h)] += !r.empty();
  }
  std::vector<std::array<double, 4>> sim(static_cast<std::size_t>(G));
  for (int g = 0; g < G; ++g)
    for (int h = 0; h < 4; ++h) {
      const double js = c.js[std::size_t(g)][std::size_t(h)];
      sim[std::size_t(g)][std::size_t(h)] = std::isnan(js) ? 0.0 : 1.0 - js;
    }
  c.matching = best_matching(sim);
  double s = 0;
  for (auto [g, h] : c.matching) {
    s += c.share[std::size_t(g)][std::size_t(h)];
    const PairScore& ps = rows[std::size_t(g)][std::size_t(h)];
    c.matched_row_share.push_back(ps.row_share);
    if (block_len > 0) {
      const std::size_t R = ps.row_on.size(), B = std::size_t(block_len);
      std::vector<double> bs;
      for (std::size_t b0 = 0; b0 < R; b0 += B) {
        double on = 0, mass = 0;
        bool any = false;
        for (std::size_t k = b0; k < std::min(R, b0 + B); ++k)
          if (!M[std::size_t(h)][k].empty()) on += ps.row_on[k], mass += ps.row_mass[k], any = true;
        bs.push_back(any && mass > 0 ? on / mass : std::numeric_limits<double>::quiet_NaN());
      }
      c.matched_block_share.push_back(std::move(bs));
    }
  }
  c.mean_matched_share = c.matching.empty() ? 0.0 : s / double(c.matching.size());
  return c;
}

void write_attention_dir(const std::string& out, const AttentionMaps& a, const Shape& shape, std::int64_t s1,
                         std::int64_t s2, std::int64_t samples, const std::vector<std::uint8_t>& example_tokens,
                         const std::vector<std::int32_t>& pos1, const std::vector<std::int32_t>& pos2,
                         const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> meta = {
      {"n", std::to_string(shape.n)},   {"m", std::to_string(shape.m)},   {"l", std::to_string(shape.l)},
      {"s1", std::to_string(s1)},       {"s2", std::to_string(s2)},       {"samples", std::to_string(samples)},
      {"example_tokens", tokens_to_string(example_tokens)}, {"pos1", nlohmann::json(pos1).dump()},
      {"pos2", nlohmann::json(pos2).dump()}};
  for (const auto& [k, v] : extra) meta[k] = v;
  write_attention_dir(out, a, meta);
}

void write_attention_dir(const std::string& out, const AttentionMaps& a, const std::map<std::string, std::string>& meta) {
  make_output_dir(out);
  std::vector<Tensor> ts;
  for (int g = 0; g < a.heads(); ++g) {
    const std::string& name = a.names[std::size_t(g)];
    // "layers.<l>.head.<h>" -> "layer<l>_head<h>.png"
    std::string png = name;
    std::size_t p = png.find("layers.");
    if (p == 0) png = "layer" + png.substr(7);
    p = png.find(".head.");
    if (p != std::string::npos) png = png.substr(0, p) + "_head" + png.substr(p + 6);
    write_attention_png(out + "/" + png + ".png", a.maps[std::size_t(g)], a.T);
    ts.push_back(make_tensor(name, {a.T, a.T}, a.maps[std::size_t(g)]));
  }
  write_safetensors(out + "/attention.safetensors", ts, meta);
}

}  // namespace manyadd::learn
