// What every --json report carries besides its tool's numbers: which program wrote it (tool, project
// version, the git commit the binary was built from), how it was called (argv), and a top-level verdict
// that agrees with the exit code, so a report read months later says what produced it and whether it
// passed without re-running anything.
//
//   {"manyadd": {"tool": "evaluate", "version": "0.1.0", "commit": "8893f99-dirty",
//                "argv": ["evaluate", "--model", "models/x", ...]},
//    "verdict": "pass" | "fail" | "done",
//    ... the tool's own fields ...}
//
// "pass"/"fail" are for tools that check something (exit 0 / exit 1); "done" for tools that produce
// something (train, dump_attention, ...). cli::parse() records argv; a tool writes its report through
// write_json_report().
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace manyadd::report {

// The project version (CMake's project(VERSION)) and the commit of the source tree the library was
// built from: `git describe --always --dirty --abbrev=12` at build time, "unknown" outside a checkout.
const char* version();
const char* commit();

// The command line of this process, as given to cli::parse (argv[0] reduced to its file name).
void set_command_line(int argc, const char* const* argv);
const std::vector<std::string>& command_line();

// {"tool", "version", "commit", "argv"}.
nlohmann::json provenance(const std::string& tool);

// body + {"manyadd": provenance(tool), "verdict": verdict}, written atomically (files.hpp) with two-space
// indentation. verdict must be "pass", "fail" or "done" (InvariantError otherwise).
void write_json_report(const std::string& path, const std::string& tool, const std::string& verdict,
                       nlohmann::json body);

}  // namespace manyadd::report
