// Shared by the tests: running a tool as a user does (a subprocess: exit code, stdout, stderr, signals
// reported), per-test temporary directories, and where committed data lives.
//   source_dir(): $MANYADD_SOURCE_DIR when set (binaries run in another tree), else the source tree
//   compiled in; a missing committed file fails with a message saying which variable to set.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

namespace manyadd::testing {

struct CmdResult {
  int rc = -1;      // the exit code; 128 + signal when killed by one
  std::string out;  // stdout
  std::string err;  // stderr
};

// A fresh directory for this process and `name` (removed first if it exists).
inline std::string temp_dir(const std::string& name) {
  const auto p =
      std::filesystem::temp_directory_path() / ("manyadd_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Runs `cmd` through /bin/sh with stdout and stderr captured.
inline CmdResult run_cmd(const std::string& cmd) {
  static int counter = 0;
  const std::string base = std::filesystem::temp_directory_path() /
                           ("manyadd_cmd_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  const std::string o = base + ".out", e = base + ".err";
  const int st = std::system((cmd + " > '" + o + "' 2> '" + e + "'").c_str());
  CmdResult r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  r.out = slurp(o);
  r.err = slurp(e);
  std::filesystem::remove(o);
  std::filesystem::remove(e);
  return r;
}

// Bytes from hex digits ("0a1b" -> "\x0a\x1b").
inline std::string from_hex(const std::string& h) {
  std::string out;
  for (std::size_t k = 0; k + 1 < h.size(); k += 2) out += char(std::stoi(h.substr(k, 2), nullptr, 16));
  return out;
}

// A safetensors file written by hand: the header (JSON text, padded with spaces to a multiple of 8)
// after its 8-byte little-endian length, then the data.
inline std::string safetensors_with_header(const std::string& header_json, const std::string& data) {
  std::string h = header_json;
  while (h.size() % 8) h += ' ';
  std::string out(8, '\0');
  const std::uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[std::size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + h + data;
}

inline std::string source_dir() {
  if (const char* s = std::getenv("MANYADD_SOURCE_DIR"); s && *s) return s;
  return MANYADD_SOURCE_DIR;
}

// A committed file or directory under the source tree; fails the test (not the process) when absent.
inline std::string source_path(const std::string& rel) {
  const std::string p = source_dir() + "/" + rel;
  if (!std::filesystem::exists(p))
    ADD_FAILURE() << "committed test data '" << rel << "' not found under '" << source_dir()
                  << "': set MANYADD_SOURCE_DIR to the repository root when the tests run in another tree";
  return p;
}

}  // namespace manyadd::testing
