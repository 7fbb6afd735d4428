// Fuzz targets: see targets.hpp.
#include "targets.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/error.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "manyadd/learn/runs/train.hpp"

namespace manyadd::fuzz {

namespace {
[[noreturn]] void violated(const std::string& what) { throw Violation(what); }

bool same_tensors(const SafetensorsFile& a, const SafetensorsFile& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const Tensor &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.bytes != y.bytes) return false;
  }
  return true;
}
std::map<std::string, std::string> without_checksum(std::map<std::string, std::string> m) {
  m.erase("checksum");
  return m;
}
}  // namespace

const std::vector<std::string>& target_names() {
  static const std::vector<std::string> names = {"safetensors", "model_config", "options"};
  return names;
}

bool safetensors(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  ReadOptions opt;
  opt.require_checksum = false;  // mutated files mostly lose theirs: check everything else
  opt.allow_nonfinite = true;
  SafetensorsFile f;
  try {
    f = parse_safetensors(bytes, "fuzz", opt);
  } catch (const InputError&) {
    return false;
  }
  std::uint64_t hl = 0;
  std::memcpy(&hl, bytes.data(), 8);
  std::uint64_t at = 8 + hl;
  for (const Tensor& t : f.tensors) {
    const std::int64_t n = t.numel();
    if (n < 0 || std::uint64_t(n) * dtype_size(t.dtype) != t.bytes.size())
      violated(fmt::format("accepted tensor '{}' holds {} bytes, not its shape's", t.name, t.bytes.size()));
    at += t.bytes.size();
  }
  if (at != size) violated(fmt::format("accepted tensors end at byte {} of {}", at, size));
  const std::string again = safetensors_bytes(f.tensors, without_checksum(f.metadata));
  ReadOptions strict = opt;
  strict.require_checksum = true;
  strict.allow_legacy_checksum = false;
  SafetensorsFile g;
  try {
    g = parse_safetensors(again, "rewritten", strict);
  } catch (const InputError& e) {
    violated(std::string("an accepted file, written back, is refused: ") + e.what());
  }
  if (!same_tensors(f, g) || without_checksum(f.metadata) != without_checksum(g.metadata))
    violated("an accepted file, written back and read again, differs");
  return true;
}

bool model_config(const std::uint8_t* data, std::size_t size, const SafetensorsFile& weights) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j;
  try {
    j = parse_json(text, "config.json");
  } catch (const InputError&) {
    return false;
  }
  bool accepted = false;
  try {
    const learn::LoadedModel m = learn::load_model(j, weights, "config.json");
    std::uint64_t held = 0;
    for (const Tensor& t : weights.tensors) held += t.bytes.size();
    if (std::uint64_t(m.params.size()) * 4 > held)
      violated(fmt::format("{} parameters allocated from weights of {} bytes", m.params.size(), held));
    if (m.lay.tensors.size() != weights.tensors.size())
      violated(fmt::format("a model of {} tensors accepted from a file of {}", m.lay.tensors.size(),
                           weights.tensors.size()));
    for (const auto& spec : m.lay.tensors) {
      const std::vector<float> w = weights.get(spec.name).to_f32();
      if (std::memcmp(w.data(), m.params.data() + spec.offset, w.size() * 4) != 0)
        violated(fmt::format("tensor '{}' loaded differently from the file", spec.name));
    }
    accepted = true;
  } catch (const InputError&) {
  }
  if (j.is_object() && j.contains("train")) {
    try {
      learn::TrainConfig tc;
      from_json(j["train"], tc);
    } catch (const InputError&) {
    }
  }
  return accepted;
}

