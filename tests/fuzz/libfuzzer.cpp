// libFuzzer entry point of one target of targets.hpp, chosen at compile time (MANYADD_FUZZ_TARGET):
// built by tests/CMakeLists.txt as fuzz_<target> when MANYADD_FUZZ is on (clang, with
// -fsanitize=fuzzer,address,undefined); run by `./x fuzz TARGET [SECONDS]`. A violated invariant or an
// exception other than InputError escapes and aborts: libFuzzer saves the input as a reproducer,
// which then belongs under tests/data/fuzz/<target>/ (tests/test_fuzz.cpp replays every file there).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "manyadd/core/safetensors.hpp"
#include "targets.hpp"

namespace {
// The weights config.json is checked against: a committed model (its directory in
// $MANYADD_FUZZ_WEIGHTS, else the source tree's).
const manyadd::SafetensorsFile& weights() {
  static const manyadd::SafetensorsFile w = [] {
    const char* env = std::getenv("MANYADD_FUZZ_WEIGHTS");
    return manyadd::read_safetensors(env && *env ? std::string(env)
                                                 : std::string(MANYADD_SOURCE_DIR) +
                                                       "/models/cpu-sa1010-1l2h-d64/model.safetensors");
  }();
  return w;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
#define MANYADD_STR2(x) #x
#define MANYADD_STR(x) MANYADD_STR2(x)
  const std::string target = MANYADD_STR(MANYADD_FUZZ_TARGET);
  if (target == "safetensors") manyadd::fuzz::safetensors(data, size);
  else if (target == "model_config") manyadd::fuzz::model_config(data, size, weights());
  else manyadd::fuzz::options(data, size);
  return 0;
}
