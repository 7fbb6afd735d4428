// core/: the safetensors reader/writer (round trips for every dtype, the committed every-dtype file
// both writers produce, and every malformed file of tests/data/safetensors_cases.json refused with
// InputError before allocation), the atomic writer's refusals, parallel_for, the strict option
// parsers and the exit-code policy.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/error.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/core/parallel.hpp"
#include "manyadd/core/progress.hpp"
#include "manyadd/core/report.hpp"
#include "manyadd/core/safetensors.hpp"
#include "test_util.hpp"

using namespace manyadd;
namespace fs = std::filesystem;

namespace {
std::string tmpdir() {
  const std::string d = (fs::temp_directory_path() / fmt::format("manyadd_core_{}", ::getpid())).string();
  fs::create_directories(d);
  return d;
}
using manyadd::testing::from_hex;
const auto with_header = manyadd::testing::safetensors_with_header;
std::string f32_bytes(std::initializer_list<float> v) {
  std::string s;
  for (float x : v) s.append(reinterpret_cast<const char*>(&x), 4);
  return s;
}
void expect_refused(const std::string& bytes, const std::string& needle, bool require_checksum = false,
                    bool allow_legacy_checksum = true) {
  ReadOptions o;
  o.require_checksum = require_checksum;
  o.allow_legacy_checksum = allow_legacy_checksum;
  try {
    parse_safetensors(bytes, "test", o);
    ADD_FAILURE() << "accepted; expected a refusal mentioning '" << needle << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(Safetensors, RoundTripEveryDtype) {
  for (DType t : {DType::F64, DType::F32, DType::BF16, DType::F16, DType::I64, DType::I32, DType::I16, DType::I8}) {
    // Values every listed dtype holds exactly.
    const std::vector<double> v = {0.0, 1.0, dtype_is_float(t) ? -2.5 : -2.0, 3.0, 100.0, -7.0};
    const auto bytes = safetensors_bytes({make_tensor("x", {2, 3}, v, t)}, {{"k", "v"}});
    const auto f = parse_safetensors(bytes, "mem");
    ASSERT_EQ(f.tensors.size(), 1u);
    EXPECT_EQ(f.tensors[0].dtype, t);
    EXPECT_EQ(f.tensors[0].shape, (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(f.tensors[0].to_f64(), v) << dtype_name(t);  // all values exact in every dtype listed
    EXPECT_EQ(f.metadata.at("k"), "v");
  }
}

TEST(Safetensors, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  // Property: the error of the rounding is at most half a bf16 ulp (2^-8 relative).
  rc::check([](float x) {
    if (!std::isfinite(x) || std::fabs(x) > 1e38f || std::fabs(x) < 1e-37f) return;
    const float y = bf16_to_float(float_to_bf16(x));
    RC_ASSERT(std::fabs(double(y) - double(x)) <= std::ldexp(std::fabs(double(x)), -8));
  });
}

TEST(Safetensors, StreamingWriterEqualsInMemoryBytes) {
  const std::string d = tmpdir();
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<double> b = {7, 8};
  const std::vector<Tensor> ts = {make_tensor("a", {2, 3}, a), make_tensor("b", {2}, b, DType::F64)};
  {
    SafetensorsWriter w(d + "/s.safetensors", {{"a", DType::F32, {2, 3}}, {"b", DType::F64, {2}}}, {{"x", "y"}});
    w.write(ts[0].bytes.data(), 8);
    w.write(ts[0].bytes.data() + 8, ts[0].bytes.size() - 8);
    w.write(ts[1].bytes.data(), ts[1].bytes.size());
    w.commit();
  }
  EXPECT_EQ(read_file(d + "/s.safetensors"), safetensors_bytes(ts, {{"x", "y"}}));
  {  // abandoned before commit: nothing left behind
    SafetensorsWriter w(d + "/t.safetensors", {{"a", DType::F32, {2, 3}}}, {});
    w.write(ts[0].bytes.data(), 4);
  }
  EXPECT_FALSE(fs::exists(d + "/t.safetensors"));
  for (const auto& e : fs::directory_iterator(d)) EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos);
  fs::remove_all(d);
}

namespace {
// The cases shared with tests/test_python_io.py (the Python reader and writer).
nlohmann::json shared_cases() {
  return read_json_file(manyadd::testing::source_path("tests/data/safetensors_cases.json"));
}
}  // namespace

TEST(Safetensors, EveryDtypeFileIsByteIdenticalAcrossWriters) {
  // tests/data/every_dtype.safetensors was written by the Python writer; this writer must produce the
  // same bytes from the same values, and this reader must return the stored (rounded) values.
  const auto cases = shared_cases()["every_dtype"];
  std::vector<Tensor> ts;
  for (const auto& t : cases["tensors"])
    ts.push_back(make_tensor(t["name"].get<std::string>(), t["shape"].get<std::vector<std::int64_t>>(),
                             t["values"].get<std::vector<double>>(), parse_dtype(t["dtype"].get<std::string>())));
  const auto meta = cases["metadata"].get<std::map<std::string, std::string>>();
  const std::string golden = read_file(manyadd::testing::source_path("tests/data/every_dtype.safetensors"));
  EXPECT_EQ(safetensors_bytes(ts, meta), golden);
  const auto f = parse_safetensors(golden, "every_dtype");
  ASSERT_EQ(f.tensors.size(), cases["tensors"].size());
  for (const auto& t : cases["tensors"]) {
    const Tensor& got = f.get(t["name"].get<std::string>());
    EXPECT_EQ(got.to_f64(), t.value("stored", t["values"]).get<std::vector<double>>()) << got.name;
    EXPECT_EQ(got.shape, t["shape"].get<std::vector<std::int64_t>>()) << got.name;
  }
  for (const auto& [k, v] : meta) EXPECT_EQ(f.metadata.at(k), v);
  // A tensor order that leaves one misaligned would write a file every reader refuses.
  EXPECT_THROW(safetensors_bytes({make_tensor("u", {1}, std::vector<double>{1}, DType::U8),
                                  make_tensor("f", {1}, std::vector<float>{1})},
                                 {}),
               InvariantError);
}

TEST(Safetensors, MalformedFilesAreRefusedBeforeAllocation) {
  const std::string ab = f32_bytes({1, 2, 3});
  const std::string good = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  EXPECT_NO_THROW(parse_safetensors(with_header(good, ab), "t", ReadOptions{false, false, 1 << 20}));
  const auto cases = shared_cases()["malformed"];
  ASSERT_GT(cases.size(), 20u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["why"].get<std::string>());
    std::string bytes = c.contains("file_hex") ? from_hex(c["file_hex"].get<std::string>())
                                               : with_header(c["header"].get<std::string>(), from_hex(c["data_hex"].get<std::string>()));
    if (c.contains("truncate")) bytes = bytes.substr(0, c["truncate"].get<std::size_t>());
    expect_refused(bytes, c["needle"].get<std::string>(), c.value("require_checksum", false),
                   c.value("allow_legacy_checksum", true));
  }
  // A flipped data byte breaks the checksum.
  std::string w = safetensors_bytes({make_tensor("a", {3}, std::vector<float>{1, 2, 3})}, {});
  w[w.size() - 2] ^= 1;
  expect_refused(w, "checksum mismatch", true);
  // Every truncation of a valid file is refused.
  const std::string v = safetensors_bytes({make_tensor("a", {3}, std::vector<float>{1, 2, 3})}, {});
  for (std::size_t k = 0; k < v.size(); ++k) expect_refused(v.substr(0, k), "", true);
}

TEST(Safetensors, ChecksumIsStandardFnv1a64OverTheWholeFile) {
  // Published FNV-1a 64 test vectors (the FNV reference test suite; Go's hash/fnv golden values).
  const std::pair<const char*, std::uint64_t> vectors[] = {{"", 0xcbf29ce484222325ull},
                                                           {"a", 0xaf63dc4c8601ec8cull},
                                                           {"ab", 0x089c4407b545986aull},
                                                           {"abc", 0xe71fa2190541574bull},
                                                           {"foobar", 0x85944171f73967e8ull}};
  for (const auto& [text, h] : vectors) EXPECT_EQ(fnv1a64(text, std::strlen(text)), h) << text;
  // The stored value is that hash of the file's bytes with its own 16 digits read as '0'.
  const std::string f = safetensors_bytes({make_tensor("a", {2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6})}, {{"step", "15"}});
  const std::string at = "\"checksum\":\"fnv1a64:";
  const std::size_t k = f.find(at) + at.size();
  std::string zeroed = f;
  zeroed.replace(k, 16, std::string(16, '0'));
  EXPECT_EQ(f.substr(k, 16), fmt::format("{:016x}", fnv1a64(zeroed.data(), zeroed.size())));
  EXPECT_FALSE(parse_safetensors(f, "new").legacy_checksum);
  // Every byte is under it: the step in the metadata, a shape, the length prefix's padding.
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"step\":\"15\"", "\"step\":\"25\""}, {"[2,3]", "[3,2]"}, {"\"a\"", "\"b\""}}) {
    std::string g = f;
    g.replace(g.find(from), from.size(), to);
    expect_refused(g, "checksum mismatch");
  }
  // A legacy file (the earlier variant over the data alone) is read by default, and refused where the
  // caller needs the whole file covered (checkpoints).
  const std::string legacy = from_hex(shared_cases()["legacy_file_hex"].get<std::string>());
  const auto lf = parse_safetensors(legacy, "legacy");
  EXPECT_TRUE(lf.legacy_checksum);
  EXPECT_EQ(lf.metadata.at("step"), "15");
  expect_refused(legacy, "legacy checksum", false, false);
}

