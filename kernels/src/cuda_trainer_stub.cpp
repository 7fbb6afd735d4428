// kernels/ without nvcc: no CUDA training device; make_cuda_device refuses with the reason, so
// `train --device cuda` and `evaluate --device cuda` exit 2 with "no CUDA device: built without CUDA ...".
#include "manyadd/cuda_engine.hpp"
#include "manyadd/cuda_train.hpp"

namespace manyadd::learn {

bool cuda_training_available(std::string* why) { return cuda_available(why); }

std::unique_ptr<TrainDevice> make_cuda_device(const ModelConfig&) {
  std::string why;
  cuda_available(&why);
  throw InputError("no CUDA device: " + why);
}

}  // namespace manyadd::learn
