// Offset pairs grouped by wrap case, and the margin shift between two offsets' attention; see
// offset_cases.hpp.
#include "manyadd/offset_cases.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace manyadd {

bool ids_in_range(const Shape& s, int P1, int P2, std::int64_t s1, std::int64_t s2) {
  return s1 >= 1 && s2 >= 1 && s1 + s.l <= (std::int64_t(1) << P1) && s2 + s.m <= (std::int64_t(1) << P2);
}

std::pair<bool, bool> wrap_case(const Shape& s, int P1, int P2, std::int64_t s1, std::int64_t s2) {
  return {s1 == 1 && s1 + s.l == (std::int64_t(1) << P1), s2 == 1 && s2 + s.m == (std::int64_t(1) << P2)};
}

std::vector<std::vector<OffsetPair>> group_by_wrap_case(const Shape& s, int P1, int P2, const std::vector<OffsetPair>& offsets) {
  std::vector<std::vector<OffsetPair>> out;
  std::map<std::pair<bool, bool>, std::size_t> where;
  for (const auto& o : offsets) {
    if (!ids_in_range(s, P1, P2, o.first, o.second)) {
      out.push_back({o});
      continue;
    }
    const auto key = wrap_case(s, P1, P2, o.first, o.second);
    auto it = where.find(key);
    if (it == where.end()) {
      where[key] = out.size();
      out.push_back({o});
    } else {
      out[it->second].push_back(o);
    }
  }
  return out;
}

std::vector<double> margin_shift_bound(const CompiledFFN& F, const std::array<Eigen::MatrixXd, 4>& A,
                                       const std::array<Eigen::MatrixXd, 4>& B, std::int64_t first_row) {
  const Eigen::Index N = A[0].rows();
  const double vmax[4] = {27, 27, 1, 1};
  // per hidden unit, the weight of each head output in its linear form; per token, the readout
  // coefficients; Lipschitz: |d logit_t| <= sum_u |C_u,t| sum_h |w_u,h| |dy_h|
  std::vector<std::array<double, 4>> w;
  std::vector<int> unit;
  for (const auto& G : F.groups)
    for (int u : G.units) {
      w.push_back({std::abs(G.w[Layout::PRE_SUM]), std::abs(G.w[Layout::PRE_CARRY]), std::abs(G.w[Layout::PRE_ARROW]),
                   std::abs(G.w[Layout::PRE_EOS])});
      unit.push_back(u);
    }
  std::vector<double> out;
  for (Eigen::Index j = first_row; j < N; ++j) {
    std::array<double, 4> dy{};
    for (int h = 0; h < 4; ++h) dy[std::size_t(h)] = vmax[h] * (A[std::size_t(h)].row(j) - B[std::size_t(h)].row(j)).cwiseAbs().sum();
    std::array<double, kVocab> dl{};
    for (std::size_t k = 0; k < w.size(); ++k) {
      double z = 0;
      for (int h = 0; h < 4; ++h) z += w[k][std::size_t(h)] * dy[std::size_t(h)];
      for (int t = 0; t < kVocab; ++t) dl[std::size_t(t)] += std::abs(F.C[std::size_t(unit[k])][std::size_t(t)]) * z;
    }
    out.push_back(2 * *std::max_element(dl.begin(), dl.end()));
  }
  return out;
}

}  // namespace manyadd
