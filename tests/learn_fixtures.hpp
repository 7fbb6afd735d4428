// Shared fixtures of the learn/ tests: the micro model and training configurations, scratch paths.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "test_util.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/decoder/model.hpp"
#include "manyadd/learn/tasks/task.hpp"
#include "manyadd/learn/runs/train.hpp"

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

// The small model of the device tests: `layers` blocks of 2 heads of d_head (d_model 2 d_head, d_ff 3
// d_head), position IDs up to 12 / 8 (absolute: 80, coupled3's multiplication: 8 / 6 / 8, abacus k 4),
// enough for mixed_examples' shapes.
inline ModelConfig small_model(PosMode mode, int layers, int d_head = 8) {
  ModelConfig c;
  c.n_layers = layers;
  c.n_heads = 2;
  c.d_model = 2 * d_head;
  c.d_head = d_head;
  c.d_ff = 3 * d_head;
  c.max_pos1 = 12;
  c.max_pos2 = 8;
  c.pos_mode = mode;
  if (mode == PosMode::absolute) c.max_pos1 = 80;
  if (mode == PosMode::abacus) c.abacus_k = 4;  // + the longest number (4 digits) - 1 <= max_pos1
  if (mode == PosMode::coupled3) {  // multiplication, up to 2 x 2 digits (tests/test_cuda_train.cpp's tables)
    c.vocab = task(TaskKind::multiplication).vocab();
    c.max_pos1 = 8, c.max_pos2 = 6, c.max_pos3 = 8;
  }
  return c;
}
// Examples of different shapes (addition: lengths 10..~50; coupled3's multiplication up to 2 x 2 digits),
// random offsets.
inline std::vector<Example> mixed_examples(const ModelConfig& c, int count, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<Example> exs;
  for (int i = 0; i < count; ++i) {
    if (c.pos_mode == PosMode::coupled3) {
      const Task& mul = task(TaskKind::multiplication);
      const int n = 1 + int(rng.uniform(0, 2)), m = 1 + int(rng.uniform(0, 2));
      exs.push_back(make_train_example(mul, mul.sample_cell(rng, n, m), c, rng));
      continue;
    }
    const int n = 1 + int(rng.uniform(0, 2)), m = 2 + int(rng.uniform(0, 2));
    exs.push_back(make_train_example(sample_TA(rng, n, m), c, rng));
  }
  return exs;
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
