// The project's one thread pool primitive. Work is split so that anything f writes per index is
// independent of scheduling: results are the same for any thread count unless f itself reduces.
#pragma once

#include <cstdint>
#include <functional>

namespace manyadd {

enum class Schedule {
  blocks,   // thread t takes the contiguous block [n t / T, n (t + 1) / T): the thread of an index is fixed
  dynamic,  // threads take the next index from a shared counter: for uneven work; the thread is not fixed
};

// Runs f(thread, i) for every i in [0, n) on min(threads, n) threads (the caller's thread included
// only when one thread is used). The first exception thrown by any f is rethrown after all threads
// have stopped; with Schedule::dynamic the other threads stop taking new indices once one has thrown.
void parallel_for(int threads, std::int64_t n, const std::function<void(int thread, std::int64_t i)>& f,
                  Schedule schedule = Schedule::blocks);

}  // namespace manyadd
