// Training and test examples on construct/'s scratchpad format (paper 000, Sec. 4.1-4.2): every
// problem gets its own shape (n_i = longest operand, m_i = operand count, minimal padding as the
// paper's experiments), position IDs per mode and offset, and targets on the response only.
#pragma once

#include <cstdint>
#include <vector>

#include "manyadd/format.hpp"
#include "manyadd/learn/model.hpp"

namespace manyadd::learn {

// Position IDs of one shape under a mode, with offsets s1 (level 1) and s2 (level 2).
//   coupled  construct's bi-level IDs (Appendix D.4.2, Eqs. 1-2)
//   digits   level 1 of those only (significance coupling)
//   absolute BOS 0, index k >= 1 -> s1 + k - 1
//   none     nothing
void position_ids_for(const Shape& shape, PosMode mode, std::int64_t s1, std::int64_t s2, std::vector<std::int32_t>& p1,
                      std::vector<std::int32_t>& p2);

// Largest admissible offsets for a shape (the IDs must stay <= max_pos of their level); < 1 when the
// shape does not fit the model at all.
//   coupled/digits: s1 <= max_pos1 - l, s2 <= max_pos2 - m ; absolute: s1 <= max_pos1 - N + 2.
std::int64_t max_offset1(const ModelConfig& c, const Shape& s);
std::int64_t max_offset2(const ModelConfig& c, const Shape& s);
bool shape_fits(const ModelConfig& c, const Shape& s);

// The shape a problem is written in: n = longest operand, m = operand count, minimal padding.
Shape shape_of(const Problem& p);

// A teacher-forced example: input = the N tokens of the sequence; the target at index k is token k+1
// for k >= index of '=' and '$' (EOS) after the last token; -1 (no loss) on the query.
Example make_example(const Problem& p, const ModelConfig& c, std::int64_t s1, std::int64_t s2);
// Training example with random offsets s1 in [1, max_offset1], s2 in [1, max_offset2].
Example make_train_example(const Problem& p, const ModelConfig& c, Rng& rng);
// Number of response tokens (the counted targets) of a shape: N - index of '='.
inline std::int64_t response_len(const Shape& s) { return s.N() - s.eq_index(); }

}  // namespace manyadd::learn
