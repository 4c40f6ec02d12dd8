// flight_recorder.cpp — recording and formatting a rank's last actions.
#include "host/reliability/flight_recorder.h"

#include <fmt/format.h>

namespace carousel {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

void FlightRecorder::start(std::int64_t step, std::int64_t index, const schedule::Action& action) {
  current_ = {step, index, schedule::to_string(action), std::chrono::steady_clock::now(), {}};
  in_progress_ = true;
}

void FlightRecorder::complete() {
  current_.ended = std::chrono::steady_clock::now();
  done_[completed_ % kKept] = current_;
  ++completed_;
  in_progress_ = false;
}

void FlightRecorder::note(std::int64_t step, const std::string& what) {
  current_ = {step, -1, what, std::chrono::steady_clock::now(), {}};
  in_progress_ = true;
}

std::string FlightRecorder::report(int last) const {
  const auto now = std::chrono::steady_clock::now();
  auto describe = [](const Entry& e) {
    return e.index >= 0 ? fmt::format("step {} action {} ({})", e.step, e.index, e.what)
                        : fmt::format("step {} {}", e.step, e.what);
  };
  std::string out = in_progress_ ? fmt::format("in {} for {:.3f} s", describe(current_),
                                               seconds_between(current_.started, now))
                                 : std::string("between actions");
  const std::int64_t first = std::max<std::int64_t>(0, completed_ - last);
  if (completed_ == 0) out += "; nothing completed yet";
  for (std::int64_t k = completed_ - 1; k >= first; --k) {
    const Entry& e = done_[k % kKept];
    out += fmt::format("{} {} ({:.3f} s)", k == completed_ - 1 ? "; completed:" : ",", describe(e),
                       seconds_between(e.started, e.ended));
  }
  return out;
}

}  // namespace carousel
