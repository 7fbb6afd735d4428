// The decoder's configuration (model.hpp ModelConfig): its option names, its checks, its JSON form, the
// position codes' tables, and the one-paragraph description of the architecture a config.json carries.
#include "manyadd/learn/decoder/model.hpp"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/error.hpp"
#include "manyadd/core/safetensors.hpp"
#include "manyadd/model.hpp"  // construct/: hypercube(), Theorem 4.1's position code

namespace manyadd::learn {

PosMode parse_pos_mode(const std::string& s) {
  if (s == "coupled") return PosMode::coupled;
  if (s == "digits") return PosMode::digits;
  if (s == "absolute") return PosMode::absolute;
  if (s == "none") return PosMode::none;
  if (s == "coupled3") return PosMode::coupled3;
  if (s == "abacus") return PosMode::abacus;
  if (s == "fire") return PosMode::fire;
  if (s == "rope") return PosMode::rope;
  if (s == "coupled_rel") return PosMode::coupled_rel;
  throw InputError(fmt::format(
      "position mode '{}' unknown (coupled|coupled3|digits|absolute|none|abacus|fire|rope|coupled_rel)", s));
}
const char* pos_mode_name(PosMode m) {
  switch (m) {
    case PosMode::coupled: return "coupled";
    case PosMode::digits: return "digits";
    case PosMode::absolute: return "absolute";
    case PosMode::none: return "none";
    case PosMode::coupled3: return "coupled3";
    case PosMode::abacus: return "abacus";
    case PosMode::fire: return "fire";
    case PosMode::rope: return "rope";
    case PosMode::coupled_rel: return "coupled_rel";
  }
  return "?";
}
int pos_levels(PosMode m) {
  switch (m) {
    case PosMode::coupled:
    case PosMode::coupled_rel: return 2;
    case PosMode::coupled3: return 3;
    case PosMode::digits:
    case PosMode::absolute:
    case PosMode::abacus: return 1;
    case PosMode::none:
    case PosMode::fire:
    case PosMode::rope: return 0;
  }
  return 0;
}
int pos_tables(PosMode m) { return m == PosMode::coupled_rel ? 0 : pos_levels(m); }

AttnScale parse_attn_scale(const std::string& s) {
  if (s == "inv_sqrt_dhead") return AttnScale::inv_sqrt_dhead;
  if (s == "none") return AttnScale::none;
  if (s == "positional") return AttnScale::positional;
  throw InputError(fmt::format("attention scale '{}' unknown (inv_sqrt_dhead|none|positional)", s));
}
InitScheme parse_init(const std::string& s) {
  if (s == "normal") return InitScheme::normal;
  if (s == "t5") return InitScheme::t5;
  throw InputError(fmt::format("initialization '{}' unknown (normal|t5)", s));
}
NormKind parse_norm_kind(const std::string& s) {
  if (s == "rms") return NormKind::rms;
  if (s == "layer") return NormKind::layer;
  throw InputError(fmt::format("final norm '{}' unknown (rms|layer)", s));
}
FireThreshold parse_fire_threshold(const std::string& s) {
  if (s == "max") return FireThreshold::max;
  if (s == "min") return FireThreshold::min;
  throw InputError(fmt::format("fire_threshold '{}' unknown (max: the FIRE paper | min: the paper-000 authors' code)", s));
}
Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  throw InputError(fmt::format("precision '{}' unknown (fp32|bf16)", s));
}
const char* attn_scale_name(AttnScale a) {
  return a == AttnScale::none ? "none" : a == AttnScale::positional ? "positional" : "inv_sqrt_dhead";
}
const char* init_name(InitScheme i) { return i == InitScheme::t5 ? "t5" : "normal"; }
const char* norm_kind_name(NormKind n) { return n == NormKind::layer ? "layer" : "rms"; }
const char* fire_threshold_name(FireThreshold f) { return f == FireThreshold::min ? "min" : "max"; }
const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }
float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

