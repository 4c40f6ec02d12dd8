// pipeline_bench.cpp — the pipeline benchmark: schedules x S x M x weight modes on simulated CPU
// devices (or logical GPU devices with device=cuda), each a short real training run whose last
// steps are traced (profiler_steps). Per configuration: step time, tokens/s, the schedule's
// measured span and bubble next to the cost model's prediction calibrated from the same steps
// (mean measured F, B, I, W and gather durations), peak device memory and weight all-gathers.
//
//   build/bin/pipeline_bench                                   # the default grid, table on stdout
//   build/bin/pipeline_bench --schedules 1f1b,zbv --stages 2 --factors 1,2,4 --json out.json
//   build/bin/pipeline_bench --weight-modes none,bsw -- base_emb_dim=512 base_mlp_dim=1376
//
// Every configuration keeps the global batch (--batch sequences), so step times compare. Ranks
// run as threads with cores / ranks OpenMP threads each; a configuration with more ranks than
// cores shares cores between stages, so its "bubble" is filled by other ranks' work and is
// marked oversubscribed. scripts/render_pipeline_bench.py turns the JSON into the tables and the
// plot of docs/performance.md.
#include <omp.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "benchmarks/bench_args.h"
#include "compute/error.h"
#include "host/config/config.h"
#include "host/io/files.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"
#include "host/schedule/registry.h"
#include "models/model.h"

