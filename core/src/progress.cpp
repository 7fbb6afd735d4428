// The progress reporter: see progress.hpp.
#include "manyadd/core/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>

namespace manyadd {

std::string human_seconds(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = std::int64_t(s);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

Progress::Progress(std::string what, std::int64_t total, std::string unit, ProgressOptions opt)
    : what_(std::move(what)), unit_(std::move(unit)), total_(total), opt_(opt), t0_(clock::now()) {
  done_ = opt_.first;
  if (!opt_.out) opt_.out = &std::cerr;
  live_ = opt_.live == 1 || (opt_.live < 0 && opt_.out == &std::cerr && ::isatty(STDERR_FILENO)) ||
          (opt_.live < 0 && opt_.out == &std::cout && ::isatty(STDOUT_FILENO));
  // Plain lines: the first after one period (short work prints only its final line).
  next_print_ns_ = live_ ? 0 : std::int64_t(opt_.period_s * 1e9);
}

Progress::~Progress() { finish(); }

void Progress::add(std::int64_t k) {
  done_.fetch_add(k, std::memory_order_relaxed);
  maybe_print();
}
void Progress::set(std::int64_t d) {
  done_.store(d, std::memory_order_relaxed);
  maybe_print();
}
void Progress::note(const std::string& s) {
  std::lock_guard<std::mutex> lk(mu_);
  note_ = s;
}

void Progress::maybe_print() {
  if (opt_.quiet) return;
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0_).count();
  std::int64_t due = next_print_ns_.load(std::memory_order_relaxed);
  if (now < due) return;
  const std::int64_t step = live_ ? 100'000'000 : std::int64_t(opt_.period_s * 1e9);
  if (!next_print_ns_.compare_exchange_strong(due, now + step)) return;  // another thread prints
  std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
  if (!lk.owns_lock() || finished_) return;
  print(false);
}

std::string Progress::line() const {
  std::lock_guard<std::mutex> lk(mu_);
  return compose();
}

std::string Progress::compose() const {
  const double el = std::chrono::duration<double>(clock::now() - t0_).count();
  const std::int64_t d = done_.load();
  const double rate = el > 0 ? double(d - opt_.first) / el : 0;
  std::string s = fmt::format("{}: {}", what_, d);
  if (total_ > 0) s += fmt::format("/{} {} ({:.0f}%)", total_, unit_, 100.0 * double(d) / double(total_));
  else s += " " + unit_;
  s += fmt::format(" | {:.3g} {}/s | elapsed {}", rate, unit_, human_seconds(el));
  if (total_ > 0 && d < total_) {
    double eta = rate > 0 ? double(total_ - d) / rate : NAN;
    const bool capped = opt_.deadline_s > 0 && !(eta <= opt_.deadline_s - el);
    if (capped) eta = std::max(0.0, opt_.deadline_s - el);
    s += " ETA " + human_seconds(eta) + (capped ? " (time limit)" : "");
  }
  if (!note_.empty()) s += " | " + note_;
  return s;
}

void Progress::print(bool final_line) {
  const std::string s = compose();
  std::ostream& o = *opt_.out;
  if (live_) {
    o << '\r' << s;
    if (s.size() < last_len_) o << std::string(last_len_ - s.size(), ' ');
    last_len_ = s.size();
    if (final_line) o << '\n';
  } else {
    o << s << '\n';
  }
  o.flush();
}

void Progress::message(const std::string& s, bool warning) {
  if (opt_.quiet && !warning) return;
  std::lock_guard<std::mutex> lk(mu_);
  std::ostream& o = *opt_.out;
  if (live_ && last_len_ > 0 && !finished_) {  // clear the live line, print, redraw it below
    o << '\r' << std::string(last_len_, ' ') << '\r' << s << '\n';
    last_len_ = 0;
    if (!opt_.quiet) print(false);
    else o.flush();
  } else {
    o << s << '\n';
    o.flush();
  }
}

void Progress::finish() {
  std::lock_guard<std::mutex> lk(mu_);
  if (finished_) return;
  finished_ = true;
  if (opt_.quiet) return;
  const double elapsed = std::chrono::duration<double>(clock::now() - t0_).count();
  if (elapsed >= opt_.final_after_s || (live_ && last_len_ > 0)) print(true);
}

}  // namespace manyadd