TEST(AtomicFile, RefusesWhatARenameWouldDestroy) {
  const std::string d = tmpdir();
  EXPECT_THROW(atomic_write("/dev/null", "x"), InputError);
  EXPECT_THROW(atomic_write(d, "x"), InputError);
  EXPECT_THROW(atomic_write(d + "/", "x"), InputError);
  EXPECT_THROW(atomic_write(d + "/missing_dir/f", "x"), InputError);
  atomic_write(d + "/target", "old");
  fs::create_symlink(d + "/target", d + "/link");
  EXPECT_THROW(atomic_write(d + "/link", "new"), InputError);
  EXPECT_TRUE(fs::is_symlink(d + "/link"));
  EXPECT_EQ(read_file(d + "/target"), "old");
  atomic_write(d + "/target", "new");  // a regular file is replaced
  EXPECT_EQ(read_file(d + "/target"), "new");
  {
    AtomicFile f(d + "/abandoned");
    f.append("partial");
  }
  EXPECT_FALSE(fs::exists(d + "/abandoned"));
  for (const auto& e : fs::directory_iterator(d)) EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos);
  {  // the target turns into a directory before commit: refused, the temporary removed, nothing replaced
    AtomicFile f(d + "/becomes_dir");
    f.append("partial");
    fs::create_directory(d + "/becomes_dir");
    EXPECT_THROW(f.commit(), InputError);
  }
  EXPECT_TRUE(fs::is_directory(d + "/becomes_dir"));
  for (const auto& e : fs::directory_iterator(d)) EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos);
  EXPECT_THROW(read_file(d + "/target", 2), InputError);  // longer than the limit
  EXPECT_THROW(read_file(d), InputError);
  fs::remove_all(d);
}

