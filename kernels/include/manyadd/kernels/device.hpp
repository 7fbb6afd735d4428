// The CUDA device as plain C++ (no CUDA headers, so every caller compiles with the host compiler):
// availability, memory, RAII buffers and timers. Every call that fails throws std::runtime_error
// naming the CUDA call, file and line (kernels/src/cuda_check.cuh). Built without CUDA
// (MANYADD_WITH_CUDA == 0), device_available() is false with the reason and every other call throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace manyadd::kernels {

// True when a CUDA device can be used. Any cudaGetDeviceCount error (e.g. "CUDA driver version is
// insufficient") or zero devices counts as "no device"; `why` then gets the reason.
bool device_available(std::string* why);

void* dev_alloc(std::size_t bytes);
void dev_free(void* p) noexcept;
void to_device(void* dst, const void* src, std::size_t bytes);
void to_host(void* dst, const void* src, std::size_t bytes);
void dev_zero(void* p, std::size_t bytes);
void dev_copy(void* dst, const void* src, std::size_t bytes);  // device to device
void synchronize();

// Device memory for `size()` elements of T; grows on resize (contents are then undefined), freed on
// destruction. Move-only.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) { resize(n); }
  ~DeviceBuffer() { dev_free(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_), std::swap(n_, o.n_);
    return *this;
  }
  void resize(std::size_t n) {  // keeps a larger allocation
    if (n <= n_) return;
    dev_free(p_);
    p_ = nullptr, n_ = 0;
    p_ = static_cast<T*>(dev_alloc(n * sizeof(T)));
    n_ = n;
  }
  void zero() { dev_zero(p_, n_ * sizeof(T)); }
  void upload(const T* src, std::size_t n) { to_device(p_, src, n * sizeof(T)); }
  void download(T* dst, std::size_t n) const { to_host(dst, p_, n * sizeof(T)); }
  T* get() const { return p_; }
  operator T*() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

// Device time between start() and stop() (CUDA events on the default stream).
class DeviceTimer {
 public:
  DeviceTimer();
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;
  void start();
  double stop_seconds();  // waits for the stop event

 private:
  void* a_ = nullptr;
  void* b_ = nullptr;
};

}  // namespace manyadd::kernels
