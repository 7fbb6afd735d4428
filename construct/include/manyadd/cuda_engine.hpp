// The constructed model's real-softmax forward pass on a CUDA device (flash-attention style: no N x N
// matrix). A plain C++ header: callers need no CUDA headers and no #ifdefs; in a build without CUDA
// cuda_available() is false ("built without CUDA") and cuda_forward_cpu_twin still runs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "manyadd/format.hpp"
#include "manyadd/model.hpp"

namespace manyadd {

// True when a CUDA device can be used. Any cudaGetDeviceCount error (e.g. "CUDA driver version is
// insufficient") or zero devices counts as "no device"; `why` then gets the reason.
bool cuda_available(std::string* why);

struct CudaForwardResult {
  std::int64_t first = 0;                     // 0-based index of the first response position ('=')
  std::vector<std::uint8_t> pred;             // (N - first) argmax at positions first..N-1 (lowest on ties)
  std::vector<std::array<double, 4>> heads;   // (N - first) head outputs o_h; empty unless asked
  double kernel_seconds = 0;                  // device time of the attention pass (cudaEvent)
};

// Forward pass of `model` on `tokens` (one teacher-forced sequence of `shape`, offsets s1, s2).
// Attention (all 4 heads, model lambda, real softmax) runs on the device in float32 (or float64);
// the FFN + readout runs on the host with CompiledFFN (7 inputs NUM..PRE_EOS per response position).
// Throws InputError when no device is usable or the model is not the constructed one.
CudaForwardResult cuda_forward(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                               const Shape& shape, std::int64_t s1, std::int64_t s2, bool float64,
                               bool keep_head_outputs);

// The same pipeline with the device pass replaced by its CPU twin (same layout, key order and online
// softmax; O(N^2), one thread): tests everything around the kernel where no device exists. Both builds.
CudaForwardResult cuda_forward_cpu_twin(const ConstructedModel& model, const std::vector<std::uint8_t>& tokens,
                                        const Shape& shape, std::int64_t s1, std::int64_t s2, bool float64,
                                        bool keep_head_outputs);

}  // namespace manyadd
