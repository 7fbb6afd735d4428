// The error policy: see error.hpp.
#include "manyadd/core/error.hpp"

#include <new>
#include <ostream>

#include <fmt/format.h>

namespace manyadd {

int run_tool(const char* tool, std::ostream& err, const std::function<int()>& body) {
  try {
    return body();
  } catch (const InputError& e) {
    err << tool << ": " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    err << tool << ": out of memory: the input asks for more memory than this machine can give\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    err << tool << ": internal error: " << e.what() << "\n";
    return kExitInternal;
  } catch (...) {
    err << tool << ": internal error: unknown exception\n";
    return kExitInternal;
  }
}

namespace detail {
void invariant_failed(const char* file, int line, const char* cond, const std::string& what) {
  throw InvariantError(fmt::format("{}:{}: invariant ({}) broken: {}", file, line, cond, what));
}
}  // namespace detail

}  // namespace manyadd
