// Shared fixtures of the learn/ tests.
#pragma once

#include "manyadd/learn/model.hpp"

namespace manyadd::learn::fixtures {

// The micro model the training tests use: 1 layer, 4 heads of 8 (d_model 32), d_ff 64, position IDs
// up to 6 per level (enough for SA(2, 3) with random offsets).
inline ModelConfig micro_model() {
  ModelConfig c;
  c.d_model = 32;
  c.d_head = 8;
  c.d_ff = 64;
  c.max_pos1 = 6;
  c.max_pos2 = 6;
  return c;
}

}  // namespace manyadd::learn::fixtures
