// The one progress reporter of long work: "what: done/total unit (pct) | rate unit/s | elapsed E ETA R",
// redrawn in place on a terminal (at most 10 times a second) and printed as a plain line every
// `period_s` seconds otherwise (a pipe or a log file), plus a final line. add() is thread-safe and
// cheap (an atomic add and a clock read), so workers call it directly. Quiet: nothing is printed
// but warnings. Every other line a tool prints on the same stream while it works (an evaluated row,
// an evaluation during training, a warning) goes through message(), which keeps a live line intact.
//
// The ETA is (total - done) / rate, the rate counted from `first` (a resumed run's steps done before
// this process are not its speed); with a deadline (work that stops at a wall-time limit) the ETA is
// at most the time left to it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <mutex>
#include <string>

namespace manyadd {

struct ProgressOptions {
  std::ostream* out = nullptr;  // default std::cerr
  bool quiet = false;
  int live = -1;                // 1 redraw in place, 0 plain lines, -1 decide: live when `out` is a terminal
  double period_s = 10;         // plain lines: at most one per period
  std::int64_t first = 0;       // done when the work starts here (a resumed run): the rate counts from it
  double deadline_s = 0;        // > 0: the work stops this many seconds after the start (ETA capped)
  double final_after_s = 0;     // the final line only when the work took at least this long (or a live
                                // line was drawn): a stage that is usually instant stays silent
};

// Options that print nothing but warnings (library callers, tests).
inline ProgressOptions quiet_progress() {
  ProgressOptions o;
  o.quiet = true;
  return o;
}

class Progress {
 public:
  Progress(std::string what, std::int64_t total, std::string unit, ProgressOptions opt = {});
  ~Progress();  // finishes if finish() was not called
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(std::int64_t k = 1);
  void set(std::int64_t done);
  void note(const std::string& s);  // extra text shown after the counts (e.g. "loss 0.021")
  // A line of its own on the progress stream (above the live line on a terminal): printed unless quiet;
  // a warning is printed even when quiet.
  void message(const std::string& s, bool warning = false);
  void finish();                    // the final line (once)
  std::int64_t done() const { return done_.load(); }
  bool live() const { return live_; }  // redrawn in place (a terminal) rather than plain lines
  // The line as it would be printed now (for tests and for callers that log it themselves).
  std::string line() const;

 private:
  using clock = std::chrono::steady_clock;
  std::string what_, unit_;
  std::int64_t total_;
  ProgressOptions opt_;
  bool live_ = false;
  std::atomic<std::int64_t> done_{0};
  std::atomic<std::int64_t> next_print_ns_{0};
  clock::time_point t0_;
  mutable std::mutex mu_;
  std::string note_;
  bool finished_ = false;
  std::size_t last_len_ = 0;
  void maybe_print();
  void print(bool final_line);    // with mu_ held
  std::string compose() const;    // with mu_ held
};

std::string human_seconds(double s);  // "42s", "3m07s", "2h05m", "?" for non-finite

}  // namespace manyadd
