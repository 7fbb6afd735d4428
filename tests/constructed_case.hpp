// One teacher-forced TA(n, m) instance with the model built for its shape (dims_ours, default
// lambda, offsets 1, 1): the case the CUDA engine and kernel rounding tests share.
#pragma once

#include <cstdint>
#include <vector>

#include "manyadd/cuda_engine.hpp"
#include "manyadd/format.hpp"
#include "manyadd/model.hpp"
#include "manyadd/structured.hpp"

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

// Every response row of the case through the kernel's CPU twin, beside the row's matches from the
// structured stream: f(match, twin row, 0-based response index r).
template <class F>
void for_each_twin_row(const Case& c, F f) {
  const TcTwin twin(c.M, c.seq, c.shape, c.s1, c.s2);
  std::vector<std::int64_t> rows;
  for (std::int64_t i = c.shape.eq_index(); i < c.shape.N(); ++i) rows.push_back(i);
  const std::vector<TcRow> tw = twin.rows(rows);
  StructuredStream st(c.shape, c.s1, c.s2, c.M.layout.P1, c.M.layout.P2);
  std::size_t r = 0;
  st.run(c.seq.data(), [&](const QueryMatch& q) {
    f(q, tw[r], r);
    ++r;
  });
}

}  // namespace manyadd::cases
