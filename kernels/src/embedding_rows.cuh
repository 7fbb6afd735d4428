// The arithmetic of the embedding kernels of train.cu, written once for two executors: the device (one
// thread per output entry, or per (table row, channel) in backward) and the host replay in
// tests/test_cuda_train_kernels.cpp (one loop over every thread). Plain C++ where nvcc is not compiling
// (MANYADD_HD is empty), so the test includes this file with the host compiler.
//
// The position levels in use (0 to train::kMaxPosLevels = 3: none, digits/absolute, coupled, coupled3)
// travel to the kernels by value in a Levels: level lv's ID buffer (R), table (rows[lv], C) and row count.
// Forward adds the token row and then the levels' rows in level order, the order of the CPU twin
// (learn/layers.hpp), so the two are bitwise equal. Backward's grid has one block row per table row,
// the token table's V rows first, then level 0's, 1's, 2's: each sums the rows of dout that read its
// row, in row order, then adds that sum to the gradient entry (bitwise the twin's row-by-row adds into
// a zeroed gradient). It finds those rows in Readers (grouped on the host: learn::PackedBatch::readers),
// so a table row's thread reads only its own rows: O(R C) work for a table instead of O(rows R C).
#pragma once

#include <cstdint>

#include "manyadd/kernels/train.hpp"

#if defined(__CUDACC__)
#define MANYADD_HD __host__ __device__ inline
#else
#define MANYADD_HD inline  // (attention_rows.cuh defines it identically)
#endif

namespace manyadd::kernels::embedding_rows {

template <class W>  // const float: forward's tables; float: backward's gradients
struct Levels {
  const std::int32_t* ids[train::kMaxPosLevels] = {};
  W* table[train::kMaxPosLevels] = {};
  int rows[train::kMaxPosLevels] = {};
  int n = 0;  // levels in use
};

// out[t, c] = wte[tok[t], c] + sum_{lv < n} table_lv[ids_lv[t], c]
MANYADD_HD float forward_entry(const std::uint8_t* tok, const float* wte, const Levels<const float>& p,
                                   long long t, int c, int C) {
  float o = wte[(long long)tok[t] * C + c];
  for (int lv = 0; lv < p.n; ++lv) o += p.table[lv][(long long)p.ids[lv][t] * C + c];
  return o;
}

// The rows of dout that read each table row, grouped (CSR): table k (0 the token table, 1 + lv level lv)
// row r is read by rows[k][starts[k][r]], ..., rows[k][starts[k][r + 1] - 1], in increasing order.
struct Readers {
  const std::int32_t* rows[1 + train::kMaxPosLevels] = {};
  const std::int32_t* starts[1 + train::kMaxPosLevels] = {};
};

// Block rows of the backward grid: the token table's and every level's.
MANYADD_HD int backward_rows(int V, const Levels<float>& p) {
  int rows = V;
  for (int lv = 0; lv < p.n; ++lv) rows += p.rows[lv];
  return rows;
}

// Block row `row` (< backward_rows), channel c: the sum of dout's rows that read table row `row` (in
// row order), added to its gradient entry.
MANYADD_HD void backward_entry(float* dwte, const Levels<float>& p, const Readers& rd, const float* dout, int row,
                               int c, int C, int V) {
  int k = 0;
  float* entry = dwte + (long long)row * C + c;
  if (row >= V) {
    row -= V;
    int lv = 0;
    while (row >= p.rows[lv]) row -= p.rows[lv++];  // row < backward_rows: lv < n
    k = 1 + lv;
    entry = p.table[lv] + (long long)row * C + c;
  }
  float acc = 0.f;
  for (int i = rd.starts[k][row]; i < rd.starts[k][row + 1]; ++i) acc += dout[(long long)rd.rows[k][i] * C + c];
  *entry += acc;
}

}  // namespace manyadd::kernels::embedding_rows
