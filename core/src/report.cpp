#include "manyadd/core/report.hpp"

#include "manyadd/core/error.hpp"
#include "manyadd/core/files.hpp"

namespace manyadd::build_info {
// Defined in the file the build generates (cmake/build_info.cmake).
extern const char* const kVersion;
extern const char* const kCommit;
}  // namespace manyadd::build_info

namespace manyadd::report {
namespace {
std::vector<std::string>& argv_store() {
  static std::vector<std::string> v;
  return v;
}
}  // namespace

const char* version() { return build_info::kVersion; }
const char* commit() { return build_info::kCommit; }

void set_command_line(int argc, const char* const* argv) {
  auto& v = argv_store();
  v.clear();
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i] ? argv[i] : "";
    if (i == 0) {
      const auto slash = a.find_last_of('/');
      if (slash != std::string::npos) a = a.substr(slash + 1);
    }
    v.push_back(std::move(a));
  }
}

const std::vector<std::string>& command_line() { return argv_store(); }

nlohmann::json provenance(const std::string& tool) {
  return {{"tool", tool}, {"version", version()}, {"commit", commit()}, {"argv", command_line()}};
}

void write_json_report(const std::string& path, const std::string& tool, const std::string& verdict,
                       nlohmann::json body) {
  MANYADD_INVARIANT(verdict == "pass" || verdict == "fail" || verdict == "done", "unknown verdict " + verdict);
  MANYADD_INVARIANT(body.is_object(), "a report is a JSON object");
  // The provenance and the verdict first, then the tool's fields (nlohmann::json sorts keys; the
  // ordered type keeps this order in the file).
  nlohmann::ordered_json out;
  out["manyadd"] = provenance(tool);
  out["verdict"] = verdict;
  for (auto it = body.begin(); it != body.end(); ++it) out[it.key()] = it.value();
  atomic_write(path, out.dump(2) + "\n");
}

}  // namespace manyadd::report
