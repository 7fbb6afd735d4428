// kernels/ without nvcc: the same API, reporting that no CUDA engine was built.
#include "manyadd/cuda_engine.hpp"

namespace manyadd {

bool cuda_available(std::string* why) {
  if (why) *why = "built without CUDA (no nvcc found when configuring)";
  return false;
}

CudaForwardResult cuda_forward(const ConstructedModel&, const std::vector<std::uint8_t>&, const Shape&,
                               std::int64_t, std::int64_t, bool, bool) {
  throw InputError("cuda_forward: built without CUDA (no nvcc found when configuring)");
}

}  // namespace manyadd
