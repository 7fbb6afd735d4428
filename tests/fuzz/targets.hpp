// Fuzz targets: each takes arbitrary bytes, and either the input is refused with InputError (what the
// tools turn into exit 2) or it is accepted and the target's invariants hold. Anything else -- another
// exception, a crash, a sanitizer report, a huge allocation, a hang -- is a bug; a broken invariant
// throws Violation. Each returns whether the input was accepted (the drivers report the share).
//
// They run two ways, on the same code:
//   tests/test_fuzz.cpp     in ./x test: every reproducer under tests/data/fuzz/<target>/, then a short
//                           RapidCheck run (seconds) of each target on mutations of the seed corpus
//                           (the committed models, configs and safetensors cases).
//   tests/fuzz/libfuzzer.cpp  libFuzzer through clang with AddressSanitizer and UBSan, for long runs:
//                           ./x fuzz TARGET [SECONDS] (README, "Reliability").
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "manyadd/core/safetensors.hpp"

namespace manyadd::fuzz {

struct Violation : std::logic_error {
  using std::logic_error::logic_error;
};

// The safetensors reader. Accepted: the tensors tile the data section, each holds its shape's bytes,
// and what was read writes back to a file that the reader, requiring the whole-file checksum, reads
// back to the same tensors and metadata.
bool safetensors(const std::uint8_t* data, std::size_t size);

// config.json (the text) against model weights: parsed strictly, its model section refused before any
// allocation unless the weights hold exactly its tensors; accepted, the model has every tensor of the
// file (no more, no fewer) and its parameters equal the weights.
// Its train section, when present, is read as train reads it: accepted or InputError.
bool model_config(const std::uint8_t* data, std::size_t size, const SafetensorsFile& weights);

// The strict option parsers and the command-line layer (core/cli.hpp). The input is lines: each is
// checked by parse_int/parse_uint/parse_real against an independent oracle (what the text must look
// like to be accepted, and the value it must give), then all of them are parsed as a command line by
// an App with one option of each kind: cli::parse answers -1 (go on), 0 (help) or 2 (usage error)
// and never throws, and on -1 every option holds a value inside its bounds.
bool options(const std::uint8_t* data, std::size_t size);

// The names of the targets ("safetensors", "model_config", "options"), for the drivers.
const std::vector<std::string>& target_names();

}  // namespace manyadd::fuzz
