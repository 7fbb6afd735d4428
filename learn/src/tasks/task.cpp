// The tasks' registry (names, kinds, the instance of each) and what every task shares (training cells,
// extents, the model check, the position rule): see task.hpp. The families: task_addition.cpp,
// task_parity.cpp, task_multiplication.cpp; what their writers and readers share: task_detail.hpp.
#include "manyadd/learn/tasks/task.hpp"

#include <algorithm>

#include <boost/multiprecision/cpp_int.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/learn/tasks/data.hpp"
#include "manyadd/learn/tasks/hard_data.hpp"
#include "manyadd/learn/tasks/train_config.hpp"

#include "task_detail.hpp"

namespace manyadd::learn {

namespace {
const std::vector<TaskKind> kAll = {TaskKind::addition,       TaskKind::addition_noscratch, TaskKind::addition_2op,
                                    TaskKind::parity,         TaskKind::parity_noscratch,   TaskKind::multiplication,
                                    TaskKind::multiplication_noscratch};
}  // namespace

TaskKind parse_task(const std::string& s) {
  for (auto k : kAll)
    if (s == task_name(k)) return k;
  throw InputError(fmt::format("task '{}' unknown ({})", s, task_names()));
}

const char* task_name(TaskKind k) {
  switch (k) {
    case TaskKind::addition: return "addition";
    case TaskKind::addition_noscratch: return "addition-noscratch";
    case TaskKind::addition_2op: return "addition-2op";
    case TaskKind::parity: return "parity";
    case TaskKind::parity_noscratch: return "parity-noscratch";
    case TaskKind::multiplication: return "multiplication";
    case TaskKind::multiplication_noscratch: return "multiplication-noscratch";
  }
  return "?";
}

const std::vector<TaskKind>& all_tasks() { return kAll; }

std::string task_names() {
  std::string s;
  for (auto k : kAll) s += (s.empty() ? "" : "|") + std::string(task_name(k));
  return s;
}

std::vector<std::pair<int, int>> Task::training_cells(const TrainConfig& tc) const {
  std::vector<std::pair<int, int>> cells;
  const GridAxis a0 = axis(0);
  const int j_lo = two_axes() ? axis(1).min_value : 1, j_hi = two_axes() ? tc.train_m : 1;
  for (int i = a0.min_value; i <= tc.train_n; ++i)
    for (int j = j_lo; j <= j_hi; ++j)
      if (in_training_region(tc, i, j)) cells.emplace_back(i, j);
  return cells;
}

Task::Extent Task::extent(int i, int j) const {
  Extent e = cell_extent(i, j);
  // Every run is longest in the all-nines instance (a carry only lengthens a number); the property test
  // in tests/test_tasks.cpp checks every sampled instance against it.
  e.digit_run = longest_digit_run(write(largest(i, j)).tokens);
  return e;
}

void Task::check_model(const ModelConfig& c) const {
  if (c.vocab < vocab())
    throw InputError(fmt::format("task {} uses the tokens '{}': the model's vocab {} is too small (set model.vocab "
                                 "{})",
                                 name(), vocabulary_string(vocab()), c.vocab, vocab()));
  const int need = pos_levels(c.pos_mode);
  const bool coupled =
      c.pos_mode == PosMode::coupled || c.pos_mode == PosMode::coupled3 || c.pos_mode == PosMode::coupled_rel;
  if (coupled && need != levels()) {
    const char* fix = levels() == 1 ? "digits (its single-level coupling)" : levels() == 2 ? "coupled" : "coupled3";
    throw InputError(fmt::format("task {} couples positions on {} level{}, pos_mode {} on {}: use pos_mode {} (or "
                                 "absolute / none)",
                                 name(), levels(), levels() == 1 ? "" : "s", pos_mode_name(c.pos_mode), need, fix));
  }
}

const Task& task(TaskKind k) {
  switch (k) {
    case TaskKind::addition:
    case TaskKind::addition_noscratch:
    case TaskKind::addition_2op: return task_detail::addition_family(k);
    case TaskKind::parity:
    case TaskKind::parity_noscratch: return task_detail::parity_family(k);
    case TaskKind::multiplication:
    case TaskKind::multiplication_noscratch: return task_detail::multiplication_family(k);
  }
  throw InvariantError("task: unknown kind");
}

const Task& task_named(const std::string& name) { return task(parse_task(name)); }

std::string position_rule(const Task& t, PosMode mode) {
  const nlohmann::json d = t.describe();
  const std::string coupling = d.value("position_ids", std::string("the task's coupling"));
  const std::string offsets = " (offsets s, s1, s2, s3 >= 1: random per sample in training, 1 at evaluation "
                              "unless given)";
  switch (mode) {
    case PosMode::coupled:
    case PosMode::coupled3: return "pos_mode " + std::string(pos_mode_name(mode)) + ": " + coupling + offsets;
    case PosMode::digits: return "pos_mode digits: one table, level 1 of the task's coupling alone: " + coupling + offsets;
    case PosMode::absolute: return "pos_mode absolute: one table, BOS 0, the token at index k >= 1 -> s + k - 1" + offsets;
    case PosMode::none: return "pos_mode none: no position embeddings (causal attention alone)";
    case PosMode::fire:
      return "pos_mode fire: no position IDs and no table; every layer's attention scores get FIRE's learned bias "
             "b_h(i, j) of the query's and key's token indices i, j (BOS 0), a function of log(|c| (i - j) + 1) / "
             "log(|c| n_i + 1), n_i = max(i, L) or min(i, L) (fire_threshold) (Li et al. 2024)";
    case PosMode::rope:
      return "pos_mode rope: no position IDs and no table; every layer's queries and keys are rotated by their token "
             "index (BOS 0), the pair (2k, 2k+1) by the angle index * 10000^(-2k/d_head) (Su et al. 2021)";
    case PosMode::coupled_rel:
      return "pos_mode coupled_rel: no table; " + coupling + offsets +
             "; every layer's score of a query and a key gets a learned gain per head, level and ID difference d "
             "(|d| <= rel_window), none otherwise";
    case PosMode::abacus:
      return "pos_mode abacus: one table; each maximal run of digit tokens is numbered beta, beta + 1, ... from "
             "its first token, every other token 0; beta uniform in [1, abacus_k], one per batch, in training, 1 at "
             "evaluation (McLeish et al. 2024, Sec. 3.1)";
  }
  return "";
}

const Task& task_of_model(const nlohmann::json& config_json, const std::string& requested, const std::string& dir) {
  std::string trained = "addition";
  if (config_json.contains("train") && config_json["train"].is_object() && config_json["train"].contains("task")) {
    const auto& t = config_json["train"]["task"];
    if (!t.is_string()) throw InputError(fmt::format("{}/config.json: train.task must be a string ({})", dir, task_names()));
    trained = t.get<std::string>();
  }
  const Task& tk = task_named(trained);
  if (!requested.empty() && parse_task(requested) != tk.kind())
    throw InputError(fmt::format("the model in {} was trained on task {}; --task {} is another format (drop --task, "
                                 "or give {})",
                                 dir, tk.name(), requested, tk.name()));
  return tk;
}

}  // namespace manyadd::learn