PosCode parse_pos_code(const std::string& s) {
  if (s == "learned") return PosCode::learned;
  if (s == "frozen") return PosCode::frozen;
  if (s == "hypercube") return PosCode::hypercube;
  if (s == "shuffled") return PosCode::shuffled;
  throw InputError(fmt::format("position code '{}' unknown (learned|frozen|hypercube|shuffled)", s));
}
const char* pos_code_name(PosCode k) {
  switch (k) {
    case PosCode::learned: return "learned";
    case PosCode::frozen: return "frozen";
    case PosCode::hypercube: return "hypercube";
    case PosCode::shuffled: return "shuffled";
  }
  return "?";
}
bool pos_code_frozen(PosCode k) { return k != PosCode::learned; }
bool pos_code_is_vertex(PosCode k) { return k == PosCode::hypercube || k == PosCode::shuffled; }
namespace {
// The codewords of a vertex code: the binary lexicode of length P and minimum distance d (every word
// from 0 up, kept when it is at distance >= d from every word kept before; for d = 1 every word, in
// counting order, which is Theorem 4.1's hypercube: word p - 1 is v_p), at most `count` of them.
// d >= 2 is limited to kMaxLexicodeWords words (validate()), so the quadratic search stays small.
constexpr int kMaxLexicodeWords = 4096, kMaxCodeBits = 24;
std::vector<std::uint32_t> lexicode(int P, int d, std::int64_t count) {
  std::vector<std::uint32_t> w;
  const std::uint64_t end = std::uint64_t(1) << P;
  for (std::uint64_t x = 0; x < end && std::int64_t(w.size()) < count; ++x) {
    bool ok = true;
    if (d > 1)
      for (std::uint32_t c : w)
        if (__builtin_popcount(std::uint32_t(x) ^ c) < d) {
          ok = false;
          break;
        }
    if (ok) w.push_back(std::uint32_t(x));
  }
  return w;
}
// Bits of level lv's vertex code: the smallest P whose lexicode of distance d holds max_pos + 1 words,
// so every ID 1..max_pos and the successor max_pos + 1 of the last get distinct words (no wrap);
// 0 when no P <= kMaxCodeBits does.
int pos_code_bits(int max_pos, int d) {
  for (int P = 1; P <= kMaxCodeBits; ++P) {
    if ((std::int64_t(1) << P) < std::int64_t(max_pos) + 1) continue;
    if (d == 1 || std::int64_t(lexicode(P, d, max_pos + 1).size()) == std::int64_t(max_pos) + 1) return P;
  }
  return 0;
}
}  // namespace

bool ModelConfig::any_pos_code() const {
  for (int lv = 0; lv < pos_tables(pos_mode); ++lv)
    if (pos_codes[lv] != PosCode::learned) return true;
  return false;
}
std::string ModelConfig::pos_codes_string() const {
  const int L = std::max(1, pos_tables(pos_mode));
  bool same = true;
  for (int lv = 1; lv < L; ++lv) same = same && pos_codes[lv] == pos_codes[0];
  std::string s = pos_code_name(pos_codes[0]);
  if (!same)
    for (int lv = 1; lv < L; ++lv) s += std::string(",") + pos_code_name(pos_codes[lv]);
  return s;
}

PosCodeBlock pos_code_block(const ModelConfig& c, int level) {
  PosCodeBlock b;
  for (int lv = 0; lv < pos_tables(c.pos_mode) && lv <= level; ++lv) {
    if (!pos_code_is_vertex(c.pos_codes[lv])) continue;
    const int P = pos_code_bits(c.max_pos(lv), c.pos_code_distance);
    if (lv == level) return {b.offset, P};
    b.offset += 2 * P;
  }
  return {0, 0};
}

