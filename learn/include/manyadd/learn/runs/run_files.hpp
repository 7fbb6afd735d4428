// The files of a training run that every model family writes the same way: the checkpoint (weights,
// Adam moments and the step under one checksum, model.safetensors beside it), the CSV logs that a
// resume rewrites to the steps the checkpoint holds, doubles stored bit for bit in metadata, and the
// temporaries a killed process left behind. learn/'s Trainer (train.hpp) and the grid universal
// transformer's (grid_train.hpp) both use them, so a run of either resumes by the same rules.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "manyadd/core/progress.hpp"
#include "manyadd/core/safetensors.hpp"
#include "manyadd/learn/decoder/model.hpp"

namespace manyadd::learn {

// Whether `path` exists; InputError with the OS message where that cannot be known (a name too long, a
// directory without permission): the user's to correct, not an internal error.
bool path_exists(const std::string& path);

// dir/model.safetensors (the weights, metadata {format: pt, step}) and dir/checkpoint.safetensors (the
// weights, then "adam.m." and "adam.v." + every name; metadata: `meta` plus format and step), each
// written atomically. The directory must exist.
void write_run_checkpoint(const std::string& dir, const Layout& lay, const std::vector<float>& p,
                          const std::vector<float>& m, const std::vector<float>& v, std::int64_t step,
                          std::map<std::string, std::string> meta);
// Reads dir/checkpoint.safetensors (its checksum must cover the whole file: no legacy checksum), calls
// check_meta on its metadata (the caller refuses another configuration there: InputError), checks that
// it holds a step and exactly the layout's tensors and moments, fills p, m, v and returns the file and
// the step.
struct RunCheckpoint {
  SafetensorsFile file;
  std::int64_t step = 0;
  std::map<std::string, std::string> run_state;  // the metadata "run.<key>" entries, keys without "run."
};
RunCheckpoint read_run_checkpoint(const std::string& dir, const Layout& lay, std::vector<float>& p,
                                  std::vector<float>& m, std::vector<float>& v,
                                  const std::function<void(const std::map<std::string, std::string>&)>& check_meta);

// Whether a checkpoint's metadata "model_config" is the configuration `now`, compared as configurations
// (parsed with Config's from_json), not as text: a checkpoint written before a field existed holds
// that field's default. A missing or unreadable one is not.
template <class Config>
bool checkpoint_config_is(const std::map<std::string, std::string>& meta, const Config& now) {
  const auto it = meta.find("model_config");
  if (it == meta.end()) return false;
  try {
    Config saved;
    from_json(nlohmann::json::parse(it->second), saved);
    return nlohmann::json(saved) == nlohmann::json(now);
  } catch (const std::exception&) {
    return false;
  }
}
// What a resumed run's settings change from those its checkpoint was trained with: " key old -> new;"
// for every field of `now` that `was` lacks or holds otherwise, "" when none.
std::string config_changes(const nlohmann::json& was, const nlohmann::json& now);

// A resume's train settings against those its checkpoint's run was trained with (run_state's
// "train_config"; config.json is the user's to edit and flags may extend a run): config_changes with the
// fields in `ignore` (settings that do not change the run) left out of both; `upgrade` fills fields a
// train_config written before they existed lacks. "" when nothing changed or the checkpoint holds no
// train_config. `what` names the checkpoint in errors.
std::string resumed_train_changes(const std::map<std::string, std::string>& run_state, const std::string& what,
                                  nlohmann::json now, const std::vector<std::string>& ignore = {},
                                  const std::function<void(nlohmann::json&)>& upgrade = {});

// The record of the changes kept with the run (its checkpoint's run.train_changes, config.json's "run",
// the report): `prior`, then "@STEP: key old -> new; ..." -- "@5100: beta 0.05 -> 0.0005; epochs 510 -> 810;".
std::string add_train_change(const std::string& prior, std::int64_t step, const std::string& diff);

// Rewrites a CSV log so that it describes exactly the steps the checkpoint holds: the header, then the
// complete rows (`columns` fields, a step first, steps increasing) of steps <= upto. Dropped: rows of
// steps a killed run logged after its last checkpoint, and a last line a kill cut short (no newline).
// keep = false: the header alone (a new run). Returns the last step kept (0: none).
std::int64_t rewrite_log(const std::string& path, const std::string& header, std::size_t columns, std::int64_t upto,
                         bool keep);

// The two logs of a run directory, log.csv and eval.csv, rewritten to the steps the checkpoint holds
// (rewrite_log, keep = resuming) and open for appending; last_eval: the last step eval.csv holds.
struct RunLogs {
  std::ofstream log, eval;
  std::int64_t last_eval = 0;
};
void open_run_logs(RunLogs& logs, const std::string& dir, const std::string& log_header, std::size_t log_columns,
                   const std::string& eval_header, std::size_t eval_columns, std::int64_t upto, bool keep);

// A double stored exactly (its IEEE bits, 16 hex digits), NaN and infinities included, and back
// (InputError naming `what` for anything but 16 hex digits).
std::string double_bits(double x);
double from_bits(const std::string& s, const std::string& what);

// Temporaries of atomic writes that a killed process left in the run directory ("<file>.tmp.<pid>"
// of a process that no longer runs).
void remove_stale_temporaries(const std::string& dir);

// One process's piece of a run (train and train_grid): the last step it runs (up to --stop-after, 0: all of
// `total`), its progress line's options (from the steps already done, no later than --max-seconds: the ETA
// says which ends the piece), and the run directory made (a resume first drops what a killed process left).
struct RunPiece {
  std::int64_t end = 0;
  ProgressOptions progress;
};
RunPiece begin_run_piece(const std::string& dir, bool resume, std::int64_t total, std::int64_t done,
                         std::int64_t stop_after, double max_seconds, const ProgressOptions& progress);

}  // namespace manyadd::learn
