// kernels/ without nvcc: the device side (attention.hpp) reports that no CUDA engine was built, so
// cuda_available() is false and cuda_forward throws InputError; cuda_forward_cpu_twin still works.
#include <stdexcept>

#include "attention.hpp"

namespace manyadd::cuda {

bool device_count(std::string* why) {
  if (why) *why = "built without CUDA (no nvcc found when configuring)";
  return false;
}

double attention(const float*, const float*, const float*, float*, int, std::int64_t, std::int64_t) {
  throw std::runtime_error("cuda attention: built without CUDA");
}
double attention(const double*, const double*, const double*, double*, int, std::int64_t, std::int64_t) {
  throw std::runtime_error("cuda attention: built without CUDA");
}

}  // namespace manyadd::cuda
