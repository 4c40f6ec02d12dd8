// cmd_train.cpp — `carousel train [config.yml ...] key=value ...`.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "host/cli/commands.h"
#include "host/config/config.h"
#include "host/config/run_name.h"
#include "host/io/run_lock.h"
#include "host/mesh/launch.h"
#include "host/reliability/stop_signals.h"
#include "host/report/logging.h"
#include "host/report/progress_bar.h"
#include "host/run/trainer.h"

namespace carousel {

void split_config_arguments(const std::vector<std::string>& args, std::vector<std::string>& files,
                            std::vector<std::string>& overrides) {
  for (const std::string& arg : args) {
    if (overrides.empty() && arg.find('=') == std::string::npos) {
      files.push_back(arg);  // the leading arguments without '=' are config files
    } else {
      overrides.push_back(arg);
    }
  }
}

void print_config_keys() {
  const Config defaults;
  fmt::print("{:<38} {:<7} {:<12} {:<11} {}\n", "key", "type", "default", "on resume", "meaning");
  for (const auto& k : config_keys()) {
    fmt::print("{:<38} {:<7} {:<12} {:<11} {}\n", k.name, k.type, k.get(defaults),
               resume_class_name(k.resume), k.help);
  }
}

int run_train(const ConfigArgs& options) {
  std::vector<std::string> files, overrides;
  split_config_arguments(options.args, files, overrides);
  LoadedConfig loaded = load_config(files, overrides);
  const auto processes = ProcessGroup::join(loaded.config.collective_timeout_seconds);
  // Named before logging starts: the log file lives in the run directory.
  const bool fresh_run = resolve_run_name(loaded.config, processes->world());
  // One run per run directory, taken before anything is written there (world rank 0's process
  // holds it for the job; see host/io/run_lock.h).
  std::optional<RunLock> lock;
  if (processes->rank() == 0) {
    try {
      lock.emplace(RunLock::acquire(loaded.config.run_directory()));
    } catch (const std::exception& e) {
      StopSignals::note_failing();  // the SIGTERM Open MPI sends after MPI_Abort: not a stop
      if (processes->size() > 1) {  // the other processes would wait for this one forever
        spdlog::error("{}", e.what());
        processes->abort(2);
      }
      throw;
    }
  }
  // Also to <run directory>/logs/rank<r>.log (appended: a resumed run keeps what came before).
  // When that directory cannot be made, the console alone: check_outputs_writable reports why.
  const LogOptions log{
      .rank = processes->rank(),
      .level = loaded.config.log_level,
      .file_dir = (std::filesystem::path(loaded.config.run_directory()) / "logs").string(),
      .progress_bar = progress_bar_wanted(loaded.config.progress_bar, isatty(STDERR_FILENO) == 1,
                                          processes->rank(), loaded.config.log_level)};
  try {
    init_logging(log);
  } catch (const std::filesystem::filesystem_error&) {
    init_logging({.rank = log.rank, .level = log.level, .file_dir = {}, .progress_bar = false});
  }
  if (fresh_run) log_fresh_run_name(loaded.config);
  spdlog::info("config ({} keys; non-default marked *):", loaded.table.size());
  for (const auto& row : loaded.table) {
    spdlog::info("  {} {:<36} {:<24} {}", row.source == "default" ? ' ' : '*', row.key, row.value,
                 row.source == "default" ? "" : row.source);
  }
  try {
    train(loaded.config, processes->world());
  } catch (const std::exception& e) {
    // This process fails: under mpirun, the other processes (told by MPI_Abort below) and this
    // one get Open MPI's SIGTERM next, which must not be announced as a stop with a checkpoint.
    StopSignals::note_failing();
    if (processes->size() > 1) {  // the other processes would wait for this one forever
      spdlog::error("{}", e.what());
      processes->abort(2);
    }
    throw;
  }
  return 0;
}

}  // namespace carousel
