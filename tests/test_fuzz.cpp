// Fuzzing in the test suite (tests/fuzz/targets.hpp): every reproducer under tests/data/fuzz/<target>/
// is replayed, then each target runs on RapidCheck-generated mutations of its seed corpus -- byte
// flips, overwrites, insertions, deletions, truncations, duplicated ranges and numbers replaced by
// boundary values (0, -1, 2^31, 2^62, 2^64, 64.9, 1e400, ...), on the whole input or, for safetensors,
// on the JSON header alone with its length prefix kept right and the checksum optionally dropped, so
// that the validation behind the checksum is reached. A failure prints the shrunk mutation list and
// the seed: RC_PARAMS="seed=S" reproduces it; save the input as a reproducer under
// tests/data/fuzz/<target>/. MANYADD_FUZZ_CASES sets the cases per target (defaults 3000, 3000, 5000:
// a few seconds in all; a long run: MANYADD_FUZZ_CASES=1000000); the address space is capped at 4 GiB
// so that an allocation an input should not cause fails here instead of swapping. The share of inputs
// accepted is printed per target.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fuzz/targets.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/core/safetensors.hpp"
#include "manyadd/learn/runs/io.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace manyadd;
using manyadd::testing::source_path;

namespace {

struct CapAddressSpace : ::testing::Environment {
  void SetUp() override {
    struct rlimit rl {};
    getrlimit(RLIMIT_AS, &rl);
    const rlim_t cap = rlim_t(4) << 30;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > cap) {
      rl.rlim_cur = cap;
      setrlimit(RLIMIT_AS, &rl);
    }
  }
};
const auto* const kCap = ::testing::AddGlobalTestEnvironment(new CapAddressSpace);

using manyadd::testing::from_hex;
using manyadd::testing::safetensors_with_header;
std::vector<std::string> committed_models() {
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(source_path("models")))
    if (fs::exists(e.path() / "model.safetensors")) dirs.push_back(e.path().string());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}
std::vector<std::string> regressions(const std::string& target) {
  std::vector<std::string> out;
  const fs::path d = fs::path(manyadd::testing::source_dir()) / "tests/data/fuzz" / target;
  if (fs::is_directory(d))
    for (const auto& e : fs::directory_iterator(d)) out.push_back(read_file(e.path().string()));
  return out;
}
const SafetensorsFile& weights() {  // the model config.json is checked against (as fuzz_model_config)
  static const SafetensorsFile w = read_safetensors(source_path("models/cpu-sa1010-1l2h-d64/model.safetensors"));
  return w;
}

const std::vector<std::string>& safetensors_seeds() {
  static const std::vector<std::string> seeds = [] {
    std::vector<std::string> s;
    for (const auto& d : committed_models()) s.push_back(read_file(d + "/model.safetensors"));
    s.push_back(read_file(source_path("tests/data/every_dtype.safetensors")));
    const auto cases = read_json_file(source_path("tests/data/safetensors_cases.json"));
    for (const auto& c : cases["malformed"])
      s.push_back(c.contains("file_hex") ? from_hex(c["file_hex"].get<std::string>())
                                         : safetensors_with_header(c["header"].get<std::string>(),
                                                                   from_hex(c["data_hex"].get<std::string>())));
    s.push_back(from_hex(cases["legacy_file_hex"].get<std::string>()));
    // A checkpoint: a small model's weights and moments and its step.
    learn::ModelConfig c;
    c.d_model = 8, c.d_head = 2, c.d_ff = 4, c.max_pos1 = 5, c.max_pos2 = 5;
    const learn::Layout lay = learn::Layout::make(c);
    const auto p = learn::init_params<float>(c, lay, 7);
    auto ts = learn::params_to_tensors(lay, p);
    for (const char* pre : {"adam.m.", "adam.v."}) {
      const auto t = learn::params_to_tensors(lay, p, pre);
      ts.insert(ts.end(), t.begin(), t.end());
    }
    s.push_back(safetensors_bytes(ts, {{"step", "3"}, {"run.log_window_steps", "1"}}));
    for (auto& r : regressions("safetensors")) s.push_back(std::move(r));
    return s;
  }();
  return seeds;
}
const std::vector<std::string>& config_seeds() {
  static const std::vector<std::string> seeds = [] {
    std::vector<std::string> s;
    for (const auto& d : committed_models()) s.push_back(read_file(d + "/config.json"));
    for (auto& r : regressions("model_config")) s.push_back(std::move(r));
    return s;
  }();
  return seeds;
}
const std::vector<std::string>& option_seeds() {
  static const std::vector<std::string> seeds = [] {
    std::vector<std::string> s = {"--i\n7\n--r\n0.25\n--s\nx", "--u\n42\n--f", "-5", "1e-3\n2.5e+2\n.5", "--help",
                                  "--o\nout.json", "3.5\n1,2\n+5\ninf\nnan\n0x10\n-0", "99999999999999999999\n-1000\n1000",
                                  "--i=12\n--r=1\n--s=", "--o\n/dev/null\n--o\n/"};
    for (auto& r : regressions("options")) s.push_back(std::move(r));
    return s;
  }();
  return seeds;
}

