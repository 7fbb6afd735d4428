// The certificate's precision "float32-cuda" (CertOptions::kernel): the tensor-core kernel's rounding
// model (kernel_rounding.hpp) in place of the dense engine's, the host's double FFN + readout.
// It must prove the shapes it is sound for, fail where it must (lambda below the threshold, a
// deliberately widened rounding model), widen monotonically with the unmatched count, and its head
// enclosures must contain what the kernel's CPU twin (TcTwin) computes.
#include <gtest/gtest.h>

#include <cmath>

#include "constructed_case.hpp"
#include "manyadd/certificate.hpp"
#include "manyadd/cuda_engine.hpp"
#include "manyadd/structured.hpp"

namespace {
using namespace manyadd;

const PrecisionMargin& margin_of(const CertResult& r, const std::string& name) {
  for (const auto& p : r.margins)
    if (p.precision == name) return p;
  throw std::runtime_error("no precision " + name);
}

CertOptions with_kernel() {
  CertOptions o;
  o.lambda_min = false;
  o.kernel = true;
  return o;
}

// Proven on small and medium shapes (these margins were 0.90 .. 0.48 when written, N up to 20904),
// and the kernel precision never claims more than real arithmetic: its enclosures contain the real
// ones and it subtracts the FFN's rounding, so its margin is at most the real one.
TEST(CertificateKernel, ProvenOnShapes) {
  for (auto [n, m] : std::vector<std::pair<int, int>>{{1, 1}, {3, 2}, {5, 5}, {10, 10}, {30, 30}, {100, 10}, {100, 100}}) {
    const Shape s = Shape::make(n, m);
    const Dims dm = dims_ours(s);
    const auto M = build_model(dm.P1, dm.P2, default_lambda(s.N()));
    const CertResult r = certify(M, s, 1, 1, with_kernel());
    ASSERT_EQ(r.margins.size(), 4u);
    const auto& k = margin_of(r, "float32-cuda");
    EXPECT_TRUE(r.proven) << "n=" << n << " m=" << m << " float32-cuda margin " << k.min_margin;
    EXPECT_TRUE(k.proven) << "n=" << n << " m=" << m;
    EXPECT_LE(k.min_margin, margin_of(r, "real").min_margin);
    // without the option, the precision is not part of the result
    EXPECT_EQ(certify(M, s, 1, 1, CertOptions{true, false}).margins.size(), 3u);
  }
}

// Below the real threshold the kernel precision fails too; a rounding model 64 times wider than the
// kernel's (every error term scaled) fails where the kernel's own proves, and names its precision.
TEST(CertificateKernel, FailsWhereItMust) {
  const Shape s = Shape::make(10, 10);
  const Dims dm = dims_ours(s);
  const double lmin = certify(build_model(dm.P1, dm.P2, default_lambda(s.N())), s, 1, 1).lambda_min;
  ASSERT_TRUE(std::isfinite(lmin));
  {
    const auto M = build_model(dm.P1, dm.P2, 0.9 * lmin);
    const CertResult r = certify(M, s, 1, 1, with_kernel());
    EXPECT_FALSE(margin_of(r, "float32-cuda").proven);
    EXPECT_FALSE(r.proven);
  }
  const auto M = build_model(dm.P1, dm.P2, default_lambda(s.N()));
  const int D = qkv_plan(M).D;
  CertOptions wide = with_kernel();
  std::array<KernelRounding, 4> kr;
  for (int h = 0; h < 4; ++h) kr[std::size_t(h)] = kernel_rounding(M, h, D, 64);
  wide.kernel_model = kr;
  const CertResult r = certify(M, s, 1, 1, wide);
  EXPECT_TRUE(margin_of(r, "float64").proven);
  EXPECT_TRUE(margin_of(r, "float32").proven);
  EXPECT_FALSE(margin_of(r, "float32-cuda").proven);
  EXPECT_FALSE(r.proven);
  ASSERT_TRUE(r.failure.has_value());
  EXPECT_EQ(r.failure->part, "float32-cuda");
  // the same model unwidened proves (so the failure is the widening's)
  for (int h = 0; h < 4; ++h) kr[std::size_t(h)] = kernel_rounding(M, h, D);
  wide.kernel_model = kr;
  EXPECT_TRUE(certify(M, s, 1, 1, wide).proven);
}

// The enclosure widens as the unmatched count u grows (what lets a class's worst u stand for all
// its positions), and a range [x, x_hi] contains every single x's enclosure.
TEST(CertificateKernel, EnclosureMonotoneInUAndRange) {
  const auto M = build_model(10, 10, 12);
  for (int h = 0; h < 4; ++h)
    for (std::int64_t x : {1, 2, 3, 50, 2000}) {
      const int vmax = h < 2 ? 27 : 0;
      const std::int64_t vsum = h < 2 ? 9 * x : 1;
      ExactInterval prev = head_enclosure(M, h, 3, vsum, x, 0, vmax);
      for (std::int64_t u : {1, 10, 1000, 100000, 2000000, 2000000000}) {
        const ExactInterval e = head_enclosure(M, h, 3, vsum, x, u, vmax);
        EXPECT_LE(e.lo, prev.lo) << "head " << h + 1 << " x " << x << " u " << u;
        EXPECT_GE(e.hi, prev.hi) << "head " << h + 1 << " x " << x << " u " << u;
        prev = e;
      }
      if (h < 2) continue;  // ranges: heads 3-4 (vsum = 1 for every x)
      const ExactInterval range = head_enclosure(M, h, 3, 1, x, 1000, 0, x + 40);
      for (std::int64_t y = x; y <= x + 40; y += 7) {
        const ExactInterval e = head_enclosure(M, h, 3, 1, y, 1000, 0);
        EXPECT_LE(range.lo, e.lo);
        EXPECT_GE(range.hi, e.hi);
      }
    }
}

// The certificate's kernel enclosure, from a query's counts only, contains the twin's replay of the
// kernel (one execution the device may perform) for every row and head of small shapes.
TEST(CertificateKernel, EnclosureContainsTheTwin) {
  std::uint64_t seed = 5;
  std::int64_t checked = 0;
  for (auto [n, m] : std::vector<std::pair<int, int>>{{1, 1}, {2, 3}, {4, 4}, {6, 2}, {3, 9}}) {
    const cases::Case c = cases::make_case(n, m, ++seed);
    cases::for_each_twin_row(c, [&](const QueryMatch& q, const TcRow& tw, std::size_t) {
      for (int h = 0; h < 4; ++h) {
        const HeadMatch& hm = q.h[std::size_t(h)];
        const ExactInterval e = head_enclosure(c.M, h, 3, hm.vsum, hm.x, hm.u, h < 2 ? 27 : 1);
        const double out = double(tw.out[std::size_t(h)]);
        EXPECT_LE(e.lo.convert_to<double>(), out) << "n=" << n << " m=" << m << " row " << q.j << " head " << h + 1;
        EXPECT_GE(e.hi.convert_to<double>(), out) << "n=" << n << " m=" << m << " row " << q.j << " head " << h + 1;
        ++checked;
      }
    });
    // and the program the certificate speaks of (twin attention, double FFN) predicts every next
    // token of the teacher-forced sequence
    const auto R = cuda_forward_cpu_twin(c.M, c.seq, c.shape, c.s1, c.s2, CudaOptions{});
    for (std::size_t i = 0; i + 1 < R.pred.size(); ++i)
      EXPECT_EQ(int(R.pred[i]), int(c.seq[std::size_t(R.first) + i + 1])) << "n=" << n << " m=" << m << " row " << R.first + std::int64_t(i);
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
