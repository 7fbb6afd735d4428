// parallel_for: see parallel.hpp.
#include "manyadd/core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace manyadd {

void parallel_for(int threads, std::int64_t n, const std::function<void(int, std::int64_t)>& f, Schedule schedule) {
  if (n <= 0) return;
  threads = int(std::max<std::int64_t>(1, std::min<std::int64_t>(threads, n)));
  if (threads == 1) {
    for (std::int64_t i = 0; i < n; ++i) f(0, i);
    return;
  }
  std::exception_ptr err;
  std::mutex mu;
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> failed{false};
  auto worker = [&](int t) {
    try {
      if (schedule == Schedule::blocks) {
        const std::int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
        for (std::int64_t i = lo; i < hi; ++i) f(t, i);
      } else {
        for (std::int64_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < n;) f(t, i);
      }
    } catch (...) {
      failed = true;
      std::lock_guard<std::mutex> lk(mu);
      if (!err) err = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(std::size_t(threads));
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  for (auto& th : pool) th.join();
  if (err) std::rethrow_exception(err);
}

}  // namespace manyadd