// ---- mutations -----------------------------------------------------------------------------------
struct Mutation {
  int kind = 0;  // 0 flip, 1 overwrite, 2 insert, 3 erase, 4 truncate, 5 duplicate, 6 replace a number
  std::uint32_t pos = 0, len = 0;
  std::string bytes;
};
void showValue(const Mutation& m, std::ostream& os) {
  static const char* names[] = {"flip", "overwrite", "insert", "erase", "truncate", "duplicate", "number"};
  os << names[m.kind] << "@" << m.pos << " len " << m.len << " bytes " << nlohmann::json(m.bytes).dump(-1, ' ', true);
}

rc::Gen<std::string> token() {
  return rc::gen::oneOf(
      rc::gen::element<std::string>("0", "1", "-1", "2", "7", "64.9", "1e400", "-0", "2147483648", "4294967296",
                                    "4611686018427387904", "9223372036854775807", "9223372036854775808",
                                    "18446744073709551616", "1099511627776", "16777216", "null", "true", "[]", "{}",
                                    "\"x\"", "[0,0]", "\"F64\"", "\"I8\"", "\"BF16\"", "NaN", "8192", "65536"),
      rc::gen::resize(8, rc::gen::container<std::string>(
                             rc::gen::map(rc::gen::inRange(0, 256), [](int b) { return char(b); }))));
}
rc::Gen<Mutation> mutation() {
  return rc::gen::build<Mutation>(rc::gen::set(&Mutation::kind, rc::gen::inRange(0, 7)),
                                  rc::gen::set(&Mutation::pos, rc::gen::arbitrary<std::uint32_t>()),
                                  rc::gen::set(&Mutation::len, rc::gen::inRange<std::uint32_t>(0, 64)),
                                  rc::gen::set(&Mutation::bytes, token()));
}

