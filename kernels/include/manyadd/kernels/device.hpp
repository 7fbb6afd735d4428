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
// Page-locked host memory (cudaMallocHost): the source of asynchronous uploads.
void* host_alloc_pinned(std::size_t bytes);
void host_free_pinned(void* p) noexcept;
// Host to device on the default stream without waiting (src must be pinned and stay unchanged until the
// copy has run: record a DeviceEvent after it and wait on that before reusing src).
void to_device_async(void* dst, const void* src, std::size_t bytes);

// Memory for `size()` elements of T from Alloc/Free (the device's or pinned host memory); grows on
// resize (contents are then undefined), freed on destruction. Move-only.
template <class T, void* (*Alloc)(std::size_t), void (*Free)(void*) noexcept>
class OwnedBuffer {
 public:
  OwnedBuffer() = default;
  explicit OwnedBuffer(std::size_t n) { resize(n); }
  ~OwnedBuffer() { Free(p_); }
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;
  OwnedBuffer(OwnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  OwnedBuffer& operator=(OwnedBuffer&& o) noexcept {
    std::swap(p_, o.p_), std::swap(n_, o.n_);
    return *this;
  }
  void resize(std::size_t n) {  // keeps a larger allocation
    if (n <= n_) return;
    Free(p_);
    p_ = nullptr, n_ = 0;
    p_ = static_cast<T*>(Alloc(n * sizeof(T)));
    n_ = n;
  }
  T* get() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

// Device memory (cudaMalloc), with the copies to and from the host.
template <class T>
class DeviceBuffer : public OwnedBuffer<T, dev_alloc, dev_free> {
 public:
  using OwnedBuffer<T, dev_alloc, dev_free>::OwnedBuffer;
  using OwnedBuffer<T, dev_alloc, dev_free>::get;
  void zero() { dev_zero(get(), this->size() * sizeof(T)); }
  void upload(const T* src, std::size_t n) { to_device(get(), src, n * sizeof(T)); }
  void download(T* dst, std::size_t n) const { to_host(dst, get(), n * sizeof(T)); }
  operator T*() const { return get(); }
};

// Pinned host memory (cudaMallocHost): the source of asynchronous uploads.
template <class T>
using PinnedBuffer = OwnedBuffer<T, host_alloc_pinned, host_free_pinned>;

// A point in the default stream's work: record() marks "everything launched so far", synchronize()
// waits on the host until the device has reached the last recorded mark (at once when none was).
class DeviceEvent {
 public:
  DeviceEvent();
  ~DeviceEvent();
  DeviceEvent(const DeviceEvent&) = delete;
  DeviceEvent& operator=(const DeviceEvent&) = delete;
  void record();
  void synchronize();

 private:
  void* e_ = nullptr;
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
