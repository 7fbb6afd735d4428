// Every CUDA training kernel (kernels/src/train.cu) against its CPU twin in learn/layers.hpp
// or learn/batch.hpp, on random inputs. Built only with nvcc; each test skips (with the reason)
// without a device. Tolerances: see each test; errors are measured relative to the largest entry of
// the CPU result (max |gpu - cpu| / max |cpu|), the scale at which fp32 rounding acts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "cuda_train_test_util.hpp"
#include "manyadd/learn/batch.hpp"
#include "manyadd/learn/layers.hpp"
#include "manyadd/learn/train.hpp"
#include "manyadd/kernels/device.hpp"
#include "manyadd/kernels/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;
namespace K = manyadd::kernels::train;

namespace {

template <class T>
struct Dev {  // device copy of a host vector
  kernels::DeviceBuffer<T> buf;
  T* p = nullptr;
  std::size_t n = 0;
  explicit Dev(const std::vector<T>& h) : buf(h.size()), p(buf.get()), n(h.size()) { buf.upload(h.data(), n); }
  explicit Dev(std::size_t count) : buf(count), p(buf.get()), n(count) { buf.zero(); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    buf.download(h.data(), n);
    return h;
  }
};
std::vector<float> randn(std::size_t n, std::uint32_t seed, float sd = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
double rel_err(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  double m = 0, e = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    m = std::max(m, double(std::abs(cpu[i])));
    e = std::max(e, double(std::abs(gpu[i] - cpu[i])));
  }
  return m > 0 ? e / m : e;
}
}  // namespace

// Same additions in the same order as the CPU: bitwise equal (tolerance 0), forward and backward.
TEST(CudaKernelsGpu, EmbeddingIsBitwiseTheCpu) {
  REQUIRE_DEVICE();
  const int R = 900, C = 96, V = 14, rows0 = 21, rows1 = 11;
  std::mt19937 g(1);
  std::vector<std::uint8_t> tok(R);
  std::vector<std::int32_t> p0(R), p1(R);
  for (int t = 0; t < R; ++t) tok[t] = std::uint8_t(g() % V), p0[t] = int(g() % rows0), p1[t] = int(g() % rows1);
  const auto wte = randn(std::size_t(V) * C, 2), wpe0 = randn(std::size_t(rows0) * C, 3),
             wpe1 = randn(std::size_t(rows1) * C, 4), dout = randn(std::size_t(R) * C, 5);
  std::vector<float> out(std::size_t(R) * C), dwte(wte.size(), 0.f), dw0(wpe0.size(), 0.f), dw1(wpe1.size(), 0.f);
  const std::int32_t* pos[2] = {p0.data(), p1.data()};
  const float* wpe[2] = {wpe0.data(), wpe1.data()};
  float* dwpe[2] = {dw0.data(), dw1.data()};
  embedding_forward(out.data(), tok.data(), pos, 2, wte.data(), wpe, R, C);
  embedding_backward(dwte.data(), dwpe, dout.data(), tok.data(), pos, 2, R, C);
  Dev<std::uint8_t> dtok(tok);
  Dev<std::int32_t> dp0(p0), dp1(p1);
  Dev<float> dwte_(wte), dwpe0_(wpe0), dwpe1_(wpe1), ddout(dout), dout_(out.size()), gte(wte.size()), g0(wpe0.size()),
      g1(wpe1.size());
  K::embedding_forward(dout_.p, dtok.p, dp0.p, dp1.p, 2, dwte_.p, dwpe0_.p, dwpe1_.p, R, C);
  K::embedding_backward(gte.p, g0.p, g1.p, ddout.p, dtok.p, dp0.p, dp1.p, 2, R, C, V, rows0, rows1);
  EXPECT_EQ(dout_.get(), out);
  EXPECT_EQ(gte.get(), dwte);
  EXPECT_EQ(g0.get(), dw0);
  EXPECT_EQ(g1.get(), dw1);
}

