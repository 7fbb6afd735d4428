// A score bias for the attention kernels (train.hpp's flash kernels and flash_tc.hpp's tensor-core
// kernels): FIRE's relative-position bias (learn/layers.hpp, "FIRE"; kernels/README.md, "FIRE on CUDA").
// Plain C++, no CUDA headers.
//
// The bias of query index i and key index j <= i within a sequence (indices within the sequence, the
// same for every sequence of a varlen batch and every layer: FIRE's bias depends on the indices alone) is
// one entry of a table of pairs (i, d), d = i - j, in triangle order:
//   bias[h stride + tri(i) + i - j],  tri(i) = i (i + 1) / 2,
// stride >= tri(T) for the batch's longest sequence T (learn's CUDA device: stride = tri(T), the MLP's
// output (NH, tri(T)) from kernels::train::fire_*). It is added to the fp32 score: s scale + b (the CUDA-
// core kernels) or, in base 2, fl(s c2) + fl(b fl(log2 e)) (the tensor-core kernel), as learn's fp32 and
// bf16 attention add it.
// The backward writes the bias's gradient of every (sequence b, head h, i, j <= i), the softmax gradient
// x_ij = P_ij (dP_ij - D_i) before the score scale (fp32, unrounded), to
//   dslots[NH soff[b] + h tri(T_b) + tri(i) + i - j],  soff[b] = sum_{b' < b} tri(T_b')
// (each entry written once, no atomics); kernels::train::fire_dbias_reduce sums the slots of a pair over
// the sequences in order. dslots null: the gradient is not written.
#pragma once

namespace manyadd::kernels {

struct ScoreBias {
  const float* bias = nullptr;      // null: no bias (every other field ignored)
  long long stride = 0;             // a head's entries
  float* dslots = nullptr;          // backward: the gradient's slots, or null
  const long long* soff = nullptr;  // backward with dslots: B + 1 slot offsets (fire_slot_offsets)
};

}  // namespace manyadd::kernels

// The kernels' one store of a gradient slot (attention_rows.cuh, flash_tc.cuh). A host replay may define
// it before including them, to count the stores per slot (tests/test_cuda_train_kernels.cpp: every slot
// exactly once).
#ifndef MANYADD_SLOT_STORE
#define MANYADD_SLOT_STORE(p, x) (*(p) = (x))
#endif
