// logging.cpp — builds the process-wide spdlog logger described in logging.h.
#include "host/report/logging.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <vector>

#include "compute/error.h"
#include "host/io/files.h"
#include "host/report/progress_bar.h"

namespace carousel {

namespace {
std::atomic<bool> console_errors{true};

// The rank's log file, opened as every output is (host/io/files.h: never through a symlink,
// never waiting on a FIFO) — spdlog's own file sink opens by name with fopen, which follows
// both. Each line is one write(2) to a file opened for appending: nothing is buffered, so a
// crash loses no line, and the log is as complete as the console.
class LogFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit LogFileSink(OutputFile file) : file_(std::move(file)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    file_.write(line.data(), line.size());  // a failure reaches spdlog's error handler
  }
  void flush_() override {}

 private:
  OutputFile file_;
};
}  // namespace

bool console_shows_errors() { return console_errors.load(); }

void init_logging(const LogOptions& options) {
  const auto level = spdlog::level::from_str(options.level);
  if (level == spdlog::level::off && options.level != "off") {
    fail("log level '{}' is not valid; use trace, debug, info, warn, error or off", options.level);
  }
  std::vector<spdlog::sink_ptr> sinks;
  {  // other ranks (processes of a job) show only their warnings and errors
    spdlog::sink_ptr console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    std::shared_ptr<ProgressSink> bar;
    if (options.progress_bar) console = bar = std::make_shared<ProgressSink>(console, stderr);
    set_progress_sink(bar);
    console->set_level(options.rank == 0 ? level : std::max(level, spdlog::level::warn));
    console_errors = level <= spdlog::level::err;
    sinks.push_back(console);
  }
  if (!options.file_dir.empty()) {
    // file_dir is <run directory>/logs: a symlink there is refused, not followed elsewhere.
    const std::filesystem::path dir(options.file_dir);
    check_output_directory(dir, "the log directory");
    std::filesystem::create_directories(dir);
    const std::string path = fmt::format("{}/rank{}.log", options.file_dir, options.rank);
    auto file = std::make_shared<LogFileSink>(
        OutputFile(path, "the rank's log file", OutputMode::Append, dir.parent_path()));
    file->set_level(spdlog::level::debug);
    sinks.push_back(file);
  }
  auto logger = std::make_shared<spdlog::logger>("carousel", sinks.begin(), sinks.end());
  logger->set_pattern(fmt::format("[%H:%M:%S.%e] [%^%l%$] [rank {}] %v", options.rank));
  logger->set_level(options.file_dir.empty() ? level : std::min(level, spdlog::level::debug));
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

}  // namespace carousel
