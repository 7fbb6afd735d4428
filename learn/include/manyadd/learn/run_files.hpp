// The files of a training run that every model family writes the same way: the checkpoint (weights,
// Adam moments and the step under one checksum, model.safetensors beside it), the CSV logs that a
// resume rewrites to the steps the checkpoint holds, doubles stored bit for bit in metadata, and the
// temporaries a killed process left behind. learn/'s Trainer (train.hpp) and the grid universal
// transformer's (grid_train.hpp) both use them, so a run of either resumes by the same rules.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "manyadd/core/safetensors.hpp"
#include "manyadd/learn/model.hpp"

namespace manyadd::learn {

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

// Rewrites a CSV log so that it describes exactly the steps the checkpoint holds: the header, then the
// complete rows (`columns` fields, a step first, steps increasing) of steps <= upto. Dropped: rows of
// steps a killed run logged after its last checkpoint, and a last line a kill cut short (no newline).
// keep = false: the header alone (a new run). Returns the last step kept (0: none).
std::int64_t rewrite_log(const std::string& path, const std::string& header, std::size_t columns, std::int64_t upto,
                         bool keep);

// A double stored exactly (its IEEE bits, 16 hex digits), NaN and infinities included, and back
// (InputError naming `what` for anything but 16 hex digits).
std::string double_bits(double x);
double from_bits(const std::string& s, const std::string& what);

// Temporaries of atomic writes that a killed process left in the run directory ("<file>.tmp.<pid>"
// of a process that no longer runs).
void remove_stale_temporaries(const std::string& dir);

}  // namespace manyadd::learn
