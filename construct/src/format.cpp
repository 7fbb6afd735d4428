// Task format: see format.hpp.
#include "manyadd/format.hpp"

#include <algorithm>
#include <fmt/format.h>

namespace manyadd {

namespace {
const char kChars[kVocabTasks + 1] = "0123456789+=>$*";

int digit_count(std::int64_t v) {
  int d = 1;
  while (v >= 10) {
    v /= 10;
    ++d;
  }
  return d;
}

__extension__ typedef __int128 i128;  // exact width_minimal for n < digits(m)

std::string strip_zeros(const std::string& s) {
  auto i = s.find_first_not_of('0');
  return i == std::string::npos ? std::string("0") : s.substr(i);
}

// Shapes are bounded so that every index and position ID fits comfortably in 32/64-bit integers;
// engines refuse far earlier on memory.
constexpr std::int64_t kMaxDigits = 100'000'000;
constexpr std::int64_t kMaxOperands = 100'000'000;
}  // namespace

char token_char(int tok) {
  if (tok < 0 || tok >= kVocabTasks) throw InputError(fmt::format("token id {} outside [0, {})", tok, kVocabTasks));
  return kChars[tok];
}

int token_from_char(char c) {
  for (int t = 0; t < kVocabTasks; ++t)
    if (kChars[t] == c) return t;
  throw InputError(fmt::format("character '{}' is not in the vocabulary 0-9 + = > $ *", c));
}

std::string vocabulary_string(int vocab) {
  if (vocab != kVocab && vocab != kVocabTasks)
    throw InputError(fmt::format("a vocabulary has {} or {} tokens (got {})", kVocab, kVocabTasks, vocab));
  return std::string(kChars, std::size_t(vocab));
}

std::string tokens_to_string(const std::vector<std::uint8_t>& toks) {
  std::string s(toks.size(), '?');
  for (std::size_t i = 0; i < toks.size(); ++i) s[i] = token_char(toks[i]);
  return s;
}

std::vector<std::uint8_t> tokens_from_string(const std::string& s) {
  std::vector<std::uint8_t> t(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) t[i] = std::uint8_t(token_from_char(s[i]));
  return t;
}

Padding parse_padding(const std::string& s) {
  if (s == "theorem") return Padding::theorem;
  if (s == "minimal") return Padding::minimal;
  throw InputError(fmt::format("padding rule '{}' unknown (theorem|minimal)", s));
}

const char* padding_name(Padding p) { return p == Padding::theorem ? "theorem" : "minimal"; }

int width_theorem(std::int64_t n, std::int64_t m) { return int(n + 1 + (digit_count(m) - 1)); }

int width_minimal(std::int64_t n, std::int64_t m) {
  // digits(m (10^n - 1)) with d = digits(m): the product lies in [10^(n+d-2), 10^(n+d)), and it
  // reaches 10^(n+d-1) iff (m - 10^(d-1)) 10^n >= m. For n >= d that holds unless m is a power of
  // ten; below, all numbers fit in 128 bits.
  const int d = digit_count(m);
  i128 p = 1;
  for (int i = 1; i < d; ++i) p *= 10;
  const i128 lhs_factor = i128(m) - p;
  bool reaches;
  if (lhs_factor == 0) {
    reaches = false;
  } else if (n >= d) {
    reaches = true;
  } else {
    i128 t = 1;
    for (std::int64_t i = 0; i < n; ++i) t *= 10;
    reaches = lhs_factor * t >= i128(m);
  }
  return int(n + d - 1 + (reaches ? 1 : 0));
}

int width(Padding p, std::int64_t n, std::int64_t m) {
  return p == Padding::theorem ? width_theorem(n, m) : width_minimal(n, m);
}

Shape Shape::make(std::int64_t n, std::int64_t m, Padding p) {
  if (n < 1) throw InputError(fmt::format("--n must be >= 1 (got {})", n));
  if (m < 1) throw InputError(fmt::format("--m must be >= 1 (got {})", m));
  if (n > kMaxDigits) throw InputError(fmt::format("--n {} is above the supported {}", n, kMaxDigits));
  if (m > kMaxOperands) throw InputError(fmt::format("--m {} is above the supported {}", m, kMaxOperands));
  Shape s;
  s.n = int(n);
  s.m = int(m);
  s.l = width(p, n, m);
  s.padding = p;
  return s;
}

std::string Problem::to_string() const {
  std::string s;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    if (i) s += '+';
    s += operands[i];
  }
  return s;
}

int Problem::max_digits() const {
  std::size_t d = 0;
  for (auto& o : operands) d = std::max(d, o.size());
  return int(d);
}

