// The project's error policy, shared by every library and tool.
//   InputError      something the user can correct (a bad option, a malformed file, a size too large
//                   for the machine): the tools print it and exit 2.
//   InvariantError  a broken internal invariant, i.e. a bug: exit 3 with the message, never silently.
// run_tool() is the one place that maps exceptions to exit codes (0 done/verified, 1 a failed check,
// 2 bad input, 3 internal error).
#pragma once

#include <functional>
#include <iosfwd>
#include <stdexcept>
#include <string>

namespace manyadd {

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct InvariantError : std::logic_error {
  using std::logic_error::logic_error;
};

enum ExitCode : int { kExitOk = 0, kExitFailed = 1, kExitBadInput = 2, kExitInternal = 3 };

// Runs body() and returns its exit code; an exception becomes a message on `err` prefixed by the tool's
// name and an exit code: InputError -> 2; std::bad_alloc -> 2 ("out of memory": the input asked for
// more than the machine holds); anything else -> 3 ("internal error").
int run_tool(const char* tool, std::ostream& err, const std::function<int()>& body);

// Throws InvariantError("file:line: what") when cond is false. Unlike assert it stays on under NDEBUG.
#define MANYADD_INVARIANT(cond, what)                                                     \
  do {                                                                                    \
    if (!(cond)) ::manyadd::detail::invariant_failed(__FILE__, __LINE__, #cond, (what)); \
  } while (0)

namespace detail {
[[noreturn]] void invariant_failed(const char* file, int line, const char* cond, const std::string& what);
}

}  // namespace manyadd
