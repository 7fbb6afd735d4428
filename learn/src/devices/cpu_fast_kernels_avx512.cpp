// cpu_fast_kernels.inc for AVX-512 (F, BW, DQ, VL) with FMA, in a `#pragma GCC target` region: only
// the functions defined below carry those instructions (the standard headers are included before it),
// and avx512_kernels() hands them out only on a CPU that has them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "manyadd/learn/devices/cpu_fast_kernels.hpp"
#include "manyadd/learn/decoder/layers.hpp"  // coupled_rel_bucket (compiled outside the target region)

namespace manyadd::learn::cpu_fast {
namespace avx512 {
namespace {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#include "cpu_fast_kernels.inc"
#pragma GCC pop_options
}  // namespace
}  // namespace avx512

const Kernels* avx512_kernels() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("fma");
  using namespace avx512;
  static const Kernels k{"avx512",     attention_forward_any, attention_backward_any, geglu_forward_n, geglu_backward_n,
                         rmsnorm_forward_n, rmsnorm_backward_n, silu_forward_n, silu_backward_n,
                         dropout_mask_n,    local_attention_c1_forward, local_attention_c1_backward,
                         round_bf16_n,      to_bf16_n,          exp_n,          exp2_n};
  return ok ? &k : nullptr;
}

}  // namespace manyadd::learn::cpu_fast
