// A run of `train` is one history however it is interrupted: stopped with --stop-after, killed with
// SIGKILL at random moments and resumed, or resumed after it finished, it ends with the uninterrupted
// run's weights and checkpoint byte for byte, and its log.csv and eval.csv rows equal the
// uninterrupted run's (step, loss, lr, grad norm; step, mean and min exact match -- the wall-clock
// columns, tokens/s and elapsed seconds, are each process's own).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "manyadd/core/files.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using manyadd::read_file;

namespace {
const std::string kTrain = TRAIN_EXE;
// Small and fast; log rows (every 4) and checkpoints (every 5) interleave, so most checkpoints fall
// inside a log window, and evaluations (every 12) fall between checkpoints.
const std::vector<std::string> kConfig = {
    "--train-n", "2", "--train-m", "3", "--train-size", "300", "--max-pos1", "6", "--max-pos2", "6",
    "--d-model", "16", "--d-head", "4", "--d-ff", "16", "--batch", "8", "--lr", "0.01", "--log-every", "4",
    "--eval-every", "12", "--eval-samples", "3", "--checkpoint-every", "5", "--steps", "60", "--threads", "2"};

const std::string& tmp() {
  static const std::string d = manyadd::testing::temp_dir("test_learn_resume");
  return d;
}

// Starts train with `args` (stdout and stderr to /dev/null); returns its pid.
pid_t spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv = {const_cast<char*>(kTrain.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execv(kTrain.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}
int wait_for(pid_t pid) {
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
std::vector<std::string> with(std::vector<std::string> a, std::initializer_list<std::string> more) {
  a.insert(a.end(), more);
  return a;
}

// The first `columns` fields of every line (the header included).
std::string columns(const std::string& path, int columns) {
  std::istringstream in(read_file(path));
  std::string line, out;
  while (std::getline(in, line)) {
    std::size_t end = 0;
    for (int c = 0; c < columns && end != std::string::npos; ++c) end = line.find(',', end ? end + 1 : 0);
    out += line.substr(0, end) + "\n";
  }
  return out;
}

// The uninterrupted run, once; and how long it took.
struct Reference {
  std::string dir;
  double seconds = 0;
};
const Reference& reference() {
  static const Reference r = [] {
    Reference x;
    x.dir = tmp() + "/uninterrupted";
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(wait_for(spawn(with(kConfig, {"--out", x.dir}))), 0);
    x.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return x;
  }();
  return r;
}

void expect_same_history(const std::string& d) {
  const std::string ref = reference().dir;
  EXPECT_EQ(read_file(d + "/model.safetensors"), read_file(ref + "/model.safetensors"));
  EXPECT_EQ(read_file(d + "/checkpoint.safetensors"), read_file(ref + "/checkpoint.safetensors"));
  EXPECT_EQ(columns(d + "/log.csv", 4), columns(ref + "/log.csv", 4));
  EXPECT_EQ(columns(d + "/eval.csv", 3), columns(ref + "/eval.csv", 3));
  for (const auto& e : fs::directory_iterator(d))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}
}  // namespace

TEST(LearnResume, StopAfterAndResumeWriteTheUninterruptedLogs) {
  const std::string d = tmp() + "/stopped";
  // 17 and 42: inside log windows (rows at multiples of 4), after checkpoints, between evaluations.
  ASSERT_EQ(wait_for(spawn(with(kConfig, {"--out", d, "--stop-after", "17"}))), 0);
  EXPECT_EQ(columns(d + "/log.csv", 1), "step\n4\n8\n12\n16\n");  // no row where --stop-after stopped
  ASSERT_EQ(wait_for(spawn({"--out", d, "--resume", "--stop-after", "42"})), 0);
  ASSERT_EQ(wait_for(spawn({"--out", d, "--resume"})), 0);
  expect_same_history(d);
}

TEST(LearnResume, ResumingAFinishedRunChangesNothing) {
  const std::string d = tmp() + "/finished";
  fs::copy(reference().dir, d, fs::copy_options::recursive);
  ASSERT_EQ(wait_for(spawn({"--out", d, "--resume"})), 0);
  expect_same_history(d);  // in particular no second row of the final evaluation
}

TEST(LearnResume, KilledAtRandomMomentsResumesToTheUninterruptedRun) {
  // SIGKILL at times drawn uniformly over most of the uninterrupted run's duration, then resume
  // (a fresh start when no checkpoint was written yet), until a run finishes. The seed is printed;
  // MANYADD_KILL_SEED repeats a sequence of kill times.
  const char* env = std::getenv("MANYADD_KILL_SEED");
  const std::uint64_t seed = env && *env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
  SCOPED_TRACE("MANYADD_KILL_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const double full = reference().seconds;
  const std::string d = tmp() + "/killed";
  int kills = 0, rc = -1;
  double scale = 1;  // shrinks when a run outpaced every kill (the reference ran under more load)
  for (int attempt = 0; attempt < 40 && rc != 0; ++attempt) {
    const bool resume = fs::exists(d + "/checkpoint.safetensors");
    // The share of the run still to do (config.json holds the step of the last save).
    const double left = resume ? 1.0 - manyadd::read_json_file(d + "/config.json")["step"].get<double>() / 60 : 1.0;
    const pid_t pid = spawn(resume ? std::vector<std::string>{"--out", d, "--resume"} : with(kConfig, {"--out", d}));
    if (kills < 8) {
      const double at = std::uniform_real_distribution<double>(0, 0.9 * full * left * scale)(rng);
      std::this_thread::sleep_for(std::chrono::duration<double>(at));
      ::kill(pid, SIGKILL);
    }
    rc = wait_for(pid);
    if (rc == 128 + SIGKILL) {
      ++kills;
    } else {
      ASSERT_EQ(rc, 0) << "a run (resume " << resume << ") failed after " << kills << " kills";
      if (kills == 0) {  // finished before the first kill landed: start over, killing sooner
        fs::remove_all(d);
        scale /= 2;
        rc = -1;
      }
    }
  }
  ASSERT_EQ(rc, 0);
  EXPECT_GE(kills, 1);
  RecordProperty("kills", kills);
  std::cout << "killed " << kills << " times (MANYADD_KILL_SEED=" << seed << ")\n";
  expect_same_history(d);
}

namespace {
struct Cleanup : ::testing::Environment {
  void TearDown() override { fs::remove_all(tmp()); }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new Cleanup);
}  // namespace
