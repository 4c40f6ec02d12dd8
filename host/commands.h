// commands.h — the `carousel` subcommands; main.cpp parses the command line and calls one.
#pragma once

#include <string>
#include <vector>

namespace carousel {

struct InfoOptions {
  int cpu_devices = 1;  // how many simulated CPU devices to create and list
};
// `carousel info`: build configuration, backends and devices this process can use.
int run_info(const InfoOptions& options);

struct TrainOptions {
  std::vector<std::string> args;  // [config.yml] key=value ...
};
// `carousel train`: single-device training (host/trainer.h).
int run_train(const TrainOptions& options);
// The config key table: name, type, default, meaning.
void print_config_keys();

}  // namespace carousel
