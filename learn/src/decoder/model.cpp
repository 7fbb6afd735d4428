// The learned transformer: layout, init, the one forward/backward (a batch of sequences; a single
// sequence is a batch of one), greedy KV-cache decoding on the same forward.
#include "manyadd/learn/decoder/model.hpp"

#include <algorithm>
#include <random>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/safetensors.hpp"
#include "manyadd/learn/decoder/layers.hpp"
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
  throw InputError(fmt::format("attention scale '{}' unknown (inv_sqrt_dhead|none)", s));
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
const char* attn_scale_name(AttnScale a) { return a == AttnScale::none ? "none" : "inv_sqrt_dhead"; }
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
namespace {
bool pos_code_is_vertex(PosCode k) { return k == PosCode::hypercube || k == PosCode::shuffled; }
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
  need(!(rel_far_mask && rel_far), "model.rel_far_mask and model.rel_far exclude each other (a masked far key has no gain)");
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
                                "rel_far_norm", "rel_far_mask"};
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
  }
  return d;
}

Layout Layout::make(const ModelConfig& c) {
  c.validate();
  Layout L;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape) { return L.add(name, std::move(shape)); };
  const std::int64_t C = c.d_model, D = std::int64_t(c.n_heads) * c.d_head, F = c.d_ff;
  L.wte = add("tok_emb.weight", {c.vocab, C});
  for (int lv = 0; lv < pos_tables(c.pos_mode); ++lv) {
    L.wpe[lv] = add(fmt::format("pos_emb.{}.weight", lv), {c.max_pos(lv) + 1, C});
    L.tensors.back().trainable = !pos_code_frozen(c.pos_codes[lv]);
  }
  if (c.pos_mode == PosMode::fire) {
    const std::int64_t H = c.fire_width;
    L.fire_w1 = add("fire.mlp.0.weight", {H, 1});
    L.fire_w2 = add("fire.mlp.2.weight", {H, H});
    L.fire_w3 = add("fire.mlp.4.weight", {c.n_heads, H});
    L.fire_c = add("fire.c", {1});
    L.fire_L_sqrt = add("fire.L_sqrt", {1});
  }
  if (c.pos_mode == PosMode::coupled_rel)
    L.rel_bias = add("rel_bias.weight", {c.n_layers, c.n_heads, pos_levels(c.pos_mode), c.rel_buckets()});
  for (int b = 0; b < c.n_layers; ++b) {
    Block k;
    if (L.rel_bias >= 0)
      k.rel_bias = L.rel_bias + std::int64_t(b) * c.n_heads * pos_levels(c.pos_mode) * c.rel_buckets();
    const std::string p = fmt::format("layers.{}.", b);
    k.attn_norm1 = add(p + "attn_norm1.weight", {C});
    k.wq = add(p + "attn.q.weight", {D, C});
    k.wk = add(p + "attn.k.weight", {D, C});
    k.wv = add(p + "attn.v.weight", {D, C});
    k.wo = add(p + "attn.o.weight", {C, D});
    k.attn_norm2 = add(p + "attn_norm2.weight", {C});
    k.ffn_norm1 = add(p + "ffn_norm1.weight", {C});
    k.wi = add(p + "ffn.wi.weight", {2 * F, C});
    k.wo_ff = add(p + "ffn.wo.weight", {C, F});
    k.ffn_norm2 = add(p + "ffn_norm2.weight", {C});
    L.blocks.push_back(k);
  }
  L.final_norm = add("final_norm.weight", {C});
  if (c.final_norm == NormKind::layer) L.final_norm_bias = add("final_norm.bias", {C});
  if (!c.tie_readout) L.lm_head = add("lm_head.weight", {c.vocab, C});
  return L;
}

std::int64_t Layout::add(const std::string& name, std::vector<std::int64_t> shape) {
  TensorSpec t;
  t.name = name;
  t.shape = std::move(shape);
  t.size = 1;
  for (auto d : t.shape) t.size *= d;
  t.offset = total;
  total += t.size;
  tensors.push_back(t);
  return t.offset;
}

std::vector<ParamSegment> Layout::trainable_segments() const {
  std::vector<ParamSegment> segs;
  for (const auto& t : tensors) {
    if (!t.trainable || t.size == 0) continue;
    if (!segs.empty() && segs.back().offset + segs.back().size == t.offset && segs.back().decay == t.decay)
      segs.back().size += t.size;
    else
      segs.push_back({t.offset, t.size, t.decay});
  }
  return segs;
}

