// The problems of paper 003: see grid_problems.hpp.
#include "manyadd/learn/tasks/grid_problems.hpp"

#include <string>
#include <utility>

#include <fmt/format.h>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/error.hpp"

namespace manyadd::learn::grid {

// ---- instances and problems ------------------------------------------------------------------------------

std::string Instance::name() const {
  auto part = [](int lo, int hi) { return lo == hi ? std::to_string(lo) : fmt::format("{}-{}", lo, hi); };
  return part(terms_lo, terms_hi) + "x" + part(digits_lo, digits_hi);
}

void Instance::validate() const {
  if (terms_lo < 1 || terms_lo > terms_hi || terms_hi > 1000)
    throw InputError(fmt::format("instance {}: terms must be 1 <= lo <= hi <= 1000", name()));
  if (digits_lo < 1 || digits_lo > digits_hi || digits_hi > 100000)
    throw InputError(fmt::format("instance {}: digits must be 1 <= lo <= hi <= 100000", name()));
}

Instance Instance::parse(const std::string& s) {
  auto range = [&](const std::string& t, int& lo, int& hi) {
    const auto dash = t.find('-');
    const std::string what = fmt::format("instance '{}' (expected TERMSxDIGITS, each N or LO-HI: 2x100, 1-4x1-10)", s);
    if (dash == std::string::npos) {
      lo = hi = int(cli::parse_int(t, what, 1, 100000));
    } else {
      lo = int(cli::parse_int(t.substr(0, dash), what, 1, 100000));
      hi = int(cli::parse_int(t.substr(dash + 1), what, 1, 100000));
    }
  };
  const auto x = s.find('x');
  if (x == std::string::npos || s.find('x', x + 1) != std::string::npos)
    throw InputError(fmt::format("instance '{}': expected TERMSxDIGITS, each N or LO-HI (2x100, 1-4x1-10)", s));
  Instance in;
  range(s.substr(0, x), in.terms_lo, in.terms_hi);
  range(s.substr(x + 1), in.digits_lo, in.digits_hi);
  in.validate();
  return in;
}

std::vector<std::string> paper_table(const std::string& t) {
  if (t == "iii") return {"2x15", "2x100", "2x602", "1-4x1-10", "1-5x1-5", "5-6x1-10", "7-10x1-10"};
  if (t == "iv-digits") return {"2x1-1000", "2x1000", "2x1-2000", "2x2000", "2x1-4000", "2x4000"};
  if (t == "iv-terms") return {"5x5", "6x5", "7x5", "8x5", "9x5", "10x5"};
  if (t == "terms") return {"1x5", "2x5", "3x5", "4x5", "5x5", "6x5", "7x5", "8x5", "9x5", "10x5"};
  throw InputError(fmt::format("--table '{}' unknown (iii | iv-digits | iv-terms | terms)", t));
}

Problem sample_problem(Rng& rng, const Instance& inst) {
  Problem p;
  const int n = int(rng.uniform(std::uint64_t(inst.terms_lo), std::uint64_t(inst.terms_hi)));
  for (int i = 0; i < n; ++i) {
    const int d = int(rng.uniform(std::uint64_t(inst.digits_lo), std::uint64_t(inst.digits_hi)));
    std::string o(std::size_t(d), '0');
    for (char& ch : o) ch = char('0' + rng.uniform(0, 9));
    p.operands.push_back(std::move(o));
  }
  return p;
}

std::string problem_sum(const Problem& p) {
  Problem stripped;
  for (const auto& o : p.operands) {
    const auto nz = o.find_first_not_of('0');
    stripped.operands.push_back(nz == std::string::npos ? "0" : o.substr(nz));
  }
  return reference_sum(stripped).str();
}

Problem parse_grid_problem(const std::string& s) {
  Problem p;
  std::string body;  // spaces ignored, as the decoder's tasks read a problem (learn/src/tasks/task_addition.cpp)
  for (char c : s)
    if (c != ' ') body += c;
  if (!body.empty() && body.back() == '=') body.pop_back();
  std::string cur;
  for (std::size_t i = 0; i <= body.size(); ++i) {
    if (i == body.size() || body[i] == '+') {
      if (cur.empty()) throw InputError(fmt::format("problem '{}': empty operand (expected e.g. 57+48+96)", s));
      p.operands.push_back(cur);
      cur.clear();
    } else if (body[i] >= '0' && body[i] <= '9') {
      cur += body[i];
    } else {
      throw InputError(fmt::format("problem '{}': unexpected character '{}' (digits and '+' only)", s, body[i]));
    }
  }
  return p;
}

}  // namespace manyadd::learn::grid
