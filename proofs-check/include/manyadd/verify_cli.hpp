// The verify_construction command, callable in-process so tests can drive it: options -> plan ->
// stages -> report (verify/plan.hpp, verify/stages.hpp). Returns the exit code: 0 verified,
// 1 a check failed (printed), 2 bad input or usage, 3 internal error (the message on err).
#pragma once

#include <iosfwd>

namespace manyadd {
int verify_construction_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);
}
