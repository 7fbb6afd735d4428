// format_ids: the sequence, the position IDs (every mode of learn/, construct's coupled IDs) and the
// targets of one problem of any task (learn/include/manyadd/learn/tasks/task.hpp), or of a list of cases as
// JSON (tests/data/format_cases.json -> tests/data/format_golden.json, the golden file
// python/manyadd/format.py is checked against). Also the samplers' draws (TA, SA, every task's test
// cells and training sets, the per-cell seed of evaluate/dump_attention), so the Python twin of the
// samplers is checked on the same file. Exit codes: 0 done, 2 bad usage or input, 3 internal error.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/runs/eval.hpp"
#include "manyadd/learn/tasks/task.hpp"
#include "manyadd/learn/runs/train.hpp"

using namespace manyadd;
using namespace manyadd::learn;
using ojson = nlohmann::ordered_json;

namespace {

// A case's integer field, bounded (the shape's own validation follows).
std::int64_t get_int(const nlohmann::json& c, const char* key, std::int64_t dflt, std::int64_t lo, std::int64_t hi) {
  if (!c.contains(key)) return dflt;
  if (!c[key].is_number_integer()) throw InputError(fmt::format("case field '{}' must be an integer", key));
  const auto v = c[key].get<std::int64_t>();
  if (v < lo || v > hi) throw InputError(fmt::format("case field '{}' = {} outside [{}, {}]", key, v, lo, hi));
  return v;
}
std::string get_str(const nlohmann::json& c, const char* key, const std::string& dflt) {
  if (!c.contains(key)) return dflt;
  if (!c[key].is_string()) throw InputError(fmt::format("case field '{}' must be a string", key));
  return c[key].get<std::string>();
}

// One sequence case: {"problem", "padding" (default minimal), "n" (default: the longest operand),
// "pos_mode" (default coupled), "s1", "s2" (default 1)}. The answer repeats the inputs and adds the
// shape, the tokens, the IDs of every level of the mode and the targets (learn's rule: the next token
// from '=' on, EOS last, -1 on the query). An input the C++ refuses gives {"error": message}.
ojson sequence_case(const nlohmann::json& c) {
  ojson out;
  const std::string text = get_str(c, "problem", "");
  const std::string pad = get_str(c, "padding", "minimal"), mode_s = get_str(c, "pos_mode", "coupled");
  const std::int64_t s1 = get_int(c, "s1", 1, -1000, 1'000'000), s2 = get_int(c, "s2", 1, -1000, 1'000'000);
  out["problem"] = text;
  out["padding"] = pad;
  out["pos_mode"] = mode_s;
  out["s1"] = s1;
  out["s2"] = s2;
  try {
    const Problem p = parse_problem(text);
    const std::int64_t n = get_int(c, "n", p.max_digits(), -1000, 1'000'000);
    out["n"] = n;
    const Shape shape = Shape::make(n, std::int64_t(p.operands.size()), parse_padding(pad));
    const PosMode mode = parse_pos_mode(mode_s);
    const auto toks = build_sequence(p, shape);
    std::vector<std::int32_t> p1, p2;
    position_ids_for(shape, mode, s1, s2, p1, p2);
    ojson pos = ojson::array();
    if (pos_levels(mode) >= 1) pos.push_back(p1);
    if (pos_levels(mode) >= 2) pos.push_back(p2);
    std::vector<int> targets(toks.size(), -1);
    for (std::int64_t k = shape.eq_index(); k + 1 < shape.N(); ++k) targets[std::size_t(k)] = toks[std::size_t(k + 1)];
    targets.back() = kDollar;
    out["operands"] = p.operands;
    out["m"] = shape.m;
    out["l"] = shape.l;
    out["N"] = shape.N();
    out["eq_index"] = shape.eq_index();
    out["tokens"] = tokens_to_string(toks);
    out["pos"] = pos;
    out["targets"] = targets;
  } catch (const InputError& e) {
    out["error"] = e.what();
  }
  return out;
}

// A task's case: {"task", "problem", "pos_mode" (default: the task's coupling: digits, coupled or
// coupled3 for 1, 2 or 3 levels), "s1", "s2", "s3" (default 1)} -> the tokens, the eq index, the
// answer span, the relative IDs and spans of every coupling level, the IDs of the mode at the
// offsets, the targets, the answer read back and the reference answer. No max_pos check (the IDs of
// any offsets). A refused input gives {"error": message}.
ojson task_case(const nlohmann::json& c) {
  ojson out;
  const std::string name = get_str(c, "task", "");
  const std::string text = get_str(c, "problem", "");
  const std::int64_t s1 = get_int(c, "s1", 1, -1000, 1'000'000), s2 = get_int(c, "s2", 1, -1000, 1'000'000),
                     s3 = get_int(c, "s3", 1, -1000, 1'000'000);
  out["task"] = name;
  out["problem"] = text;
  try {
    const Task& tk = task_named(name);
    const char* dflt = tk.levels() == 1 ? "digits" : tk.levels() == 2 ? "coupled" : "coupled3";
    const std::string mode_s = get_str(c, "pos_mode", dflt);
    out["pos_mode"] = mode_s;
    out["s"] = {s1, s2, s3};
    const PosMode mode = parse_pos_mode(mode_s);
    const Problem p = tk.parse(text);
    const Written w = tk.write(p);
    std::vector<std::int32_t> pos[kMaxPosLevels];
    position_ids_for(w, mode, Offsets{s1, s2, s3}, pos);
    ojson ids = ojson::array(), rel = ojson::array();
    for (int lv = 0; lv < pos_levels(mode); ++lv) ids.push_back(pos[lv]);
    for (int lv = 0; lv < w.levels; ++lv) rel.push_back(w.rel[lv]);
    std::vector<int> targets(w.tokens.size(), -1);
    for (std::int64_t k = w.eq; k + 1 < w.T(); ++k) targets[std::size_t(k)] = w.tokens[std::size_t(k + 1)];
    targets.back() = kDollar;
    const Reading rd = tk.read(w.tokens);
    out["operands"] = p.operands;
    out["T"] = w.T();
    out["eq_index"] = w.eq;
    out["answer_span"] = {w.answer_begin, w.answer_end};
    out["tokens"] = tokens_to_string(w.tokens);
    out["rel"] = rel;
    out["span"] = std::vector<std::int32_t>(w.span.begin(), w.span.begin() + w.levels);
    out["pos"] = ids;
    out["targets"] = targets;
    out["answer"] = rd.answer;
    out["consistent"] = rd.consistent;
    out["reference"] = tk.reference_answer(p);
  } catch (const InputError& e) {
    out["error"] = e.what();
  }
  return out;
}

// {"sample": "TA" | "SA", "n", "m", "count", "seed", "cell" (TA: seed the generator with
// cell_seed(seed, n, m), as evaluate and dump_attention do)} -> the problems drawn, in order.
// {"sample": "cell" | "train", "task", "n", "m", "count", "seed", "cell"}: the task's test cell (n, m)
// (cell: seeded as evaluate seeds it) or its training set with train_n = n, train_m = m, count problems.
ojson sample_case(const nlohmann::json& c) {
  const std::string kind = get_str(c, "sample", "");
  if (kind == "cell" || kind == "train") {
    const Task& tk = task_named(get_str(c, "task", ""));
    const int n = int(get_int(c, "n", 1, 1, 1000)), m = int(get_int(c, "m", 1, 1, 1000));
    const std::int64_t count = get_int(c, "count", 1, 1, 10000);
    if (!c.contains("seed") || !c["seed"].is_number_unsigned()) throw InputError("a sample case needs an unsigned 'seed'");
    const std::uint64_t seed = c["seed"].get<std::uint64_t>();
    const bool cell = c.contains("cell") && c["cell"].is_boolean() && c["cell"].get<bool>();
    ojson out = {{"sample", kind}, {"task", tk.name()}, {"n", n}, {"m", m}, {"count", count}, {"seed", seed},
                 {"cell", cell}};
    Rng rng(cell ? cell_seed(seed, n, m) : seed);
    ojson problems = ojson::array();
    if (kind == "cell") {
      for (std::int64_t i = 0; i < count; ++i) problems.push_back(tk.to_string(tk.sample_cell(rng, n, m)));
    } else {
      TrainConfig tc;
      tc.task = tk.name(), tc.train_n = n, tc.train_m = m, tc.train_size = count;
      tc.validate();
      for (const auto& p : tk.sample_train(rng, tc)) problems.push_back(tk.to_string(p));
    }
    if (cell) out["cell_seed"] = cell_seed(seed, n, m);
    out["problems"] = problems;
    return out;
  }
  const int n = int(get_int(c, "n", 1, 1, 1000)), m = int(get_int(c, "m", 2, 1, 1000));
  const std::int64_t count = get_int(c, "count", 1, 1, 10000);
  if (!c.contains("seed") || !c["seed"].is_number_unsigned()) throw InputError("a sample case needs an unsigned 'seed'");
  const std::uint64_t seed = c["seed"].get<std::uint64_t>();
  const bool cell = c.contains("cell") && c["cell"].is_boolean() && c["cell"].get<bool>();
  ojson out = {{"sample", kind}, {"n", n}, {"m", m}, {"count", count}, {"seed", seed}, {"cell", cell}};
  Rng rng(cell ? cell_seed(seed, n, m) : seed);
  ojson problems = ojson::array();
  if (kind == "TA") {
    for (std::int64_t i = 0; i < count; ++i) problems.push_back(sample_TA(rng, n, m).to_string());
  } else if (kind == "SA") {
    for (const auto& p : sample_SA(rng, n, m, count)) problems.push_back(p.to_string());
  } else {
    throw InputError(fmt::format("sample kind '{}' unknown (TA|SA)", kind));
  }
  if (cell) out["cell_seed"] = cell_seed(seed, n, m);
  out["problems"] = problems;
  return out;
}

// {"width": "theorem" | "minimal", "n", "m"} -> l.
ojson width_case(const nlohmann::json& c) {
  const std::string rule = get_str(c, "width", "");
  const std::int64_t n = get_int(c, "n", 1, 1, 100'000'000), m = get_int(c, "m", 1, 1, 100'000'000);
  return {{"width", rule}, {"n", n}, {"m", m}, {"l", width(parse_padding(rule), n, m)}};
}

// ---- the work, estimated before any of it is done ------------------------------------------------
// Bytes one token of an answer takes at the peak: the token, its IDs (up to 3 levels) and its target in
// the vectors (4 bytes each: 20), the same five in the answer's JSON values (16 bytes each: 80), and its
// share of the dumped text and of the printed table (a number and a comma or a column each: ~25).
constexpr double kBytesPerToken = 128;

// The test cell (i, j) a task's problem lies in (Task::cell_extent's axes).
std::pair<int, int> cell_of(const Task& tk, const Problem& p) {
  const auto len = [&](std::size_t k) { return k < p.operands.size() ? int(p.operands[k].size()) : 1; };
  switch (tk.kind()) {
    case TaskKind::addition:
    case TaskKind::addition_noscratch: return {p.max_digits(), int(p.operands.size())};
    case TaskKind::parity:
    case TaskKind::parity_noscratch: return {len(0), 1};
    default: return {len(0), len(1)};  // two numbers of i and j digits
  }
}

// The bytes a case's answer takes, from its fields alone (nothing is written): a sequence case's N
// tokens (its shape), a task case's longest sequence of the problem's cell (the task's extent), a
// sample case's drawn digits (twice: the problems and their JSON strings). A case the C++ refuses
// counts 0: its answer is the error message.
double case_bytes(const nlohmann::json& c) {
  try {
    if (c.contains("width")) return 0;
    if (c.contains("sample")) {
      const double n = double(get_int(c, "n", 1, 1, 1000)), m = double(get_int(c, "m", 2, 1, 1000)),
                   count = double(get_int(c, "count", 1, 1, 10000));
      return count * (64.0 + 2.0 * m * (n + 2.0));
    }
    if (c.contains("task")) {
      const Task& tk = task_named(get_str(c, "task", ""));
      const Problem p = tk.parse(get_str(c, "problem", ""));
      const auto [i, j] = cell_of(tk, p);
      return double(tk.cell_extent(i, j).T) * kBytesPerToken;
    }
    const Problem p = parse_problem(get_str(c, "problem", ""));
    const std::int64_t n = get_int(c, "n", p.max_digits(), -1000, 1'000'000);
    const Shape shape = Shape::make(n, std::int64_t(p.operands.size()), parse_padding(get_str(c, "padding", "minimal")));
    return double(shape.N()) * kBytesPerToken;
  } catch (const InputError&) {
    return 0;
  }
}

// One case's tokens and IDs as a table (index, token, one row per level), and its JSON if asked.
void print_ids(const ojson& r, const std::string& json_path) {
  const std::string toks = r["tokens"].get<std::string>();
  std::string line = "index ", tline = "token ";
  for (std::size_t k = 0; k < toks.size(); ++k) {
    line += fmt::format(" {:>3}", k);
    tline += fmt::format(" {:>3}", toks[k]);
  }
  std::printf("%s\n%s\n", line.c_str(), tline.c_str());
  int lv = 1;
  for (const auto& ids : r["pos"]) {
    std::string pl = fmt::format("pos{}  ", lv++);
    for (const auto& v : ids) pl += fmt::format(" {:>3}", v.get<int>());
    std::printf("%s\n", pl.c_str());
  }
  if (!json_path.empty()) atomic_write(json_path, r.dump(1) + "\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Print the token sequence and position IDs of a problem (or of a JSON list of cases).", "format_ids"};
  std::string problem, cases, json_path, padding = "minimal", mode = "coupled", task_s = "addition";
  std::int64_t n = 0, s1 = 1, s2 = 1, s3 = 1;
  auto* o_problem = cli::add_string(app, "--problem", problem, "one problem, e.g. 57+48+96");
  auto* o_cases = cli::add_string(app, "--cases", cases,
                                  "a JSON list of cases (see learn/tools/format_ids.cpp); the answers go to --json");
  o_problem->excludes(o_cases);
  auto* o_padding = cli::add_string(app, "--padding", padding,
                                    "padding rule: minimal (learn/, the paper's experiments) or theorem (default minimal; "
                                    "addition only)");
  auto* o_n = cli::add_int(app, "--n", n, "digits per operand (0 = the longest operand; addition only)", 0, 100'000'000);
  auto* o_task = cli::add_string(app, "--task", task_s, "the task (" + task_names() + ") (default addition)");
  auto* o_mode = cli::add_string(app, "--pos-mode", mode,
                                 "position IDs: coupled|coupled3|digits|absolute|none|abacus|fire|rope (learn/'s modes; "
                                 "fire and rope have none; default: the task's coupling)");
  auto* o_s1 = cli::add_int(app, "--s1", s1, "level-1 position offset", 1, 1'000'000);
  auto* o_s2 = cli::add_int(app, "--s2", s2, "level-2 position offset", 1, 1'000'000);
  auto* o_s3 = cli::add_int(app, "--s3", s3, "level-3 position offset (3-level tasks: multiplication)", 1, 1'000'000);
  cli::add_json(app, json_path,
                "write the answer(s) as JSON to FILE: golden data (the Python twin's tests compare against it), not "
                "a report, so without the tools' provenance and verdict");
  app.footer(cli::exit_codes_footer(false));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("format_ids", std::cerr, [&] {
    // An option the chosen path would ignore is refused, not dropped silently.
    const auto refuse_given = [](std::initializer_list<CLI::Option*> opts, const std::string& why) {
      for (CLI::Option* o : opts)
        if (o->count()) throw InputError(fmt::format("{} {}: drop it", o->get_name(), why));
    };
    if (!cases.empty()) {
      refuse_given({o_padding, o_n, o_task, o_mode, o_s1, o_s2, o_s3},
                   "does not apply to --cases (every case gives its own fields)");
      if (json_path.empty()) throw InputError("--cases writes its answers to --json FILE");
      const nlohmann::json in = read_json_file(cases);
      if (!in.is_array()) throw InputError(fmt::format("{}: expected a JSON list of cases", cases));
      double bytes = 0;
      for (const auto& c : in) bytes += c.is_object() ? case_bytes(c) : 0.0;
      cli::check_fits_memory(bytes, fmt::format("--cases {} ({} cases)", cases, in.size()));
      std::string text = "[\n";  // one case per line: a diff of the golden file reads case by case
      for (std::size_t i = 0; i < in.size(); ++i) {
        const auto& c = in[i];
        if (!c.is_object()) throw InputError(fmt::format("{}: every case must be a JSON object", cases));
        const ojson r = c.contains("sample")  ? sample_case(c)
                        : c.contains("width") ? width_case(c)
                        : c.contains("task")  ? task_case(c)
                                              : sequence_case(c);
        text += r.dump() + (i + 1 < in.size() ? ",\n" : "\n");
      }
      atomic_write(json_path, text + "]\n");
      return 0;
    }
    if (problem.empty()) throw InputError("give --problem P (e.g. 57+48+96) or --cases FILE");
    if (parse_task(task_s) != TaskKind::addition) {
      refuse_given({o_padding, o_n}, fmt::format("applies to addition (task {} has its own format)", task_s));
      nlohmann::json c = {{"task", task_s}, {"problem", problem}, {"s1", s1}, {"s2", s2}, {"s3", s3}};
      if (o_mode->count()) c["pos_mode"] = mode;
      cli::check_fits_memory(case_bytes(c), "--problem's sequence");
      const ojson r = task_case(c);
      if (r.contains("error")) throw InputError(r["error"].get<std::string>());
      std::printf("%s %s  (T=%d, '=' at %d, answer %s = tokens %d..%d, pos_mode %s)\n", task_s.c_str(),
                  r["tokens"].get<std::string>().c_str(), r["T"].get<int>(), r["eq_index"].get<int>(),
                  r["answer"].get<std::string>().c_str(), r["answer_span"][0].get<int>(),
                  r["answer_span"][1].get<int>() - 1, r["pos_mode"].get<std::string>().c_str());
      print_ids(r, json_path);
      return 0;
    }
    refuse_given({o_s3}, "applies to 3-level tasks (addition has 2 levels)");
    nlohmann::json c = {{"problem", problem}, {"padding", padding}, {"pos_mode", mode}, {"s1", s1}, {"s2", s2}};
    if (n > 0) c["n"] = n;
    cli::check_fits_memory(case_bytes(c), "--problem's sequence (its shape's N tokens)");
    const ojson r = sequence_case(c);
    if (r.contains("error")) throw InputError(r["error"].get<std::string>());
    std::printf("sequence %s  (n=%d m=%d l=%d N=%d, %s padding, pos_mode %s, s1=%lld s2=%lld)\n",
                r["tokens"].get<std::string>().c_str(), r["n"].get<int>(), r["m"].get<int>(), r["l"].get<int>(),
                r["N"].get<int>(), padding.c_str(), mode.c_str(), static_cast<long long>(s1),
                static_cast<long long>(s2));
    print_ids(r, json_path);
    return 0;
  });
}
