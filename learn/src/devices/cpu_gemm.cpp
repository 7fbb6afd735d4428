// oneDNN matmul behind cpu_gemm.hpp's BLAS-style call, through oneDNN's C API loaded at the first use
// (dlopen of libdnnl.so.2): the project's binaries do not depend on the library, so they start (and the
// GPU bundle, bench/gpu/gather.sh, travels) without it; only the fast CPU device needs it.
#include "manyadd/learn/devices/cpu_gemm.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include "manyadd/core/error.hpp"

namespace manyadd::learn::cpu_gemm {
namespace {

// The C functions used, resolved from the loaded library (their declarations come from the header).
struct Api {
  std::string error;  // empty when loaded
  decltype(&::dnnl_engine_create) engine_create = nullptr;
  decltype(&::dnnl_stream_create) stream_create = nullptr;
  decltype(&::dnnl_stream_destroy) stream_destroy = nullptr;
  decltype(&::dnnl_memory_desc_init_by_strides) md_init = nullptr;
  decltype(&::dnnl_memory_desc_get_size) md_size = nullptr;
  decltype(&::dnnl_matmul_desc_init) matmul_desc_init = nullptr;
  decltype(&::dnnl_primitive_attr_create) attr_create = nullptr;
  decltype(&::dnnl_primitive_attr_destroy) attr_destroy = nullptr;
  decltype(&::dnnl_primitive_attr_set_scratchpad_mode) attr_scratchpad = nullptr;
  decltype(&::dnnl_primitive_attr_set_post_ops) attr_post_ops = nullptr;
  decltype(&::dnnl_post_ops_create) post_ops_create = nullptr;
  decltype(&::dnnl_post_ops_append_sum) post_ops_sum = nullptr;
  decltype(&::dnnl_post_ops_destroy) post_ops_destroy = nullptr;
  decltype(&::dnnl_primitive_desc_create) pd_create = nullptr;
  decltype(&::dnnl_primitive_desc_query_md) pd_query_md = nullptr;
  decltype(&::dnnl_primitive_desc_destroy) pd_destroy = nullptr;
  decltype(&::dnnl_primitive_create) primitive_create = nullptr;
  decltype(&::dnnl_primitive_execute) execute = nullptr;
  decltype(&::dnnl_memory_create) memory_create = nullptr;
  decltype(&::dnnl_memory_destroy) memory_destroy = nullptr;
  decltype(&::dnnl_get_effective_cpu_isa) effective_isa = nullptr;
  void (*omp_set_num_threads)(int) = nullptr;  // from the library's OpenMP runtime
  dnnl_engine_t engine = nullptr;
};

const Api& api() {
  static const Api a = [] {
    Api r;
    // MANYADD_ONEDNN names another library file (the tests name a missing one).
    const char* env = std::getenv("MANYADD_ONEDNN");
    const std::string name = env && *env ? env : "libdnnl.so.2";
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      const char* e = dlerror();
      r.error = fmt::format("cannot load oneDNN ({}): {}", name, e ? e : "unknown error");
      return r;
    }
    bool ok = true;
    auto get = [&](auto& fn, const char* sym) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, sym));
      if (!fn) ok = false, r.error = fmt::format("oneDNN ({}) lacks {}", name, sym);
    };
    get(r.engine_create, "dnnl_engine_create"), get(r.stream_create, "dnnl_stream_create");
    get(r.stream_destroy, "dnnl_stream_destroy"), get(r.md_init, "dnnl_memory_desc_init_by_strides");
    get(r.md_size, "dnnl_memory_desc_get_size"), get(r.matmul_desc_init, "dnnl_matmul_desc_init");
    get(r.attr_create, "dnnl_primitive_attr_create"), get(r.attr_destroy, "dnnl_primitive_attr_destroy");
    get(r.attr_scratchpad, "dnnl_primitive_attr_set_scratchpad_mode");
    get(r.attr_post_ops, "dnnl_primitive_attr_set_post_ops"), get(r.post_ops_create, "dnnl_post_ops_create");
    get(r.post_ops_sum, "dnnl_post_ops_append_sum"), get(r.post_ops_destroy, "dnnl_post_ops_destroy");
    get(r.pd_create, "dnnl_primitive_desc_create"), get(r.pd_query_md, "dnnl_primitive_desc_query_md");
    get(r.pd_destroy, "dnnl_primitive_desc_destroy"), get(r.primitive_create, "dnnl_primitive_create");
    get(r.execute, "dnnl_primitive_execute"), get(r.memory_create, "dnnl_memory_create");
    get(r.memory_destroy, "dnnl_memory_destroy"), get(r.effective_isa, "dnnl_get_effective_cpu_isa");
    get(r.omp_set_num_threads, "omp_set_num_threads");
    if (ok && r.engine_create(&r.engine, dnnl_cpu, 0) != dnnl_success) ok = false, r.error = "oneDNN: no CPU engine";
    if (!ok) r.engine = nullptr;
    return r;
  }();
  return a;
}