TEST(ParallelFor, CoversEveryIndexOnceAndRethrows) {
  for (auto sched : {Schedule::blocks, Schedule::dynamic})
    for (int threads : {1, 2, 7})
      for (std::int64_t n : {0, 1, 5, 100}) {
        std::vector<std::atomic<int>> hits(std::size_t(std::max<std::int64_t>(n, 1)));
        parallel_for(threads, n, [&](int, std::int64_t i) { hits[std::size_t(i)]++; }, sched);
        for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[std::size_t(i)].load(), 1);
      }
  // blocks: the thread of an index is fixed (contiguous blocks)
  std::vector<int> who(10);
  parallel_for(3, 10, [&](int t, std::int64_t i) { who[std::size_t(i)] = t; });
  EXPECT_EQ(who, (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2, 2, 2}));
  EXPECT_THROW(parallel_for(2, 10, [](int, std::int64_t i) { if (i == 7) throw InputError("x"); }, Schedule::dynamic),
               InputError);
}

TEST(Cli, StrictNumbers) {
  EXPECT_EQ(cli::parse_int("42", "--n", 1, 100), 42);
  for (const char* bad : {"", "3.5", "1e3", "+5", " 5", "5 ", "0x10", "abc"})
    EXPECT_THROW(cli::parse_int(bad, "--n", 0, 100), InputError) << bad;
  EXPECT_THROW(cli::parse_int("101", "--n", 0, 100), InputError);
  EXPECT_THROW(cli::parse_int("99999999999999999999", "--n", 0, std::numeric_limits<std::int64_t>::max()), InputError);
  EXPECT_EQ(cli::parse_uint("4294967296", "--s", std::numeric_limits<std::uint64_t>::max()), 4294967296ull);
  EXPECT_THROW(cli::parse_uint("-1", "--s", 10), InputError);
  EXPECT_DOUBLE_EQ(cli::parse_real("2.5e-1", "--x", 0, 1), 0.25);
  for (const char* bad : {"", "nan", "inf", "-inf", "0x1p3", "1e999", "1,5", " 1"})
    EXPECT_THROW(cli::parse_real(bad, "--x", -1e300, 1e300), InputError) << bad;
  EXPECT_THROW(cli::parse_real("2", "--x", 0, 1), InputError);
}

