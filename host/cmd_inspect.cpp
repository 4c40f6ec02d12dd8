// cmd_inspect.cpp — `carousel inspect DIR`: the checkpoint report (host/inspect.h) on stdout.
#include <iostream>

#include "host/commands.h"
#include "host/inspect.h"

namespace carousel {

int run_inspect(const InspectOptions& options) {
  const int code = inspect_checkpoint(options.path, std::cout);
  std::cout.flush();
  return code;
}

}  // namespace carousel
