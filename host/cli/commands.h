// commands.h — the `carousel` subcommands; main.cpp parses the command line and calls one.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace CLI {
class App;
}

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
// `carousel train`: training on one device or pipelined (host/run/trainer.h).
int run_train(const ConfigArgs& options);
// `carousel schedule`: a pipeline schedule, lowered, replayed and simulated (host/schedule/).
int run_schedule(const ConfigArgs& options);
// Splits "[a.yml b.yml ...] key=value ..." into the config files (the leading arguments without
// '=', later ones overriding earlier ones) and the overrides.
void split_config_arguments(const std::vector<std::string>& args, std::vector<std::string>& files,
                            std::vector<std::string>& overrides);
// The config key table: name, type, default, meaning.
void print_config_keys();
// Under an address-space or data limit, glibc's malloc arenas capped (startup_limits.cpp);
// main() calls it before any thread starts.
void cap_malloc_arenas_under_limits();

struct InspectOptions {
  std::string path;  // a checkpoint step directory, a run directory or its checkpoints/
};
// `carousel inspect`: the checkpoint report (host/io/inspect.h); 0 verified, 2 not.
int run_inspect(const InspectOptions& options);

// `carousel plan`: the mesh planner (host/plan/, docs/performance.md#planning-a-mesh).
struct PlanOptions {
  std::string model;  // a preset name, or a Hugging Face config.json (or its directory)
  std::string gpu;    // a GPU preset (plan_gpus.h): the defaults of the four below
  int devices = 0, devices_per_node = 8;
  std::string device_memory;  // "80GiB"
  double peak_tflops = 0;     // per device, dense, in the compute dtype
  std::string intra_node_bandwidth, inter_node_bandwidth;  // "450GB/s", "400Gbit/s"
  std::string global_batch_tokens;                         // "4M"; or global_batch in sequences
  std::int64_t global_batch = 0;
  std::int64_t seq_len = 0;  // 0: the model's max_target_length
  std::string dtype = "bfloat16", remat = "full";
  // NaN: not given (0.6, or unused with costs_file, which measures the compute instead).
  double compute_efficiency = std::numeric_limits<double>::quiet_NaN();
  std::string costs_file;              // a schedule_costs.yml a profiled run wrote
  std::vector<std::string> schedules;  // empty: all
  std::int64_t max_microbatches = 0;
  std::int64_t tensor = 0, context = 0, expert = 0;  // 0: search them
  // A layout to evaluate (0 or empty: searched; host/plan/plan_layout.h): S, F, D, M, R, the
  // pipelined layers, one schedule, the FSDP weight mode, the stage layers ("even" or counts).
  std::int64_t stages = 0, fsdp = 0, data = 0, microbatches = 0, repeats = 0, pipeline_layers = 0;
  std::string schedule, weights, stage_layers;
  std::string mlp = "swiglu";  // gelu: the GPT-style MLP, planner arithmetic only
  bool explain = false;
  // A carousel YAML config whose data keys (dataset_*, eval_*, tokenizer_path, steps, ...) the
  // launch line carries; empty: the launch line says which to add.
  std::string config;
  double kernel_latency_us = 5, message_latency_us = 10;  // the FLOP model's latency floor
  int top = 5;
  bool json = false;
};
int run_plan(const PlanOptions& options);
// Declares the plan flags on `cmd`, bound to `options` (in cmd_plan.cpp).
void add_plan_options(CLI::App& cmd, PlanOptions& options);

// `carousel --version`: "carousel X.Y.Z", then "key: value" lines (commit, build type, cuda,
// nccl, mpi).
std::string version_text();

}  // namespace carousel
