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

// The arguments of `train` and `schedule`: an optional YAML file, then key=value overrides.
struct ConfigArgs {
  std::vector<std::string> args;  // [config.yml] key=value ...
};
// `carousel train`: training on one device or pipelined (host/trainer.h).
int run_train(const ConfigArgs& options);
// `carousel schedule`: a pipeline schedule, lowered, replayed and simulated (host/schedule/).
int run_schedule(const ConfigArgs& options);
// Splits "[config.yml] key=value ..." into the file (a first argument without '=') and overrides.
void split_config_arguments(const std::vector<std::string>& args, std::string& file,
                            std::vector<std::string>& overrides);
// The config key table: name, type, default, meaning.
void print_config_keys();

struct InspectOptions {
  std::string path;  // a checkpoint step directory, a run directory or its checkpoints/
};
// `carousel inspect`: the checkpoint report (host/inspect.h); 0 verified, 2 not.
int run_inspect(const InspectOptions& options);

// `carousel --version`: "carousel X.Y.Z", then "key: value" lines (commit, build type, cuda,
// nccl, mpi).
std::string version_text();

}  // namespace carousel
