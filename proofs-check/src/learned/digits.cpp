// learned/digits.hpp: the scratchpad's digits as a constraint problem.
#include "manyadd/learned/digits.hpp"

#include <fmt/format.h>

#include "manyadd/core/error.hpp"

namespace manyadd::learned {

DigitVars::DigitVars(const Shape& shape) : shape_(shape), n_(shape.n), m_(shape.m), l_(shape.l) {
  vars_ = m_ * l_ + (m_ + 1) * l_ + m_ * (l_ + 1);
  const std::int64_t N = shape.N(), eq = shape.eq_index();
  var_at_.assign(std::size_t(N), -1);
  sym_at_.assign(std::size_t(N), kDollar);
  pos_of_.assign(std::size_t(vars_), -1);
  // $ A_1 + A_2 ... + A_m = : A_i's digit of significance t at (i - 1)(l + 1) + (l + 1 - t)
  for (int i = 1; i <= m_; ++i) {
    for (int t = 1; t <= l_; ++t) var_at_[std::size_t((i - 1) * (l_ + 1) + (l_ + 1 - t))] = A(i, t);
    sym_at_[std::size_t(i * (l_ + 1))] = i < m_ ? kPlus : kEq;
  }
  // B_0 > B_1 > ... > B_m : B_j's digit t at eq + j (l + 1) + t, the '>' before B_j (j >= 1) at eq + j (l + 1)
  for (int j = 0; j <= m_; ++j) {
    for (int t = 1; t <= l_; ++t) var_at_[std::size_t(eq + std::int64_t(j) * (l_ + 1) + t)] = B(j, t);
    if (j >= 1) sym_at_[std::size_t(eq + std::int64_t(j) * (l_ + 1))] = kArrow;
  }
  for (std::int64_t p = 0; p < N; ++p)
    if (var_at_[std::size_t(p)] >= 0) pos_of_[std::size_t(var_at_[std::size_t(p)])] = p;
}

std::string DigitVars::name(int v) const {
  if (v < m_ * l_) return fmt::format("A_{}[{}]", v / l_ + 1, v % l_ + 1);
  if (v < m_ * l_ + (m_ + 1) * l_) {
    const int w = v - m_ * l_;
    return fmt::format("B_{}[{}]", w / l_, w % l_ + 1);
  }
  const int w = v - m_ * l_ - (m_ + 1) * l_;
  return fmt::format("c_{}[{}]", w / (l_ + 1) + 1, w % (l_ + 1) + 1);
}

Domains DigitVars::root() const {
  Domains d(std::size_t(vars_), 0x3FF);
  for (int i = 1; i <= m_; ++i)
    for (int t = n_ + 1; t <= l_; ++t) d[std::size_t(A(i, t))] = 1;
  for (int t = 1; t <= l_; ++t) d[std::size_t(B(0, t))] = 1;
  for (int j = 1; j <= m_; ++j)
    for (int t = 1; t <= l_ + 1; ++t) d[std::size_t(carry(j, t))] = (t == 1 || t == l_ + 1) ? 1 : 3;
  if (!propagate(d)) throw InvariantError("the root domains of a shape are inconsistent");
  return d;
}

// One column: b + a + c = s + 10 c', keep the values with a support.
bool DigitVars::revise(Domains& d, int j, int t, bool& changed) const {
  const int vb = B(j - 1, t), va = A(j, t), vc = carry(j, t), vs = B(j, t), vo = carry(j, t + 1);
  const std::uint16_t Db = d[std::size_t(vb)], Da = d[std::size_t(va)], Dc = d[std::size_t(vc)],
                      Ds = d[std::size_t(vs)], Do = d[std::size_t(vo)];
  std::uint16_t nb = 0, na = 0, nc = 0, ns = 0, no = 0;
  for (int b = 0; b < 10; ++b) {
    if (!(Db >> b & 1)) continue;
    for (int a = 0; a < 10; ++a) {
      if (!(Da >> a & 1)) continue;
      for (int c = 0; c < 2; ++c) {
        if (!(Dc >> c & 1)) continue;
        const int sum = a + b + c, s = sum % 10, o = sum / 10;
        if (!(Ds >> s & 1) || !(Do >> o & 1)) continue;
        nb |= std::uint16_t(1u << b), na |= std::uint16_t(1u << a), nc |= std::uint16_t(1u << c);
        ns |= std::uint16_t(1u << s), no |= std::uint16_t(1u << o);
      }
    }
  }
  if (nb != Db || na != Da || nc != Dc || ns != Ds || no != Do) changed = true;
  d[std::size_t(vb)] = nb, d[std::size_t(va)] = na, d[std::size_t(vc)] = nc, d[std::size_t(vs)] = ns,
  d[std::size_t(vo)] = no;
  return nb != 0;
}

bool DigitVars::propagate(Domains& d) const {
  for (bool changed = true; changed;) {
    changed = false;
    for (int j = 1; j <= m_; ++j)
      for (int t = 1; t <= l_; ++t)
        if (!revise(d, j, t, changed)) return false;
  }
  return true;
}

Problem DigitVars::problem_of(const Domains& d) const {
  Problem p;
  for (int i = 1; i <= m_; ++i) {
    std::string s;
    for (int t = n_; t >= 1; --t) {
      const std::uint16_t v = d[std::size_t(A(i, t))];
      if (popcount16(v) != 1) throw InvariantError(fmt::format("problem_of: {} is not a single value", name(A(i, t))));
      s.push_back(char('0' + lowest_bit(v)));
    }
    p.operands.push_back(s);
  }
  return p;
}

bool DigitVars::narrow_to_one_input(Domains& d) const {
  for (int i = 1; i <= m_; ++i)
    for (int t = 1; t <= n_; ++t) {
      const std::uint16_t v = d[std::size_t(A(i, t))];
      if (popcount16(v) == 1) continue;
      bool fixed = false;
      for (int x = 0; x < 10 && !fixed; ++x) {
        if (!(v >> x & 1)) continue;
        Domains c = d;
        c[std::size_t(A(i, t))] = std::uint16_t(1u << x);
        if (propagate(c)) d = std::move(c), fixed = true;
      }
      if (!fixed) return false;
    }
  return true;
}

Domains DigitVars::of_problem(const Problem& p) const {
  if (int(p.operands.size()) != m_) throw InputError(fmt::format("{} operands, the shape has {}", p.operands.size(), m_));
  Domains d = root();
  for (int i = 1; i <= m_; ++i) {
    const std::string& s = p.operands[std::size_t(i - 1)];
    if (int(s.size()) > n_) throw InputError(fmt::format("operand '{}' has more than {} digits", s, n_));
    for (int t = 1; t <= n_; ++t) {
      const int k = int(s.size()) - t;
      const int digit = k >= 0 ? s[std::size_t(k)] - '0' : 0;
      if (digit < 0 || digit > 9) throw InputError(fmt::format("operand '{}' is not a decimal number", s));
      d[std::size_t(A(i, t))] = std::uint16_t(1u << digit);
    }
  }
  if (!propagate(d)) throw InvariantError("an input's digits are inconsistent");
  return d;
}

}  // namespace manyadd::learned
