// Examples from construct/'s format: see data.hpp.
#include "manyadd/learn/data.hpp"

#include <fmt/format.h>

namespace manyadd::learn {

void position_ids_for(const Shape& shape, PosMode mode, std::int64_t s1, std::int64_t s2, std::vector<std::int32_t>& p1,
                      std::vector<std::int32_t>& p2) {
  p1.clear();
  p2.clear();
  switch (mode) {
    case PosMode::coupled: {
      auto ids = position_ids(shape, s1, s2);
      p1 = std::move(ids.p1);
      p2 = std::move(ids.p2);
      return;
    }
    case PosMode::digits: {
      auto ids = position_ids(shape, s1, s2);
      p1 = std::move(ids.p1);
      return;
    }
    case PosMode::absolute: {
      if (s1 < 1) throw InputError(fmt::format("offset s1 must be >= 1 (got {})", s1));
      p1.resize(std::size_t(shape.N()));
      p1[0] = 0;
      for (std::int64_t k = 1; k < shape.N(); ++k) p1[std::size_t(k)] = std::int32_t(s1 + k - 1);
      return;
    }
    case PosMode::none: return;
  }
}

std::int64_t max_offset1(const ModelConfig& c, const Shape& s) {
  switch (c.pos_mode) {
    case PosMode::coupled:
    case PosMode::digits: return std::int64_t(c.max_pos1) - s.l;
    case PosMode::absolute: return std::int64_t(c.max_pos1) - s.N() + 2;
    case PosMode::none: return 1;
  }
  return 0;
}
std::int64_t max_offset2(const ModelConfig& c, const Shape& s) {
  return c.pos_mode == PosMode::coupled ? std::int64_t(c.max_pos2) - s.m : 1;
}
bool shape_fits(const ModelConfig& c, const Shape& s) { return max_offset1(c, s) >= 1 && max_offset2(c, s) >= 1; }

Shape shape_of(const Problem& p) {
  return Shape::make(p.max_digits(), std::int64_t(p.operands.size()), Padding::minimal);
}

Example make_example(const Problem& p, const ModelConfig& c, std::int64_t s1, std::int64_t s2) {
  const Shape shape = shape_of(p);
  // Offsets a mode does not use are not checked (s2 outside coupled, both for none).
  const bool bad1 = c.pos_mode != PosMode::none && (s1 < 1 || s1 > max_offset1(c, shape));
  const bool bad2 = c.pos_mode == PosMode::coupled && (s2 < 1 || s2 > max_offset2(c, shape));
  if (bad1 || bad2)
    throw InputError(fmt::format("shape (n={}, m={}, l={}) with offsets ({}, {}) needs position IDs beyond the model's "
                                 "max_pos1={} / max_pos2={}",
                                 shape.n, shape.m, shape.l, s1, s2, c.max_pos1, c.max_pos2));
  Example ex;
  ex.tokens = build_sequence(p, shape);
  position_ids_for(shape, c.pos_mode, s1, s2, ex.pos[0], ex.pos[1]);
  const std::int64_t N = shape.N(), eq = shape.eq_index();
  ex.targets.assign(std::size_t(N), -1);
  for (std::int64_t k = eq; k + 1 < N; ++k) ex.targets[std::size_t(k)] = ex.tokens[std::size_t(k + 1)];
  ex.targets[std::size_t(N - 1)] = kDollar;
  return ex;
}

Example make_train_example(const Problem& p, const ModelConfig& c, Rng& rng) {
  const Shape shape = shape_of(p);
  const std::int64_t h1 = max_offset1(c, shape), h2 = max_offset2(c, shape);
  if (h1 < 1 || h2 < 1)
    throw InputError(fmt::format("training shape (n={}, m={}, l={}) does not fit max_pos1={} / max_pos2={}", shape.n,
                                 shape.m, shape.l, c.max_pos1, c.max_pos2));
  const auto s1 = std::int64_t(rng.uniform(1, std::uint64_t(h1)));
  const auto s2 = std::int64_t(rng.uniform(1, std::uint64_t(h2)));
  return make_example(p, c, s1, s2);
}

}  // namespace manyadd::learn