namespace {
bool all_of(const std::string& s, const char* set) { return s.find_first_not_of(set) == std::string::npos; }

// What parse_int must answer: an optional '-' then decimal digits, inside [lo, hi].
bool int_oracle(const std::string& s, std::int64_t lo, std::int64_t hi, std::int64_t* v) {
  const bool neg = !s.empty() && s[0] == '-';
  const std::string d = s.substr(neg ? 1 : 0);
  if (d.empty() || !all_of(d, "0123456789")) return false;
  const std::size_t nz = std::min(d.find_first_not_of('0'), d.size());
  if (d.size() - nz > 19) return false;  // beyond any int64
  const long double x = std::strtold(d.c_str(), nullptr) * (neg ? -1 : 1);  // exact below 2^64
  if (x < (long double)lo || x > (long double)hi) return false;
  *v = std::int64_t(x);
  return true;
}
}  // namespace

bool options(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args;
  {
    std::string cur;
    for (std::size_t i = 0; i < size && args.size() < 32; ++i) {
      if (data[i] == '\n') {
        args.push_back(cur);
        cur.clear();
      } else {
        cur += char(data[i]);
      }
    }
    if (args.size() < 32) args.push_back(cur);
  }
  const std::int64_t lo = -1000, hi = 1000;
  for (const std::string& s : args) {
    std::int64_t want = 0, got = 0;
    const bool ok = int_oracle(s, lo, hi, &want);
    bool accepted = true;
    try {
      got = cli::parse_int(s, "--i", lo, hi);
    } catch (const InputError&) {
      accepted = false;
    }
    if (accepted != ok || (ok && got != want))
      violated(fmt::format("parse_int('{}'): accepted {} value {}, expected {} {}", s, accepted, got, ok, want));

    const bool uok = !s.empty() && s[0] != '-' && int_oracle(s, 0, 1'000'000, &want);
    std::uint64_t ugot = 0;
    accepted = true;
    try {
      ugot = cli::parse_uint(s, "--u", 1'000'000);
    } catch (const InputError&) {
      accepted = false;
    }
    if (accepted != uok || (uok && ugot != std::uint64_t(want)))
      violated(fmt::format("parse_uint('{}'): accepted {} value {}, expected {}", s, accepted, ugot, uok));

    // A real: decimal characters only, all consumed by strtod, neither overflowing nor underflowing
    // (the value would not be the one written), inside the bounds.
    char* end = nullptr;
    errno = 0;
    const double x = s.empty() ? 0 : std::strtod(s.c_str(), &end);
    const bool rok = !s.empty() && all_of(s, "0123456789+-.eE") && end == s.c_str() + s.size() && errno != ERANGE &&
                     std::isfinite(x) && x >= -1e6 && x <= 1e6;
    double rgot = 0;
    accepted = true;
    try {
      rgot = cli::parse_real(s, "--r", -1e6, 1e6);
    } catch (const InputError&) {
      accepted = false;
    }
    if (accepted != rok || (rok && rgot != x))
      violated(fmt::format("parse_real('{}'): accepted {} value {}, expected {} {}", s, accepted, rgot, rok, x));
  }
  // The same text as a command line.
  CLI::App app{"fuzz", "fuzz"};
  std::int64_t i = 3;
  std::uint64_t u = 4;
  double r = 0.5;
  std::string str = "s", out;
  bool flag = false;
  cli::add_int(app, "--i", i, "int", lo, hi);
  cli::add_uint(app, "--u", u, "uint", 1'000'000);
  cli::add_real(app, "--r", r, "real", 0, 1);
  cli::add_string(app, "--s", str, "string");
  cli::add_output(app, "--o", out, "output");
  app.add_flag("--f", flag, "flag");
  std::vector<const char*> argv = {"fuzz"};
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream o, e;
  const int rc = cli::parse(app, int(argv.size()), argv.data(), o, e);
  if (rc != -1 && rc != 0 && rc != 2) violated(fmt::format("cli::parse returned {}", rc));
  if (rc == -1 && (i < lo || i > hi || u > 1'000'000 || !(r >= 0 && r <= 1) || str.empty()))
    violated("cli::parse accepted a value outside its option's bounds");
  if (rc == 2 && e.str().empty()) violated("a usage error without a message");
  return rc == -1;
}

}  // namespace manyadd::fuzz
