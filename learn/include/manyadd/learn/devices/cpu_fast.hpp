// The fast CPU device ("cpu-fast", `train --device cpu-fast`, `evaluate --device cpu-fast`): the same
// model, batches, AdamW and checkpoints as the reference CPU devices (batch.hpp), its arithmetic
// arranged for the machine (learn/README.md, "The fast CPU device"):
//  * the batch is cut into chunks of whole sequences (~chunk_rows rows), each carried through the whole
//    forward and backward while its activations sit in the core's cache; chunks are split over the
//    threads in contiguous runs of about equal work, each thread with its own gradient buffer, reduced in
//    thread order (deterministic for (model, batch, threads), as CpuDevice);
//  * the matrix products of a chunk on oneDNN (learn/include/manyadd/learn/devices/cpu_gemm.hpp; loaded at run time, so that only
//    this device needs the library): fp32, or in bf16 the products of bf16 numbers with fp32 sums on
//    AVX-512 BF16 (vdpbf16ps) where the CPU has it;
//  * attention fused over a sequence's rows (scores, softmax and values of four query rows at a time;
//    no T x T buffer: the backward recomputes the scores from two numbers per row and head), in the
//    AVX-512 build of its kernels where the CPU has AVX-512 (learn/include/manyadd/learn/devices/cpu_fast_kernels.hpp);
//  * after the last layer's keys and values, only the rows a loss reads (target >= 0) go on: their
//    attention rows, output projection, FFN, norms and readout; the prompt rows' are skipped.
// bf16 has exactly the rounding points of PackedCpuDevice in bf16 (model.hpp, Precision), which are the
// CUDA device's. fp32 and bf16 agree with the reference within the bounds test_learn_fast derives. What
// the device does not run (FIRE: its bias is a T x T table per head) it refuses by name (InputError).
#pragma once

#include <memory>

#include "manyadd/learn/devices/batch.hpp"

namespace manyadd::learn {

struct CpuFastOptions {
  int chunk_rows = 256;          // rows per chunk (a sequence longer than this is a chunk of its own)
  bool generic_kernels = false;  // the plain x86-64 build of the kernels even where AVX-512 runs
  bool bf16_as_floats = false;   // bf16 values kept in floats, multiplied in fp32 (where the CPU has no
                                 // AVX-512 BF16 this is what runs anyway): the same rounding points
};
// Throws InputError for a configuration it does not run (pos_mode fire), threads outside [1, 256], or
// where oneDNN cannot be loaded.
std::unique_ptr<TrainDevice> make_cpu_fast_device(const ModelConfig& c, int threads, Precision p = Precision::fp32,
                                                  const CpuFastOptions& o = {});
// What the device runs on this machine, in words: the kernels' build and oneDNN's instruction set.
std::string cpu_fast_description(Precision p, const CpuFastOptions& o = {});

}  // namespace manyadd::learn
