// The verify_construction command (CLI contract: ../shared/design.md), callable in-process so
// tests can drive it. Returns the exit code: 0 verified, 1 counterexample, 2 bad input.
#pragma once

#include <iosfwd>

namespace manyadd {
int verify_construction_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);
}