TEST(Cli, OptionsReportUsageErrorsWithExitCode2) {
  auto run = [](std::vector<const char*> argv) {
    CLI::App app{"t"};
    std::int64_t n = 3;
    std::string out;
    cli::add_int(app, "--n", n, "count", 1, 10);
    cli::add_output(app, "--json", out, "report");
    argv.insert(argv.begin(), "t");
    std::ostringstream o, e;
    const int rc = cli::parse(app, int(argv.size()), argv.data(), o, e);
    return std::make_pair(rc, n);
  };
  EXPECT_EQ(run({"--n", "7"}), std::make_pair(-1, std::int64_t(7)));
  EXPECT_EQ(run({"--n", "11"}).first, 2);
  EXPECT_EQ(run({"--n", ""}).first, 2);
  EXPECT_EQ(run({"--json", "/dev/null"}).first, 2);
  EXPECT_EQ(run({"--json", ""}).first, 2);
  EXPECT_EQ(run({"--help"}).first, 0);
}

TEST(Report, ProvenanceVerdictAndArgvLeadEveryReport) {
  CLI::App app{"t"};
  std::int64_t n = 3;
  cli::add_int(app, "--n", n, "count", 1, 10);
  std::vector<const char*> argv = {"/some/dir/mytool", "--n", "7"};
  std::ostringstream o, e;
  ASSERT_EQ(cli::parse(app, int(argv.size()), argv.data(), o, e), -1);
  const std::string dir = manyadd::testing::temp_dir("report");
  report::write_json_report(dir + "/r.json", "mytool", "fail", {{"accuracy", 0.5}, {"a", 1}});
  const std::string text = read_file(dir + "/r.json");
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["manyadd"]["tool"], "mytool");
  EXPECT_EQ(j["manyadd"]["argv"], nlohmann::json({"mytool", "--n", "7"}));  // argv[0] without its directory
  EXPECT_EQ(j["manyadd"]["version"], report::version());
  EXPECT_FALSE(std::string(report::commit()).empty());
  EXPECT_EQ(j["verdict"], "fail");
  EXPECT_EQ(j["accuracy"], 0.5);
  EXPECT_LT(text.find("\"manyadd\""), text.find("\"accuracy\""));  // provenance first in the file
  EXPECT_THROW(report::write_json_report(dir + "/r.json", "mytool", "maybe", nlohmann::json::object()), InvariantError);
  // --version answers with the version and the commit, exit 0.
  CLI::App app2{"t2"};
  std::vector<const char*> v2 = {"t2", "--version"};
  std::ostringstream o2, e2;
  EXPECT_EQ(cli::parse(app2, 2, v2.data(), o2, e2), 0);
  EXPECT_EQ(o2.str(), fmt::format("t2 {} (commit {})\n", report::version(), report::commit()));
  std::filesystem::remove_all(dir);
}