constexpr dnnl_dim_t kRt = DNNL_RUNTIME_DIM_VAL;
dnnl_memory_desc_t plain(const Api& a, dnnl_dim_t rows, dnnl_dim_t cols, dnnl_data_type_t t, bool transposed,
                         dnnl_dim_t ld) {
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {rows, cols};
  dnnl_dims_t strides = {ld, 1};
  if (transposed) strides[0] = 1, strides[1] = ld;
  MANYADD_INVARIANT(a.md_init(&md, 2, dims, t, strides) == dnnl_success, "cpu_gemm: oneDNN memory descriptor");
  return md;
}
dnnl_data_type_t dtype(Elem e) { return e == Elem::bf16 ? dnnl_bf16 : dnnl_f32; }

// One primitive per (ta, tb, element type, beta), every dimension and stride given at run time: oneDNN
// then takes its jit GEMM, as fast on these shapes as the primitives compiled for fixed ones (measured:
// bench/results/cpu-train/README.md, "The GEMM library"), and a batch's varying row counts cost no new
// compilation. The scratchpad is ours, per thread (safe from several threads at once).
struct Prim {
  dnnl_primitive_t p = nullptr;
  std::size_t scratch = 0;
  const dnnl_memory_desc_t* scratch_md = nullptr;
  dnnl_primitive_desc_t pd = nullptr;
};
const Prim& prim(bool ta, bool tb, Elem e, bool accumulate) {
  static std::array<Prim, 16> cache;
  static std::array<std::once_flag, 16> once;
  const int key = int(ta) | int(tb) << 1 | int(e == Elem::bf16) << 2 | int(accumulate) << 3;
  std::call_once(once[std::size_t(key)], [&] {
    const Api& a = api();
    if (!a.engine) return;
    a.omp_set_num_threads(1);  // the team size the primitive keeps (gemm below)
    Prim& p = cache[std::size_t(key)];
    const auto t = dtype(e);
    const dnnl_memory_desc_t src = plain(a, kRt, kRt, t, ta, kRt), wei = plain(a, kRt, kRt, t, tb, kRt),
                             dst = plain(a, kRt, kRt, dnnl_f32, false, kRt);
    dnnl_matmul_desc_t md;
    if (a.matmul_desc_init(&md, &src, &wei, nullptr, &dst) != dnnl_success) return;
    dnnl_primitive_attr_t attr = nullptr;
    a.attr_create(&attr);
    a.attr_scratchpad(attr, dnnl_scratchpad_mode_user);
    dnnl_post_ops_t po = nullptr;
    if (accumulate) {
      a.post_ops_create(&po);
      a.post_ops_sum(po, 1.f);
      a.attr_post_ops(attr, po);
    }
    if (a.pd_create(&p.pd, &md, attr, a.engine, nullptr) == dnnl_success &&
        a.primitive_create(&p.p, p.pd) == dnnl_success) {  // fails e.g. for bf16 on a CPU without AVX-512
      p.scratch_md = a.pd_query_md(p.pd, dnnl_query_scratchpad_md, 0);
      p.scratch = p.scratch_md ? a.md_size(p.scratch_md) : 0;
    } else {
      p.p = nullptr;
    }
    if (po) a.post_ops_destroy(po);
    a.attr_destroy(attr);
  });
  return cache[std::size_t(key)];
}

