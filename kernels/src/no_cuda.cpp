// kernels/ built without a CUDA compiler: no device. device_available() says why; every other call
// throws (callers ask device_available() first, so these are never reached in a correct program).
#include <stdexcept>

#include "manyadd/kernels/device.hpp"
#include "manyadd/kernels/mma_probe.hpp"

namespace manyadd::kernels {

namespace {
[[noreturn]] void none() { throw std::runtime_error("CUDA call in a build without CUDA (no nvcc found when configuring)"); }
}  // namespace

bool device_available(std::string* why) {
  if (why) *why = "built without CUDA (no nvcc found when configuring)";
  return false;
}
void* dev_alloc(std::size_t) { none(); }
void dev_free(void*) noexcept {}
void to_device(void*, const void*, std::size_t) { none(); }
void to_host(void*, const void*, std::size_t) { none(); }
void dev_zero(void*, std::size_t) { none(); }
void dev_copy(void*, const void*, std::size_t) { none(); }
void synchronize() { none(); }
void* host_alloc_pinned(std::size_t) { none(); }
void host_free_pinned(void*) noexcept {}
void to_device_async(void*, const void*, std::size_t) { none(); }
DeviceEvent::DeviceEvent() { none(); }
DeviceEvent::~DeviceEvent() = default;
void DeviceEvent::record() { none(); }
void DeviceEvent::synchronize() { none(); }
DeviceTimer::DeviceTimer() { none(); }
DeviceTimer::~DeviceTimer() = default;
void DeviceTimer::start() { none(); }
double DeviceTimer::stop_seconds() { none(); }
std::vector<float> mma_probe::run_on_device(const std::vector<mma_probe::Tile>& tiles) {
  mma_probe::check_tiles(tiles);
  none();
}

}  // namespace manyadd::kernels
