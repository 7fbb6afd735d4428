// The command-line layer: see cli.hpp.
#include "manyadd/core/cli.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <ostream>

#include <fmt/format.h>

#include "manyadd/core/error.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/core/report.hpp"

namespace manyadd::cli {

namespace {
std::string range_text(long double lo, long double hi, bool is_int) {
  auto s = [&](long double v) { return is_int ? fmt::format("{}", (long long)v) : fmt::format("{:g}", double(v)); };
  const bool has_lo = lo > -1e300L && !(is_int && lo <= (long double)std::numeric_limits<std::int64_t>::min());
  const bool has_hi = hi < 1e300L && !(is_int && hi >= (long double)std::numeric_limits<std::int64_t>::max());
  if (has_lo && has_hi) return fmt::format("[{}, {}]", s(lo), s(hi));
  if (has_lo) return fmt::format(">= {}", s(lo));
  if (has_hi) return fmt::format("<= {}", s(hi));
  return "";
}
std::string decorate(const std::string& help, const std::string& def, const std::string& range) {
  std::string h = help;
  if (!range.empty()) h += fmt::format(" {}", range);
  if (!def.empty()) h += fmt::format(" (default {})", def);
  return h;
}
std::string fmt_real(double v) { return fmt::format("{:g}", v); }
}  // namespace

std::int64_t parse_int(const std::string& text, const std::string& option, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  const auto r = std::from_chars(b, e, v);
  if (text.empty() || r.ec == std::errc::invalid_argument || r.ptr != e)
    throw InputError(fmt::format("{}: '{}' is not an integer", option, text));
  if (r.ec == std::errc::result_out_of_range || v < lo || v > hi)
    throw InputError(fmt::format("{}: {} is outside {}", option, text, range_text(lo, hi, true)));
  return v;
}

std::uint64_t parse_uint(const std::string& text, const std::string& option, std::uint64_t hi) {
  std::uint64_t v = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  if (!text.empty() && text[0] == '-')
    throw InputError(fmt::format("{}: '{}' is negative; a non-negative integer is needed", option, text));
  const auto r = std::from_chars(b, e, v);
  if (text.empty() || r.ec == std::errc::invalid_argument || r.ptr != e)
    throw InputError(fmt::format("{}: '{}' is not a non-negative integer", option, text));
  if (r.ec == std::errc::result_out_of_range || v > hi)
    throw InputError(fmt::format("{}: {} is larger than {}", option, text, hi));
  return v;
}

double parse_real(const std::string& text, const std::string& option, double lo, double hi) {
  // strtod accepts leading spaces, hex and "nan"/"inf": refuse those explicitly.
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])))
    throw InputError(fmt::format("{}: '{}' is not a number", option, text));
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || text.find_first_of("xXnNiI") != std::string::npos)
    throw InputError(fmt::format("{}: '{}' is not a finite decimal number", option, text));
  if (!std::isfinite(v) || errno == ERANGE) throw InputError(fmt::format("{}: '{}' is out of range", option, text));
  if (v < lo || v > hi) throw InputError(fmt::format("{}: {} is outside {}", option, text, range_text(lo, hi, false)));
  return v;
}

// CLI11 callbacks may only throw CLI errors to be reported as usage errors: convert.
#define MANYADD_CLI_CALL(expr)                                 \
  try {                                                        \
    expr;                                                      \
  } catch (const InputError& e) {                              \
    throw CLI::ValidationError(e.what());                      \
  }

CLI::Option* add_int(CLI::App& app, const std::string& name, std::int64_t& v, const std::string& help, std::int64_t lo,
                     std::int64_t hi, bool show_default) {
  auto* o = app.add_option_function<std::string>(
      name, [&v, name, lo, hi](const std::string& s) { MANYADD_CLI_CALL(v = parse_int(s, name, lo, hi)) },
      decorate(help, show_default ? std::to_string(v) : "", range_text(lo, hi, true)));
  return o->type_name("INT");
}
CLI::Option* add_int(CLI::App& app, const std::string& name, int& v, const std::string& help, int lo, int hi,
                     bool show_default) {
  auto* o = app.add_option_function<std::string>(
      name, [&v, name, lo, hi](const std::string& s) { MANYADD_CLI_CALL(v = int(parse_int(s, name, lo, hi))) },
      decorate(help, show_default ? std::to_string(v) : "", range_text(lo, hi, true)));
  return o->type_name("INT");
}
CLI::Option* add_uint(CLI::App& app, const std::string& name, std::uint64_t& v, const std::string& help,
                      std::uint64_t hi, bool show_default) {
  auto* o = app.add_option_function<std::string>(
      name, [&v, name, hi](const std::string& s) { MANYADD_CLI_CALL(v = parse_uint(s, name, hi)) },
      decorate(help, show_default ? std::to_string(v) : "",
               hi == std::numeric_limits<std::uint64_t>::max() ? "" : fmt::format("<= {}", hi)));
  return o->type_name("UINT");
}
CLI::Option* add_real(CLI::App& app, const std::string& name, double& v, const std::string& help, double lo, double hi,
                      bool show_default) {
  auto* o = app.add_option_function<std::string>(
      name, [&v, name, lo, hi](const std::string& s) { MANYADD_CLI_CALL(v = parse_real(s, name, lo, hi)) },
      decorate(help, show_default ? fmt_real(v) : "", range_text(lo, hi, false)));
  return o->type_name("REAL");
}
CLI::Option* add_string(CLI::App& app, const std::string& name, std::string& v, const std::string& help) {
  auto* o = app.add_option_function<std::string>(
      name,
      [&v, name](const std::string& s) {
        if (s.empty()) throw CLI::ValidationError(fmt::format("{}: the value is empty", name));
        v = s;
      },
      help);
  return o->type_name("TEXT");
}
CLI::Option* add_output(CLI::App& app, const std::string& name, std::string& v, const std::string& help) {
  auto* o = app.add_option_function<std::string>(
      name,
      [&v, name](const std::string& s) {
        MANYADD_CLI_CALL(check_output_path(s))
        v = s;
      },
      help);
  return o->type_name("FILE");
}
#undef MANYADD_CLI_CALL

