// The MMA probe on the device (mma_probe.hpp): one mma.sync m16n8k8 tf32 per tile, the attention
// kernel's instruction and register layout (mma_tf32.cuh), C in and D out, nothing else in between.
#include <cstdint>
#include <vector>

#include "cuda_check.cuh"
#include "manyadd/kernels/device.hpp"
#include "manyadd/kernels/mma_probe.hpp"
#include "mma_tf32.cuh"

namespace manyadd::kernels::mma_probe {

namespace {

static_assert(sizeof(Tile) == 320 * sizeof(float), "Tile: A (128), B (64), C (128) floats, no padding");
constexpr int kWarpsPerBlock = 4;

// One warp per tile (tiles: (T, 320) floats, A at 0, B at 128, C at 192; d: (T, 16, 8)). The guard is
// warp-uniform, so every warp that reaches mma.sync.aligned has all 32 lanes.
__global__ void mma_probe_kernel(const float* __restrict__ tiles, float* __restrict__ d, int T) {
  const int tile = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (tile >= T) return;
  const float* A = tiles + (long long)tile * 320;
  const float* B = A + 128;
  const float* C = A + 192;
  std::uint32_t a[4];
  float c[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    a[e] = __float_as_uint(A[tc::frag_a_row(lane, e) * 8 + tc::frag_a_col(lane, e)]);
    c[e] = C[tc::frag_c_row(lane, e) * 8 + tc::frag_c_col(lane, e)];
  }
  const std::uint32_t b0 = __float_as_uint(B[tc::frag_b_row(lane, 0) * 8 + tc::frag_b_col(lane)]);
  const std::uint32_t b1 = __float_as_uint(B[tc::frag_b_row(lane, 1) * 8 + tc::frag_b_col(lane)]);
  tc::mma_tf32(c, a, b0, b1);
  float* D = d + (long long)tile * 128;
#pragma unroll
  for (int e = 0; e < 4; ++e) D[tc::frag_c_row(lane, e) * 8 + tc::frag_c_col(lane, e)] = c[e];
}

}  // namespace

std::vector<float> run_on_device(const std::vector<Tile>& tiles) {
  check_tiles(tiles);
  const int T = int(tiles.size());
  DeviceBuffer<float> dt(std::size_t(T) * 320), dd(std::size_t(T) * 128);
  dt.upload(&tiles[0].a[0][0], std::size_t(T) * 320);
  mma_probe_kernel<<<(T + kWarpsPerBlock - 1) / kWarpsPerBlock, 32 * kWarpsPerBlock>>>(dt.get(), dd.get(), T);
  LAUNCH_CHECK();
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> d(std::size_t(T) * 128);
  dd.download(d.data(), d.size());
  return d;
}

}  // namespace manyadd::kernels::mma_probe
