// Shared pieces of the learn/ CLIs: the exit-code contract (0 done, 1 failed check, 2 bad input) and
// the table of configuration fields that `train` exposes both as JSON keys and as flags.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace manyadd::learn {

struct FieldDoc {
  const char* section;  // "model" or "train"
  const char* name;     // JSON key; the flag is --<name with '_' -> '-'>
  const char* help;
};
const std::vector<FieldDoc>& config_fields();

// Parses the command line. Returns -1 to go on, else the exit code: 0 after --help, 2 on a parse
// error (CLI11 has printed the message).
inline int parse_cli(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return -1;
}

}  // namespace manyadd::learn