std::vector<double> pos_code_table(const ModelConfig& c, int level, std::uint64_t seed) {
  const PosCodeBlock blk = pos_code_block(c, level);
  if (blk.bits == 0) throw InputError(fmt::format("level {} has no hypercube or shuffled code", level + 1));
  const int P = blk.bits, rows = c.max_pos(level) + 1, C = c.d_model;
  // The codewords: every P-bit word (pos_code_distance 1: the hypercube), else the lexicode of that
  // distance, whole (the shuffle draws from all of it).
  const std::vector<std::uint32_t> words =
      c.pos_code_distance == 1 ? std::vector<std::uint32_t>() : lexicode(P, c.pos_code_distance, std::int64_t(1) << P);
  const std::int64_t K = c.pos_code_distance == 1 ? std::int64_t(1) << P : std::int64_t(words.size());
  auto word = [&](std::int64_t i) { return c.pos_code_distance == 1 ? std::uint32_t(i) : words[std::size_t(i)]; };
  // sigma: ID p (1..K) -> codeword index + 1; the identity for hypercube (Theorem 4.1's code: ID p is
  // v_p), a permutation drawn from (seed, level) for shuffled (Fisher-Yates on our own uniform draws: the
  // same with every standard library; its own generator, so the weights' draws are untouched).
  std::vector<std::int64_t> sigma(std::size_t(K) + 1);
  for (std::int64_t p = 0; p <= K; ++p) sigma[std::size_t(p)] = p;
  if (c.pos_codes[level] == PosCode::shuffled) {
    Rng rng(seed ^ (0x9e3779b97f4a7c15ull * std::uint64_t(level + 1)));
    for (std::int64_t i = K; i >= 2; --i) std::swap(sigma[std::size_t(i)], sigma[std::size_t(rng.uniform(1, std::uint64_t(i)))]);
  }
  std::vector<double> t(std::size_t(rows) * std::size_t(C), 0.0);
  const double s = c.pos_code_scale;
  auto put = [&](double* r, std::int64_t id) {  // bit i of the word, most significant first: +s for 0, -s for 1 (Eq. 3)
    const std::uint32_t x = word(sigma[std::size_t(id)] - 1);
    for (int i = 0; i < P; ++i) r[i] = (x >> (P - 1 - i)) & 1u ? -s : s;
  };
  for (int p = 1; p < rows; ++p) {  // row 0 (BOS, unused slots): zero, as the construction
    double* r = t.data() + std::size_t(p) * std::size_t(C) + std::size_t(blk.offset);
    put(r, p), put(r + P, p + 1);
  }
  return t;
}

