// Training and teacher-forced evaluation of the learned model on a CUDA device: a learn::TrainDevice
// (learn/batch.hpp) whose steps run the packed pipeline on the GPU (cuBLAS SGEMM for the matrix
// products, kernels/src/train.cu for everything else, fp32). A plain C++ header: without CUDA in the
// build make_cuda_device always throws ("no CUDA device: built without CUDA ...").
#pragma once

#include <memory>
#include <string>

#include "manyadd/learn/batch.hpp"

namespace manyadd::learn {

// True when a CUDA device can be used; any cudaGetDeviceCount error or zero devices is "no device",
// with the reason in `why`.
bool cuda_training_available(std::string* why);

// The CUDA device for a model, holding weights, gradients, Adam moments and activations on the GPU.
// Throws InputError("no CUDA device: <reason>") when none can be used (the CLIs exit 2 on it).
std::unique_ptr<TrainDevice> make_cuda_device(const ModelConfig& c);

}  // namespace manyadd::learn
