// Shared pieces of the learn/ CLIs: the exit-code contract (0 done, 1 failed check, 2 bad input) and
// the table of configuration fields that `train` exposes both as JSON keys and as flags.
#pragma once

#include <string>
#include <vector>

namespace manyadd::learn {

struct FieldDoc {
  const char* section;  // "model" or "train"
  const char* name;     // JSON key; the flag is --<name with '_' -> '-'>
  const char* help;
};
const std::vector<FieldDoc>& config_fields();

}  // namespace manyadd::learn
