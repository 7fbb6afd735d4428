// The device as plain C++: see device.hpp.
#include "cuda_check.cuh"
#include "manyadd/kernels/device.hpp"

namespace manyadd::kernels {

bool device_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error
    return false;
  }
  if (n == 0) {
    if (why) *why = "cudaGetDeviceCount found 0 devices";
    return false;
  }
  return true;
}

void* dev_alloc(std::size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}
void dev_free(void* p) noexcept {
  if (p) cudaFree(p);
}
void to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void dev_zero(void* p, std::size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemset(p, 0, bytes));
}
void dev_copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}
void synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }
void* host_alloc_pinned(std::size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, bytes ? bytes : 1));
  return p;
}
void host_free_pinned(void* p) noexcept {
  if (p) cudaFreeHost(p);
}
void to_device_async(void* dst, const void* src, std::size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, 0));
}

DeviceEvent::DeviceEvent() {
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  e_ = e;
}
DeviceEvent::~DeviceEvent() { cudaEventDestroy(static_cast<cudaEvent_t>(e_)); }
void DeviceEvent::record() { CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e_))); }
void DeviceEvent::synchronize() { CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e_))); }

DeviceTimer::DeviceTimer() {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  if (const cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
    cudaEventDestroy(a);
    CUDA_CHECK(e);
  }
  a_ = a, b_ = b;
}
DeviceTimer::~DeviceTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(a_));
  cudaEventDestroy(static_cast<cudaEvent_t>(b_));
}
void DeviceTimer::start() { CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(a_))); }
double DeviceTimer::stop_seconds() {
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(b_)));
  CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(b_)));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(a_), static_cast<cudaEvent_t>(b_)));
  return double(ms) * 1e-3;
}

}  // namespace manyadd::kernels