void ModelConfig::validate() const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw InputError(msg);
  };
  need(vocab == kVocab || vocab == kVocabTasks,
       fmt::format("model.vocab must be {} (0-9 + = > $) or {} (and '*') (got {})", kVocab, kVocabTasks, vocab));
  need(n_layers >= 1 && n_layers <= 64, fmt::format("model.n_layers must be in [1, 64] (got {})", n_layers));
  need(n_heads >= 1 && n_heads <= 64, fmt::format("model.n_heads must be in [1, 64] (got {})", n_heads));
  need(d_model >= 1 && d_model <= 8192, fmt::format("model.d_model must be in [1, 8192] (got {})", d_model));
  need(d_head >= 1 && d_head <= 1024, fmt::format("model.d_head must be in [1, 1024] (got {})", d_head));
  need(d_ff >= 1 && d_ff <= 65536, fmt::format("model.d_ff must be in [1, 65536] (got {})", d_ff));
  need(max_pos1 >= 2 && max_pos1 <= 1'000'000, fmt::format("model.max_pos1 must be in [2, 1e6] (got {})", max_pos1));
  need(max_pos2 >= 2 && max_pos2 <= 1'000'000, fmt::format("model.max_pos2 must be in [2, 1e6] (got {})", max_pos2));
  need(max_pos3 >= 2 && max_pos3 <= 1'000'000, fmt::format("model.max_pos3 must be in [2, 1e6] (got {})", max_pos3));
  need(norm_eps > 0 && norm_eps < 1, fmt::format("model.norm_eps must be in (0, 1) (got {})", norm_eps));
  // Abacus IDs run from beta to beta + (digits of a number) - 1 <= max_pos1 with beta up to abacus_k.
  need(pos_mode != PosMode::abacus || (abacus_k >= 1 && abacus_k < max_pos1),
       fmt::format("model.abacus_k must be in [1, max_pos1 - 1 = {}] (got {}; raise max_pos1 to at least abacus_k + "
                   "the longest number's digits - 1)",
                   max_pos1 - 1, abacus_k));
  need(init_std > 0 && init_std < 10, fmt::format("model.init_std must be in (0, 10) (got {})", init_std));
  need(fire_width >= 1 && fire_width <= 4096, fmt::format("model.fire_width must be in [1, 4096] (got {})", fire_width));
  need(rel_window >= 0 && rel_window <= 64, fmt::format("model.rel_window must be in [0, 64] (got {})", rel_window));
  need(!rel_far || pos_mode == PosMode::coupled_rel,
       fmt::format("model.rel_far applies to pos_mode coupled_rel only (pos_mode is {})", pos_mode_name(pos_mode)));
  need(!rel_far_norm || rel_far, "model.rel_far_norm needs model.rel_far (it divides the far gain among the far keys)");
  need(!rel_far_mask || pos_mode == PosMode::coupled_rel,
       fmt::format("model.rel_far_mask applies to pos_mode coupled_rel only (pos_mode is {})", pos_mode_name(pos_mode)));
  need(attn_scale != AttnScale::positional || pos_mode == PosMode::coupled_rel,
       fmt::format("model.attn_scale positional takes the scores from pos_mode coupled_rel's bias (pos_mode is {})",
                   pos_mode_name(pos_mode)));
  need(!(rel_far_mask && rel_far), "model.rel_far_mask and model.rel_far exclude each other (a masked far key has no gain)");
  need(!rel_value || pos_mode == PosMode::coupled_rel,
       fmt::format("model.rel_value applies to pos_mode coupled_rel only (pos_mode is {})", pos_mode_name(pos_mode)));
  const int L = pos_tables(pos_mode);
  for (int lv = L; lv < kMaxPosLevels; ++lv)
    need(pos_codes[lv] == PosCode::learned,
         fmt::format("model.pos_codes names {} levels but pos_mode {} has {} position table{}", lv + 1,
                     pos_mode_name(pos_mode), L, L == 1 ? "" : "s"));
  need(pos_code_scale > 0 && pos_code_scale < 100,
       fmt::format("model.pos_code_scale must be in (0, 100) (got {})", pos_code_scale));
  need(pos_code_distance >= 1 && pos_code_distance <= 8,
       fmt::format("model.pos_code_distance must be in [1, 8] (got {})", pos_code_distance));
  int code_dims = 0;
  for (int lv = 0; lv < L; ++lv) {
    if (!pos_code_is_vertex(pos_codes[lv])) continue;
    need(pos_code_distance == 1 || max_pos(lv) < kMaxLexicodeWords,
         fmt::format("model.pos_code_distance {} codes at most {} IDs (max_pos{} is {})", pos_code_distance,
                     kMaxLexicodeWords - 1, lv + 1, max_pos(lv)));
    const int P = pos_code_bits(max_pos(lv), pos_code_distance);
    need(P > 0, fmt::format("model.pos_codes: no code of at most {} bits and distance {} holds the {} IDs of level {}",
                            kMaxCodeBits, pos_code_distance, max_pos(lv) + 1, lv + 1));
    code_dims += 2 * P;
  }
  need(code_dims <= d_model, fmt::format("model.pos_codes: the hypercube codes take {} residual dimensions (2 ceil(log2("
                                         "max_pos + 1)) per coded level), more than d_model = {}",
                                         code_dims, d_model));
  // RoPE turns pairs of a head's dimensions.
  need(pos_mode != PosMode::rope || d_head % 2 == 0,
       fmt::format("pos_mode rope rotates pairs of dimensions: model.d_head must be even (got {})", d_head));
}

