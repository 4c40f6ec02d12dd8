// commands.h — the `carousel` subcommands; main.cpp parses the command line and calls one.
#pragma once

namespace carousel {

struct InfoOptions {
  int cpu_devices = 1;  // how many simulated CPU devices to create and list
};
// `carousel info`: build configuration, backends and devices this process can use.
int run_info(const InfoOptions& options);

}  // namespace carousel
