// test_progress_bar.cpp — the terminal progress line: its text for known figures, when it is
// drawn, and that log lines and redraws never interleave (the exact bytes on the console).
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "host/report/progress_bar.h"

namespace carousel {
namespace {

ProgressState state(std::int64_t done, std::int64_t total) {
  return {.done = done,
          .total = total,
          .steps_per_second = 3.1,
          .tokens_per_second = 12400,
          .loss = 3.21449,
          .eta_seconds = 51.2};
}

TEST(ProgressBar, TextForKnownFigures) {
  // Width 100: the head "step  42/200 " (13) and the tail from "  21%" to "ETA 51s" (56) and two
  // brackets leave 29 cells; 42 / 200 = 21 % of them = 6.09 -> 6 filled.
  const std::string line = render_progress(state(42, 200), 100);
  EXPECT_EQ(line, "step  42/200 [" + std::string(6, '#') + std::string(23, '.') +
                      "]  21% | 3.10 step/s | 12.4k tok/s | loss 3.214 | ETA 51s");
  // Narrow: below a 10-cell bar the bar goes, then the rates, then the loss; the ETA stays
  // (an 80-column terminal cut it off before).
  EXPECT_EQ(render_progress(state(200, 200), 50), "step 200/200 100% | loss 3.214 | ETA 51s");
  EXPECT_EQ(render_progress(state(200, 200), 60),
            "step 200/200 100% | 12.4k tok/s | loss 3.214 | ETA 51s");
  EXPECT_EQ(render_progress(state(200, 200), 20), "step 200/200 100% | ");  // then cut
  ProgressState big = state(42, 100000);
  big.eta_seconds = 3 * 86400 + 7200;
  const std::string eighty = render_progress(big, 79);  // an 80-column terminal leaves 79
  EXPECT_LE(eighty.size(), 79u);
  EXPECT_NE(eighty.find("ETA "), std::string::npos) << eighty;
  // Wide: at most 40 cells; done beyond total (never expected) stays a full bar.
  const std::string wide = render_progress(state(9, 4), 300);
  EXPECT_NE(wide.find("[" + std::string(40, '#') + "] 100%"), std::string::npos) << wide;
}

TEST(ProgressBar, DrawnOnTerminalsForRankZeroAtInfo) {
  unsetenv("TERM");
  EXPECT_TRUE(progress_bar_wanted("auto", true, 0, "info"));
  EXPECT_FALSE(progress_bar_wanted("auto", false, 0, "info"));  // a file or a pipe
  EXPECT_FALSE(progress_bar_wanted("auto", true, 1, "info"));   // other processes of a job
  EXPECT_FALSE(progress_bar_wanted("auto", true, 0, "warn"));   // quiet runs stay quiet
  EXPECT_TRUE(progress_bar_wanted("always", false, 0, "warn"));
  EXPECT_FALSE(progress_bar_wanted("always", false, 3, "info"));
  EXPECT_FALSE(progress_bar_wanted("never", true, 0, "info"));
  setenv("TERM", "dumb", 1);
  EXPECT_FALSE(progress_bar_wanted("auto", true, 0, "info"));
  unsetenv("TERM");
}

// Writes the bare message and a newline to the same stream as the bar, like the console sink.
class PlainSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit PlainSink(std::FILE* out) : out_(out) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::fwrite(msg.payload.data(), 1, msg.payload.size(), out_);
    std::fputc('\n', out_);
  }
  void flush_() override { std::fflush(out_); }

 private:
  std::FILE* out_;
};

std::string contents(std::FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string out;
  for (int c; (c = std::fgetc(file)) != EOF;) out.push_back(char(c));
  return out;
}

TEST(ProgressBar, LogLinesScrollAboveTheBar) {
  std::FILE* console = std::tmpfile();
  ASSERT_NE(console, nullptr);
  auto bar = std::make_shared<ProgressSink>(std::make_shared<PlainSink>(console), console, 101);
  spdlog::logger logger("test", bar);
  logger.info("before any bar");
  bar->show(state(1, 2));
  logger.info("saved");
  bar->show(state(2, 2));
  bar->finish();
  logger.info("after");
  const std::string clear = "\r\033[K";
  const std::string first = render_progress(state(1, 2), 100);
  const std::string second = render_progress(state(2, 2), 100);
  EXPECT_EQ(contents(console), "before any bar\n" + first + clear + "saved\n" + first + clear +
                                   second + "\n" + "after\n");
  std::fclose(console);
}

}  // namespace
}  // namespace carousel
