// bfloat16 in kernels/' public headers as plain C++: the 16 stored bits (sign, 8 exponent bits, 7
// mantissa bits: the top half of an IEEE float32). No arithmetic here. The device widens a bf16 to
// float exactly (bits << 16) and rounds a float to bf16 to nearest, ties to even (__float2bfloat16_rn);
// host code converts with core's float_to_bf16 / bf16_to_float, the same rounding (NaN aside: the
// device writes the canonical NaN 0x7fff, core keeps the payload). A distinct type, so that a bf16
// buffer is never taken for an integer one and the launchers can overload on float / bf16.
#pragma once

#include <cstdint>

namespace manyadd::kernels {

struct bf16 {
  std::uint16_t bits;
};
static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2, "bf16 must be the 2 bytes of the format");

}  // namespace manyadd::kernels
