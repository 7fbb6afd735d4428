// Training and test examples of a task (task.hpp): the task writes an instance (tokens, relative
// position IDs per coupling level), the model's position mode turns them into IDs at the offsets, and
// the targets are the response (the next token from '=' on, EOS last). Addition's instances are
// construct/'s scratchpad format (paper 000, Sec. 4.1-4.2): every problem gets its own shape (n_i =
// longest operand, m_i = operand count, minimal padding as the paper's experiments).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "manyadd/format.hpp"
#include "manyadd/learn/decoder/model.hpp"
#include "manyadd/learn/tasks/task.hpp"

namespace manyadd::learn {

// A 64-bit hash of up to three numbers (the streams of a run: initialization, data, per-step draws).
std::uint64_t seed_mix(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0);

// Offsets s_1, s_2, s_3 of the position levels (each >= 1; a level the mode does not read is ignored).
using Offsets = std::array<std::int64_t, kMaxPosLevels>;

// Position IDs of a written instance under a mode, at offsets s: level lv of token k is 0 where the
// task leaves it unused (BOS always) and s_lv + rel_lv(k) elsewhere.
//   coupled   the task's two levels (a 2-level task only)      coupled3  its three levels (3-level only)
//   digits    the task's level 1 only                           absolute  BOS 0, index k >= 1 -> s_1 + k - 1
//   none      nothing                                           abacus    abacus_ids of the tokens at beta = s_1
//   fire, rope nothing: they read the token indices in the attention (model.hpp)
// pos[lv] is filled for the levels the mode reads, cleared for the others. InputError when a coupled
// mode does not match the task's levels.
void position_ids_for(const Written& w, PosMode mode, const Offsets& s, std::vector<std::int32_t> (&pos)[kMaxPosLevels]);

// Abacus Embeddings' IDs (McLeish et al. 2024, Sec. 3.1; their abacus.py numbers the spans of digit
// tokens the same way): the t-th token (t = 1, 2, ...) of every maximal run of digit tokens 0-9 gets
// beta + t - 1, every other token 0. They follow from the tokens alone, so a task's numbers align by
// significance only where it writes them least significant digit first (addition-2op). Each ID
// depends on the tokens up to its own, so greedy decoding from the written instance's IDs is exact up
// to the first wrong token.
void abacus_ids(const std::vector<std::uint8_t>& tokens, std::int64_t beta, std::vector<std::int32_t>& p);
std::int64_t longest_digit_run(const std::vector<std::uint8_t>& tokens);
// Abacus's training offset: beta uniform in [1, abacus_k] (the paper's U[1, k], k = 100; their code
// adds randint(0, max_k = 99) to IDs that start at 1: the same range); at test beta = 1. The trainer
// draws one beta per batch, as they do ("the same for all numbers in a batch").
std::int64_t abacus_offset(const ModelConfig& c, Rng& rng);

// Largest admissible offset of level lv for a model and an instance extent (the IDs must stay <=
// max_pos of their level); < 1 when it does not fit at all.
//   coupled modes, digits: max_pos_lv - span_lv ; absolute: max_pos1 - T + 2 ; abacus: max_pos1 -
//   digit_run + 1 ; levels the mode does not read: 1.
std::int64_t max_offset(const ModelConfig& c, const Task::Extent& e, int lv);
bool fits(const ModelConfig& c, const Task::Extent& e);
Task::Extent extent_of(const Written& w);

// A teacher-forced example of the task's instance at offsets s: input = the tokens, the target at index
// k is token k + 1 for k >= the index of '=' and '$' (EOS) after the last token, -1 (no loss) on the
// query; the answer span copied from the task. InputError if the IDs exceed the model's max_pos or
// the model cannot run the task (Task::check_model).
Example make_example(const Task& task, const Problem& p, const ModelConfig& c, const Offsets& s);
// Training example with random offsets: s_lv uniform in [1, max_offset(lv)], drawn for levels 1, 2
// and, with three position levels, 3 (a level the mode does not read draws from [1, 1]); abacus:
// beta = abacus_offset (InputError when beta + the longest number - 1 exceeds max_pos1).
Example make_train_example(const Task& task, const Problem& p, const ModelConfig& c, Rng& rng);

// ---- addition by shape (construct's format; the tools that compare with the constructed model) ----

// Position IDs of one addition shape under a mode, with offsets s1 (level 1) and s2 (level 2).
//   coupled  construct's bi-level IDs (Appendix D.4.2, Eqs. 1-2)
//   digits   level 1 of those only (significance coupling)
//   absolute BOS 0, index k >= 1 -> s1 + k - 1
//   none, fire, rope  nothing
//   abacus   abacus_ids of the shape's tokens at beta = s1 (the digit layout depends on the shape only)
void position_ids_for(const Shape& shape, PosMode mode, std::int64_t s1, std::int64_t s2, std::vector<std::int32_t>& p1,
                      std::vector<std::int32_t>& p2);

// Largest admissible offsets for a shape; < 1 when the shape does not fit the model at all.
//   coupled/digits: s1 <= max_pos1 - l, s2 <= max_pos2 - m ; absolute: s1 <= max_pos1 - N + 2.
std::int64_t max_offset1(const ModelConfig& c, const Shape& s);
std::int64_t max_offset2(const ModelConfig& c, const Shape& s);
bool shape_fits(const ModelConfig& c, const Shape& s);

// The shape a problem is written in: n = longest operand, m = operand count, minimal padding.
Shape shape_of(const Problem& p);

// The addition task's make_example / make_train_example (offsets (s1, s2), s3 unused).
Example make_example(const Problem& p, const ModelConfig& c, std::int64_t s1, std::int64_t s2);
Example make_train_example(const Problem& p, const ModelConfig& c, Rng& rng);
// Number of response tokens (the counted targets) of a shape: N - index of '='.
inline std::int64_t response_len(const Shape& s) { return s.N() - s.eq_index(); }

}  // namespace manyadd::learn