void to_json(nlohmann::json& j, const ModelConfig& c) {
  j = nlohmann::json{{"vocab", c.vocab},
                     {"vocabulary", vocabulary_string(c.vocab)},
                     {"n_layers", c.n_layers},
                     {"n_heads", c.n_heads},
                     {"d_model", c.d_model},
                     {"d_head", c.d_head},
                     {"d_ff", c.d_ff},
                     {"max_pos1", c.max_pos1},
                     {"max_pos2", c.max_pos2},
                     {"max_pos3", c.max_pos3},
                     {"pos_mode", pos_mode_name(c.pos_mode)},
                     {"norm_eps", c.norm_eps},
                     {"init_std", c.init_std},
                     {"attn_scale", attn_scale_name(c.attn_scale)},
                     {"init", init_name(c.init)},
                     {"tie_readout", c.tie_readout},
                     {"final_norm", norm_kind_name(c.final_norm)}};
  // Fields of one mode or option only where they apply: older files stay as they were.
  if (c.pos_mode == PosMode::abacus) j["abacus_k"] = c.abacus_k;
  if (c.pos_mode == PosMode::fire) {
    j["fire_width"] = c.fire_width;
    j["fire_threshold"] = fire_threshold_name(c.fire_threshold);
  }
  if (c.input_injection) j["input_injection"] = true;
  if (c.pos_mode == PosMode::coupled_rel) j["rel_window"] = c.rel_window;
  if (c.rel_far) j["rel_far"] = true;
  if (c.rel_far_norm) j["rel_far_norm"] = true;
  if (c.rel_far_mask) j["rel_far_mask"] = true;
  if (c.rel_value) j["rel_value"] = true;
  if (c.any_pos_code()) {
    j["pos_codes"] = c.pos_codes_string();
    j["pos_code_scale"] = c.pos_code_scale;
    if (c.pos_code_distance != 1) j["pos_code_distance"] = c.pos_code_distance;
  }
}

