// QkvPlan::check: the plan the tensor-core kernel's preparation reads, validated on the host before
// anything is allocated (both builds).
#include <stdexcept>
#include <string>

#include "manyadd/kernels/constructed_attention.hpp"

namespace manyadd::kernels {

void QkvPlan::check() const {
  auto bad = [](const std::string& what) { throw std::invalid_argument("qkv plan: " + what); };
  if (d < 1 || d > 4096) bad("input width d outside [1, 4096]");
  if (D < 8 || D > kMaxD || D % 8) bad("query/key width not a multiple of 8 in [8, 48]");
  if (vocab < 1 || vocab > 256) bad("vocabulary size outside [1, 256]");
  if (emb.size() != std::size_t(vocab) * std::size_t(d)) bad("embedding is not (vocab, d)");
  if (col_code.size() != std::size_t(d)) bad("col_code is not (d)");
  if (row_start.size() != std::size_t(8 * D + 5)) bad("row_start is not (8 D + 5)");
  if (row_start.front() != 0 || std::size_t(row_start.back()) != nz_col.size() || nz_col.size() != nz_w.size())
    bad("row_start does not span the nonzeros");
  for (std::size_t o = 0; o + 1 < row_start.size(); ++o)
    if (row_start[o + 1] < row_start[o]) bad("row_start decreases");
  for (float t : skip)
    if (!(t >= 0)) bad("a far-tile skip threshold is negative or NaN");
  for (std::int32_t c : nz_col)
    if (c < 0 || c >= d) bad("a nonzero's column is outside [0, d)");
  for (const tc::PlanCode& pc : codes)
    if ((pc.id != 0 && pc.id != 1) || pc.bits < 1 || pc.bits > 30 || pc.col < 0 || pc.col + pc.bits > d ||
        pc.shift < 0 || pc.shift > 1)
      bad("a code has an id other than 0/1, bits outside [1, 30], a shift other than 0/1 or columns outside [0, d)");
  for (int c = 0; c < d; ++c) {
    const std::int32_t ci = col_code[std::size_t(c)];
    if (ci < -1 || ci >= std::int32_t(codes.size())) bad("col_code names no code");
    if (ci >= 0) {
      const tc::PlanCode& pc = codes[std::size_t(ci)];
      if (c < pc.col || c >= pc.col + pc.bits) bad("col_code names a code that does not write that column");
    }
  }
}

}  // namespace manyadd::kernels
