// profiler.cpp — the profiled steps' trace, the calibrated prediction beside it, and the measured
// costs file.
#include "host/run/profiler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "host/config/schedule_config.h"
#include "host/io/files.h"
#include "host/plan/plan_costs.h"
#include "host/report/cost_calibration.h"
#include "models/stage.h"

namespace carousel {

namespace {
// Each rank's time by op kind over its profiled steps: one log line per rank (the first two:
// the others repeat them in a balanced mesh) and op_times.json with every rank.
void log_op_times(const std::vector<const StepTrace*>& ranks, const std::string& path,
                  const std::filesystem::path& run_directory) {
  nlohmann::json out = nlohmann::json::array();
  for (const StepTrace* t : ranks) {
    double elapsed_us = 0;
    for (const auto& s : t->steps()) elapsed_us += s.end_us - s.start_us;
    if (out.size() < 2) {
      spdlog::info("time by op, rank {}: {}", t->rank(),
                   describe_op_times(t->op_times(), elapsed_us / 1e6));
    }
    nlohmann::json ops = nlohmann::json::object();
    for (const auto& [name, time] : t->op_times())
      ops[name] = {{"calls", time.calls}, {"seconds", time.seconds}};
    out.push_back({{"rank", t->rank()},
                   {"steps", t->steps().size()},
                   {"elapsed_seconds", elapsed_us / 1e6},
                   {"ops", ops}});
  }
  write_text_file(path, out.dump(1) + "\n", "profiler op times file", run_directory);
}

// The files finish() writes, with a process's rank or without.
const std::regex& output_name() {
  static const std::regex name(R"((trace|schedule_costs|op_times)(-rank\d+)?\.(json|yml))");
  return name;
}
}  // namespace

Profiler::Profiler(const Config& cfg, const MeshShape& mesh, std::int64_t start_step)
    : cfg_(cfg),
      first_(start_step + cfg.skip_first_n_steps_for_profiler),
      end_(first_ + cfg.profiler_steps) {
  for (int rank = 0; rank < mesh.ranks(); ++rank) {
    traces_.emplace_back(rank, RankPlace::of(rank, mesh).batch_part());
  }
  // Before step 1, not after the run: a symlink, FIFO or directory where a trace goes is refused
  // when finish() opens it (host/io/files.h), but only after every step was trained.
  std::error_code ec;
  if (cfg.profiler_steps <= 0 || !std::filesystem::is_directory(cfg.run_directory(), ec)) return;
  for (const auto& entry : std::filesystem::directory_iterator(cfg.run_directory(), ec)) {
    if (std::regex_match(entry.path().filename().string(), output_name())) {
      check_output_path(entry.path(), "profiler output");
    }
  }
}

StepTrace* Profiler::trace(int rank, std::int64_t step) {
  return step >= first_ && step < end_ ? &traces_[std::size_t(rank)] : nullptr;
}

void Profiler::finish(const schedule::Program& program, const Communicator* process_world,
                      TrainResult& result) const {
  if (cfg_.profiler_steps <= 0) return;
  std::vector<const StepTrace*> ranks;
  for (const StepTrace& t : traces_) {
    if (!t.steps().empty()) ranks.push_back(&t);
  }
  if (ranks.empty()) {
    spdlog::warn(
        "profiler_steps={}: no step was profiled (the run had fewer than "
        "skip_first_n_steps_for_profiler={} steps after its start)",
        cfg_.profiler_steps, cfg_.skip_first_n_steps_for_profiler);
    return;
  }
  const std::filesystem::path dir(cfg_.run_directory());
  auto per_process = [&](const char* stem, const char* extension) {
    return (dir / (process_world
                       ? fmt::format("{}-rank{}.{}", stem, process_world->rank(), extension)
                       : fmt::format("{}.{}", stem, extension)))
        .string();
  };
  const std::string path = per_process("trace", "json");
  const schedule::StageLayers layers = stage_layers(cfg_);
  const CalibratedCosts measured_costs = calibrate_costs(
      ranks, layers, cfg_.schedule_cost_head, int(cfg_.model.num_layers - layers.layers()),
      parse_remat_policy(cfg_.remat_policy) == RematPolicy::Full);
  const schedule::Costs calibrated =
      calibrated_schedule_costs(measured_costs, layers, schedule_costs(cfg_, layers));
  const TracedPredictions predicted =
      predict_traced_steps(ranks, program, calibrated, measured_costs.handoffs);
  write_text_file(path, step_trace_json(ranks, program, predicted.mean_cost), "profiler trace",
                  dir);
  const MeasuredSchedule measured = measure_schedule(ranks);
  result.measured_bubble = measured.bubble;
  result.measured_span_ms = measured.span_us / 1e3;
  result.exposed_gather_ms = measured.exposed_gather_us / 1e3;
  result.exchange_ms = measured.exchange_us / 1e3;
  result.exposed_exchange_ms = measured.exposed_exchange_us / 1e3;
  result.calibrated_exchange_ms = measured_costs.exchange / 1e3;
  result.predicted_bubble = predicted.mean_cost.bubble_fraction;
  result.predicted_span_ms = predicted.mean_cost.step_time / 1e3;
  result.spread_span_ms = predicted.spread.span_us / 1e3;
  result.spread_bubble = predicted.spread.bubble;
  result.replayed_span_ms = predicted.replayed.span_us / 1e3;
  result.replayed_bubble = predicted.replayed.bubble;
  result.trace_path = path;
  // The measured costs, for `carousel schedule` / the planner (schedule_costs_file=...).
  const auto& steps = ranks.front()->steps();
  result.costs_path = per_process("schedule_costs", "yml");
  write_text_file(
      result.costs_path,
      schedule_costs_yaml(
          measured_costs,
          fmt::format("{} on {}, {}, S={} R={} M={}, steps {}-{}", cfg_.model_name, cfg_.device,
                      cfg_.pipeline_schedule, program.layout.ranks, program.layout.repeats,
                      program.layout.microbatches, steps.front().step + 1, steps.back().step + 1)) +
          plan::measured_on_yaml(cfg_, measured_costs.measured_head),  // for carousel plan
      "measured costs file", dir);
  spdlog::info(
      "trace of steps {}-{}: {} (chrome://tracing or ui.perfetto.dev); measured bubble "
      "{:.1f} %, predicted {:.1f} % (cost model calibrated from these steps; {:.1f} % with the "
      "spread of their durations), replayed {:.1f} % (these steps' own durations through the "
      "schedule)",
      steps.front().step + 1, steps.back().step + 1, path, 100 * result.measured_bubble,
      100 * result.predicted_bubble, 100 * result.spread_bubble, 100 * result.replayed_bubble);
  if (process_world && process_world->size() > 1) {  // one trace per process: say how to join them
    spdlog::info(
        "each of the {} processes wrote its ranks' trace-rank<r>.json; one timeline of all: "
        "python3 scripts/merge_traces.py {}/trace-rank*.json -o {}/trace-merged.json",
        process_world->size(), dir.string(), dir.string());
  }
  if (measured.exchange_us > 0) {
    spdlog::info(
        "expert exchanges: {:.2f} ms per rank and step in flight; compute waited {:.2f} ms for "
        "them (their exposed part, with each waiting thread's wake-up after a completion, so it "
        "can exceed the time in flight on a loaded machine); span {:.1f} ms measured, {:.1f} ms "
        "predicted",
        result.exchange_ms, result.exposed_exchange_ms, result.measured_span_ms,
        result.predicted_span_ms);
  }
  log_op_times(ranks, per_process("op_times", "json"), dir);
}

}  // namespace carousel
