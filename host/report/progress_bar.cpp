// progress_bar.cpp — the progress line and the console sink that keeps it below the log (see
// progress_bar.h).
#include "host/report/progress_bar.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace carousel {

std::string format_duration(double seconds) {
  const auto total = std::int64_t(seconds + 0.5);
  if (total < 60) return fmt::format("{}s", total);
  if (total < 3600) return fmt::format("{}m{:02}s", total / 60, total % 60);
  return fmt::format("{}h{:02}m", total / 3600, total % 3600 / 60);
}

namespace {

std::string compact_count(double x) {
  if (x >= 1e6) return fmt::format("{:.1f}M", x / 1e6);
  if (x >= 1e4) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.0f}", x);
}

int terminal_width(std::FILE* out) {
  winsize size{};
  if (ioctl(fileno(out), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

std::shared_ptr<ProgressSink>& installed() {
  static std::shared_ptr<ProgressSink> sink;
  return sink;
}

}  // namespace

std::string render_progress(const ProgressState& s, int width) {
  const int digits = int(std::to_string(s.total).size());
  const double fraction =
      s.total > 0 ? std::clamp(double(s.done) / double(s.total), 0.0, 1.0) : 0.0;
  const std::string head = fmt::format("step {:>{}}/{} ", s.done, digits, s.total);
  // What a narrow terminal gives up first: the bar, then the rates, then the loss; the ETA and
  // the percentage stay (an 80-column terminal lost the ETA off the end of the line).
  std::vector<std::string> parts = {fmt::format("{:3.0f}%", 100 * fraction),
                                    fmt::format("{:.2f} step/s", s.steps_per_second),
                                    fmt::format("{} tok/s", compact_count(s.tokens_per_second)),
                                    fmt::format("loss {:.3f}", s.loss),
                                    fmt::format("ETA {}", format_duration(s.eta_seconds))};
  const auto tail_of = [&] { return " " + fmt::format("{}", fmt::join(parts, " | ")); };
  constexpr int kMinCells = 10, kMaxCells = 40;
  std::string tail = tail_of();
  const auto fits = [&](int cells) {
    return width <= 0 || int(head.size() + tail.size()) + cells + 2 <= width;  // 2: brackets
  };
  if (!fits(kMinCells)) {  // no bar; then drop step/s, tok/s, loss while the line is too wide
    for (const std::size_t drop : {std::size_t(1), std::size_t(1), std::size_t(1)}) {
      if (int(head.size() + tail.size()) - 1 <= width) break;
      parts.erase(parts.begin() + std::ptrdiff_t(drop));
      tail = tail_of();
    }
    std::string line = head + tail.substr(1);
    if (int(line.size()) > width) line.resize(std::size_t(width));
    return line;
  }
  const int room = width > 0 ? width - int(head.size() + tail.size()) - 2 : kMaxCells;
  const int cells = std::clamp(room, kMinCells, kMaxCells);
  const int filled = int(std::floor(fraction * cells));
  return head + "[" + std::string(std::size_t(filled), '#') +
         std::string(std::size_t(cells - filled), '.') + "]" + tail;
}

bool progress_bar_wanted(const std::string& setting, bool console_is_terminal, int rank,
                         const std::string& log_level) {
  if (setting == "never") return false;
  if (setting == "always") return rank == 0;
  const char* term = std::getenv("TERM");
  const bool shows_info = log_level == "trace" || log_level == "debug" || log_level == "info";
  return console_is_terminal && rank == 0 && shows_info && !(term && std::string(term) == "dumb");
}

ProgressSink::ProgressSink(std::shared_ptr<spdlog::sinks::sink> inner, std::FILE* out, int width)
    : inner_(std::move(inner)), out_(out), width_(width > 0 ? width : terminal_width(out)) {}

void ProgressSink::clear_line() {
  if (state_) std::fputs("\r\033[K", out_);  // back to column 0, erase to the end of the line
}

void ProgressSink::draw() {
  if (!state_) return;
  // One column spare: a line exactly as wide as the terminal wraps on some terminals.
  std::fputs(render_progress(*state_, width_ - 1).c_str(), out_);
  std::fflush(out_);
}

void ProgressSink::show(const ProgressState& state) {
  std::lock_guard<std::mutex> lock(mutex_);
  clear_line();
  state_ = state;
  draw();
}

void ProgressSink::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!state_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  state_.reset();
}

void ProgressSink::sink_it_(const spdlog::details::log_msg& msg) {
  clear_line();
  std::fflush(out_);
  inner_->log(msg);
  inner_->flush();
  draw();
}

void ProgressSink::flush_() {
  inner_->flush();
  std::fflush(out_);
}

void ProgressSink::set_pattern_(const std::string& pattern) { inner_->set_pattern(pattern); }

void ProgressSink::set_formatter_(std::unique_ptr<spdlog::formatter> formatter) {
  inner_->set_formatter(std::move(formatter));
}

ProgressSink* progress_sink() { return installed().get(); }

void set_progress_sink(std::shared_ptr<ProgressSink> sink) { installed() = std::move(sink); }

}  // namespace carousel
