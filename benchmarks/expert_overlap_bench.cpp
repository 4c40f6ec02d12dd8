// expert_overlap_bench.cpp — how much of the MoE rows' all-to-all DualPipeV's F&B pairs hide,
// measured on CPU ranks against the cost model's prediction (docs/moe.md "The exchange in the
// schedule"). An MoE model with expert parallelism E runs as threads whose sends and receives
// cross a simulated link (cpu_link_gigabytes_per_second), so an exchange costs time against
// compute as between GPUs. Per schedule and link speed: the median step, the schedule's measured
// span next to the prediction calibrated from the same traced steps, the exchanges' time in flight
// and the part of it the compute waited for.
//
//   build/bin/expert_overlap_bench                                   # the default grid
//   build/bin/expert_overlap_bench --links 0,0.02 --schedules dualpipev,zbv -- num_experts=8
//
// dualpipev pairs an F with a B of another microbatch, which take turns at their exchanges;
// zbv runs the same V placement with no pairs, every exchange waited for at once.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "benchmarks/bench_args.h"
#include "compute/error.h"
#include "host/config/config.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"

namespace {

using namespace carousel;

using bench::split;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"expert_overlap_bench — MoE exchanges hidden by DualPipeV's pairs, measured"};
  std::string schedules = "dualpipev,zbv", links = "0,0.01";
  int stages = 1, experts = 2, microbatches = 8, steps = 8;
  std::vector<std::string> model = {
      "base_num_decoder_layers=4", "max_target_length=64", "base_emb_dim=128",
      "base_mlp_dim=256",          "num_experts=4",        "num_experts_per_tok=2",
      "dataset_type=synthetic"};
  std::vector<std::string> extra;
  app.add_option("--schedules", schedules, "comma-separated pipeline_schedule values");
  app.add_option("--links", links, "comma-separated cpu_link_gigabytes_per_second (0: memory)");
  app.add_option("--stages", stages, "S (dualpipev and zbv run 2 stages per rank)")
      ->check(CLI::Range(1, 8));
  app.add_option("--experts", experts, "E, ici_expert_parallelism")->check(CLI::Range(2, 8));
  app.add_option("--microbatches", microbatches, "M")->check(CLI::Range(2, 64));
  app.add_option("--steps", steps, "steps per run (the first 2 are warm-up)")
      ->check(CLI::Range(3, 100));
  app.add_option("keys", extra, "model config overrides key=value (after --)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    init_logging({.rank = 0, .level = "warn", .file_dir = {}});
    model.insert(model.end(), extra.begin(), extra.end());
    const auto out_dir =
        (std::filesystem::temp_directory_path() / "carousel_expert_overlap_bench").string();
    std::filesystem::remove_all(out_dir);
    const std::int64_t layers = load_config("", model).config.model.num_layers;
    CAROUSEL_CHECK(layers % (2 * stages) == 0,
                   "{} layers do not split into S x 2 = {} stages: give base_num_decoder_layers a "
                   "multiple of it",
                   layers, 2 * stages);
    const int devices = stages * experts;
    fmt::print("S={} E={} M={}, {} ranks on {} cores{}\n", stages, experts, microbatches, devices,
               omp_get_num_procs(), devices > omp_get_num_procs() ? " (oversubscribed)" : "");
    fmt::print("{:<10} {:>8} {:>9} {:>9} {:>9} {:>6} {:>11} {:>11} {:>9}\n", "schedule", "GB/s",
               "step ms", "span ms", "pred ms", "err", "exchange ms", "exposed ms", "1 x ms");
    for (const auto& schedule : split(schedules)) {
      for (const auto& link : split(links)) {
        std::vector<std::string> keys = model;
        for (const std::string& k : std::vector<std::string>{
                 "pipeline_schedule=" + schedule,
                 fmt::format("ici_pipeline_parallelism={}", stages),
                 fmt::format("ici_expert_parallelism={}", experts), "num_pipeline_repeats=2",
                 fmt::format("num_layers_per_pipeline_stage={}", layers / (2 * stages)),
                 fmt::format("num_pipeline_microbatches={}", microbatches),
                 "cpu_link_gigabytes_per_second=" + link, fmt::format("steps={}", steps),
                 fmt::format("profiler_steps={}", steps - 2), "skip_first_n_steps_for_profiler=2",
                 "enable_checkpointing=false", "log_level=warn", "base_output_directory=" + out_dir,
                 fmt::format("run_name={}_{}", schedule, link)})
          keys.push_back(k);
        Config cfg = load_config("", keys).config;
        const TrainResult r = train(cfg);
        std::vector<double> timed;
        for (std::size_t i = 2; i < r.steps.size(); ++i) timed.push_back(r.steps[i].step_ms);
        std::sort(timed.begin(), timed.end());
        const double step = timed.empty() ? 0 : timed[timed.size() / 2];
        fmt::print(
            "{:<10} {:>8} {:>9.1f} {:>9.1f} {:>9.1f} {:>5.1f}% {:>11.2f} {:>11.2f} {:>9.3f}\n",
            schedule, link, step, r.measured_span_ms, r.predicted_span_ms,
            100 * (r.predicted_span_ms / r.measured_span_ms - 1), r.exchange_ms,
            r.exposed_exchange_ms, r.calibrated_exchange_ms);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
  return 0;
}
