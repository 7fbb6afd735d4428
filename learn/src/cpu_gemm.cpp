// oneDNN matmul behind cpu_gemm.hpp's BLAS-style call.
#include "cpu_gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <vector>
#include <mutex>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "manyadd/core/error.hpp"

namespace manyadd::learn::cpu_gemm {
namespace {
using dnnl::memory;
constexpr memory::dim kRt = DNNL_RUNTIME_DIM_VAL;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One primitive per (ta, tb, element type, beta), every dimension and stride given at run time: oneDNN
// then takes its jit GEMM, as fast on these shapes as the primitives compiled for fixed ones (measured:
// README "The GEMM library"), and a batch's varying row counts cost no new compilation.
struct Prim {
  dnnl::matmul mm;
  memory::desc scratch;
  bool ok = false;
};
memory::data_type dtype(Elem e) { return e == Elem::bf16 ? memory::data_type::bf16 : memory::data_type::f32; }
memory::desc plain(memory::dims dims, memory::data_type t, bool transposed, memory::dim ld) {
  return memory::desc(dims, t, transposed ? memory::dims{1, ld} : memory::dims{ld, 1});
}

Prim& prim(bool ta, bool tb, Elem e, bool accumulate) {
  static std::array<Prim, 16> cache;
  static std::array<std::once_flag, 16> once;
  const int key = int(ta) | int(tb) << 1 | int(e == Elem::bf16) << 2 | int(accumulate) << 3;
  std::call_once(once[std::size_t(key)], [&] {
    Prim& p = cache[std::size_t(key)];
    const auto t = dtype(e);
    const memory::desc a = plain({kRt, kRt}, t, ta, kRt), b = plain({kRt, kRt}, t, tb, kRt),
                       c = plain({kRt, kRt}, memory::data_type::f32, false, kRt);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per thread (below): safe from several threads
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.f);
      attr.set_post_ops(po);
    }
    try {
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine());
      p.mm = dnnl::matmul(pd);
      p.scratch = pd.scratchpad_desc();
      p.ok = true;
    } catch (const dnnl::error&) {
      p.ok = false;  // e.g. bf16 on a CPU without AVX-512
    }
  });
  return cache[std::size_t(key)];
}
std::atomic<bool> counting{false};
std::atomic<std::int64_t> count_ns{0}, count_calls{0};
std::atomic<double> count_flops{0};  // updated with compare-exchange (fetch_add on double is C++20)
}  // namespace

void count(bool on) { counting = on; }
Stats take_stats() {
  Stats s;
  s.seconds = double(count_ns.exchange(0)) * 1e-9;
  s.calls = count_calls.exchange(0);
  s.flops = count_flops.exchange(0);
  return s;
}

void gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const void* A, std::int64_t lda,
          const void* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc, Elem e) {
  MANYADD_INVARIANT(beta == 0.f || beta == 1.f, "cpu_gemm: beta must be 0 or 1");
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // an empty sum: C = beta C
    if (beta == 0.f)
      for (std::int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.f);
    return;
  }
  Prim& p = prim(ta, tb, e, beta != 0.f);
  MANYADD_INVARIANT(p.ok, fmt::format("cpu_gemm: oneDNN has no {} matmul on this CPU", e == Elem::bf16 ? "bf16" : "fp32"));
  // The caller's thread alone: oneDNN's OpenMP would otherwise start a team of every core inside each
  // of our worker threads. (Sets this thread's own OpenMP setting; nothing else in the process uses it.)
  omp_set_num_threads(1);
  thread_local dnnl::stream stream(engine());
  const auto t = dtype(e);
  memory am(plain({M, K}, t, ta, lda), engine(), const_cast<void*>(A));
  memory bm(plain({K, N}, t, tb, ldb), engine(), const_cast<void*>(B));
  memory cm(plain({M, N}, memory::data_type::f32, false, ldc), engine(), C);
  thread_local std::vector<unsigned char> scratch;
  if (scratch.size() < p.scratch.get_size()) scratch.resize(p.scratch.get_size());
  memory sm(p.scratch, engine(), scratch.data());
  if (!counting.load(std::memory_order_relaxed)) {
    p.mm.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}});
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  p.mm.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}});
  count_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  count_calls += 1;
  const double f = 2.0 * double(M) * double(N) * double(K);
  for (double old = count_flops.load(); !count_flops.compare_exchange_weak(old, old + f);) {
  }
}

bool bf16_supported() {
  // Natively only: on AVX-512 without BF16 oneDNN emulates the bf16 products, slower than fp32 ones on
  // the same bf16 values (which the device then uses).
  return dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_bf16 ||
         dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx
      ? prim(false, true, Elem::bf16, false).ok
      : false;
}

const char* isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

}  // namespace manyadd::learn::cpu_gemm