std::string mutate(std::string s, const std::vector<Mutation>& ms) {
  for (const Mutation& m : ms) {
    const std::size_t n = s.size(), p = m.pos % (n + 1);
    switch (m.kind) {
      case 0: if (n) s[p % n] = char(s[p % n] ^ char(m.len % 255 + 1)); break;
      case 1: s.replace(p, std::min(m.bytes.size(), n - p), m.bytes); break;
      case 2: s.insert(p, m.bytes); break;
      case 3: s.erase(p, m.len); break;
      case 4: s.resize(p); break;
      case 5: s.insert(p, s.substr(p, m.len)); break;
      default: {  // replace the k-th run of digits (k = pos mod the number of runs)
        std::vector<std::pair<std::size_t, std::size_t>> runs;
        for (std::size_t i = 0; i < n;) {
          if (!std::isdigit(static_cast<unsigned char>(s[i]))) { ++i; continue; }
          std::size_t j = i;
          while (j < n && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
          runs.emplace_back(i, j - i);
          i = j;
        }
        if (!runs.empty()) {
          const auto [at, len] = runs[m.pos % runs.size()];
          s.replace(at, len, m.bytes);
        }
      }
    }
  }
  return s;
}

// The header of a safetensors file mutated as JSON text, the length prefix rewritten to match (and the
// checksum key renamed when drop_checksum, so that a changed header can still be accepted).
std::string mutate_header(const std::string& file, const std::vector<Mutation>& ms, bool drop_checksum) {
  std::uint64_t hl = 0;
  if (file.size() < 8) return mutate(file, ms);
  std::memcpy(&hl, file.data(), 8);
  if (hl > file.size() - 8) return mutate(file, ms);
  std::string header = file.substr(8, hl);
  if (drop_checksum) {
    const auto k = header.find("\"checksum\"");
    if (k != std::string::npos) header[k + 1] = 'C';
  }
  header = mutate(header, ms);
  std::string out(8, '\0');
  const std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + file.substr(8 + hl);
}

// Runs `testable` as a RapidCheck property with MANYADD_FUZZ_CASES cases (RC_PARAMS's seed applies).
template <class Testable>
void check_cases(Testable&& testable, int default_cases) {
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  const char* env = std::getenv("MANYADD_FUZZ_CASES");
  params.maxSuccess = env && *env ? std::atoi(env) : default_cases;
  rc::detail::TestMetadata meta;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  meta.id = std::string(info->test_suite_name()) + "/" + info->name();
  meta.description = info->name();
  const auto result = rc::detail::checkTestable(std::forward<Testable>(testable), meta, params);
  std::ostringstream ss;
  rc::detail::printResultMessage(result, ss);
  if (!result.template is<rc::detail::SuccessResult>()) ADD_FAILURE() << ss.str();
  else std::cout << ss.str() << "\n";
}

template <class F>
void run_target(const F& f, const std::string& input) {
  try {
    RC_TAG(f(reinterpret_cast<const std::uint8_t*>(input.data()), input.size()) ? "accepted" : "refused");
  } catch (const fuzz::Violation& v) {
    RC_FAIL(std::string("violation: ") + v.what());
  } catch (const std::exception& e) {
    RC_FAIL(std::string("escaped exception: ") + e.what());
  }
}
const auto kSafetensors = [](const std::uint8_t* d, std::size_t n) { return fuzz::safetensors(d, n); };
const auto kConfig = [](const std::uint8_t* d, std::size_t n) { return fuzz::model_config(d, n, weights()); };
const auto kOptions = [](const std::uint8_t* d, std::size_t n) { return fuzz::options(d, n); };

}  // namespace

TEST(Fuzz, RegressionInputsAndSeedsPass) {
  // Every committed reproducer and every seed, unmutated: none may break a target.
  std::size_t count = 0;
  auto replay = [&](const auto& f, const std::vector<std::string>& inputs) {
    for (const auto& in : inputs) {
      ++count;
      EXPECT_NO_THROW(f(reinterpret_cast<const std::uint8_t*>(in.data()), in.size())) << in.substr(0, 200);
    }
  };
  replay(kSafetensors, safetensors_seeds());
  replay(kConfig, config_seeds());
  replay(kOptions, option_seeds());
  for (const auto& t : fuzz::target_names())
    EXPECT_TRUE(fs::is_directory(fs::path(manyadd::testing::source_dir()) / "tests/data/fuzz" / t)) << t;
  EXPECT_GT(count, 40u);
}

TEST(Fuzz, Safetensors) {
  check_cases(
      [] {
        const std::string seed = *rc::gen::elementOf(safetensors_seeds());
        const bool header_only = *rc::gen::arbitrary<bool>();
        const bool drop_checksum = *rc::gen::arbitrary<bool>();
        const auto ms = *rc::gen::resize(6, rc::gen::container<std::vector<Mutation>>(mutation()));
        run_target(kSafetensors, header_only ? mutate_header(seed, ms, drop_checksum) : mutate(seed, ms));
      },
      3000);
}

TEST(Fuzz, ModelConfig) {
  check_cases(
      [] {
        const std::string seed = *rc::gen::elementOf(config_seeds());
        const auto ms = *rc::gen::resize(6, rc::gen::container<std::vector<Mutation>>(mutation()));
        run_target(kConfig, mutate(seed, ms));
      },
      3000);
}

TEST(Fuzz, Options) {
  check_cases(
      [] {
        const std::string seed = *rc::gen::elementOf(option_seeds());
        const auto ms = *rc::gen::resize(6, rc::gen::container<std::vector<Mutation>>(mutation()));
        run_target(kOptions, mutate(seed, ms));
      },
      5000);
}