namespace {

using namespace carousel;

// FSDP weight modes by their config keys; "none" is F = 1.
struct WeightMode {
  std::string name;
  int fsdp;
  std::vector<std::string> keys;
};

WeightMode weight_mode(const std::string& name) {
  if (name == "none") return {name, 1, {}};
  if (name == "per_use") return {name, 2, {}};
  if (name == "bsw") return {name, 2, {"pipeline_fsdp_ag_per_repeat=true"}};
  if (name == "once") return {name, 2, {"pipeline_fsdp_ag_once=true"}};
  fail("--weight-modes: '{}' is not a weight mode; use none, per_use, bsw or once", name);
}

// Stages per rank: 2 for the schedules that run several (the registry says which), else 1.
int repeats_of(const std::string& schedule) {
  return schedule::find_schedule(schedule).repeats ? 2 : 1;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

struct Row {
  std::string schedule, mode;
  int stages, repeats, microbatches, fsdp;
  bool oversubscribed;
  double step_ms, tokens_per_s, measured_span_ms, predicted_span_ms, spread_span_ms,
      replayed_span_ms, measured_bubble, predicted_bubble, spread_bubble, replayed_bubble,
      exposed_gather_ms, peak_mib, gathers_per_step, gather_mib_per_step;
};

// The config of one grid point; throws carousel::Error when the schedule rejects its layout
// (e.g. zbv with M < 2S), which the grid skips.
Config bench_config(const std::vector<std::string>& model, const std::string& schedule, int stages,
                    int factor, const WeightMode& mode, int batch, int steps,
                    const std::string& out_dir, std::int64_t layers) {
  const int repeats = repeats_of(schedule);
  const int microbatches = factor * stages;
  const int devices = stages * mode.fsdp;
  CAROUSEL_CHECK(layers % (stages * repeats) == 0,
                 "{} layers do not split into S x R = {} x {} stages; give base_num_decoder_layers "
                 "a multiple of every S x R of the grid",
                 layers, stages, repeats);
  std::vector<std::string> keys = model;
  if (devices > 1) {  // one device runs the model as one stage: layout keys would have no effect
    keys.insert(keys.end(), {"pipeline_schedule=" + schedule,
                             fmt::format("num_pipeline_repeats={}", repeats),
                             fmt::format("num_layers_per_pipeline_stage={}",
                                         layers / (stages * repeats))});
  }
  const std::vector<std::string> mesh = {
      fmt::format("ici_pipeline_parallelism={}", stages),
      fmt::format("ici_fsdp_parallelism={}", mode.fsdp),
      fmt::format("num_pipeline_microbatches={}", microbatches),
      fmt::format("per_device_batch_size={}", double(batch) / devices),
      fmt::format("steps={}", steps),
      fmt::format("profiler_steps={}", steps - 2),
      "skip_first_n_steps_for_profiler=2",
      "enable_checkpointing=false",
      "log_level=warn",
      "base_output_directory=" + out_dir,
      fmt::format("run_name={}_S{}_M{}_{}", schedule, stages, microbatches, mode.name)};
  keys.insert(keys.end(), mesh.begin(), mesh.end());
  keys.insert(keys.end(), mode.keys.begin(), mode.keys.end());
  return load_config("", keys).config;
}

Row run_one(const Config& cfg, const std::string& schedule, const WeightMode& mode, int batch,
            int steps) {
  const int stages = int(cfg.ici_pipeline_parallelism), repeats = int(cfg.repeats());
  const int devices = stages * mode.fsdp;
  const TrainResult result = train(cfg);
  std::vector<double> timed;  // the steps after the first two (warm-up)
  for (std::size_t i = 2; i < result.steps.size(); ++i) timed.push_back(result.steps[i].step_ms);
  std::sort(timed.begin(), timed.end());
  const double median = timed.empty() ? 0 : timed[timed.size() / 2];
  double gathers = 0;
  for (auto g : result.all_gathers_per_device) gathers = std::max(gathers, double(g));
  // A gather brings a whole stage's weights (float32 masters, the largest stage: even splits).
  std::int64_t layer_elements = 0;
  for (const auto& spec : param_table(cfg.model)) {
    if (spec.layer >= 0) layer_elements += numel(spec.shape);
  }
  const double stage_mib =
      4.0 * double(layer_elements) / double(stages * repeats) / double(1 << 20);
  return {
      .schedule = schedule,  // one device runs its own program whatever the name
      .mode = mode.name,
      .stages = stages,
      .repeats = repeats,
      .microbatches = int(cfg.microbatches()),
      .fsdp = mode.fsdp,
      .oversubscribed = devices > omp_get_num_procs(),
      .step_ms = median,
      .tokens_per_s = median > 0 ? double(batch * cfg.model.max_target_length) / median * 1e3 : 0,
      .measured_span_ms = result.measured_span_ms,
      .predicted_span_ms = result.predicted_span_ms,
      .spread_span_ms = result.spread_span_ms,
      .replayed_span_ms = result.replayed_span_ms,
      .measured_bubble = result.measured_bubble,
      .predicted_bubble = result.predicted_bubble,
      .spread_bubble = result.spread_bubble,
      .replayed_bubble = result.replayed_bubble,
      .exposed_gather_ms = result.exposed_gather_ms,
      .peak_mib = double(result.peak_device_bytes) / (1 << 20),
      .gathers_per_step = gathers / double(steps),
      .gather_mib_per_step = stage_mib * gathers / double(steps)};
}

nlohmann::json to_json(const Row& r) {
  return {{"schedule", r.schedule},
          {"weight_mode", r.mode},
          {"S", r.stages},
          {"R", r.repeats},
          {"M", r.microbatches},
          {"F", r.fsdp},
          {"oversubscribed", r.oversubscribed},
          {"step_ms", r.step_ms},
          {"tokens_per_s", r.tokens_per_s},
          {"measured_span_ms", r.measured_span_ms},
          {"predicted_span_ms", r.predicted_span_ms},
          {"spread_span_ms", r.spread_span_ms},
          {"replayed_span_ms", r.replayed_span_ms},
          {"measured_bubble", r.measured_bubble},
          {"predicted_bubble", r.predicted_bubble},
          {"spread_bubble", r.spread_bubble},
          {"replayed_bubble", r.replayed_bubble},
          {"exposed_gather_ms", r.exposed_gather_ms},
          {"peak_mib", r.peak_mib},
          {"all_gathers_per_step", r.gathers_per_step},
          {"all_gather_mib_per_step", r.gather_mib_per_step}};
}

using bench::split;

// --schedules all: the registry's rows, in table order.
std::vector<std::string> registered_schedules() {
  std::vector<std::string> out;
  for (const auto& row : schedule::schedules()) out.emplace_back(row.name);
  return out;
}

std::vector<int> split_ints(const std::string& flag, const std::string& list) {
  std::vector<int> out;
  for (const auto& item : split(list)) {
    try {
      std::size_t used = 0;
      out.push_back(std::stoi(item, &used));
      CAROUSEL_CHECK(used == item.size() && out.back() > 0, "");
    } catch (const std::exception&) {
      fail("{}: '{}' is not a positive integer (give a comma-separated list, e.g. 1,2,4)", flag,
           item);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipeline_bench — schedules x S x M x weight modes, measured vs predicted"};
  std::string schedules = "gpipe,1f1b,circular,interleaved_1f1b,zb_h1,looped_bfs,zbv";
  std::string stages_list = "1,2", factors = "1,2,4", modes = "none";
  std::string json_path;
  int batch = 8, steps = 6;
  std::vector<std::string> model = {"base_num_decoder_layers=8", "max_target_length=64",
                                    "dataset_type=synthetic"};
  std::vector<std::string> extra;
  app.add_option("--schedules", schedules,
                 "comma-separated pipeline_schedule values, or all (every registered schedule)");
  app.add_option("--stages", stages_list, "comma-separated S values (S = 1: one device)");
  app.add_option("--factors", factors, "M = factor x S, comma-separated");
  app.add_option("--weight-modes", modes, "none (F = 1) | per_use | bsw | once (F = 2)");
  app.add_option("--batch", batch, "global batch in sequences")->check(CLI::Range(1, 4096));
  app.add_option("--steps", steps, "steps per run (the first 2 are warm-up)")
      ->check(CLI::Range(3, 1000));
  app.add_option("--json", json_path, "write every row and the machine to this JSON file");
  app.add_option("keys", extra, "model config overrides key=value (after --)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    init_logging({.rank = 0, .level = "warn", .file_dir = {}});
    model.insert(model.end(), extra.begin(), extra.end());
    std::vector<WeightMode> weight_modes;
    for (const auto& m : split(modes)) weight_modes.push_back(weight_mode(m));
    const auto out_dir =
        (std::filesystem::temp_directory_path() / "carousel_pipeline_bench").string();
    std::filesystem::remove_all(out_dir);
    fmt::print(
        "{:<17} {:>2} {:>2} {:>3} {:<8} {:>9} {:>9} {:>9} {:>9} {:>6} {:>8} {:>8} {:>8} {:>8} "
        "{:>8} {:>8} {:>9}\n",
        "schedule", "S", "R", "M", "weights", "step ms", "tok/s", "span ms", "pred ms", "err",
        "bubble", "pred", "+spread", "replay", "AG wait", "AG MiB", "peak MiB");
    std::vector<Row> rows;
    const std::int64_t layers = load_config("", model).config.model.num_layers;  // once
    for (const int stages : split_ints("--stages", stages_list)) {
      for (const auto& schedule : schedules == "all" ? registered_schedules() : split(schedules)) {
        schedule::find_schedule(schedule);  // an unknown name: the error lists the valid ones
        if (stages == 1 && schedule != schedule::one_device_schedule().name)
          continue;  // one device: one program
        for (const int factor : split_ints("--factors", factors)) {
          for (const auto& mode : weight_modes) {
            Config cfg;
            try {
              cfg = bench_config(model, schedule, stages, factor, mode, batch, steps, out_dir,
                                 layers);
            } catch (const Error& e) {
              fmt::print("{:<17} {:>2} {:>2} {:>3} {:<8} skipped: {}\n", schedule, stages,
                         repeats_of(schedule), factor * stages, mode.name, e.what());
              continue;
            }
            const Row r = run_one(cfg, schedule, mode, batch, steps);
            fmt::print(
                "{:<17} {:>2} {:>2} {:>3} {:<8} {:>9.1f} {:>9.0f} {:>9.1f} {:>9.1f} {:>5.0f}% "
                "{:>7.1f}% {:>7.1f}% {:>7.1f}% {:>7.1f}% {:>8.2f} {:>8.1f} {:>9.1f}{}\n",
                r.schedule, r.stages, r.repeats, r.microbatches, r.mode, r.step_ms, r.tokens_per_s,
                r.measured_span_ms, r.predicted_span_ms,
                100 * (r.predicted_span_ms / r.measured_span_ms - 1), 100 * r.measured_bubble,
                100 * r.predicted_bubble, 100 * r.spread_bubble, 100 * r.replayed_bubble,
                r.exposed_gather_ms, r.gather_mib_per_step, r.peak_mib,
                r.oversubscribed ? "  oversubscribed" : "");
            std::fflush(stdout);
            rows.push_back(r);
          }
        }
      }
    }
    if (!json_path.empty()) {
      nlohmann::json doc;
      doc["machine"] = {
          {"cpu", cpu_model()}, {"cores", omp_get_num_procs()}, {"date", std::time(nullptr)}};
      doc["batch"] = batch;
      doc["steps"] = steps;
      doc["model"] = model;
      for (const Row& r : rows) doc["rows"].push_back(to_json(r));
      write_text_file(json_path, doc.dump(2) + '\n');
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
  return 0;
}
