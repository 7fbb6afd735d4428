// The one tensor-core instruction of the constructed model's attention kernel (constructed_attention.cu)
// and its register layout, shared with the probe of its accumulation (mma_probe.cu), so that the probe
// runs exactly the instruction the kernel runs. The index functions are plain C++ as well (the tests
// check on the CPU that they cover every element of a tile once).
#pragma once

#include <cstdint>

#include "manyadd/kernels/constructed_tc.hpp"  // MANYADD_HD

namespace manyadd::kernels::tc {

// mma.sync m16n8k8, tf32 operands, fp32 accumulation (PTX ISA, "Matrix Fragments for mma.m16n8k8",
// .tf32): lane = 4 g + t. A (16 x 8, row-major) a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4);
// B (8 x 8, k x n) b0 (t, g), b1 (t + 4, g); C and D (16 x 8) c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t),
// c3 (g + 8, 2t + 1).
MANYADD_HD inline int frag_a_row(int lane, int e) { return (lane >> 2) + ((e & 1) ? 8 : 0); }
MANYADD_HD inline int frag_a_col(int lane, int e) { return (lane & 3) + ((e & 2) ? 4 : 0); }
MANYADD_HD inline int frag_b_row(int lane, int e) { return (lane & 3) + (e ? 4 : 0); }
MANYADD_HD inline int frag_b_col(int lane) { return lane >> 2; }
MANYADD_HD inline int frag_c_row(int lane, int e) { return (lane >> 2) + ((e & 2) ? 8 : 0); }
MANYADD_HD inline int frag_c_col(int lane, int e) { return 2 * (lane & 3) + (e & 1); }

#ifdef __CUDACC__
// c += A B for the warp's 16 x 8 tile: a, b hold tf32 bit patterns (the low 13 bits are the caller's
// business: the kernel and the probe pass exact tf32 values).
__device__ inline void mma_tf32(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

}  // namespace manyadd::kernels::tc