CLI::Option* add_threads(CLI::App& app, int& threads) { return add_int(app, "--threads", threads, "worker threads", 1, 256); }
CLI::Option* add_seed(CLI::App& app, std::uint64_t& seed, const std::string& help) {
  return add_uint(app, "--seed", seed, help);
}
CLI::Option* add_json(CLI::App& app, std::string& path, const std::string& help) {
  return add_output(app, "--json", path, help);
}
CLI::Option* add_device(CLI::App& app, std::string& device, const std::string& help, bool cuda) {
  const std::string names = cuda ? "auto|cpu|cpu-fast|cuda" : "auto|cpu|cpu-fast";
  auto* o = app.add_option_function<std::string>(
      "--device",
      [&device, cuda, names](const std::string& s) {
        if (s == "cuda" && !cuda)
          throw CLI::ValidationError(fmt::format("--device cuda: this tool runs on the CPU ({})", names));
        if (s != "auto" && s != "cpu" && s != "cpu-fast" && s != "cuda")
          throw CLI::ValidationError(fmt::format("--device '{}' unknown ({})", s, names));
        device = s;
      },
      decorate(help, device, ""));
  return o->type_name(names);
}

CLI::Option* add_quiet(CLI::App& app, bool& quiet) {
  return app.add_flag("--quiet,-q", quiet, "no progress lines on stderr (results and errors are still printed)");
}

std::uint64_t memory_limit_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  std::uint64_t lim = pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : std::uint64_t(1) << 40;
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) lim = std::min<std::uint64_t>(lim, rl.rlim_cur);
  return lim;
}

void check_fits_memory(double bytes, const std::string& what) {
  const double lim = double(memory_limit_bytes());
  if (!(bytes <= lim))
    throw InputError(fmt::format("{} needs ~{:.1f} GiB; this machine allows {:.1f} GiB", what, bytes / double(1 << 30),
                                 lim / double(1 << 30)));
}

std::string exit_codes_footer(bool has_failed_check) {
  return has_failed_check
             ? "Exit codes: 0 done/verified, 1 a check failed (printed), 2 bad input or usage, 3 internal error."
             : "Exit codes: 0 done, 2 bad input or usage, 3 internal error.";
}

namespace {
// The option of `app` or of its option groups that the argument `arg` names ("--json", "-h", "--p2=3"),
// or nullptr.
const CLI::Option* option_named(const CLI::App& app, const std::string& arg) {
  if (arg.size() < 2 || arg[0] != '-') return nullptr;
  const std::string name = arg.substr(0, arg.find('='));
  for (const CLI::Option* o : app.get_options())
    if (o->check_name(name)) return o;
  for (const CLI::App* group : app.get_subcommands([](const CLI::App*) { return true; }))
    if (const CLI::Option* o = option_named(*group, arg)) return o;
  return nullptr;
}
// An option that takes a value followed by another option of the tool ("--json --p2"): the value was
// forgotten, and the next option would otherwise be taken as it (a file named "--p2"). Returns the
// message, empty when there is none. "--json=--p2" or "--json ./--p2" still say it on purpose.
std::string value_is_an_option(const CLI::App& app, int argc, const char* const* argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    const CLI::Option* o = arg.find('=') == std::string::npos ? option_named(app, arg) : nullptr;
    if (!o || o->get_expected_min() == 0) continue;
    if (option_named(app, argv[i + 1]))
      return fmt::format("{} needs a value, and '{}' is another option (a value that starts with '-' is written "
                         "{}=VALUE, a file named so ./{})",
                         arg, argv[i + 1], arg, argv[i + 1]);
  }
  return "";
}
}  // namespace

int parse(CLI::App& app, int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  report::set_command_line(argc, argv);
  if (!app.get_option_no_throw("--version"))
    app.set_version_flag("--version", fmt::format("{} {} (commit {})",  // the name is set from argv[0] by parse
                                                  app.get_name().empty() && argc > 0 ? report::command_line()[0] : app.get_name(),
                                                  report::version(), report::commit()));
  if (const std::string why = value_is_an_option(app, argc, argv); !why.empty()) {
    err << app.get_name() << ": " << why << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << "\n";
    return 0;
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::ParseError& e) {
    err << app.get_name() << ": " << e.what() << "\n";
    return 2;
  }
  return -1;
}

}  // namespace manyadd::cli
