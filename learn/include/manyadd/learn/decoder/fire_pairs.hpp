// FIRE's distinct (normalizer, distance) pairs (layers.hpp, FIRE): which query rows share the values
// u(i, j) the bias MLP reads. Standard library only: model.hpp's activations hold one.
#pragma once

#include <cstdint>
#include <vector>

namespace manyadd::learn {

struct FirePairs {
  std::vector<std::int64_t> base;  // (T) pair of row t (position past + t) and key j: base[t] + past + t - j
  std::vector<std::int32_t> dist;  // (P) i - j of each pair
  std::vector<std::int32_t> group; // (P) its row group
  std::vector<double> norm;        // (G) n of each group
  std::vector<std::uint8_t> on_L;  // (G) n = L (the threshold binds)
  std::int64_t pairs() const { return std::int64_t(dist.size()); }
};
inline constexpr double kFireEps = 1e-6;
// The distinct pairs of rows past..past+T-1 (keys 0..past+t each) for threshold L; max_threshold: n = max(i, L).
inline void fire_pairs(FirePairs& fp, int past, int T, double L, bool max_threshold) {
  fp.base.assign(std::size_t(T), 0);
  fp.dist.clear(), fp.group.clear(), fp.norm.clear(), fp.on_L.clear();
  std::int64_t shared = -1;  // the group of the rows with n = L, once it exists
  // The rows with n = L are contiguous (the first rows for max, the last for min): their group holds the
  // distances 0..(largest such i), grown as rows join it. A row of its own has 0..i.
  for (int t = 0; t < T; ++t) {
    const std::int64_t i = std::int64_t(past) + t;
    const bool onL = max_threshold ? L > double(i) : L < double(i);
    if (onL && shared >= 0) {
      const std::int64_t first = fp.base[std::size_t(t - 1)];  // the previous row is in the shared group
      for (std::int64_t d = std::int64_t(fp.dist.size()) - first; d <= i; ++d)
        fp.dist.push_back(std::int32_t(d)), fp.group.push_back(std::int32_t(shared));
      fp.base[std::size_t(t)] = first;
      continue;
    }
    const std::int32_t g = std::int32_t(fp.norm.size());
    fp.norm.push_back(onL ? L : double(i));
    fp.on_L.push_back(onL);
    if (onL) shared = g;
    fp.base[std::size_t(t)] = std::int64_t(fp.dist.size());
    for (std::int64_t d = 0; d <= i; ++d) fp.dist.push_back(std::int32_t(d)), fp.group.push_back(g);
  }
}
}  // namespace manyadd::learn
