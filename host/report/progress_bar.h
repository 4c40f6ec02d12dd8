// progress_bar.h — training progress on a terminal: one line at the bottom of the console,
// redrawn in place after every step (step count, a bar, rate, tokens/s, loss, ETA), with the
// log lines scrolling above it (tqdm's arrangement). Off a terminal (a file, a pipe, CI) there is
// no bar: the step log lines every log_period steps carry the same figures as plain lines.
//
// The bar lives in the console sink of the logger (ProgressSink), so a log line and a redraw never
// interleave: the sink clears the bar, writes the line, draws the bar again, under one lock.
#pragma once

#include <spdlog/sinks/base_sink.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace carousel {

// "42s", "3m07s", "2h05m": the ETA of the bar and of the step lines.
std::string format_duration(double seconds);

struct ProgressState {
  std::int64_t done = 0, total = 0;  // steps completed (counting a resumed run's earlier ones)
  double steps_per_second = 0, tokens_per_second = 0;
  double loss = 0, eta_seconds = 0;
};

// "step   42/200 [#######·············]  21% | 3.10 step/s | 12.4k tok/s | loss 3.214 | ETA 51s",
// the bar shrunk (to 10 cells at least) so the line fits `width` columns, and cut at `width`.
std::string render_progress(const ProgressState& state, int width);

// Whether a bar is drawn: `setting` auto (the console is a terminal whose TERM is not "dumb",
// this is world rank 0 and the level shows info lines), always, or never.
bool progress_bar_wanted(const std::string& setting, bool console_is_terminal, int rank,
                         const std::string& log_level);

// A console sink that keeps the progress line below the log lines it forwards to `inner`.
class ProgressSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // `out`: where `inner` writes too (stderr); `width`: columns, 0 = ask the terminal.
  ProgressSink(std::shared_ptr<spdlog::sinks::sink> inner, std::FILE* out, int width = 0);
  void show(const ProgressState& state);  // draw (or redraw) the bar
  void finish();                          // leave the last bar as a finished line

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override;
  void set_pattern_(const std::string& pattern) override;
  void set_formatter_(std::unique_ptr<spdlog::formatter> formatter) override;

 private:
  void clear_line();
  void draw();

  std::shared_ptr<spdlog::sinks::sink> inner_;
  std::FILE* out_;
  int width_;
  std::optional<ProgressState> state_;  // drawn when set
};

// The bar of this process's logger (init_logging installs it); nullptr when there is none.
ProgressSink* progress_sink();
void set_progress_sink(std::shared_ptr<ProgressSink> sink);

}  // namespace carousel
