// run_ranks.cpp — ranks as threads of this process: start them, join them, rethrow the first
// failure, and never hang on a rank that does not come back.
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <system_error>
#include <thread>

#include "collectives/local_communicator.h"
#include "compute/error.h"

namespace carousel {

namespace {

std::string message_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

void run_ranks(int size, const std::function<void(int rank)>& fn, const LocalWorld* world,
               const StuckRanks& stuck) {
  std::mutex mutex;
  std::condition_variable finished_cv;
  std::exception_ptr first;  // the first failure in time: the cause, not a rank it abandoned
  std::chrono::steady_clock::time_point first_at;
  std::vector<bool> finished(size, false);
  std::vector<std::thread> threads;
  auto fail_rank = [&](int rank, std::exception_ptr error) {
    {
      std::lock_guard lock(mutex);
      if (!first) {
        first = error;
        first_at = std::chrono::steady_clock::now();
      }
    }
    if (world) world->abort(fmt::format("rank {} failed: {}", rank, message_of(error)));
  };
  for (int r = 0; r < size; ++r) {
    try {
      threads.emplace_back([&, r] {
        try {
          fn(r);
        } catch (...) {
          fail_rank(r, std::current_exception());
        }
        std::lock_guard lock(mutex);
        finished[r] = true;
        finished_cv.notify_all();
      });
    } catch (const std::system_error& e) {  // e.g. the process's thread limit
      fail_rank(r, std::make_exception_ptr(Error(fmt::format(
                       "could not start the thread of rank {} of {}: {}; lower the number of "
                       "ranks (ici_*_parallelism) or raise the thread limit (ulimit -u)",
                       r, size, e.what()))));
      std::lock_guard lock(mutex);
      for (int later = r; later < size; ++later) finished[later] = true;
      break;
    }
  }
  {
    std::unique_lock lock(mutex);
    auto all_finished = [&] {
      return std::all_of(finished.begin(), finished.end(), [](bool f) { return f; });
    };
    while (!all_finished()) {
      if (!first || stuck.grace_seconds <= 0) {
        finished_cv.wait(lock);
        continue;
      }
      const auto deadline = first_at + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::duration<double>(stuck.grace_seconds));
      if (finished_cv.wait_until(lock, deadline, all_finished)) break;
      std::vector<int> running;
      for (int r = 0; r < size; ++r) {
        if (!finished[r]) running.push_back(r);
      }
      const std::string failure = message_of(first);
      lock.unlock();
      if (stuck.report) stuck.report(running, failure);
      std::fflush(nullptr);
      std::_Exit(2);  // stuck threads can be neither joined nor destroyed
    }
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace carousel