// RMSNorm: the GPU sums x^2 and g w x in a warp-strided tree, the CPU sequentially; each sum errs by
// at most ~C eps relative (C = 256: 1.5e-5, usually far less), and the outputs inherit it: 3e-5
// relative to the largest entry. dw sums over R = 2000 rows in 256-row chunks vs sequentially:
// ~R eps worst case = 1.2e-4; observed errors of such sums are ~sqrt(R) eps, so 1e-4.
TEST(CudaKernelsGpu, RmsNormMatchesCpu) {
  REQUIRE_DEVICE();
  const int R = 2000, C = 256;
  const auto x = randn(std::size_t(R) * C, 6), w = randn(C, 7), g = randn(std::size_t(R) * C, 8);
  const auto dx0 = randn(std::size_t(R) * C, 9);  // backward accumulates into an existing dinp
  std::vector<float> out(x.size()), r(R), dx = dx0, dw(C, 0.f);
  rmsnorm_forward(out.data(), r.data(), x.data(), w.data(), R, C, 1e-6f);
  rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), r.data(), R, C);
  Dev<float> dX(x), dW(w), dG(g), dOut(out.size()), dR(R), dDx(dx0), dDw(C), scr(K::rmsnorm_scratch_floats(R, C));
  K::rmsnorm_forward(dOut.p, dR.p, dX.p, dW.p, R, C, 1e-6f);
  K::rmsnorm_backward(dDx.p, dDw.p, scr.p, dG.p, dX.p, dW.p, dR.p, R, C);
  EXPECT_LT(rel_err(dOut.get(), out), 3e-5);
  EXPECT_LT(rel_err(dR.get(), r), 3e-5);
  EXPECT_LT(rel_err(dDx.get(), dx), 3e-5);
  EXPECT_LT(rel_err(dDw.get(), dw), 1e-4);
}

// GEGLU and the residual: element-wise; the only difference is CUDA tanhf (<= 2 ulp) vs glibc's,
// i.e. a few 1e-7 relative: 2e-6 relative to the largest entry.
TEST(CudaKernelsGpu, GegluAndResidualMatchCpu) {
  REQUIRE_DEVICE();
  const int R = 700, F = 192;
  const auto h = randn(std::size_t(R) * 2 * F, 10, 2.f), dg = randn(std::size_t(R) * F, 11);
  std::vector<float> out(std::size_t(R) * F), dh(h.size(), 0.f);
  geglu_forward(out.data(), h.data(), R, F);
  geglu_backward(dh.data(), dg.data(), h.data(), R, F);
  Dev<float> dH(h), dG(dg), dOut(out.size()), dDh(h.size());
  K::geglu_forward(dOut.p, dH.p, R, F);
  K::geglu_backward(dDh.p, dG.p, dH.p, R, F);
  EXPECT_LT(rel_err(dOut.get(), out), 2e-6);
  EXPECT_LT(rel_err(dDh.get(), dh), 2e-6);
  std::vector<float> sum(out.size());
  residual_forward(sum.data(), out.data(), dg.data(), std::int64_t(out.size()));
  Dev<float> dSum(out.size());
  K::residual_forward(dSum.p, dOut.p, dG.p, std::int64_t(out.size()));
  EXPECT_LT(rel_err(dSum.get(), sum), 2e-6);
}

// Attention over B padded sequences of T rows: the GPU uses an online softmax (running max, rescaled
// sums) and warp-tree dot products, the CPU a two-pass softmax and Eigen products; both sum <= T = 200
// terms per row, so the outputs differ by ~T eps ~ 1e-5 relative in the worst case; 1e-4 relative to
// the largest entry. The backward subtracts nearly equal terms (dP - D) and sums T of them twice:
// 3e-4. Every head width class (NPL 1..4: d_head 8, 64, 96, 128) is covered.
TEST(CudaKernelsGpu, AttentionForwardBackwardMatchCpu) {
  REQUIRE_DEVICE();
  for (int HS : {8, 64, 96, 128}) {
    SCOPED_TRACE("d_head " + std::to_string(HS));
    const int B = 3, T = 200, NH = 2, D = NH * HS;
    const std::size_t n = std::size_t(B) * T * D;
    const auto q = randn(n, 12, 0.3f), k = randn(n, 13, 0.3f), v = randn(n, 14), dout = randn(n, 15);
    std::vector<float> out(n), att(std::size_t(NH) * T * T), dq(n, 0.f), dk(n, 0.f), dv(n, 0.f), scratch(std::size_t(T) * T);
    for (int b = 0; b < B; ++b) {
      const std::size_t o = std::size_t(b) * T * D;
      attention_forward(out.data() + o, att.data(), q.data() + o, k.data() + o, v.data() + o, T, T, NH, HS);
      attention_backward(dq.data() + o, dk.data() + o, dv.data() + o, scratch.data(), dout.data() + o, att.data(),
                         q.data() + o, k.data() + o, v.data() + o, T, NH, HS);
    }
    Dev<float> dQ(q), dK(k), dV(v), dDo(dout), dOut(n), lse(std::size_t(B) * NH * T), gq(n), gk(n), gv(n),
        scr(std::size_t(B) * NH * T);
    K::attention_forward(dOut.p, lse.p, dQ.p, dK.p, dV.p, B, T, NH, HS);
    K::attention_backward(gq.p, gk.p, gv.p, scr.p, dDo.p, dOut.p, lse.p, dQ.p, dK.p, dV.p, B, T, NH, HS);
    EXPECT_LT(rel_err(dOut.get(), out), 1e-4);
    EXPECT_LT(rel_err(gq.get(), dq), 3e-4);
    EXPECT_LT(rel_err(gk.get(), dk), 3e-4);
    EXPECT_LT(rel_err(gv.get(), dv), 3e-4);
  }
}

