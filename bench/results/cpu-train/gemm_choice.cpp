// The GEMM library of the fast CPU device, chosen by measurement (README.md here, "The GEMM library"):
// oneDNN's matmul (runtime dimensions, as learn/src/devices/cpu_gemm.cpp calls it), libxsmm's JIT small-matrix
// kernels and Eigen, one thread, on the products of a 256-row chunk of the fig12-d64 model (d_model 64,
// 4 heads of 16, d_ff 256): forward x W^T (q|k|v, the FFN's input and output), backward dy W, and the
// weight gradient dy^T x (a sum over the chunk's rows). Not part of the build; compiled by hand, three ways:
//   g++ -O3 -std=c++17 -I/usr/include/eigen3 gemm_choice.cpp -o gemm_choice -ldnnl -lxsmm -lxsmmnoblas -lgomp -lpthread -ldl
//   g++ -O3 -std=c++17 -DEIGEN_ONLY -I/usr/include/eigen3 gemm_choice.cpp -o gemm_choice_eigen
//   g++ -O3 -std=c++17 -DEIGEN_ONLY -march=native -I/usr/include/eigen3 gemm_choice.cpp -o gemm_choice_native
// (libxsmm from Debian's libxsmm-dev, installed for this measurement only.) The second is Eigen as the
// project compiles it (-march=x86-64: SSE2), the third Eigen with AVX-512 code; Eigen is measured in
// processes of its own (in the first build's process, after libxsmm's initialization, its products ran at
// 15 GFLOP/s instead of 37: measured, not explained). Prints GFLOP/s per shape.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <Eigen/Core>
#ifndef EIGEN_ONLY
#include <libxsmm.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

using Clock = std::chrono::steady_clock;
template <class F>
double gflops(F f, double flops) {
  f();
  const auto t0 = Clock::now();
  int it = 0;
  double s = 0;
  do {
    f();
    ++it;
    s = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (s < 0.5);
  return flops * it / s * 1e-9;
}
using MatR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

int main() {
  // kind F: C (M, N) = A (M, K) W^T, W (N, K); B: C (M, K) = A (M, N) W, W (N, K); W: C (N, K) += A^T X, A (M, N), X (M, K)
  struct Shape {
    char kind;
    int M, K, N;
    const char* what;
  };
  const Shape shapes[] = {{'F', 256, 64, 192, "q|k|v = n1 [Wq|Wk|Wv]^T"}, {'F', 256, 64, 512, "h = n3 Wi^T"},
                          {'F', 256, 256, 64, "fo = g Wo'^T"},           {'B', 256, 64, 512, "dn3 = dh Wi"},
                          {'B', 256, 64, 192, "dn1 = dqkv Wqkv"},        {'W', 256, 64, 512, "dWi += dh^T n3"},
                          {'W', 256, 256, 64, "dWo' += dres^T g"},       {'F', 1024, 1024, 1024, "1024^3"}};
#ifndef EIGEN_ONLY
  omp_set_num_threads(1);
  libxsmm_init();
  std::printf("libxsmm target %s\n", libxsmm_get_target_arch());
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  std::printf("%-22s %5s %5s %5s | %8s %8s | %8s %8s | %8s\n", "product", "M", "K", "N", "oneDNN32", "oneDNN16",
              "xsmm32", "xsmm16", "Eigen");
#else
  std::printf("%-22s %5s %5s %5s | %8s\n", "product", "M", "K", "N", "Eigen");
#endif
  for (const Shape& sh : shapes) {
    const int M = sh.M, K = sh.K, N = sh.N;
    // the product as P (rows) x Q (cols) = sum over R
    int P = M, Q = N, R = K;
    if (sh.kind == 'B') Q = K, R = N;
    if (sh.kind == 'W') P = N, Q = K, R = M;
    std::vector<float> A(std::size_t(P) * R, 0.5f), B(std::size_t(R) * Q, 0.25f), C(std::size_t(P) * Q, 0.f);
    const double fl = 2.0 * P * Q * R;
    Eigen::Map<MatR> Cm(C.data(), P, Q);
    double eigen = 0;
    if (sh.kind == 'F') {
      Eigen::Map<MatR> Am(A.data(), M, K), Wm(B.data(), N, K);
      eigen = gflops([&] { Cm.noalias() = Am * Wm.transpose(); }, fl);
    } else if (sh.kind == 'B') {
      Eigen::Map<MatR> Am(A.data(), M, N), Wm(B.data(), N, K);
      eigen = gflops([&] { Cm.noalias() = Am * Wm; }, fl);
    } else {
      Eigen::Map<MatR> Am(A.data(), M, N), Xm(B.data(), M, K);
      eigen = gflops([&] { Cm.noalias() += Am.transpose() * Xm; }, fl);
    }
#ifndef EIGEN_ONLY
    using dnnl::memory;
    const auto rt = DNNL_RUNTIME_DIM_VAL;
    double dn[2];
    for (int bf = 0; bf < 2; ++bf) {
      const auto t = bf ? memory::data_type::bf16 : memory::data_type::f32;
      const bool ta = sh.kind == 'W', tb = sh.kind == 'F';
      auto md = [&](memory::dim r, memory::dim c, memory::data_type dt, bool tr, memory::dim ld) {
        return memory::desc({r, c}, dt, tr ? memory::dims{1, ld} : memory::dims{ld, 1});
      };
      dnnl::primitive_attr attr;
      if (sh.kind == 'W') {
        dnnl::post_ops po;
        po.append_sum(1.f);
        attr.set_post_ops(po);
      }
      dnnl::matmul mm(dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(md(rt, rt, t, ta, rt), md(rt, rt, t, tb, rt), md(rt, rt, memory::data_type::f32, false, rt)),
          attr, eng));
      const memory::dim lda = ta ? P : R, ldb = tb ? R : Q;
      memory am(md(P, R, t, ta, lda), eng, A.data()), bm(md(R, Q, t, tb, ldb), eng, B.data()),
          cm(md(P, Q, memory::data_type::f32, false, Q), eng, C.data());
      dn[bf] = gflops([&] { mm.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}}); }, fl);
    }
    // libxsmm: column-major C (Q, P) = B' (Q, R) A' (R, P), the same sizes (transposes folded into the
    // layouts, as a device would keep its weights); bf16 with A in its VNNI layout (the contents do not
    // matter for the timing).
    const float alpha = 1, beta = 0;
    const int fl32 = 0, vnni = LIBXSMM_GEMM_FLAG_VNNI_A;
    auto f32 = libxsmm_smmdispatch(Q, P, R, nullptr, nullptr, nullptr, &alpha, &beta, &fl32, nullptr);
    auto f16 = libxsmm_bsmmdispatch(Q, P, R, nullptr, nullptr, nullptr, &alpha, &beta, &vnni, nullptr);
    std::vector<libxsmm_bfloat16> A16(A.size(), 0x3f00), B16(B.size(), 0x3e80);
    const double x32 = f32 ? gflops([&] { f32(B.data(), A.data(), C.data()); }, fl) : 0;
    const double x16 = f16 ? gflops([&] { f16(B16.data(), A16.data(), C.data()); }, fl) : 0;
    std::printf("%-22s %5d %5d %5d | %8.1f %8.1f | %8.1f %8.1f | %8.1f\n", sh.what, M, K, N, dn[0], dn[1], x32, x16, eigen);
#else
    std::printf("%-22s %5d %5d %5d | %8.1f\n", sh.what, M, K, N, eigen);
#endif
  }
}
