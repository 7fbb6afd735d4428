// Examples of a task: see data.hpp.
#include "manyadd/learn/tasks/data.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace manyadd::learn {

std::uint64_t seed_mix(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full ^ c * 0x165667B19E3779F9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {
// BOS 0, index k >= 1 -> s1 + k - 1.
void absolute_ids(std::int64_t T, std::int64_t s1, std::vector<std::int32_t>& p) {
  if (s1 < 1) throw InputError(fmt::format("offset s1 must be >= 1 (got {})", s1));
  p.resize(std::size_t(T));
  if (T > 0) p[0] = 0;
  for (std::int64_t k = 1; k < T; ++k) p[std::size_t(k)] = std::int32_t(s1 + k - 1);
}
bool coupled_mode(PosMode m) { return m == PosMode::coupled || m == PosMode::coupled3 || m == PosMode::coupled_rel; }
bool is_digit(std::uint8_t tok) { return tok <= 9; }
}  // namespace

void abacus_ids(const std::vector<std::uint8_t>& tokens, std::int64_t beta, std::vector<std::int32_t>& p) {
  if (beta < 1) throw InputError(fmt::format("abacus offset beta must be >= 1 (got {})", beta));
  p.resize(tokens.size());
  std::int64_t t = 0;  // index of the token within its run of digits, 0 outside one
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    t = is_digit(tokens[k]) ? t + 1 : 0;
    p[k] = t ? std::int32_t(beta + t - 1) : 0;
  }
}

std::int64_t longest_digit_run(const std::vector<std::uint8_t>& tokens) {
  std::int64_t t = 0, best = 0;
  for (auto tok : tokens) best = std::max(best, t = is_digit(tok) ? t + 1 : 0);
  return best;
}

std::int64_t abacus_offset(const ModelConfig& c, Rng& rng) {
  return std::int64_t(rng.uniform(1, std::uint64_t(c.abacus_k)));
}

void position_ids_for(const Written& w, PosMode mode, const Offsets& s, std::vector<std::int32_t> (&pos)[kMaxPosLevels]) {
  for (auto& p : pos) p.clear();
  const int L = pos_levels(mode);
  if (mode == PosMode::absolute) return absolute_ids(w.T(), s[0], pos[0]);
  if (mode == PosMode::abacus) return abacus_ids(w.tokens, s[0], pos[0]);
  if (coupled_mode(mode) && L != w.levels)
    throw InputError(fmt::format("pos_mode {} reads {} position levels, the task couples {}", pos_mode_name(mode), L,
                                 w.levels));
  for (int lv = 0; lv < L; ++lv) {
    if (s[std::size_t(lv)] < 1) throw InputError(fmt::format("offset s{} must be >= 1 (got {})", lv + 1, s[std::size_t(lv)]));
    const auto& rel = w.rel[lv];
    auto& p = pos[lv];
    p.resize(rel.size());
    for (std::size_t k = 0; k < rel.size(); ++k) p[k] = rel[k] < 0 ? 0 : std::int32_t(s[std::size_t(lv)] + rel[k]);
  }
}

std::int64_t max_offset(const ModelConfig& c, const Task::Extent& e, int lv) {
  if (lv >= pos_levels(c.pos_mode)) return 1;
  if (c.pos_mode == PosMode::absolute) return std::int64_t(c.max_pos1) - e.T + 2;
  if (c.pos_mode == PosMode::abacus) return std::int64_t(c.max_pos1) - e.digit_run + 1;
  return std::int64_t(c.max_pos(lv)) - e.span[std::size_t(lv)];
}

bool fits(const ModelConfig& c, const Task::Extent& e) {
  for (int lv = 0; lv < kMaxPosLevels; ++lv)
    if (max_offset(c, e, lv) < 1) return false;
  return true;
}

Task::Extent extent_of(const Written& w) {
  Task::Extent e;
  e.T = w.T();
  e.digit_run = longest_digit_run(w.tokens);
  for (int lv = 0; lv < kMaxPosLevels; ++lv) e.span[std::size_t(lv)] = w.span[std::size_t(lv)];
  return e;
}

namespace {
// The offsets a model reads: two (levels 1 and 2, as the first models always wrote them) or three.
int offsets_shown(const ModelConfig& c) { return std::max(2, pos_levels(c.pos_mode)); }
std::string offsets_words(const ModelConfig& c, const Offsets& s) {
  std::string o, mp;
  for (int lv = 0; lv < offsets_shown(c); ++lv) {
    o += fmt::format("{}{}", lv ? ", " : "", s[std::size_t(lv)]);
    mp += fmt::format("{}max_pos{}={}", lv ? " / " : "", lv + 1, c.max_pos(lv));
  }
  return fmt::format("offsets ({}) needs position IDs beyond the model's {}", o, mp);
}
}  // namespace