void from_json(const nlohmann::json& j, ModelConfig& c) {
  if (!j.is_object()) throw InputError("model config must be a JSON object");
  auto geti = [&](const char* k, int& v) {
    if (!j.contains(k)) return;
    if (!j[k].is_number_integer()) throw InputError(fmt::format("model.{} must be an integer", k));
    // an unsigned value above 2^63 would wrap to a negative int64: compare it as it was written
    const bool in_range = j[k].is_number_unsigned()
                              ? j[k].get<std::uint64_t>() <= 1'000'000'000
                              : j[k].get<std::int64_t>() >= -1'000'000'000 && j[k].get<std::int64_t>() <= 1'000'000'000;
    if (!in_range) throw InputError(fmt::format("model.{} out of range (got {})", k, j[k].dump()));
    v = int(j[k].get<std::int64_t>());
  };
  auto getf = [&](const char* k, float& v) {
    if (!j.contains(k)) return;
    if (!j[k].is_number()) throw InputError(fmt::format("model.{} must be a number", k));
    v = j[k].get<float>();
  };
  static const char* known[] = {"vocab",    "vocabulary", "n_layers",   "n_heads",     "d_model",
                                "d_head",   "d_ff",       "max_pos1",   "max_pos2",    "max_pos3", "pos_mode",
                                "norm_eps", "init_std",   "attn_scale", "init",        "tie_readout",
                                "final_norm", "architecture", "abacus_k", "fire_width", "fire_threshold",
                                "input_injection", "pos_codes", "pos_code_scale", "pos_code_distance", "rel_window", "rel_far",
                                "rel_far_norm", "rel_far_mask", "rel_value"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return it.key() == k; }) == std::end(known))
      throw InputError(fmt::format("model config: unknown field '{}'", it.key()));
  geti("vocab", c.vocab);
  geti("n_layers", c.n_layers);
  geti("n_heads", c.n_heads);
  geti("d_model", c.d_model);
  geti("d_head", c.d_head);
  geti("d_ff", c.d_ff);
  geti("max_pos1", c.max_pos1);
  geti("max_pos2", c.max_pos2);
  geti("max_pos3", c.max_pos3);
  auto gets = [&](const char* k) -> const std::string* {
    if (!j.contains(k)) return nullptr;
    if (!j[k].is_string()) throw InputError(fmt::format("model.{} must be a string", k));
    return j[k].get_ptr<const std::string*>();
  };
  if (auto v = gets("pos_mode")) c.pos_mode = parse_pos_mode(*v);
  if (j.contains("abacus_k") && c.pos_mode != PosMode::abacus)
    throw InputError(fmt::format("model.abacus_k applies to pos_mode abacus only (pos_mode is {})", pos_mode_name(c.pos_mode)));
  geti("abacus_k", c.abacus_k);
  for (const char* k : {"fire_width", "fire_threshold"})
    if (j.contains(k) && c.pos_mode != PosMode::fire)
      throw InputError(fmt::format("model.{} applies to pos_mode fire only (pos_mode is {})", k, pos_mode_name(c.pos_mode)));
  geti("fire_width", c.fire_width);
  if (j.contains("rel_window") && c.pos_mode != PosMode::coupled_rel)
    throw InputError(fmt::format("model.rel_window applies to pos_mode coupled_rel only (pos_mode is {})",
                                 pos_mode_name(c.pos_mode)));
  geti("rel_window", c.rel_window);
  if (j.contains("rel_far")) {
    if (c.pos_mode != PosMode::coupled_rel)
      throw InputError(fmt::format("model.rel_far applies to pos_mode coupled_rel only (pos_mode is {})",
                                   pos_mode_name(c.pos_mode)));
    if (!j["rel_far"].is_boolean()) throw InputError("model.rel_far must be true or false");
    c.rel_far = j["rel_far"].get<bool>();
  }
  if (j.contains("rel_far_norm")) {
    if (!j["rel_far_norm"].is_boolean()) throw InputError("model.rel_far_norm must be true or false");
    c.rel_far_norm = j["rel_far_norm"].get<bool>();
  }
  if (j.contains("rel_far_mask")) {
    if (c.pos_mode != PosMode::coupled_rel)
      throw InputError(fmt::format("model.rel_far_mask applies to pos_mode coupled_rel only (pos_mode is {})",
                                   pos_mode_name(c.pos_mode)));
    if (!j["rel_far_mask"].is_boolean()) throw InputError("model.rel_far_mask must be true or false");
    c.rel_far_mask = j["rel_far_mask"].get<bool>();
  }
  if (j.contains("rel_value")) {
    if (c.pos_mode != PosMode::coupled_rel)
      throw InputError(fmt::format("model.rel_value applies to pos_mode coupled_rel only (pos_mode is {})",
                                   pos_mode_name(c.pos_mode)));
    if (!j["rel_value"].is_boolean()) throw InputError("model.rel_value must be true or false");
    c.rel_value = j["rel_value"].get<bool>();
  }
  if (auto v = gets("fire_threshold")) c.fire_threshold = parse_fire_threshold(*v);
  if (j.contains("input_injection")) {
    if (!j["input_injection"].is_boolean()) throw InputError("model.input_injection must be true or false");
    c.input_injection = j["input_injection"].get<bool>();
  }
  if (auto v = gets("pos_codes")) {
    // one kind for every level, or one per level, comma-separated
    std::vector<std::string> parts;
    std::size_t b = 0;
    for (;;) {
      const std::size_t e = v->find(',', b);
      parts.push_back(v->substr(b, e == std::string::npos ? std::string::npos : e - b));
      if (e == std::string::npos) break;
      b = e + 1;
    }
    const int L = pos_tables(c.pos_mode);
    if (parts.size() > 1 && int(parts.size()) != L)
      throw InputError(fmt::format("model.pos_codes '{}': {} kinds for pos_mode {} with {} level{} (give one kind or "
                                   "one per level)", *v, parts.size(), pos_mode_name(c.pos_mode), L, L == 1 ? "" : "s"));
    for (int lv = 0; lv < kMaxPosLevels; ++lv) c.pos_codes[lv] = PosCode::learned;
    const PosCode one = parse_pos_code(parts[0]);
    for (int lv = 0; lv < L; ++lv) c.pos_codes[lv] = parts.size() == 1 ? one : parse_pos_code(parts[std::size_t(lv)]);
    if (L == 0 && one != PosCode::learned)
      throw InputError(fmt::format("model.pos_codes '{}': pos_mode {} has no position table", *v, pos_mode_name(c.pos_mode)));
  }
  getf("pos_code_scale", c.pos_code_scale);
  geti("pos_code_distance", c.pos_code_distance);
  getf("norm_eps", c.norm_eps);
  getf("init_std", c.init_std);
  if (auto v = gets("attn_scale")) c.attn_scale = parse_attn_scale(*v);
  if (auto v = gets("init")) c.init = parse_init(*v);
  if (auto v = gets("final_norm")) c.final_norm = parse_norm_kind(*v);
  if (j.contains("tie_readout")) {
    if (!j["tie_readout"].is_boolean()) throw InputError("model.tie_readout must be true or false");
    c.tie_readout = j["tie_readout"].get<bool>();
  }
  c.validate();
  // model.vocabulary describes model.vocab (to_json writes it): one that disagrees is refused, as
  // python/manyadd (strict.learned_model) refuses it
  if (j.contains("vocabulary")) {
    if (!j["vocabulary"].is_string()) throw InputError("model.vocabulary must be a string");
    const std::string& given = j["vocabulary"].get_ref<const std::string&>();
    if (given != vocabulary_string(c.vocab))
      throw InputError(fmt::format("model.vocabulary '{}' is not the vocabulary of model.vocab = {} ('{}')",
                                   given.substr(0, 40), c.vocab, vocabulary_string(c.vocab)));
  }
}

