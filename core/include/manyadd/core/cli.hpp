// The one command-line layer of every tool (CLI11 underneath): strict numeric options, the options
// every tool shares (--threads, --seed, --json, --device), parsing with the exit-code contract, and
// the help footer that states the exit codes.
//
// Numbers are parsed strictly: the whole text must be a number of the option's type ("3.5", "+5",
// "1e3" or "" are refused for integers; "nan", "inf" and "" for reals; "-1" for unsigned), and within
// [lo, hi]. The default a user sees in --help is the variable's value when the option is declared.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>

namespace manyadd::cli {

// Strict parse of one value; InputError naming the option otherwise.
std::int64_t parse_int(const std::string& text, const std::string& option, std::int64_t lo, std::int64_t hi);
std::uint64_t parse_uint(const std::string& text, const std::string& option, std::uint64_t hi);
double parse_real(const std::string& text, const std::string& option, double lo, double hi);

// Options bound to a variable with the strict parsers. The help text gets "(default V)" appended when
// show_default is set (the variable's current value) and the accepted range.
CLI::Option* add_int(CLI::App& app, const std::string& name, std::int64_t& v, const std::string& help,
                     std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
                     std::int64_t hi = std::numeric_limits<std::int64_t>::max(), bool show_default = true);
CLI::Option* add_int(CLI::App& app, const std::string& name, int& v, const std::string& help,
                     int lo = std::numeric_limits<int>::min(), int hi = std::numeric_limits<int>::max(),
                     bool show_default = true);
CLI::Option* add_uint(CLI::App& app, const std::string& name, std::uint64_t& v, const std::string& help,
                      std::uint64_t hi = std::numeric_limits<std::uint64_t>::max(), bool show_default = true);
CLI::Option* add_real(CLI::App& app, const std::string& name, double& v, const std::string& help,
                      double lo = -std::numeric_limits<double>::max(), double hi = std::numeric_limits<double>::max(),
                      bool show_default = true);
// A string option that refuses an empty value.
CLI::Option* add_string(CLI::App& app, const std::string& name, std::string& v, const std::string& help);
// An output file: non-empty, and a path an atomic write may replace (files.hpp), checked at parse time.
CLI::Option* add_output(CLI::App& app, const std::string& name, std::string& v, const std::string& help);

// Shared options. --threads T in [1, 256]; --seed S (unsigned 64-bit); --json FILE (an output);
// --device cpu|cpu-fast|cuda (cuda refused as a usage error where the tool runs on the CPU only: cuda = false).
CLI::Option* add_threads(CLI::App& app, int& threads);
CLI::Option* add_seed(CLI::App& app, std::uint64_t& seed, const std::string& help);
CLI::Option* add_json(CLI::App& app, std::string& path, const std::string& help = "write the JSON report to FILE");
CLI::Option* add_device(CLI::App& app, std::string& device, const std::string& help, bool cuda = true);
// --quiet: no progress lines (results and errors are still printed).
CLI::Option* add_quiet(CLI::App& app, bool& quiet);

// Work sized by options is checked against the machine before it starts: InputError "WHAT needs ~X
// GiB; this machine allows Y GiB" when `bytes` exceeds the memory a process may use (the physical
// memory, or the address-space limit of `ulimit -v` when lower). `what` names the options to reduce.
std::uint64_t memory_limit_bytes();
void check_fits_memory(double bytes, const std::string& what);

// The footer every --help ends with.
std::string exit_codes_footer(bool has_failed_check);

// Parses argv. Returns -1 to go on; 0 after --help or --version (printed to out: the project version and
// the commit of the build, report.hpp); 2 on a usage error (message on err, prefixed with the tool's
// name). Records argv for the --json reports (report::command_line). An option that takes a value followed
// by another option of the app ("--json --p2": the value forgotten) is a usage error, not a value.
int parse(CLI::App& app, int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace manyadd::cli