Problem parse_problem(const std::string& s) {
  Problem p;
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) throw InputError(fmt::format("problem '{}': empty operand (expected e.g. 57+48+96)", s));
    p.operands.push_back(strip_zeros(cur));
    cur.clear();
  };
  for (char c : s) {
    if (c == '+') {
      flush();
    } else if (c >= '0' && c <= '9') {
      cur += c;
    } else if (c == ' ') {
      continue;
    } else {
      throw InputError(fmt::format("problem '{}': unexpected character '{}' (digits and '+' only)", s, c));
    }
  }
  flush();
  return p;
}

boost::multiprecision::cpp_int reference_sum(const Problem& p) {
  boost::multiprecision::cpp_int sum = 0;
  for (auto& o : p.operands) {
    // Boost reads a leading 0 as an octal prefix ("010" = 8, "09" refused): the decimal digits after the
    // leading zeros, "0" when there are none.
    const std::size_t first = std::min(o.find_first_not_of('0'), o.size());
    sum += boost::multiprecision::cpp_int(first == o.size() ? std::string("0") : o.substr(first));
  }
  return sum;
}

std::string decimal_sum(const Problem& p) {
  std::size_t L = 0;
  for (auto& o : p.operands) L = std::max(L, o.size());
  // col[k]: the digit sum of the column k places from the most significant (right-aligned), at most
  // 9 per operand; then the carries from the least significant column up.
  std::vector<std::uint64_t> col(L, 0);
  unsigned bad = 0;
  for (auto& o : p.operands) {
    std::uint64_t* c = col.data() + (L - o.size());
    for (std::size_t i = 0; i < o.size(); ++i) {
      const unsigned d = unsigned(static_cast<unsigned char>(o[i])) - unsigned('0');
      bad |= unsigned(d > 9);
      c[i] += d;
    }
  }
  if (bad) throw InputError(fmt::format("decimal_sum: an operand of '{}' is not a decimal number", p.to_string().substr(0, 80)));
  std::string rev;  // least significant digit first
  rev.reserve(L + 24);
  std::uint64_t carry = 0;
  for (std::size_t k = L; k-- > 0;) {
    const std::uint64_t v = col[k] + carry;
    rev.push_back(char('0' + v % 10));
    carry = v / 10;
  }
  for (; carry; carry /= 10) rev.push_back(char('0' + carry % 10));
  while (rev.size() > 1 && rev.back() == '0') rev.pop_back();
  if (rev.empty()) rev = "0";
  return std::string(rev.rbegin(), rev.rend());
}