nlohmann::json architecture_description(const ModelConfig& c) {
  const bool t5 = c.init == InitScheme::t5;
  nlohmann::json d = {
      {"type", "decoder-only transformer"},
      {"embedding", "tok_emb[token] + sum over levels of pos_emb.<level>[position id of that level]"},
      {"block", c.input_injection
                    ? "input injection (McLeish et al. 2024): block 0 reads x0 = the embedding, block l >= 1 reads x = "
                      "(block l-1's output) + x0; then x = attn_norm2(x + attn(attn_norm1(x))); x = ffn_norm2(x + "
                      "ffn(ffn_norm1(x)))"
                    : "x = attn_norm2(x + attn(attn_norm1(x))); x = ffn_norm2(x + ffn(ffn_norm1(x)))"},
      {"attention", c.attn_scale == AttnScale::none
                        ? "causal multi-head, no biases, q/k/v/o nn.Linear(bias=False), scores q.k unscaled (T5)"
                    : c.attn_scale == AttnScale::positional
                        ? "causal multi-head, no biases, q/k/v/o nn.Linear(bias=False), scores the position bias "
                          "alone (q.k times 0: q and k unused)"
                        : "causal multi-head, no biases, q/k/v/o nn.Linear(bias=False), scores scaled by 1/sqrt(d_head)"},
      {"ffn", "GEGLU: wi (2*d_ff, d_model) -> [gate | up]; gelu_tanh(gate) * up; wo (d_model, d_ff)"},
      {"norm", "RMSNorm: w * x / sqrt(mean(x^2) + norm_eps)"},
      {"final_norm", c.final_norm == NormKind::layer
                         ? "LayerNorm: w * (x - mean(x)) / sqrt(var(x) + norm_eps) + b (biased variance), tensors "
                           "final_norm.weight and final_norm.bias"
                         : "RMSNorm: w * x / sqrt(mean(x^2) + norm_eps), tensor final_norm.weight"},
      {"readout", c.tie_readout ? "tied to the token table (T5): logits = (final_norm(x) * d_model^-1/2) "
                                  "tok_emb.weight^T; no lm_head tensor"
                                : "final_norm then lm_head (vocab, d_model), no bias"},
      {"init", t5 ? "t5: q ~ N(0, (d_model d_head)^-1/2), k, v ~ N(0, d_model^-1/2), o ~ N(0, (n_heads d_head)^-1/2), "
                    "ffn wi ~ N(0, d_model^-1/2), ffn wo ~ N(0, d_ff^-1/2), tables N(0, 1), norm weights 1, biases 0"
                  : "normal: matrices and tables N(0, init_std), norm weights 1, biases 0"}};
  if (c.pos_mode == PosMode::fire) {
    d["embedding"] = "tok_emb[token] (no position table)";
    d["position_bias"] = fmt::format(
        "FIRE (Li et al. 2024): scores(i, j) += b_h(i, j) in every layer, i, j the token indices (BOS 0), j <= i; "
        "b(i, j) = W3 relu(W2 relu(W1 u)) (fire.mlp.0/2/4.weight: (H, 1), (H, H), (n_heads, H), H = fire_width = "
        "{}, no biases), u = psi(i - j) / (psi({}(i, L)) + 1e-6), psi(x) = log(|c| x + 1), L = L_sqrt^2 (fire.c, "
        "fire.L_sqrt learned; init 0.1, 16); init W1 N(0, 1), W2, W3 N(0, H^-1/2)",
        c.fire_width, fire_threshold_name(c.fire_threshold));
  }
  if (c.pos_mode == PosMode::rope) {
    d["embedding"] = "tok_emb[token] (no position table)";
    d["rotary"] = fmt::format(
        "RoPE (Su et al. 2021): q and k of every head rotated before the scores, pair (2k, 2k+1) of the token at index "
        "p (BOS 0) by the angle p * {}^(-2k/d_head): x'_2k = x_2k cos - x_2k+1 sin, x'_2k+1 = x_2k sin + x_2k+1 cos",
        kRopeBase);
  }
  if (c.pos_mode == PosMode::none) d["embedding"] = "tok_emb[token] (no position table)";
  if (c.pos_mode == PosMode::coupled_rel) {
    d["embedding"] = "tok_emb[token] (no position table)";
    d["position_bias"] = fmt::format(
        "coupled_rel: scores(i, j) += sum over the 2 coupling levels lv of g[layer, head, lv, d + {0}] with d = "
        "id_lv(j) - id_lv(i), |d| <= {0} (rel_bias.weight (n_layers, n_heads, 2, {1})); no bias where either "
        "ID is 0{2}; init N(0, init_std) (t5: d_model^-1/2)",
        c.rel_window, c.rel_buckets(),
        c.rel_far ? fmt::format(", g[layer, head, lv, {}]{} where |d| > {}", 2 * c.rel_window + 1,
                                c.rel_far_norm ? " - ln(number of the query's far keys on level lv)" : "",
                                c.rel_window)
                  : c.rel_far_mask ? fmt::format("; not attended (score -inf) where |d| > {} on either level", c.rel_window)
                                   : fmt::format(" or |d| > {}", c.rel_window));
    if (c.rel_value)
      d["position_value"] = fmt::format(
          "rel_value (Shaw et al. 2018): the attention output of head h at query i is sum_j P(i, j) (v_j + sum over "
          "levels lv of r[layer, h, lv, bucket]), the bucket of the ID difference as the bias's (rel_value.weight "
          "(n_layers, n_heads, 2, {}, d_head)); init 0",
          c.rel_buckets());
  }
  return d;
}

}  // namespace manyadd::learn
