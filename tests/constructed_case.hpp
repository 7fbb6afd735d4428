// One teacher-forced TA(n, m) instance with the model built for its shape (dims_ours, default
// lambda, offsets 1, 1): the case the CUDA engine and kernel rounding tests share.
#pragma once

#include <cstdint>
#include <vector>

#include "manyadd/format.hpp"
#include "manyadd/model.hpp"

namespace manyadd::cases {

struct Case {
  Shape shape;
  std::int64_t s1 = 1, s2 = 1;
  ConstructedModel M;
  std::vector<std::uint8_t> seq;
};

inline Case make_case(int n, int m, std::uint64_t seed) {
  Case c;
  c.shape = Shape::make(n, m);
  const Dims dims = dims_ours(c.shape);
  Rng rng(seed);
  c.M = build_model(dims.P1, dims.P2, default_lambda(c.shape.N()));
  c.seq = build_sequence(sample_TA(rng, n, m), c.shape);
  return c;
}

}  // namespace manyadd::cases
