// op_timing.cpp — time by op kind (see op_timing.h): the host stopwatch and the report line.
#include "compute/recording/op_timing.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

namespace carousel {

void accumulate(OpTimes& a, const OpTimes& b) {
  for (const auto& [name, t] : b) {
    a[name].calls += t.calls;
    a[name].seconds += t.seconds;
  }
}

std::string describe_op_times(const OpTimes& times, double elapsed_seconds, int top) {
  std::vector<std::pair<std::string, OpTime>> by_time(times.begin(), times.end());
  std::sort(by_time.begin(), by_time.end(), [](const auto& a, const auto& b) {
    return a.second.seconds != b.second.seconds ? a.second.seconds > b.second.seconds
                                                : a.first < b.first;
  });
  const double whole = elapsed_seconds > 0 ? elapsed_seconds : 1.0;
  std::string out;
  double total = 0;
  for (std::size_t i = 0; i < by_time.size(); ++i) {
    const auto& [name, t] = by_time[i];
    total += t.seconds;
    if (int(i) >= top) continue;
    out += fmt::format("{}{} {:.1f} % ({} calls)", out.empty() ? "" : ", ", name,
                       100.0 * t.seconds / whole, t.calls);
  }
  if (int(by_time.size()) > top) out += fmt::format(", {} more kinds", by_time.size() - top);
  return fmt::format("{} — ops {:.1f} % of {:.3f} s", out.empty() ? "no ops" : out,
                     100.0 * total / whole, elapsed_seconds);
}

namespace {
class HostStopwatch final : public OpStopwatch {
 public:
  void begin(const char* op) override {
    op_ = op;
    start_ = std::chrono::steady_clock::now();
  }
  void end() override {
    const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start_;
    OpTime& t = times_[op_];
    ++t.calls;
    t.seconds += d.count();
  }
  OpTimes collect() override { return std::exchange(times_, {}); }

 private:
  const char* op_ = "";
  std::chrono::steady_clock::time_point start_;
  OpTimes times_;
};
}  // namespace

std::unique_ptr<OpStopwatch> host_op_stopwatch() { return std::make_unique<HostStopwatch>(); }

}  // namespace carousel
