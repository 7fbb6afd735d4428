// Central finite differences in double for the gradient checks of learn/ (test_learn_grad) and of the
// grid universal transformer (test_grid_grad).
//
// Tolerance: with step h = 1e-5 in double, the central difference has truncation error ~h^2 |f'''|
// (~1e-10 for O(1) functions) and rounding error ~1e-16 |f| / h (~1e-10); the checks require
// |analytic - numeric| <= 1e-6 * max(1, |analytic|, |numeric|), four orders above both errors and far
// below any real bug (a wrong term changes a gradient by O(its size)).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace manyadd::testing {

constexpr double kH = 1e-5;
constexpr double kTol = 1e-6;

inline std::vector<double> randn(std::mt19937_64& g, std::size_t n, double sd = 1.0) {
  std::normal_distribution<double> d(0.0, sd);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Compares analytic gradient `an` of f at x with central differences over every coordinate of x.
// Returns the worst scaled error.
inline double check(std::vector<double>& x, const std::vector<double>& an, const std::function<double()>& f) {
  EXPECT_EQ(x.size(), an.size());
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + kH;
    const double fp = f();
    x[i] = x0 - kH;
    const double fm = f();
    x[i] = x0;
    const double num = (fp - fm) / (2 * kH);
    const double err = std::abs(num - an[i]) / std::max({1.0, std::abs(num), std::abs(an[i])});
    worst = std::max(worst, err);
  }
  return worst;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace manyadd::testing
