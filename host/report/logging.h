// logging.h — spdlog setup: every line carries the rank; the console shows everything rank 0
// logs and the warnings and errors of other ranks; each rank can also write its own file.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace carousel {

struct LogOptions {
  int rank = 0;
  std::string level = "info";  // trace|debug|info|warn|error|off
  std::string file_dir;  // when set, rank r also logs (at debug) to <dir>/rank<r>.log, appended
  bool progress_bar = false;  // the console keeps a progress line (host/report/progress_bar.h)
};

// Installs the default logger for this process. Throws carousel::Error on an unknown level.
void init_logging(const LogOptions& options);

// Whether an error logged now reaches the console (not with log level off, whatever the file).
bool console_shows_errors();

}  // namespace carousel
