// Shared fixtures of the learn/ tests: the micro model and training configurations, scratch paths.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include "test_util.hpp"
#include "manyadd/learn/model.hpp"
#include "manyadd/learn/train.hpp"

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

// Training on SA(2, 3), batch 16, lr 1e-2, 2 threads: what the micro model learns in seconds.
inline TrainConfig micro_train(std::int64_t train_size, std::int64_t steps) {
  TrainConfig t;
  t.train_n = 2;
  t.train_m = 3;
  t.train_size = train_size;
  t.steps = steps;
  t.batch = 16;
  t.lr = 1e-2;
  t.threads = 2;
  return t;
}

// A path `name` inside this test process's scratch directory (the directory is created once, the
// path itself is not). The directory is removed when the process exits.
inline std::string scratch(const std::string& name) {
  struct Dir {
    std::string path = manyadd::testing::temp_dir("learn_tests");
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path + "/" + name;
}

}  // namespace manyadd::learn::fixtures
