// The fast CPU device's matrix products (cpu_fast_device.cpp) on oneDNN (Debian's libdnnl-dev): its
// matmul primitive JIT-compiles kernels for the CPU it runs on (AVX-512, and vdpbf16ps where the CPU
// has AVX-512 BF16), so the project keeps compiling for plain x86-64 and still runs those instructions.
// Chosen over Eigen and libxsmm by measurement (bench/results/cpu-train/README.md, "The GEMM library").
//
// Row-major, BLAS-style: C (M x N, row stride ldc) = beta C + op(A) op(B), op(A) (M x K), op(B) (K x N);
// A is stored (M x K) with row stride lda, or (K x M) when ta; B (K x N) with ldb, or (N x K) when tb.
// beta is 0 or 1. A and B hold floats (Elem::f32) or bf16 numbers (Elem::bf16: uint16 bit patterns,
// the upper halves of floats); C is always fp32. In bf16 every product of two bf16 numbers is exact in
// fp32 and the sums are fp32 (vdpbf16ps adds two products per lane, each exact, with round to nearest
// even; denormal inputs and outputs flushed to zero): the arithmetic of the bf16 rounding points
// (model.hpp, Precision), in another order than Eigen's.
// oneDNN is loaded at the first use (dlopen of libdnnl.so.2, Debian's libdnnl2; MANYADD_ONEDNN names
// another file): the project's binaries do not depend on it at load time.
// Every call runs on the calling thread alone (the callers split the work over threads themselves), so
// a call's result depends only on its operands and shapes: deterministic.
#pragma once

#include <cstdint>
#include <string>

namespace manyadd::learn::cpu_gemm {

enum class Elem { f32, bf16 };

// Why oneDNN cannot be used here (it cannot be loaded), or empty.
const std::string& unavailable();
// InputError "<who> needs oneDNN (...): <why>" where it cannot be used; nothing where it can.
void require(const std::string& who);

void gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const void* A, std::int64_t lda,
          const void* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc, Elem e);

// Whether oneDNN runs bf16 products natively on this CPU (the AVX-512 BF16 instructions). Where it does
// not, the fast device keeps its bf16 values in floats and multiplies them in fp32 (the same rounding
// points: the products of bf16 numbers are exact either way).
bool bf16_supported();
// The instruction set oneDNN dispatches to on this machine ("avx512_core_bf16", ...), for reports.
const char* isa_name();

// For benchmarks (off by default, no cost then): every call's wall time on its thread and its 2 M N K
// multiply-adds, summed over threads (seconds are thread-seconds).
struct Stats {
  double seconds = 0, flops = 0;
  std::int64_t calls = 0;
};
void count(bool on);
Stats take_stats();  // the sums since the last call, reset

}  // namespace manyadd::learn::cpu_gemm
