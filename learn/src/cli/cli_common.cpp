// Configuration fields as options: see cli_common.hpp.
#include "manyadd/learn/cli/cli_common.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "manyadd/core/cli.hpp"
#include "manyadd/learn/devices/cpu_gemm.hpp"
#include "manyadd/learn/devices/cpu_fast.hpp"
#include "manyadd/learn/devices/cuda_device.hpp"
#include "manyadd/learn/tasks/task.hpp"
#include "manyadd/learn/runs/train.hpp"

namespace manyadd::learn {

std::shared_ptr<TrainDevice> make_named_device(const std::string& name, const ModelConfig& mc, int threads, Precision p) {
  if (name == "cpu") return nullptr;
  if (name == "cpu-fast") return make_cpu_fast_device(mc, threads, p);
  if (name == "cuda") return make_cuda_device(mc, p);
  throw InputError(fmt::format("--device '{}' unknown (cpu|cpu-fast|cuda)", name));
}
std::shared_ptr<TrainDevice> make_device_auto(std::string& name, const ModelConfig& mc, int threads, Precision p,
                                              std::string& why) {
  why.clear();
  if (name != "auto") return make_named_device(name, mc, threads, p);
  try {
    auto dev = make_cpu_fast_device(mc, threads, p);
    name = "cpu-fast";
    return dev;
  } catch (const InputError& e) {
    name = "cpu", why = e.what();
    return nullptr;
  }
}
std::string resolve_device_auto(const std::string& name, std::string& why) {
  why.clear();
  if (name != "auto") return name;
  why = cpu_gemm::unavailable();
  return why.empty() ? "cpu-fast" : "cpu";
}
std::string device_note(const std::string& name, Precision p) {
  return name == "cpu-fast" ? "device cpu-fast: " + cpu_fast_description(p) : "";
}

double problems_bytes(std::int64_t count, std::int64_t n, std::int64_t m) {
  // A Problem is a vector of strings: its own 24 bytes, the array of m strings (32 bytes each, ~16 of
  // allocator overhead), and each operand's digits on the heap once beyond the 15 kept inline.
  const double operand = 32.0 + (n > 15 ? double(n) + 17.0 : 0.0);
  return double(count) * (24.0 + 16.0 + double(m) * operand);
}

void check_samples_fit(std::int64_t samples, std::int64_t n, std::int64_t m, const std::string& what) {
  cli::check_fits_memory(problems_bytes(samples, n, m) + 2.0 * double(samples), what);  // + two flags per sample
}

std::pair<std::int64_t, std::int64_t> problem_bound(const Task& t, int i, int j) {
  switch (t.kind()) {
    case TaskKind::addition:
    case TaskKind::addition_noscratch: return {i, j};  // j operands of at most i digits
    case TaskKind::parity:
    case TaskKind::parity_noscratch: return {i, 1};  // one bit string of i bits
    case TaskKind::addition_2op:
    case TaskKind::multiplication:
    case TaskKind::multiplication_noscratch: return {std::max(i, j), 2};  // two numbers of i and j digits
  }
  return {i, j};
}

void check_samples_fit(std::int64_t samples, const Task& t, int i, int j, const std::string& what) {
  const auto [n, m] = problem_bound(t, i, j);
  check_samples_fit(samples, n, m, what);
}

void check_run_fits(const ModelConfig& mc, const TrainConfig& tc, bool on_device) {
  const Layout lay = Layout::make(mc);
  // weights, m, v on the host always (the trainer's copy); gradients per thread and activations only
  // where the host computes the steps
  const double params = double(lay.total) * 4.0 * (3.0 + (on_device ? 0.0 : double(tc.threads)));
  const Task& task = task_named(tc.task);
  const double T = double(task.extent(tc.train_n, tc.train_m).T);  // the longest training sequence
  const double C = mc.d_model, F = mc.d_ff, D = double(mc.n_heads) * mc.d_head;
  // Per row and layer the activations of layers.hpp (norms, q/k/v, attention row, projections, FFN)
  // and as many again for their gradients; per row the readout.
  const double per_row = 2.0 * (double(mc.n_layers) * (12.0 * C + 3.0 * F + 4.0 * D + double(mc.n_heads) * T) +
                                3.0 * double(mc.vocab) + 2.0 * C);
  // FIRE per forward (one per sequence on the per-sequence device, kept per thread): the bias and its
  // gradient (n_heads T^2 each) and at most T^2 / 2 distinct pairs with the MLP's activations and gradients
  // coupled_rel: a sequence's bias and its gradient (n_heads T^2 each), per thread
  const double rel = mc.pos_mode != PosMode::coupled_rel ? 0.0 : double(tc.threads) * T * T * 2.0 * mc.n_heads;
  const double fire = mc.pos_mode != PosMode::fire ? 0.0
                                                   : double(tc.threads) * T * T *
                                                         (2.0 * mc.n_heads + 0.5 * (4.0 * mc.fire_width + 2.0 * mc.n_heads + 2.0));
  const double acts = on_device ? 0.0 : (double(tc.batch) * T * per_row + fire + rel) * 4.0;
  const auto [n, m] = problem_bound(task, tc.train_n, tc.train_m);
  const double data = problems_bytes(tc.train_size, n, m);
  const double eval = problems_bytes(tc.eval_samples, n, m) + 2.0 * double(tc.eval_samples);
  const std::string set = task.kind() == TaskKind::addition ? fmt::format("SA({}, {})", tc.train_n, tc.train_m)
                                                            : fmt::format("{} (train_n {}, train_m {})", task.name(),
                                                                          tc.train_n, tc.train_m);
  cli::check_fits_memory(params + acts + data + eval,
                         fmt::format("the run (train_size {} of {}, {} parameters, batch {}, eval_samples {})",
                                     tc.train_size, set, lay.total, tc.batch, tc.eval_samples));
}

const std::vector<FieldDoc>& config_fields() {
  static const std::vector<FieldDoc> f = {
      {"model", "n_layers", "transformer blocks"},
      {"model", "n_heads", "attention heads per block"},
      {"model", "d_model", "residual width"},
      {"model", "d_head", "width of each head's query/key/value"},
      {"model", "d_ff", "GEGLU hidden width"},
      {"model", "max_pos1", "largest position ID of level 1 (significance; or index for absolute)"},
      {"model", "max_pos2", "largest position ID of level 2 (operand index; coupled and coupled3)"},
      {"model", "max_pos3", "largest position ID of level 3 (coupled3 only: multiplication's stage-2 significance)"},
      {"model", "pos_mode",
       "coupled (2 levels: addition) | coupled3 (3 levels: multiplication) | digits (the task's level 1 only: "
       "the coupling of single-level tasks) | absolute | none | abacus (McLeish et al.: each number's digits "
       "1, 2, ... from its first token, offset up to abacus_k in training) | fire (Li et al.: a learned "
       "relative-position bias on the scores) | rope (Su et al.: q, k rotated by the token index) | coupled_rel "
       "(the bi-level coupling's IDs as a relative score bias: a learned gain per head, level and ID difference "
       "up to rel_window, no table; CPU devices)"},
      {"model", "rel_window", "pos_mode coupled_rel: the largest |ID difference| with a gain of its own (others: no bias, or rel_far's)"},
      {"model", "rel_far", "pos_mode coupled_rel: one more learned gain per head and level for every |ID difference| > rel_window"},
      {"model", "rel_far_norm", "rel_far: that gain shared between the query's far keys of the level (less ln of their "
                                "number), so their total attention mass does not grow with the length"},
      {"model", "rel_far_mask", "pos_mode coupled_rel, instead of rel_far: a key farther than rel_window from the query "
                                "on either level is not attended (each query sees its window of IDs and BOS at every length)"},
      {"model", "rel_value", "pos_mode coupled_rel: each key also gives the query a learned vector per head, level and ID "
                             "difference (Shaw et al.'s relative values; init 0, fp32 only)"},
      {"model", "abacus_k", "pos_mode abacus: training offsets beta uniform in [1, abacus_k], one per batch (the paper's "
                            "k = 100); needs max_pos1 >= abacus_k + the longest number - 1"},
      {"model", "fire_width", "pos_mode fire: hidden width of FIRE's MLP (the authors' d_fire)"},
      {"model", "fire_threshold", "pos_mode fire: normalizer psi(max(i, L)) (max: the FIRE paper) | psi(min(i, L)) "
                                  "(min: the paper-000 authors' code)"},
      {"model", "input_injection", "true: every block after the first reads its predecessor's output + the embedding "
                                   "(McLeish et al.) | false"},
      {"model", "pos_codes",
       "what the position tables hold, one kind for every level or one per level ('learned,shuffled'): learned "
       "(trained) | frozen (N(0, pos_code_scale^2), never updated) | hypercube (Theorem 4.1's +-1 vertex of the ID and "
       "of its successor, in 2 ceil(log2(max_pos + 1)) dimensions of its own, frozen) | shuffled (the same with the "
       "vertices assigned to IDs by a seeded permutation, frozen); learn/README.md, Position codes"},
      {"model", "pos_code_scale", "pos_codes frozen: the std; hypercube, shuffled: the magnitude of each coordinate"},
      {"model", "pos_code_distance", "pos_codes hypercube, shuffled: the codewords' minimum Hamming distance (1: every "
                                     "vertex, Theorem 4.1's code; d > 1: the binary lexicode of distance d, longer)"},
      {"model", "norm_eps", "RMSNorm epsilon"},
      {"model", "init_std", "std of the normal initialization of matrices and embeddings (init normal)"},
      {"model", "attn_scale", "attention scores q.k times 1/sqrt(d_head) (inv_sqrt_dhead), unscaled (none: T5), or the coupled_rel "
                                 "bias alone (positional: q.k times 0)"},
      {"model", "init", "initialization: normal (N(0, init_std)) | t5 (the authors' T5 scheme)"},
      {"model", "tie_readout", "true: logits = tok_emb (final_norm(x) d_model^-1/2), no lm_head | false"},
      {"model", "final_norm", "final norm: rms (RMSNorm) | layer (LayerNorm with bias)"},
      {"train", "task",
       "addition | addition-noscratch | addition-2op | parity | parity-noscratch | multiplication | "
       "multiplication-noscratch (learn/README.md, Tasks)"},
      {"train", "train_n", "training set: SA(n, m) / SM(n, m) at most n digits (first factor); parity: lengths 1..n"},
      {"train", "train_m", "training set: SA(n, m) 2..m operands; SM(n, m), addition-2op: second operand at most m "
                           "digits; parity: unused"},
      {"train", "train_size", "problems in the fixed training set (the paper: 500000; parity 10000)"},
      {"train", "steps", "optimizer steps"},
      {"train", "batch", "sequences per step"},
      {"train", "lr", "peak learning rate"},
      {"train", "warmup_frac", "linear warm-up over this fraction of the steps"},
      {"train", "min_lr_frac", "cosine decay ends at this fraction of lr"},
      {"train", "beta1", "AdamW beta1"},
      {"train", "beta2", "AdamW beta2"},
      {"train", "adam_eps", "AdamW epsilon"},
      {"train", "weight_decay", "AdamW decoupled weight decay"},
      {"train", "grad_clip", "global gradient-norm clip, 0 = off"},
      {"train", "seed", "seed of initialization and position offsets (and of the data when data_seed is -1)"},
      {"train", "data_seed", "seed of the training set and its sampling order; -1 = the seed"},
      {"train", "hard_fraction", "addition: each training problem replaced by a hard one (carry cascade, maximal "
                                 "partial sums) with this probability; 0 = the paper's data"},
      {"train", "attn_entropy", "plus this times the mean attention entropy (nats) of the loss rows' heads: "
                                "sharper heads; one-layer models, fp32, CPU devices; 0 = off"},
      {"train", "warmup_from_zero", "true: step t runs at the schedule's value at t - 1 (the first at lr 0) | false"},
      {"train", "precision", "fp32 | bf16 (mixed precision: bf16 matrix-product inputs, fp32 accumulation)"},
      {"train", "threads", "worker threads over the batch; part of the run's identity"},
      {"train", "log_every", "a log.csv row every this many steps (its loss is the progress line's)"},
      {"train", "eval_every", "in-distribution evaluation every this many steps, 0 = only at the end"},
      {"train", "eval_samples", "TA samples per in-distribution cell in those evaluations"},
      {"train", "checkpoint_every", "checkpoint every this many steps, 0 = only at the end"},
  };
  return f;
}

void merge_config_sections(nlohmann::json& cfg, const nlohmann::json& src, const std::string& what) {
  if (!src.is_object()) throw InputError(fmt::format("{} must be a JSON object", what));
  for (auto it = src.begin(); it != src.end(); ++it) {
    if (it.key() != "model" && it.key() != "train") continue;  // config.json carries extra sections
    if (!it.value().is_object()) throw InputError(fmt::format("{}: \"{}\" must be an object", what, it.key()));
    for (auto f = it.value().begin(); f != it.value().end(); ++f) cfg[it.key()][f.key()] = f.value();
  }
}

std::string config_flag(const FieldDoc& f) {
  std::string flag = f.name;
  for (auto& ch : flag)
    if (ch == '_') ch = '-';
  return "--" + flag;
}

namespace {
// learn's defaults as the flags show them (to_json writes some fields only for the models they apply to).
nlohmann::json learn_defaults() {
  nlohmann::json defaults = {{"model", ModelConfig{}}, {"train", TrainConfig{}}};
  ModelConfig fire;
  fire.pos_mode = PosMode::fire;
  const nlohmann::json fj = fire;
  defaults["model"]["abacus_k"] = ModelConfig{}.abacus_k;
  for (const char* k : {"fire_width", "fire_threshold"}) defaults["model"][k] = fj.at(k);
  defaults["model"]["input_injection"] = ModelConfig{}.input_injection;
  defaults["model"]["rel_window"] = ModelConfig{}.rel_window;
  defaults["model"]["rel_far"] = ModelConfig{}.rel_far;
  defaults["model"]["rel_far_norm"] = ModelConfig{}.rel_far_norm;
  defaults["model"]["rel_far_mask"] = ModelConfig{}.rel_far_mask;
  defaults["model"]["rel_value"] = ModelConfig{}.rel_value;
  defaults["model"]["pos_codes"] = ModelConfig{}.pos_codes_string();
  defaults["model"]["pos_code_scale"] = ModelConfig{}.pos_code_scale;
  defaults["model"]["pos_code_distance"] = ModelConfig{}.pos_code_distance;
  return defaults;
}
}  // namespace

ConfigOptions::ConfigOptions(CLI::App& app) : ConfigOptions(app, config_fields(), learn_defaults()) {}

ConfigOptions::ConfigOptions(CLI::App& app, const std::vector<FieldDoc>& docs, const nlohmann::json& defaults) {
  for (const auto& doc : docs) {
    const nlohmann::json& d = defaults.at(doc.section).at(doc.name);
    Field& f = fields_.emplace_back();
    f.doc = &doc;
    f.type = d.type();
    const std::string name = config_flag(doc), help = fmt::format("{}.{}: {}", doc.section, doc.name, doc.help);
    // The defaults are the variables' initial values: add_int/add_uint/add_real print them.
    if (d.is_number_unsigned()) {
      f.u = d.get<std::uint64_t>();
      f.opt = cli::add_uint(app, name, f.u, help);
    } else if (d.is_number_integer()) {
      f.i = d.get<std::int64_t>();
      f.opt = cli::add_int(app, name, f.i, help);
    } else if (d.is_number_float()) {
      f.r = d.get<double>();
      f.opt = cli::add_real(app, name, f.r, help);
    } else if (d.is_boolean()) {  // a value, true or false (checked by given())
      f.s = d.get<bool>() ? "true" : "false";
      f.opt = cli::add_string(app, name, f.s, fmt::format("{} (default {})", help, f.s));
    } else {
      f.s = d.get<std::string>();
      f.opt = cli::add_string(app, name, f.s, fmt::format("{} (default {})", help, f.s));
    }
  }
}

nlohmann::json ConfigOptions::given() const {
  nlohmann::json out = {{"model", nlohmann::json::object()}, {"train", nlohmann::json::object()}};
  for (const Field& f : fields_) {
    if (f.opt->count() == 0) continue;
    nlohmann::json& v = out[f.doc->section][f.doc->name];
    switch (f.type) {
      case nlohmann::json::value_t::number_unsigned: v = f.u; break;
      case nlohmann::json::value_t::number_integer: v = f.i; break;
      case nlohmann::json::value_t::number_float: v = f.r; break;
      case nlohmann::json::value_t::boolean:
        if (f.s != "true" && f.s != "false")
          throw InputError(fmt::format("{} must be true or false (got '{}')", config_flag(*f.doc), f.s));
        v = f.s == "true";
        break;
      default: v = f.s;
    }
  }
  return out;
}

}  // namespace manyadd::learn
