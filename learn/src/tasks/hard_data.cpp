// Hard addition problems (hard_data.hpp).
#include "manyadd/learn/tasks/hard_data.hpp"

#include <algorithm>
#include <string>

namespace manyadd::learn {
namespace {

// Little-endian digits of a decimal string.
std::vector<int> digits_le(const std::string& s) {
  std::vector<int> d(s.size());
  for (std::size_t k = 0; k < s.size(); ++k) d[k] = s[s.size() - 1 - k] - '0';
  return d;
}
std::string from_le(const std::vector<int>& d) {
  std::string s(d.size(), '0');
  for (std::size_t k = 0; k < d.size(); ++k) s[d.size() - 1 - k] = char('0' + d[k]);
  return s;
}
// a += b (little-endian digit vectors)
void add_into(std::vector<int>& a, const std::vector<int>& b) {
  if (a.size() < b.size()) a.resize(b.size(), 0);
  int carry = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const int s = a[k] + (k < b.size() ? b[k] : 0) + carry;
    a[k] = s % 10, carry = s / 10;
  }
  if (carry) a.push_back(carry);
}

}  // namespace

Problem sample_hard_addition(Rng& rng, int n, int m, HardKind* kind, int* step) {
  const int ops = int(rng.uniform(2, std::uint64_t(m))), L = int(rng.uniform(1, std::uint64_t(n)));
  Problem p;
  const bool cascade = rng.uniform(0, 2) < 2;
  if (kind) *kind = cascade ? HardKind::cascade : HardKind::near_max;
  if (step) *step = -1;
  if (!cascade) {
    const bool all_nines = rng.uniform(0, 3) == 0;
    for (int i = 0; i < ops; ++i) {
      std::string s(std::size_t(L), '9');
      if (!all_nines)
        for (auto& ch : s) ch = rng.uniform(0, 1) ? '9' : char('0' + rng.uniform(5, 8));
      p.operands.push_back(s);
    }
    return p;
  }
  for (int i = 0; i < ops; ++i) p.operands.push_back(random_operand(rng, L));
  const int t = int(rng.uniform(1, std::uint64_t(ops - 1)));
  if (step) *step = t;
  std::vector<int> P;  // the partial sum of operands 0 .. t-1
  for (int i = 0; i < t; ++i) add_into(P, digits_le(p.operands[std::size_t(i)]));
  P.resize(std::max(P.size(), std::size_t(L)), 0);
  std::vector<int> d(static_cast<std::size_t>(L), 0);
  // lowest column: a sum of 10 or more (P's digit 0 cannot: the digit 9, a column summing to 9 without carry)
  d[0] = P[0] == 0 ? 9 : int(rng.uniform(std::uint64_t(10 - P[0]), 9));
  for (int c = 1; c < L; ++c) d[std::size_t(c)] = 9 - P[std::size_t(c)];
  if (L > 1 && d[std::size_t(L - 1)] == 0) d[std::size_t(L - 1)] = int(rng.uniform(1, 9));  // no leading zero
  p.operands[std::size_t(t)] = from_le(d);
  return p;
}

std::int64_t mix_hard_addition(std::vector<Problem>& data, double fraction, int n, int m, std::uint64_t seed) {
  if (!(fraction > 0)) return 0;
  Rng rng(seed);
  std::int64_t replaced = 0;
  // a draw in [0, 2^53) below fraction 2^53: the same test on every platform
  const std::uint64_t bar = std::uint64_t(fraction * 9007199254740992.0);
  for (Problem& p : data)
    if (rng.uniform(0, 9007199254740991ULL) < bar) p = sample_hard_addition(rng, n, m), ++replaced;
  return replaced;
}

int longest_carry_run(const Problem& p) {
  std::vector<int> P = digits_le(p.operands.front());
  int best = 0;
  for (std::size_t i = 1; i < p.operands.size(); ++i) {
    const std::vector<int> b = digits_le(p.operands[i]);
    int carry = 0, run = 0;
    for (std::size_t k = 0; k < std::max(P.size(), b.size()); ++k) {
      const int x = (k < P.size() ? P[k] : 0), y = (k < b.size() ? b[k] : 0);
      run = carry && x + y == 9 ? run + 1 : 0;
      best = std::max(best, run);
      carry = (x + y + carry) / 10;
    }
    add_into(P, b);
  }
  return best;
}

}  // namespace manyadd::learn