namespace {
Example example_of(const Task& task, const Problem& p, const Written& w, const ModelConfig& c, const Offsets& s) {
  task.check_model(c);
  const Task::Extent e = extent_of(w);
  // Offsets a mode does not read are not checked (s2 outside coupled, all of them for none).
  for (int lv = 0; lv < pos_levels(c.pos_mode); ++lv)
    if (s[std::size_t(lv)] < 1 || s[std::size_t(lv)] > max_offset(c, e, lv))
      throw InputError(fmt::format("{} with {}", task.shape_words(p), offsets_words(c, s)));
  Example ex;
  position_ids_for(w, c.pos_mode, s, ex.pos);
  ex.tokens = w.tokens;
  const std::int64_t T = w.T();
  ex.targets.assign(std::size_t(T), -1);
  for (std::int64_t k = w.eq; k + 1 < T; ++k) ex.targets[std::size_t(k)] = ex.tokens[std::size_t(k + 1)];
  ex.targets[std::size_t(T - 1)] = kDollar;
  ex.answer_begin = std::int32_t(w.answer_begin);
  ex.answer_end = std::int32_t(w.answer_end);
  return ex;
}
}  // namespace

Example make_example(const Task& task, const Problem& p, const ModelConfig& c, const Offsets& s) {
  return example_of(task, p, task.write(p), c, s);
}

Example make_train_example(const Task& task, const Problem& p, const ModelConfig& c, Rng& rng) {
  const Written w = task.write(p);
  const Task::Extent e = extent_of(w);
  Offsets s{1, 1, 1};
  if (c.pos_mode == PosMode::abacus) {
    s[0] = abacus_offset(c, rng);
    return example_of(task, p, w, c, s);
  }
  for (int lv = 0; lv < offsets_shown(c); ++lv) {
    const std::int64_t h = max_offset(c, e, lv);
    if (h < 1) {
      std::string mp;
      for (int k = 0; k < offsets_shown(c); ++k) mp += fmt::format("{}max_pos{}={}", k ? " / " : "", k + 1, c.max_pos(k));
      throw InputError(fmt::format("training {} does not fit {}", task.shape_words(p), mp));
    }
    s[std::size_t(lv)] = std::int64_t(rng.uniform(1, std::uint64_t(h)));
  }
  return example_of(task, p, w, c, s);
}

// ---- addition by shape ---------------------------------------------------------------------------

namespace {
// A sequence of the shape (its digit layout, which abacus IDs read, is the shape's alone).
std::vector<std::uint8_t> nines_sequence(const Shape& shape) {
  Problem nines;
  nines.operands.assign(std::size_t(shape.m), std::string(std::size_t(shape.n), '9'));
  return build_sequence(nines, shape);
}
}  // namespace

void position_ids_for(const Shape& shape, PosMode mode, std::int64_t s1, std::int64_t s2, std::vector<std::int32_t>& p1,
                      std::vector<std::int32_t>& p2) {
  p1.clear();
  p2.clear();
  switch (mode) {
    case PosMode::coupled:
    case PosMode::coupled_rel: {
      auto ids = position_ids(shape, s1, s2);
      p1 = std::move(ids.p1);
      p2 = std::move(ids.p2);
      return;
    }
    case PosMode::digits: {
      auto ids = position_ids(shape, s1, s2);
      p1 = std::move(ids.p1);
      return;
    }
    case PosMode::absolute: return absolute_ids(shape.N(), s1, p1);
    case PosMode::none:
    case PosMode::fire:
    case PosMode::rope: return;  // positions enter through the attention (token indices), no IDs
    case PosMode::abacus: return abacus_ids(nines_sequence(shape), s1, p1);
    case PosMode::coupled3: throw InputError("pos_mode coupled3 reads three position levels, addition couples two");
  }
}

namespace {
Task::Extent shape_extent(const Shape& s, const ModelConfig& c) {
  Task::Extent e{s.N(), {s.l, s.m, 0}};
  if (c.pos_mode == PosMode::abacus) e.digit_run = longest_digit_run(nines_sequence(s));
  return e;
}
}  // namespace

std::int64_t max_offset1(const ModelConfig& c, const Shape& s) { return max_offset(c, shape_extent(s, c), 0); }
std::int64_t max_offset2(const ModelConfig& c, const Shape& s) { return max_offset(c, shape_extent(s, c), 1); }
bool shape_fits(const ModelConfig& c, const Shape& s) { return max_offset1(c, s) >= 1 && max_offset2(c, s) >= 1; }

Shape shape_of(const Problem& p) {
  return Shape::make(p.max_digits(), std::int64_t(p.operands.size()), Padding::minimal);
}

Example make_example(const Problem& p, const ModelConfig& c, std::int64_t s1, std::int64_t s2) {
  return make_example(task(TaskKind::addition), p, c, Offsets{s1, s2, 1});
}

Example make_train_example(const Problem& p, const ModelConfig& c, Rng& rng) {
  return make_train_example(task(TaskKind::addition), p, c, rng);
}

}  // namespace manyadd::learn