TEST(ErrorPolicy, ExitCodes) {
  std::ostringstream err;
  EXPECT_EQ(run_tool("t", err, [] { return 1; }), 1);
  EXPECT_EQ(run_tool("t", err, []() -> int { throw InputError("bad n"); }), 2);
  EXPECT_EQ(run_tool("t", err, []() -> int { throw std::bad_alloc(); }), 2);
  EXPECT_EQ(run_tool("t", err, []() -> int { throw std::runtime_error("boom"); }), 3);
  EXPECT_EQ(run_tool("t", err, []() -> int {
              MANYADD_INVARIANT(1 + 1 == 3, "arithmetic");
              return 0;
            }),
            3);
  EXPECT_NE(err.str().find("t: bad n"), std::string::npos);
  EXPECT_NE(err.str().find("internal error: boom"), std::string::npos);
  EXPECT_NE(err.str().find("invariant (1 + 1 == 3) broken: arithmetic"), std::string::npos);
}

TEST(Progress, LinesCountsAndQuiet) {
  {
    std::ostringstream o;
    ProgressOptions opt;
    opt.out = &o;
    opt.live = 0;
    opt.period_s = 1e9;  // no periodic line: only the final one
    Progress p("certify", 10, "pairs", opt);
    parallel_for(4, 10, [&](int, std::int64_t) { p.add(); });
    p.note("3 failed");
    EXPECT_EQ(p.done(), 10);
    p.finish();
    p.finish();  // once
    const std::string s = o.str();
    EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1) << s;
    EXPECT_NE(s.find("certify: 10/10 pairs (100%)"), std::string::npos) << s;
    EXPECT_NE(s.find("| 3 failed"), std::string::npos) << s;
    EXPECT_EQ(s.find("ETA"), std::string::npos) << s;  // done: no ETA
  }
  {
    std::ostringstream o;
    ProgressOptions opt;
    opt.out = &o;
    opt.quiet = true;
    Progress p("x", 5, "items", opt);
    p.add(5);
    p.finish();
    EXPECT_TRUE(o.str().empty());
  }
  {
    std::ostringstream o;
    ProgressOptions opt;
    opt.out = &o;
    opt.live = 1;  // redraw in place: carriage returns, one newline at the end
    Progress p("x", 0, "steps", opt);
    p.add(3);
    p.finish();
    EXPECT_NE(o.str().find('\r'), std::string::npos);
    EXPECT_NE(o.str().find("x: 3 steps"), std::string::npos);
  }
  {
    std::ostringstream o;
    ProgressOptions opt;
    opt.out = &o;
    opt.live = 0;
    opt.final_after_s = 1e9;  // a stage that finished at once says nothing
    Progress p("x", 5, "items", opt);
    p.add(5);
    p.finish();
    EXPECT_TRUE(o.str().empty()) << o.str();
  }
  EXPECT_EQ(human_seconds(42), "42s");
  EXPECT_EQ(human_seconds(187), "3m07s");
  EXPECT_EQ(human_seconds(7500), "2h05m");
  EXPECT_EQ(human_seconds(NAN), "?");
}