// Cross-entropy: the same operations per row, expf/logf within 2 ulp of glibc's: 1e-6 relative.
TEST(CudaKernelsGpu, CrossEntropyMatchesCpu) {
  REQUIRE_DEVICE();
  const int R = 1000, V = 14;
  const auto z = randn(std::size_t(R) * V, 16, 3.f);
  std::vector<std::int32_t> tg(R);
  for (int t = 0; t < R; ++t) tg[t] = t % 3 == 0 ? -1 : t % V;
  std::vector<float> losses(R), probs(z.size()), dz(z.size());
  crossentropy_forward(losses.data(), probs.data(), z.data(), tg.data(), R, V);
  crossentropy_backward(dz.data(), probs.data(), tg.data(), 0.01f, R, V);
  Dev<float> dZ(z), dL(R), dP(z.size()), dDz(z.size());
  Dev<std::int32_t> dT(tg);
  K::crossentropy_forward(dL.p, dP.p, dZ.p, dT.p, R, V);
  K::crossentropy_backward(dDz.p, dP.p, dT.p, 0.01f, R, V);
  EXPECT_LT(rel_err(dL.get(), losses), 1e-6);
  EXPECT_LT(rel_err(dP.get(), probs), 1e-6);
  EXPECT_LT(rel_err(dDz.get(), dz), 1e-6);
}

// Reductions in double over fp32 inputs: exact products, n = 1e6 double additions in another order:
// relative error <= n 2^-53 ~ 1e-10.
TEST(CudaKernelsGpu, ReductionsMatchCpu) {
  REQUIRE_DEVICE();
  const auto x = randn(1'000'003, 17);
  double s = 0, ss = 0;
  for (float v : x) s += double(v), ss += double(v) * double(v);
  Dev<float> dX(x);
  Dev<double> scr(K::reduce_scratch_doubles());
  EXPECT_NEAR(K::reduce_sum(dX.p, std::int64_t(x.size()), false, scr.p), s, 1e-10 * ss);
  EXPECT_NEAR(K::reduce_sum(dX.p, std::int64_t(x.size()), true, scr.p), ss, 1e-10 * ss);
}

// AdamW: the same correctly rounded float operations in the same order (no contraction): bitwise.
TEST(CudaKernelsGpu, AdamWIsBitwiseTheCpu) {
  REQUIRE_DEVICE();
  const std::size_t n = 100'000;
  auto p = randn(n, 18), m = randn(n, 19, 1e-3f), v = randn(n, 20, 1e-3f), g = randn(n, 21, 1e-2f);
  for (auto& x : v) x = x * x;
  TrainConfig tc;
  tc.weight_decay = 0.1;
  const AdamScalars s = adam_scalars(tc, 7, 3.0);  // clipping active (3 > 1)
  Dev<float> dp(p), dm(m), dv(v), dg(g);
  adamw_update(p.data(), m.data(), v.data(), g.data(), std::int64_t(n), s);
  K::adamw_update(dp.p, dm.p, dv.p, dg.p, std::int64_t(n), s.clip, s.b1, s.b2, s.eps, s.step_size, s.inv_sqrt_bc2, s.wd);
  EXPECT_EQ(dp.get(), p);
  EXPECT_EQ(dm.get(), m);
  EXPECT_EQ(dv.get(), v);
}
