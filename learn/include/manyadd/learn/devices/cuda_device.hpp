// Training and teacher-forced evaluation of the learned model on a CUDA device: a learn::TrainDevice
// (learn/batch.hpp) whose steps run the packed pipeline on the GPU in fp32 (cuBLAS SGEMM) or bf16 mixed
// precision (bf16 tensor-core GEMMs with fp32 accumulation, the rounding points of PackedCpuDevice in
// bf16), every architecture option of ModelConfig, the statistics of a step read back only when asked
// (TrainDevice::step_async / take_results). kernels/src/train.cu holds everything but the matrix
// products. A plain C++ header: without CUDA in the build make_cuda_device always throws ("no CUDA
// device: built without CUDA ...").
#pragma once

#include <memory>
#include <string>

#include "manyadd/learn/devices/batch.hpp"

namespace manyadd::learn {

// True when a CUDA device can be used; any cudaGetDeviceCount error or zero devices is "no device",
// with the reason in `why`.
bool cuda_training_available(std::string* why);

// What the CUDA device cannot run, as an InputError naming it: d_head > 512 (the attention kernels keep
// a head's row in a warp's registers or tiles of it in shared memory). Every other model option (every
// pos_mode, up to coupled3's three position tables, fire, rope, input_injection) and both precisions are
// supported. Checked before any device is touched, so the message is the same on machines with and
// without a GPU.
void check_cuda_supports(const ModelConfig& c, Precision p);

// The CUDA device for a model, holding weights, gradients, Adam moments and activations on the GPU, in
// precision p (the run's; a property of the device like the CPU devices'). Throws the InputError of
// check_cuda_supports, or InputError("no CUDA device: <reason>") when none can be used (the CLIs exit 2
// on either).
std::unique_ptr<TrainDevice> make_cuda_device(const ModelConfig& c, Precision p = Precision::fp32);

}  // namespace manyadd::learn
