// logging.cpp — builds the process-wide spdlog logger described in logging.h.
#include "host/report/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <atomic>
#include <filesystem>
#include <vector>

#include "compute/error.h"
#include "host/config/paths.h"
#include "host/report/progress_bar.h"

namespace carousel {

namespace {
std::atomic<bool> console_errors{true};
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
    std::filesystem::create_directories(options.file_dir);
    const std::string path = fmt::format("{}/rank{}.log", options.file_dir, options.rank);
    check_output_file("base_output_directory", path, "the rank's log file");
    auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
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