std::vector<std::uint8_t> build_sequence(const Problem& p, const Shape& shape) {
  const int m = shape.m, l = shape.l;
  if (int(p.operands.size()) != m)
    throw InputError(fmt::format("problem has {} operands, shape has m = {}", p.operands.size(), m));
  for (auto& o : p.operands) {
    if (o.empty() || !std::all_of(o.begin(), o.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw InputError(fmt::format("operand '{}' is not a decimal number", o));
    if (int(o.size()) > shape.n)
      throw InputError(fmt::format("operand '{}' has {} digits, shape has n = {}", o, o.size(), shape.n));
  }
  std::vector<std::uint8_t> seq(std::size_t(shape.N()));
  std::uint8_t* w = seq.data();
  *w++ = kDollar;
  // Query: operands not reversed, zero-padded to l.
  for (int i = 0; i < m; ++i) {
    const std::string& o = p.operands[std::size_t(i)];
    for (int k = 0; k < l - int(o.size()); ++k) *w++ = 0;
    for (char c : o) *w++ = std::uint8_t(c - '0');
    *w++ = i + 1 < m ? kPlus : kEq;
  }
  // Response: b_0 = 0, then b_j = b_{j-1} + a_j, each reversed (least significant digit first).
  for (int k = 0; k < l; ++k) *w++ = 0;
  const std::uint8_t* prev = w - l;  // b_{j-1}: acc digit of significance t+1 at prev[t]
  for (int j = 0; j < m; ++j) {
    const std::string& o = p.operands[std::size_t(j)];
    const int len = int(o.size());
    *w++ = kArrow;
    int carry = 0;
    for (int t = 0; t < l; ++t) {
      const int od = t < len ? o[std::size_t(len - 1 - t)] - '0' : 0;
      const int s = prev[t] + od + carry;
      carry = s >= 10;
      w[t] = std::uint8_t(s - 10 * carry);
    }
    if (carry) throw InputError(fmt::format("partial sum b_{} does not fit in l = {} digits", j + 1, l));
    prev = w;
    w += l;
  }
  MANYADD_INVARIANT(w == seq.data() + seq.size(), "build_sequence wrote N tokens");
  return seq;
}

ParsedSequence parse_sequence(const std::vector<std::uint8_t>& toks) {
  auto bad = [&](const std::string& why) {
    return InputError(fmt::format("malformed sequence ({}): {}", why, tokens_to_string(toks)));
  };
  if (toks.size() < 3 || toks[0] != kDollar) throw bad("must start with '$'");
  // l from the first separator, m from the count of operands.
  std::size_t k = 1;
  while (k < toks.size() && toks[k] < 10) ++k;
  if (k == toks.size() || k == 1) throw bad("no operand");
  const int l = int(k - 1);
  const std::size_t N = toks.size();
  if (N % std::size_t(l + 1) != 0 || (N / std::size_t(l + 1)) % 2 == 0) throw bad("length is not (2m+1)(l+1)");
  const int m = int((N / std::size_t(l + 1) - 1) / 2);
  ParsedSequence out;
  out.m = m;
  out.l = l;
  auto read_number = [&](std::size_t start, bool reversed) {
    std::string s;
    for (int t = 0; t < l; ++t) {
      const auto d = toks[start + std::size_t(t)];
      if (d > 9) throw bad("separator inside a number");
      s += char('0' + d);
    }
    if (reversed) std::reverse(s.begin(), s.end());
    return strip_zeros(s);
  };
  for (int i = 0; i < m; ++i) {
    const std::size_t start = 1 + std::size_t(i) * (l + 1);
    out.problem.operands.push_back(read_number(start, false));
    const auto sep = toks[start + std::size_t(l)];
    if (sep != (i + 1 < m ? kPlus : kEq)) throw bad("expected '+' or '=' after an operand");
  }
  for (int j = 0; j <= m; ++j) {
    const std::size_t start = std::size_t(m + j) * (l + 1) + 1;
    if (j > 0 && toks[start - 1] != kArrow) throw bad("expected '>' before a partial sum");
    out.partial_sums.push_back(read_number(start, true));
  }
  return out;
}

void position_id_at(const Shape& shape, std::int64_t s1, std::int64_t s2, std::int64_t k,
                    std::int32_t& p1, std::int32_t& p2) {
  const std::int64_t L = shape.l + 1;
  if (k == 0) {
    p1 = p2 = 0;
    return;
  }
  if (k < std::int64_t(shape.m) * L + 1) {
    // Query: A_i occupies indices (i-1)L + 1 .. (i-1)L + l, its separator (i-1)L + L.
    const std::int64_t i = (k - 1) / L + 1, r = (k - 1) % L;  // r = 0..l-1 digit, r = l separator
    p1 = std::int32_t(r == shape.l ? s1 : s1 + (shape.l - r));  // digit at r has significance l - r
    p2 = std::int32_t(s2 + i - 1);
    if (r == shape.l && i == shape.m) p2 = std::int32_t(s2);  // '=' shares its level-2 ID with B_0
    return;
  }
  // Response: block j = 0..m starts with the separator ('=' for j = 0, '>' else) at m L + j L.
  const std::int64_t rel = k - std::int64_t(shape.m) * L;
  const std::int64_t j = rel / L, r = rel % L;  // r = 0 separator, r = t >= 1 digit of significance t
  p1 = std::int32_t(s1 + r);
  p2 = std::int32_t(s2 + j);
}

PositionIds position_ids(const Shape& shape, std::int64_t s1, std::int64_t s2) {
  if (s1 < 1 || s2 < 1) throw InputError(fmt::format("offsets must be >= 1 (got s1={}, s2={})", s1, s2));
  PositionIds ids;
  const auto N = shape.N();
  ids.p1.resize(std::size_t(N));
  ids.p2.resize(std::size_t(N));
  for (std::int64_t k = 0; k < N; ++k) position_id_at(shape, s1, s2, k, ids.p1[std::size_t(k)], ids.p2[std::size_t(k)]);
  return ids;
}

std::string random_operand(Rng& rng, int digits) {
  std::string s(std::size_t(digits), '0');
  if (digits == 1) {
    s[0] = char('0' + rng.uniform(0, 9));
    return s;
  }
  s[0] = char('0' + rng.uniform(1, 9));
  for (int i = 1; i < digits; ++i) s[std::size_t(i)] = char('0' + rng.uniform(0, 9));
  return s;
}

Problem sample_TA(Rng& rng, int n, int m) {
  Problem p;
  p.operands.reserve(std::size_t(m));
  for (int i = 0; i < m; ++i) p.operands.push_back(random_operand(rng, n));
  return p;
}

std::vector<Problem> sample_SA(Rng& rng, int n, int m, std::int64_t count) {
  if (n < 1 || m < 2) throw InputError(fmt::format("SA(n, m) needs n >= 1 and m >= 2 (got {}, {})", n, m));
  std::vector<Problem> out;
  out.reserve(std::size_t(count));
  const std::int64_t first = (count + 1) / 2;
  for (std::int64_t s = 0; s < count; ++s) {
    Problem p;
    const int ops = int(rng.uniform(2, std::uint64_t(m)));
    if (s < first) {
      for (int i = 0; i < ops; ++i) p.operands.push_back(random_operand(rng, int(rng.uniform(1, std::uint64_t(n)))));
    } else {
      const int len = int(rng.uniform(1, std::uint64_t(n)));
      for (int i = 0; i < ops; ++i) p.operands.push_back(random_operand(rng, len));
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace manyadd