// Plain lines or a live line: decided by whether the stream is a terminal. stderr is pointed at a
// pseudo-terminal, then at a file, and a Progress on std::cerr must pick live, then plain.
TEST(Progress, LiveOnATerminalPlainOtherwise) {
  const int saved = ::dup(STDERR_FILENO);
  ASSERT_GE(saved, 0);
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  const int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(slave, 0);
  ProgressOptions opt;
  opt.quiet = true;  // nothing written to the terminal nobody reads
  ::dup2(slave, STDERR_FILENO);
  const bool on_tty = Progress("x", 1, "items", opt).live();
  const std::string file = manyadd::testing::temp_dir("progress") + "/log";
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, STDERR_FILENO);
  const bool on_file = Progress("x", 1, "items", opt).live();
  ::dup2(saved, STDERR_FILENO);
  ::close(saved), ::close(fd), ::close(slave), ::close(master);
  EXPECT_TRUE(on_tty);
  EXPECT_FALSE(on_file);
  std::ostringstream o;  // any other stream: plain
  opt.out = &o;
  EXPECT_FALSE(Progress("x", 1, "items", opt).live());
}

// Plain lines every period; messages on lines of their own (dropped when quiet, warnings kept); the
// rate counted from `first`; a deadline caps the ETA.
TEST(Progress, PeriodicLinesMessagesRateAndDeadline) {
  {
    std::ostringstream o;
    ProgressOptions opt;
    opt.out = &o, opt.live = 0, opt.period_s = 0;  // a line at every update
    Progress p("train", 100, "steps", opt);
    p.add(10);
    p.message("eval step 10: mean 0.5");
    p.add(10);
    p.finish();
    const std::string s = o.str();
    EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 4) << s;
    EXPECT_NE(s.find("train: 10/100 steps (10%)"), std::string::npos) << s;
    EXPECT_NE(s.find("\neval step 10: mean 0.5\n"), std::string::npos) << s;
    EXPECT_NE(s.find("train: 20/100 steps (20%)"), std::string::npos) << s;
    EXPECT_NE(s.find("ETA"), std::string::npos) << s;
    EXPECT_EQ(s.find('\r'), std::string::npos) << s;
  }
  {
    std::ostringstream o;
    ProgressOptions opt;
    opt.out = &o, opt.quiet = true;
    Progress p("x", 10, "items", opt);
    p.add(3);
    p.message("a row");
    EXPECT_TRUE(o.str().empty());
    p.message("warning: settings differ", true);
    p.finish();
    EXPECT_EQ(o.str(), "warning: settings differ\n");
  }
  {
    std::ostringstream o;
    ProgressOptions opt;
    opt.out = &o, opt.live = 1;  // a message clears the live line and redraws it below
    Progress p("x", 10, "items", opt);
    p.add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    p.add(1);  // drawn
    p.message("row 1");
    const std::string s = o.str();
    EXPECT_NE(s.find("\rrow 1\n\rx: 2/10 items"), std::string::npos) << s;
  }
  {
    // A resumed run: 900 of 1000 steps were done before; 50 more in ~0.2 s is ~250/s, so the 50 left
    // take ~0.2 s (the rate counted from 0 would be ~4750/s and the ETA 0s).
    std::ostringstream o;
    ProgressOptions opt;
    opt.out = &o, opt.quiet = true, opt.first = 900;
    Progress p("train", 1000, "steps", opt);
    EXPECT_EQ(p.done(), 900);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    p.add(50);
    const std::string l = p.line();
    EXPECT_NE(l.find("train: 950/1000 steps (95%)"), std::string::npos) << l;
    const double rate = std::stod(l.substr(l.find("| ") + 2));
    EXPECT_GT(rate, 50);
    EXPECT_LT(rate, 300);  // 50 / 0.2 s at most (the sleep is a lower bound)
  }
  {
    // 1 of 1000 steps in ~0.1 s: ~100 s left by the rate, but the work stops at 2 s.
    std::ostringstream o;
    ProgressOptions opt;
    opt.out = &o, opt.quiet = true, opt.deadline_s = 2;
    Progress p("train", 1000, "steps", opt);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    p.add(1);
    const std::string l = p.line();
    EXPECT_NE(l.find("ETA 1s (time limit)"), std::string::npos) << l;
  }
}