std::atomic<bool> counting{false};
std::atomic<std::int64_t> count_ns{0}, count_calls{0};
std::atomic<double> count_flops{0};  // updated with compare-exchange (fetch_add on double is C++20)

// A thread's stream and scratchpad.
struct ThreadState {
  dnnl_stream_t stream = nullptr;
  std::vector<unsigned char> scratch;
  ~ThreadState() {
    if (stream) api().stream_destroy(stream);
  }
};
}  // namespace

const std::string& unavailable() { return api().error; }

void require(const std::string& who) {
  if (!unavailable().empty())
    throw InputError(who + " needs oneDNN (Debian's libdnnl2, which ./x installs): " + unavailable());
}

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
  const Api& a = api();
  MANYADD_INVARIANT(a.engine, "cpu_gemm: " + a.error);
  // The caller's thread alone: oneDNN's OpenMP would otherwise start a team of every core inside each
  // of our worker threads. (Sets this thread's own OpenMP setting; nothing else in the process uses it.)
  // Before the primitive is made: oneDNN's matmul keeps the thread count it saw at its creation and
  // runs every later call on a team of that size, whatever the calling thread's setting is then (a
  // primitive made on a default setting of 2 threads had each of our workers start a second, spinning
  // OpenMP thread: half the CPU samples of a 2-thread grid run were that spin).
  a.omp_set_num_threads(1);
  const Prim& p = prim(ta, tb, e, beta != 0.f);
  MANYADD_INVARIANT(p.p, fmt::format("cpu_gemm: oneDNN has no {} matmul on this CPU", e == Elem::bf16 ? "bf16" : "fp32"));
  thread_local ThreadState ts;
  if (!ts.stream) MANYADD_INVARIANT(a.stream_create(&ts.stream, a.engine, dnnl_stream_default_flags) == dnnl_success, "cpu_gemm: oneDNN stream");
  if (ts.scratch.size() < p.scratch) ts.scratch.resize(p.scratch);
  const auto t = dtype(e);
  const dnnl_memory_desc_t am = plain(a, M, K, t, ta, lda), bm = plain(a, K, N, t, tb, ldb),
                           cm = plain(a, M, N, dnnl_f32, false, ldc);
  dnnl_memory_t mem[4] = {nullptr, nullptr, nullptr, nullptr};
  a.memory_create(&mem[0], &am, a.engine, const_cast<void*>(A));
  a.memory_create(&mem[1], &bm, a.engine, const_cast<void*>(B));
  a.memory_create(&mem[2], &cm, a.engine, C);
  int nargs = 3;
  if (p.scratch_md) a.memory_create(&mem[3], p.scratch_md, a.engine, ts.scratch.data()), nargs = 4;
  const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]},
                                   {DNNL_ARG_SCRATCHPAD, mem[3]}};
  const bool timed = counting.load(std::memory_order_relaxed);
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const dnnl_status_t st = a.execute(p.p, ts.stream, nargs, args);
  if (timed) {
    count_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    count_calls += 1;
    const double f = 2.0 * double(M) * double(N) * double(K);
    for (double old = count_flops.load(); !count_flops.compare_exchange_weak(old, old + f);) {
    }
  }
  for (dnnl_memory_t m : mem)
    if (m) a.memory_destroy(m);
  MANYADD_INVARIANT(st == dnnl_success, "cpu_gemm: oneDNN matmul failed");
}

bool bf16_supported() {
  // Natively only: on AVX-512 without BF16 oneDNN emulates the bf16 products, slower than fp32 ones on
  // the same bf16 values (which the device then uses).
  const Api& a = api();
  if (!a.engine) return false;
  const dnnl_cpu_isa_t isa = a.effective_isa();
  return (isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx) &&
         prim(false, true, Elem::bf16, false).p != nullptr;
}

const char* isa_name() {
  const Api& a = api();
  if (!a.engine) return "unavailable";
  switch (a.effective_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

}  // namespace manyadd::learn::cpu_gemm