const TensorSpec& Layout::find(const std::string& name) const {
  for (auto& t : tensors)
    if (t.name == name) return t;
  throw InputError(fmt::format("no tensor named '{}'", name));
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
// The std of a matrix or table under a scheme (names as Layout::make writes them). T5: HuggingFace's
// T5PreTrainedModel._init_weights with initializer_factor 1 (the Mesh TensorFlow scheme that lets T5
// skip the 1/sqrt(d_head) of the scores); tables N(0, 1) as torch.nn.Embedding's default.
double init_std_of(const ModelConfig& c, const std::string& name) {
  // FIRE's MLP: the authors' init in either scheme (custom_t5_decoder_only.py: net[0] N(0, factor),
  // net[2] and net[4] N(0, factor d_fire^-1/2), factor = initializer_factor = 1).
  if (name == "fire.mlp.0.weight") return 1.0;
  if (name == "fire.mlp.2.weight" || name == "fire.mlp.4.weight") return 1.0 / std::sqrt(double(c.fire_width));
  if (c.init == InitScheme::normal) return double(c.init_std);
  const double C = c.d_model, HS = c.d_head, D = double(c.n_heads) * c.d_head, F = c.d_ff;
  if (ends_with(name, "attn.q.weight")) return 1.0 / std::sqrt(C * HS);
  if (ends_with(name, "attn.k.weight") || ends_with(name, "attn.v.weight")) return 1.0 / std::sqrt(C);
  if (ends_with(name, "attn.o.weight")) return 1.0 / std::sqrt(D);
  if (ends_with(name, "ffn.wi.weight")) return 1.0 / std::sqrt(C);
  if (ends_with(name, "ffn.wo.weight")) return 1.0 / std::sqrt(F);
  if (name == "rel_bias.weight") return 1.0 / std::sqrt(C);  // HF T5's relative_attention_bias: factor d_model^-1/2
  return 1.0;  // tok_emb, pos_emb.*, an untied lm_head
}
}  // namespace

