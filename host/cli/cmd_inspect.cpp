// cmd_inspect.cpp — `carousel inspect DIR`: the checkpoint report (host/io/inspect.h) on stdout.
#include <iostream>

#include "host/cli/commands.h"
#include "host/io/inspect.h"

namespace carousel {

int run_inspect(const InspectOptions& options) {
  const int code = inspect_checkpoint(options.path, std::cout);
  std::cout.flush();
  return code;
}

}  // namespace carousel
