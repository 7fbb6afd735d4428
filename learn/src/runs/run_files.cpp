// The files of a training run: see run_files.hpp.
#include "manyadd/learn/runs/run_files.hpp"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/learn/runs/io.hpp"

namespace manyadd::learn {

void write_run_checkpoint(const std::string& dir, const Layout& lay, const std::vector<float>& p,
                          const std::vector<float>& m, const std::vector<float>& v, std::int64_t step,
                          std::map<std::string, std::string> meta) {
  const std::map<std::string, std::string> weights_meta = {{"format", "pt"}, {"step", std::to_string(step)}};
  write_safetensors(dir + "/model.safetensors", params_to_tensors(lay, p), weights_meta);
  auto ts = params_to_tensors(lay, p);
  auto tm = params_to_tensors(lay, m, "adam.m.");
  auto tv = params_to_tensors(lay, v, "adam.v.");
  ts.insert(ts.end(), tm.begin(), tm.end());
  ts.insert(ts.end(), tv.begin(), tv.end());
  meta.insert(weights_meta.begin(), weights_meta.end());
  write_safetensors(dir + "/checkpoint.safetensors", ts, meta);
}

RunCheckpoint read_run_checkpoint(const std::string& dir, const Layout& lay, std::vector<float>& p,
                                  std::vector<float>& m, std::vector<float>& v,
                                  const std::function<void(const std::map<std::string, std::string>&)>& check_meta) {
  ReadOptions whole_file;  // the step and the configuration in the metadata must be under the checksum
  whole_file.allow_legacy_checksum = false;
  RunCheckpoint c;
  c.file = read_safetensors(dir + "/checkpoint.safetensors", whole_file);
  const auto& meta = c.file.metadata;
  if (check_meta) check_meta(meta);
  if (!meta.count("step")) throw InputError(fmt::format("'{}/checkpoint.safetensors' has no step", dir));
  try {
    c.step = cli::parse_int(meta.at("step"), "its step", 0, std::numeric_limits<std::int64_t>::max());
  } catch (const InputError& e) {
    throw InputError(fmt::format("'{}/checkpoint.safetensors': {}", dir, e.what()));
  }
  check_tensor_set(lay, c.file, {"", "adam.m.", "adam.v."});
  tensors_to_params(lay, c.file, p);
  tensors_to_params(lay, c.file, m, "adam.m.");
  tensors_to_params(lay, c.file, v, "adam.v.");
  for (const auto& [k, val] : meta)
    if (k.compare(0, 4, "run.") == 0) c.run_state[k.substr(4)] = val;
  return c;
}

std::string config_changes(const nlohmann::json& was, const nlohmann::json& now) {
  std::string diff;
  for (auto it = now.begin(); it != now.end(); ++it)
    if (!was.is_object() || !was.contains(it.key()) || was.at(it.key()) != it.value())
      diff += fmt::format(" {} {} -> {};", it.key(),
                          was.is_object() && was.contains(it.key()) ? was.at(it.key()).dump() : "(none)",
                          it.value().dump());
  return diff;
}

std::string resumed_train_changes(const std::map<std::string, std::string>& run_state, const std::string& what,
                                  nlohmann::json now, const std::vector<std::string>& ignore,
                                  const std::function<void(nlohmann::json&)>& upgrade) {
  const auto it = run_state.find("train_config");
  if (it == run_state.end()) return "";
  nlohmann::json was = parse_json(it->second, what + " (run.train_config)");
  if (upgrade && was.is_object()) upgrade(was);
  for (const std::string& k : ignore) {
    if (was.is_object()) was.erase(k);
    if (now.is_object()) now.erase(k);
  }
  return config_changes(was, now);
}

std::string add_train_change(const std::string& prior, std::int64_t step, const std::string& diff) {
  return prior + fmt::format("{}@{}:{}", prior.empty() ? "" : " ", step, diff);
}

bool path_exists(const std::string& path) {
  std::error_code ec;
  const bool there = std::filesystem::exists(path, ec);
  if (ec) throw InputError(fmt::format("'{}': {}", path, ec.message()));
  return there;
}

// Rewrites a CSV log so that it describes exactly the steps the checkpoint holds: the header, then the
// complete rows (`columns` fields, a step first, steps increasing) of steps <= upto. Dropped: rows of
// steps a killed run logged after its last checkpoint, and a last line a kill cut short (no newline).
// keep = false: the header alone (a new run). Returns the last step kept (0: none).
std::int64_t rewrite_log(const std::string& path, const std::string& header, std::size_t columns, std::int64_t upto,
                         bool keep) {
  check_output_path(path);  // the log is appended to: not through a link, not into a device
  std::string kept = header + "\n";
  std::int64_t last = 0;
  if (keep && path_exists(path)) {
    const std::string text = read_file(path, std::uint64_t(1) << 30);
    for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
      const std::string line = text.substr(at, nl - at);
      if (std::count(line.begin(), line.end(), ',') + 1 != std::ptrdiff_t(columns)) continue;  // the header, a torn row
      std::int64_t step = 0;
      try {
        step = cli::parse_int(line.substr(0, line.find(',')), "step", 1, upto);
      } catch (const InputError&) {
        continue;
      }
      if (step <= last) continue;
      kept += line + "\n";
      last = step;
    }
  }
  atomic_write(path, kept);
  return last;
}

void open_run_logs(RunLogs& logs, const std::string& dir, const std::string& log_header, std::size_t log_columns,
                   const std::string& eval_header, std::size_t eval_columns, std::int64_t upto, bool keep) {
  rewrite_log(dir + "/log.csv", log_header, log_columns, upto, keep);
  logs.last_eval = rewrite_log(dir + "/eval.csv", eval_header, eval_columns, upto, keep);
  logs.log.open(dir + "/log.csv", std::ios::app);
  if (!logs.log) throw InputError(fmt::format("cannot open '{}/log.csv'", dir));
  logs.eval.open(dir + "/eval.csv", std::ios::app);
  if (!logs.eval) throw InputError(fmt::format("cannot open '{}/eval.csv'", dir));
}

// A double stored exactly (its IEEE bits, 16 hex digits), NaN and infinities included.
std::string double_bits(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, 8);
  return fmt::format("{:016x}", b);
}
double from_bits(const std::string& s, const std::string& what) {
  std::uint64_t b = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), b, 16);
  if (s.size() != 16 || r.ec != std::errc() || r.ptr != s.data() + s.size())
    throw InputError(fmt::format("{}: '{}' is not 16 hex digits", what, s));
  double x;
  std::memcpy(&x, &b, 8);
  return x;
}

// Temporaries of atomic writes that a killed process left in the run directory ("<file>.tmp.<pid>"
// of a process that no longer runs).
void remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const auto k = name.rfind(".tmp.");
    if (k == std::string::npos || !e.is_regular_file(ec)) continue;
    const std::string pid = name.substr(k + 5);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    if (::kill(pid_t(std::stol(pid)), 0) != 0 && errno == ESRCH) std::filesystem::remove(e.path(), ec);
  }
}

RunPiece begin_run_piece(const std::string& dir, bool resume, std::int64_t total, std::int64_t done,
                         std::int64_t stop_after, double max_seconds, const ProgressOptions& progress) {
  RunPiece p;
  p.end = stop_after > 0 ? std::min(total, stop_after) : total;
  p.progress = progress;
  p.progress.first = std::min(done, p.end);
  p.progress.deadline_s = max_seconds;
  make_output_dir(dir);
  if (resume) remove_stale_temporaries(dir);
  return p;
}

}  // namespace manyadd::learn