double standard_normal(Rng& rng) {
  const double u1 = (double(rng.uniform(1, (1ull << 53))) ) / double(1ull << 53);
  const double u2 = double(rng.uniform(0, (1ull << 53) - 1)) / double(1ull << 53);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

template <class S>
std::vector<S> init_params(const ModelConfig& c, const Layout& lay, std::uint64_t seed) {
  std::vector<S> p(std::size_t(lay.total), S(0));
  Rng rng(seed);
  auto normal = [&]() { return standard_normal(rng); };
  for (auto& t : lay.tensors) {
    if (t.name == "fire.c" || t.name == "fire.L_sqrt") {  // the authors' c0 = 0.1, L0_sqrt = 16; no draw
      p[std::size_t(t.offset)] = S(t.name == "fire.c" ? 0.1 : 16.0);
      continue;
    }
    if (t.shape.size() == 1) {  // norm weights 1, LayerNorm bias 0; no draw
      const S v = ends_with(t.name, ".bias") ? S(0) : S(1);
      for (std::int64_t i = 0; i < t.size; ++i) p[std::size_t(t.offset + i)] = v;
      continue;
    }
    const double sd = init_std_of(c, t.name);
    for (std::int64_t i = 0; i < t.size; ++i) p[std::size_t(t.offset + i)] = S(sd * normal());
  }
  // Position codes: the tables took a learned table's draws above (every other tensor is the learned
  // run's); frozen rescales them, hypercube and shuffled replace them.
  for (int lv = 0; lv < pos_tables(c.pos_mode); ++lv) {
    S* w = p.data() + lay.wpe[lv];
    const std::int64_t n = std::int64_t(c.max_pos(lv) + 1) * c.d_model;
    if (c.pos_codes[lv] == PosCode::frozen) {
      const double r = double(c.pos_code_scale) / init_std_of(c, fmt::format("pos_emb.{}.weight", lv));
      for (std::int64_t i = 0; i < n; ++i) w[i] = S(double(w[i]) * r);
    } else if (pos_code_is_vertex(c.pos_codes[lv])) {
      const auto tab = pos_code_table(c, lv, seed);
      for (std::int64_t i = 0; i < n; ++i) w[i] = S(tab[std::size_t(i)]);
    }
  }
  return p;
}

template <class S>
void Acts<S>::resize(const ModelConfig& c, const BatchView& x, int Tk_) {
  B = x.B, T = x.T, Tk = Tk_, R = x.rows();
  const std::size_t C = std::size_t(c.d_model), D = std::size_t(c.n_heads) * c.d_head, F = std::size_t(c.d_ff);
  const int past = Tk_ - x.T;  // > 0 only for a uniform batch of one
  const std::size_t r = std::size_t(R), rk = std::size_t(R) + std::size_t(past);
  std::size_t att = 0;  // each sequence's (len, len + past) score matrix per head
  for (int s = 0; s < x.B; ++s) att += std::size_t(x.length(s)) * std::size_t(x.length(s) + past);
  x0.resize(r * C);
  blocks.resize(std::size_t(c.n_layers));
  for (auto& b : blocks) {
    b.xin.resize(c.input_injection ? r * C : 0);
    b.n1.resize(r * C), b.r1.resize(r);
    b.q.resize(r * D), b.k.resize(rk * D), b.v.resize(rk * D);
    b.att.resize(std::size_t(c.n_heads) * att);
    b.ao.resize(r * D);
    b.proj.resize(r * C), b.res1.resize(r * C);
    b.x1.resize(r * C), b.r2.resize(r);
    b.n3.resize(r * C), b.r3.resize(r);
    b.h.resize(r * 2 * F), b.g.resize(r * F);
    b.fo.resize(r * C), b.res2.resize(r * C);
    b.x2.resize(r * C), b.r4.resize(r);
  }
  xf.resize(r * C), rf.resize(r), mf.resize(r);
  logits.resize(r * std::size_t(c.vocab)), probs.resize(r * std::size_t(c.vocab));
  losses.resize(r);
}

template <class S>
void GradScratch<S>::resize(const ModelConfig& c, std::int64_t R, int T) {
  const std::size_t C = std::size_t(c.d_model), D = std::size_t(c.n_heads) * c.d_head, F = std::size_t(c.d_ff);
  const std::size_t r = std::size_t(R);
  dlogits.resize(r * std::size_t(c.vocab));
  dxf.resize(r * C), dx.resize(r * C), dres.resize(r * C), dn.resize(r * C);
  dh.resize(r * 2 * F), dg.resize(r * F);
  dao.resize(r * D), dq.resize(r * D), dk.resize(r * D), dv.resize(r * D);
  datt.resize(std::size_t(T) * std::size_t(T));
  dx0.resize(c.input_injection ? r * C : 0);
}

BatchView batch_of(const Example& ex) {
  const int T = ex.T();
  if (T < 1) throw InputError("empty sequence");
  if (int(ex.targets.size()) != T) throw InputError("targets and tokens differ in length");
  BatchView x;
  x.B = 1, x.T = T;
  x.tokens = ex.tokens.data();
  x.targets = ex.targets.data();
  for (int lv = 0; lv < kMaxPosLevels; ++lv) {
    if (ex.pos[lv].empty()) continue;  // a level the model does not use (model_forward checks)
    if (int(ex.pos[lv].size()) < T) throw InputError(fmt::format("position IDs of level {} are missing", lv + 1));
    x.pos[lv] = ex.pos[lv].data();
  }
  return x;
}

namespace {
// Every token and position ID of the rows against the model: a bad ID would read outside a table.
void check_rows(const ModelConfig& c, const BatchView& x) {
  if (x.B < 1 || x.T < 1) throw InputError("empty batch");
  if (x.offsets) {  // varlen: sequences of 1..T rows, in order from row 0
    if (x.offsets[0] != 0) throw InputError("varlen batch: the first sequence must start at row 0");
    for (int s = 0; s < x.B; ++s)
      if (x.length(s) < 1 || x.length(s) > x.T)
        throw InputError(fmt::format("varlen batch: sequence {} has {} rows (must be 1..{})", s, x.length(s), x.T));
  }
  const std::int64_t R = x.rows();
  for (std::int64_t i = 0; i < R; ++i)
    if (x.tokens[i] >= c.vocab) throw InputError("token outside the vocabulary");
  for (int lv = 0; lv < pos_levels(c.pos_mode); ++lv) {
    if (!x.pos[lv]) throw InputError(fmt::format("position IDs of level {} are missing", lv + 1));
    for (std::int64_t i = 0; i < R; ++i)
      if (x.pos[lv][i] < 0 || x.pos[lv][i] > c.max_pos(lv))
        throw InputError(fmt::format("position ID {} of level {} outside [0, {}]: the model's max_pos{} is too small "
                                     "for this shape",
                                     x.pos[lv][i], lv + 1, c.max_pos(lv), lv + 1));
  }
}
template <class S>
void zero(std::vector<S>& v) {
  std::fill(v.begin(), v.end(), S(0));
}

// The bf16 rounding of mixed precision, in place. Float only: bf16 emulation rounds floats (core's
// float_to_bf16); a double forward is the finite-difference reference and has no bf16 mode.
template <class S>
void round_bf16_inplace(S* p, std::int64_t n) {
  if constexpr (std::is_same_v<S, float>) {
    for (std::int64_t i = 0; i < n; ++i) p[i] = round_bf16(p[i]);
  } else {
    (void)p, (void)n;
    throw InvariantError("bf16 precision runs in float only");
  }
}

// How one forward/backward computes: the precision and, in bf16, the rounded weights of the products.
template <class S>
struct Ctx {
  bool bf16;
  const S* wg;  // matrix-product weights: the parameters (fp32) or Acts::wgemm (bf16)
  S att_scale;
  const S* fire_bias = nullptr;                      // pos_mode fire: (NH, T, Tk), every sequence and layer
  const std::vector<S>* rope_cos = nullptr;          // pos_mode rope: this call's tables
  const std::vector<S>* rope_sin = nullptr;
  std::vector<S>* rel_bias = nullptr;                // pos_mode coupled_rel: the per-sequence bias scratch
  const S* params = nullptr;                         // the parameters (fp32/double: the gains)
  const S* W(std::int64_t off) const { return wg + off; }
  void round(std::vector<S>& v, std::int64_t n) const {
    if (bf16) round_bf16_inplace(v.data(), n);
  }
};
template <class S>
Ctx<S> context(const Acts<S>& a, const ModelView<S>& m) {
  const bool bf16 = m.precision == Precision::bf16;
  Ctx<S> ctx{bf16, bf16 ? a.wgemm.data() : m.params,
             attention_scale<S>(m.cfg.d_head, m.cfg.attn_scale == AttnScale::inv_sqrt_dhead)};
  if (m.cfg.pos_mode == PosMode::fire) ctx.fire_bias = a.fire_bias.data();
  if (m.cfg.pos_mode == PosMode::rope) ctx.rope_cos = &a.rope_cos, ctx.rope_sin = &a.rope_sin;
  if (m.cfg.pos_mode == PosMode::coupled_rel) ctx.rel_bias = const_cast<std::vector<S>*>(&a.rel_bias);
  ctx.params = m.params;
  return ctx;
}
// bf16: the weights every matrix product reads, rounded once per forward (the tables and norm weights
// are copied unrounded: the embedding lookup and the norms read fp32 values; a tied readout reads the
// token table through this copy, rounded, while the embedding reads it from the parameters).
template <class S>
void round_gemm_weights(std::vector<S>& wg, const ModelView<S>& m) {
  const Layout& lay = m.lay;
  const ModelConfig& c = m.cfg;
  wg.assign(m.params, m.params + lay.total);
  auto rnd = [&](std::int64_t off, std::int64_t n) { round_bf16_inplace(wg.data() + off, n); };
  const std::int64_t C = c.d_model, D = std::int64_t(c.n_heads) * c.d_head, F = c.d_ff;
  for (const auto& w : lay.blocks) {
    rnd(w.wq, D * C), rnd(w.wk, D * C), rnd(w.wv, D * C), rnd(w.wo, C * D);
    rnd(w.wi, 2 * F * C), rnd(w.wo_ff, C * F);
  }
  rnd(lay.readout(), std::int64_t(c.vocab) * C);
}

// Passes 2-7 of one block on the rows of xb, input x (positions past..past+T-1 of each sequence;
// past > 0 only for a batch of one); writes the block's activations, its output is b.x2. bf16 rounding points (ctx.round): n1,
// q, k, v, the attention weights inside attention_forward (before they multiply v), ao, n3, h, g; proj and
// fo stay fp32 (they are only added to the fp32 residual, so rounding them would lose accuracy for nothing:
// the GPU writes or fuses them in fp32). RoPE turns q and k before their rounding (the rotation reads the
// fp32 products); FIRE's bias is fp32, added to the fp32 scores before the softmax (layers.hpp).
template <class S>
void block_forward(typename Acts<S>::Block& b, const S* x, const ModelView<S>& m, const Ctx<S>& ctx,
                   const Layout::Block& w, const BatchView& xb, int past) {
  const ModelConfig& c = m.cfg;
  const int R = int(xb.rows()), C = c.d_model, NH = c.n_heads, HS = c.d_head, D = NH * HS, F = c.d_ff;
  const S eps = S(c.norm_eps);
  const std::int64_t RC = std::int64_t(R) * C, RD = std::int64_t(R) * D;
  // 2. n1 = Norm1(x)
  rmsnorm_forward(b.n1.data(), b.r1.data(), x, m.at(w.attn_norm1), R, C, eps);
  ctx.round(b.n1, RC);
  // 3. q, k, v = n1 Wq^T, n1 Wk^T, n1 Wv^T   (k, v at key rows past.. : past > 0 only for B = 1)
  matmul_forward(b.q.data(), b.n1.data(), ctx.W(w.wq), R, C, D);
  matmul_forward(b.k.data() + std::int64_t(past) * D, b.n1.data(), ctx.W(w.wk), R, C, D);
  matmul_forward(b.v.data() + std::int64_t(past) * D, b.n1.data(), ctx.W(w.wv), R, C, D);
  if (ctx.rope_cos)  // 3'. RoPE: q, k of each sequence's row t turned by position past + t (the cached keys are
                     //     turned already)
    for (int s = 0; s < xb.B; ++s) {
      const std::int64_t o = xb.begin(s) * D;
      rope_rotate(b.q.data() + o, *ctx.rope_cos, *ctx.rope_sin, xb.length(s), NH, HS, +1);
      rope_rotate(b.k.data() + std::int64_t(past) * D + o, *ctx.rope_cos, *ctx.rope_sin, xb.length(s), NH, HS, +1);
    }
  if (ctx.bf16) {
    round_bf16_inplace(b.q.data(), RD);
    round_bf16_inplace(b.k.data() + std::int64_t(past) * D, RD);  // the cached rows are rounded already
    round_bf16_inplace(b.v.data() + std::int64_t(past) * D, RD);
  }
  // 4. ao = causal softmax(scale q k^T [+ FIRE bias]) v per head, one sequence at a time on its own rows
  //    (scores and softmax in fp32; bf16: the weights rounded before they multiply v, layers.hpp); its key
  //    rows start where its query rows do (past > 0: one sequence); FIRE: its block is the top-left corner
  //    of the batch's (NH, T, T + past) bias
  //    coupled_rel: the sequence's own (NH, T, Tk) bias from its IDs (layers.hpp, coupled_rel_bias)
  std::int64_t att_at = 0;
  for (int s = 0; s < xb.B; ++s) {
    const std::int64_t o = xb.begin(s) * D;
    const int T = xb.length(s), Tk = T + past;
    const S* bias = ctx.fire_bias;
    int bias_rows = xb.T, bias_cols = xb.T + past;
    if (ctx.rel_bias) {
      const std::int32_t* ids[kMaxPosLevels] = {};
      for (int lv = 0; lv < pos_levels(c.pos_mode); ++lv) ids[lv] = xb.pos[lv] + xb.begin(s);
      ctx.rel_bias->resize(std::size_t(NH) * std::size_t(T) * std::size_t(Tk));
      coupled_rel_bias(ctx.rel_bias->data(), ctx.params + w.rel_bias, ids, pos_levels(c.pos_mode), T, past, NH,
                       c.rel_window, c.rel_far, c.rel_far_norm, c.rel_far_mask);
      bias = ctx.rel_bias->data(), bias_rows = T, bias_cols = Tk;
    }
    attention_forward(b.ao.data() + o, b.att.data() + att_at, b.q.data() + o, b.k.data() + o, b.v.data() + o, T, Tk,
                      NH, HS, ctx.att_scale, bias, bias_rows, bias_cols, ctx.bf16);
    att_at += std::int64_t(NH) * T * Tk;
  }
  ctx.round(b.ao, RD);
  // 5. proj = ao Wo^T ; res1 = x + proj ; x1 = Norm2(res1)
  matmul_forward(b.proj.data(), b.ao.data(), ctx.W(w.wo), R, D, C);
  residual_forward(b.res1.data(), x, b.proj.data(), RC);
  rmsnorm_forward(b.x1.data(), b.r2.data(), b.res1.data(), m.at(w.attn_norm2), R, C, eps);
  // 6. n3 = Norm1'(x1) ; h = n3 Wi^T ; g = geglu(h) ; fo = g Wo'^T
  rmsnorm_forward(b.n3.data(), b.r3.data(), b.x1.data(), m.at(w.ffn_norm1), R, C, eps);
  ctx.round(b.n3, RC);
  matmul_forward(b.h.data(), b.n3.data(), ctx.W(w.wi), R, C, 2 * F);
  ctx.round(b.h, std::int64_t(R) * 2 * F);
  geglu_forward(b.g.data(), b.h.data(), R, F);
  ctx.round(b.g, std::int64_t(R) * F);
  matmul_forward(b.fo.data(), b.g.data(), ctx.W(w.wo_ff), R, F, C);
  // 7. res2 = x1 + fo ; x2 = Norm2'(res2)
  residual_forward(b.res2.data(), b.x1.data(), b.fo.data(), RC);
  rmsnorm_forward(b.x2.data(), b.r4.data(), b.res2.data(), m.at(w.ffn_norm2), R, C, eps);
}

// Passes 7..2 of one block in reverse (no cache); g.dx holds d(block output) on entry and d(block input
// x) on exit. Accumulates into the block's parameter gradients in G. bf16 rounding points: the output
// gradient of each product before the product reads it (dres for the FFN and attention outputs, dh,
// dao, inside attention_backward P before P^T dout and dS before dS k and dS^T q, dq, dk, dv: RoPE turns
// dq and dk back before their rounding); the gradients the products write (dg, dn), the residual gradient,
// FIRE's d bias (the unrounded dS) and every parameter gradient stay fp32.
template <class S>
void block_backward(S* G, GradScratch<S>& g, const typename Acts<S>::Block& b, const S* x, const ModelView<S>& m,
                    const Ctx<S>& ctx, const Layout::Block& w, const BatchView& xb) {
  const ModelConfig& c = m.cfg;
  const int R = int(xb.rows()), C = c.d_model, NH = c.n_heads, HS = c.d_head, D = NH * HS, F = c.d_ff;
  const std::int64_t RC = std::int64_t(R) * C, RD = std::int64_t(R) * D;
  // The residual gradient as a product's input: itself in fp32, a rounded copy in bf16.
  auto dres_in = [&]() -> const S* {
    if (!ctx.bf16) return g.dres.data();
    g.dres16.assign(g.dres.begin(), g.dres.begin() + RC);
    round_bf16_inplace(g.dres16.data(), RC);
    return g.dres16.data();
  };
  // 7. x2 = Norm2'(res2) ; res2 = x1 + fo   (dres = d res2, flows to x1 and fo)
  zero(g.dres);
  rmsnorm_backward(g.dres.data(), G + w.ffn_norm2, g.dx.data(), b.res2.data(), m.at(w.ffn_norm2), b.r4.data(), R, C);
  // 6. fo = g Wo'^T ; g = geglu(h) ; h = n3 Wi^T ; n3 = Norm1'(x1)
  zero(g.dg);
  matmul_backward(g.dg.data(), G + w.wo_ff, dres_in(), b.g.data(), ctx.W(w.wo_ff), R, F, C);
  zero(g.dh);
  geglu_backward(g.dh.data(), g.dg.data(), b.h.data(), R, F);
  ctx.round(g.dh, std::int64_t(R) * 2 * F);
  zero(g.dn);
  matmul_backward(g.dn.data(), G + w.wi, g.dh.data(), b.n3.data(), ctx.W(w.wi), R, C, 2 * F);
  //    d x1 = dres (residual) + Norm1' backward; dx is reused as d x1
  std::copy(g.dres.begin(), g.dres.end(), g.dx.begin());
  rmsnorm_backward(g.dx.data(), G + w.ffn_norm1, g.dn.data(), b.x1.data(), m.at(w.ffn_norm1), b.r3.data(), R, C);
  // 5. proj = ao Wo^T ; res1 = x + proj ; x1 = Norm2(res1)
  zero(g.dres);
  rmsnorm_backward(g.dres.data(), G + w.attn_norm2, g.dx.data(), b.res1.data(), m.at(w.attn_norm2), b.r2.data(), R, C);
  zero(g.dao);
  matmul_backward(g.dao.data(), G + w.wo, dres_in(), b.ao.data(), ctx.W(w.wo), R, D, C);
  ctx.round(g.dao, RD);
  // 4. ao = causal softmax(scale q k^T [+ FIRE bias]) v per head, one sequence at a time (FIRE: d bias summed
  //    over the sequences and, through g.dfire_bias, the layers)
  zero(g.dq), zero(g.dk), zero(g.dv);
  //    coupled_rel: each sequence's d bias (its own scratch) summed into the layer's gains by bucket
  S* dbias = ctx.fire_bias ? g.dfire_bias.data() : nullptr;
  std::int64_t att_at = 0;
  for (int s = 0; s < xb.B; ++s) {
    const std::int64_t o = xb.begin(s) * D;
    const int T = xb.length(s);
    int bias_T = xb.T;
    if (ctx.rel_bias) {
      g.drel_bias.assign(std::size_t(NH) * std::size_t(T) * std::size_t(T), S(0));
      dbias = g.drel_bias.data(), bias_T = T;
    }
    attention_backward(g.dq.data() + o, g.dk.data() + o, g.dv.data() + o, g.datt.data(), g.dao.data() + o,
                       b.att.data() + att_at, b.q.data() + o, b.k.data() + o, b.v.data() + o, T, NH, HS,
                       ctx.att_scale, dbias, bias_T, ctx.bf16 ? b.ao.data() + o : nullptr);
    if (ctx.rel_bias) {
      const std::int32_t* ids[kMaxPosLevels] = {};
      for (int lv = 0; lv < pos_levels(c.pos_mode); ++lv) ids[lv] = xb.pos[lv] + xb.begin(s);
      coupled_rel_bias_backward(G + w.rel_bias, g.drel_bias.data(), ids, pos_levels(c.pos_mode), T, NH, c.rel_window, c.rel_far);
    }
    att_at += std::int64_t(NH) * T * T;
    if (ctx.rope_cos) {  // 3'. RoPE: the rotation is orthogonal, d(before) = R^T d(after)
      rope_rotate(g.dq.data() + o, *ctx.rope_cos, *ctx.rope_sin, T, NH, HS, -1);
      rope_rotate(g.dk.data() + o, *ctx.rope_cos, *ctx.rope_sin, T, NH, HS, -1);
    }
  }
  ctx.round(g.dq, RD), ctx.round(g.dk, RD), ctx.round(g.dv, RD);
  // 3. q, k, v = n1 Wq^T, n1 Wk^T, n1 Wv^T
  zero(g.dn);
  matmul_backward(g.dn.data(), G + w.wq, g.dq.data(), b.n1.data(), ctx.W(w.wq), R, C, D);
  matmul_backward(g.dn.data(), G + w.wk, g.dk.data(), b.n1.data(), ctx.W(w.wk), R, C, D);
  matmul_backward(g.dn.data(), G + w.wv, g.dv.data(), b.n1.data(), ctx.W(w.wv), R, C, D);
  // 2. n1 = Norm1(x)   (d x = dres (residual) + Norm1 backward)
  std::copy(g.dres.begin(), g.dres.end(), g.dx.begin());
  rmsnorm_backward(g.dx.data(), G + w.attn_norm1, g.dn.data(), x, m.at(w.attn_norm1), b.r1.data(), R, C);
}

// 0. FIRE's bias for the rows past..past+T-1 against keys 0..past+T-1 (layers.hpp): the distinct pairs'
// normalized distances, the MLP once per pair, the bias (NH, T, Tk) every layer adds. fp32 in either
// precision (a bias, as the scores; its MLP is not one of the rounded products).
template <class S>
void fire_forward(Acts<S>& a, const ModelView<S>& m, int past, int T) {
  const ModelConfig& c = m.cfg;
  const Layout& lay = m.lay;
  const int H = c.fire_width, NH = c.n_heads, Tk = past + T;
  const S Ls = *m.at(lay.fire_L_sqrt);
  fire_pairs(a.fire, past, T, double(Ls * Ls), c.fire_threshold == FireThreshold::max);
  const std::int64_t P = a.fire.pairs();
  a.fire_u.resize(std::size_t(P)), a.fire_h1.resize(std::size_t(P * H)), a.fire_h2.resize(std::size_t(P * H));
  a.fire_out.resize(std::size_t(P * NH));
  fire_distances(a.fire_u.data(), a.fire, *m.at(lay.fire_c));
  fire_mlp_forward(a.fire_out.data(), a.fire_h1.data(), a.fire_h2.data(), a.fire_u.data(), m.at(lay.fire_w1),
                   m.at(lay.fire_w2), m.at(lay.fire_w3), P, H, NH);
  a.fire_bias.resize(std::size_t(NH) * std::size_t(T) * std::size_t(Tk));
  fire_bias_scatter(a.fire_bias.data(), a.fire_out.data(), a.fire, past, T, Tk, NH);
}
template <class S>
void fire_backward(S* G, GradScratch<S>& g, const Acts<S>& a, const ModelView<S>& m, int T) {
  const ModelConfig& c = m.cfg;
  const Layout& lay = m.lay;
  const int H = c.fire_width, NH = c.n_heads;
  const std::int64_t P = a.fire.pairs();
  g.dfire_out.resize(std::size_t(P * NH)), g.dfire_u.resize(std::size_t(P)), g.dfire_h.resize(std::size_t(2 * P * H));
  fire_bias_gather(g.dfire_out.data(), g.dfire_bias.data(), a.fire, T, NH);
  fire_mlp_backward(g.dfire_u.data(), G + lay.fire_w1, G + lay.fire_w2, G + lay.fire_w3, g.dfire_h.data(),
                    g.dfire_out.data(), a.fire_h1.data(), a.fire_h2.data(), a.fire_u.data(), m.at(lay.fire_w1),
                    m.at(lay.fire_w2), m.at(lay.fire_w3), P, H, NH);
  fire_distances_backward(G + lay.fire_c, G + lay.fire_L_sqrt, g.dfire_u.data(), a.fire, *m.at(lay.fire_c),
                          *m.at(lay.fire_L_sqrt));
}

// The readout's input: xf itself (fp32, untied), xf d_model^-1/2 (tied: the T5 readout), rounded in bf16.
template <class S>
S readout_scale(const ModelConfig& c) {
  return S(1) / std::sqrt(S(c.d_model));
}
}  // namespace

// Forward, pass 8 and the loss (bf16 rounding points: the readout input xr; logits and loss fp32).
template <class S>
S model_forward(Acts<S>& a, const ModelView<S>& m, const BatchView& x, int past) {
  const ModelConfig& c = m.cfg;
  const Layout& lay = m.lay;
  check_rows(c, x);
  if (past < 0 || (past > 0 && (x.B != 1 || x.offsets)))
    throw InvariantError("model_forward: cached keys need a uniform batch of one");
  const int R = int(x.rows()), C = c.d_model, V = c.vocab;
  const std::int64_t RC = std::int64_t(R) * C;
  const S eps = S(c.norm_eps);
  a.resize(c, x, past + x.T);
  if (m.precision == Precision::bf16) round_gemm_weights(a.wgemm, m);
  else a.wgemm.clear();  // marks the activations as fp32 ones (model_backward checks)
  if (c.pos_mode == PosMode::fire) fire_forward(a, m, past, x.T);
  if (c.pos_mode == PosMode::rope) rope_tables(a.rope_cos, a.rope_sin, past, x.T, c.d_head, kRopeBase);
  const Ctx<S> ctx = context(a, m);
  const S* wpe[kMaxPosLevels] = {m.at(lay.wpe[0]), m.at(lay.wpe[1]), m.at(lay.wpe[2])};
  // 1. x0 = tok_emb[tok] + sum_lv pos_emb_lv[pos_lv]
  embedding_forward(a.x0.data(), x.tokens, x.pos, pos_tables(c.pos_mode), m.at(lay.wte), wpe, R, C);
  const S* h = a.x0.data();
  // 2.-7. the blocks (input injection: block l >= 1 reads xin = its predecessor's output + x0)
  for (int l = 0; l < c.n_layers; ++l) {
    auto& b = a.blocks[std::size_t(l)];
    if (c.input_injection && l > 0) {
      residual_forward(b.xin.data(), h, a.x0.data(), RC);
      h = b.xin.data();
    }
    block_forward(b, h, m, ctx, lay.blocks[std::size_t(l)], x, past);
    h = b.x2.data();
  }
  // 8. xf = final_norm(x) ; xr = xf [* d_model^-1/2 when tied] ; logits = xr W^T (W = lm_head or tok_emb) ;
  //    losses
  if (c.final_norm == NormKind::layer)
    layernorm_forward(a.xf.data(), a.mf.data(), a.rf.data(), h, m.at(lay.final_norm), m.at(lay.final_norm_bias), R, C,
                      eps);
  else
    rmsnorm_forward(a.xf.data(), a.rf.data(), h, m.at(lay.final_norm), R, C, eps);
  const S* xr = a.xf.data();
  if (c.tie_readout || ctx.bf16) {
    a.xr.resize(std::size_t(RC));
    if (c.tie_readout) scale_forward(a.xr.data(), a.xf.data(), readout_scale<S>(c), RC);
    else std::copy(a.xf.begin(), a.xf.begin() + RC, a.xr.begin());
    ctx.round(a.xr, RC);
    xr = a.xr.data();
  }
  matmul_forward(a.logits.data(), xr, ctx.W(lay.readout()), R, C, V);
  if (!x.targets) return S(0);
  return crossentropy_forward(a.losses.data(), a.probs.data(), a.logits.data(), x.targets, R, V);
}

// Backward (bf16 rounding points: dlogits, the readout product's output gradient, and those of
// block_backward; dxr, dxf and the residual gradient fp32).
template <class S>
void model_backward(S* G, GradScratch<S>& g, const Acts<S>& a, const ModelView<S>& m, const BatchView& x,
                    S loss_scale) {
  if (a.B != x.B || a.T != x.T || a.Tk != x.T || a.R != x.rows() || !x.targets)
    throw InvariantError("model_backward: needs the activations of model_forward on the same batch (no cache)");
  const ModelConfig& c = m.cfg;
  const Layout& lay = m.lay;
  if ((m.precision == Precision::bf16) != !a.wgemm.empty())
    throw InvariantError("model_backward: the forward ran in another precision");
  const Ctx<S> ctx = context(a, m);
  const int R = int(x.rows()), C = c.d_model, V = c.vocab;
  const std::int64_t RC = std::int64_t(R) * C;
  g.resize(c, R, x.T);
  // 8. xf = final_norm(x) ; xr = xf [* s] ; logits = xr W^T ; losses
  crossentropy_backward(g.dlogits.data(), a.probs.data(), x.targets, loss_scale, R, V);
  ctx.round(g.dlogits, std::int64_t(R) * V);
  const bool has_xr = c.tie_readout || ctx.bf16;
  const S* xr = has_xr ? a.xr.data() : a.xf.data();
  zero(g.dxf);
  if (c.tie_readout) {  // d xr into dn (scratch), then dxf = s d xr
    zero(g.dn);
    matmul_backward(g.dn.data(), G + lay.readout(), g.dlogits.data(), xr, ctx.W(lay.readout()), R, C, V);
    scale_backward(g.dxf.data(), g.dn.data(), readout_scale<S>(c), RC);
  } else {
    matmul_backward(g.dxf.data(), G + lay.readout(), g.dlogits.data(), xr, ctx.W(lay.readout()), R, C, V);
  }
  zero(g.dx);  // gradient w.r.t. the current block output
  const S* xlast = a.blocks.back().x2.data();
  if (c.final_norm == NormKind::layer)
    layernorm_backward(g.dx.data(), G + lay.final_norm, G + lay.final_norm_bias, g.dxf.data(), xlast,
                       m.at(lay.final_norm), a.mf.data(), a.rf.data(), R, C);
  else
    rmsnorm_backward(g.dx.data(), G + lay.final_norm, g.dxf.data(), xlast, m.at(lay.final_norm), a.rf.data(), R, C);
  // 7.-2. the blocks, last first (input injection: d xin flows to the previous output and to x0)
  if (c.pos_mode == PosMode::fire) g.dfire_bias.assign(std::size_t(c.n_heads) * std::size_t(x.T) * std::size_t(x.T), S(0));
  if (c.input_injection) zero(g.dx0);
  for (int l = c.n_layers - 1; l >= 0; --l) {
    const bool inj = c.input_injection && l > 0;
    const S* in = l == 0 ? a.x0.data() : inj ? a.blocks[std::size_t(l)].xin.data() : a.blocks[std::size_t(l - 1)].x2.data();
    block_backward(G, g, a.blocks[std::size_t(l)], in, m, ctx, lay.blocks[std::size_t(l)], x);
    if (inj)
      for (std::int64_t i = 0; i < RC; ++i) g.dx0[std::size_t(i)] += g.dx[std::size_t(i)];
  }
  if (c.input_injection)
    for (std::int64_t i = 0; i < RC; ++i) g.dx[std::size_t(i)] += g.dx0[std::size_t(i)];
  // 1. x0 = tok_emb[tok] + sum_lv pos_emb_lv[pos_lv]
  // a frozen position code (PosCode) is a constant: no gradient is accumulated into its table
  S* dwpe[kMaxPosLevels] = {nullptr, nullptr, nullptr};
  for (int lv = 0; lv < pos_tables(c.pos_mode); ++lv)
    if (!pos_code_frozen(c.pos_codes[lv])) dwpe[lv] = G + lay.wpe[lv];
  embedding_backward(G + lay.wte, dwpe, g.dx.data(), x.tokens, x.pos, pos_tables(c.pos_mode), R, C);
  // 0. FIRE: the bias's gradient, summed over sequences and layers, through the MLP to its weights, c, L_sqrt
  if (c.pos_mode == PosMode::fire) fire_backward(G, g, a, m, x.T);
}

std::vector<std::uint8_t> KvDecoder::greedy(const std::vector<std::uint8_t>& prefix,
                                            const std::vector<std::int32_t> pos[kMaxPosLevels], int max_new) const {
  const int Lv = pos_levels(m.cfg.pos_mode), P = int(prefix.size()), total = P + max_new, V = m.cfg.vocab;
  if (prefix.empty()) throw InputError("greedy decoding needs a non-empty prefix");
  for (int lv = 0; lv < Lv; ++lv)
    if (int(pos[lv].size()) < total - 1) throw InputError("greedy decoding: position IDs shorter than the output");
  std::vector<std::uint8_t> out;
  if (max_new < 1) return out;
  Acts<float> a;  // its keys/values are the cache
  auto rows = [&](const std::uint8_t* tok, int t, int n) {  // positions t..t+n-1
    BatchView x;
    x.B = 1, x.T = n, x.tokens = tok;
    for (int lv = 0; lv < Lv; ++lv) x.pos[lv] = pos[lv].data() + t;
    return x;
  };
  auto argmax = [&](int row) {  // lowest index on ties, as the teacher-forced evaluation
    const float* z = a.logits.data() + std::int64_t(row) * V;
    return std::uint8_t(std::max_element(z, z + V) - z);
  };
  // The prompt in one pass, then one token per pass against the cached keys/values.
  model_forward(a, m, rows(prefix.data(), 0, P));
  std::uint8_t tok = argmax(P - 1);
  out.push_back(tok);
  for (int t = P; t + 1 < total && tok != kDollar; ++t) {
    model_forward(a, m, rows(&tok, t, 1), t);
    tok = argmax(0);
    out.push_back(tok);
  }
  return out;
}

template std::vector<float> init_params<float>(const ModelConfig&, const Layout&, std::uint64_t);
template std::vector<double> init_params<double>(const ModelConfig&, const Layout&, std::uint64_t);
template struct Acts<float>;
template struct Acts<double>;
template struct GradScratch<float>;
template struct GradScratch<double>;
template float model_forward<float>(Acts<float>&, const ModelView<float>&, const BatchView&, int);
template double model_forward<double>(Acts<double>&, const ModelView<double>&, const BatchView&, int);
template void model_backward<float>(float*, GradScratch<float>&, const Acts<float>&, const ModelView<float>&,
                                    const BatchView&, float);
template void model_backward<double>(double*, GradScratch<double>&, const Acts<double>&, const ModelView<double>&,
                                     const BatchView&, double);

}  // namespace manyadd::learn
