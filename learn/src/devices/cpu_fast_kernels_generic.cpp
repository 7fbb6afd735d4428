// cpu_fast_kernels.inc for plain x86-64 (the project's target): every CPU runs it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "manyadd/learn/devices/cpu_fast_kernels.hpp"
#include "manyadd/learn/decoder/layers.hpp"  // coupled_rel_bucket

namespace manyadd::learn::cpu_fast {
namespace {
#include "cpu_fast_kernels.inc"
}  // namespace

std::int64_t attention_workspace(int T, int HS) { return Work::floats(round16(T), HS); }

const Kernels& generic_kernels() {
  static const Kernels k{"x86-64",     attention_forward_any, attention_backward_any, geglu_forward_n, geglu_backward_n,
                         rmsnorm_forward_n, rmsnorm_backward_n, silu_forward_n, silu_backward_n,
                         dropout_mask_n,    local_attention_c1_forward, local_attention_c1_backward,
                         round_bf16_n,      to_bf16_n,          exp_n,          exp2_n};
  return k;
}

const Kernels& kernels() {
  static const Kernels& k = avx512_kernels() ? *avx512_kernels() : generic_kernels();
  return k;
}

}  // namespace manyadd::learn::cpu_fast
