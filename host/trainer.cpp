// trainer.cpp — the training loop: mesh checks, resume or init, steps, reports, checkpoints.
#include "host/trainer.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <set>

#include "compute/cpu_backend.h"
#include "host/checkpoint.h"
#include "host/cost_calibration.h"
#include "host/data.h"
#include "host/device_peak.h"
#include "host/fault_injection.h"
#include "host/files.h"
#include "host/flight_recorder.h"
#include "host/mesh.h"
#include "host/plan/plan_costs.h"
#include "host/rank_executor.h"
#include "host/run_name.h"
#include "host/schedule_config.h"
#include "host/sharded_checkpoint.h"
#include "host/sharded_params.h"
#include "host/step_report.h"
#include "host/step_trace.h"
#include "host/stop_signals.h"

namespace carousel {

namespace {

// After a rank fails, how long the other rank threads get to come back before the process
// reports and exits (their communicator waits end at once; only a computation can hold them).
constexpr double kStuckRankGraceSeconds = 5;

// Mesh rules that depend on more than one key, and the process count of an mpirun job.
void check_mesh(const Config& cfg, const MeshShape& mesh, const Communicator* process_world) {
  CAROUSEL_CHECK(cfg.model.is_llama(),
                 "carousel train runs decoder_block=llama; the simple block is for pipeline "
                 "equivalence tests");
  cfg.check_microbatch_split();
  const int fsdp = mesh.fsdp, data = mesh.data, ranks = mesh.ranks();
  CAROUSEL_CHECK(!process_world || process_world->size() == ranks,
                 "mpirun started {} processes but the config has D x S x F = {} x {} x {} = {} "
                 "devices (ici_data_parallelism x ici_pipeline_parallelism x "
                 "ici_fsdp_parallelism); start {} processes (mpirun -np {}) or change the mesh",
                 process_world ? process_world->size() : 0, data, mesh.stages, fsdp, ranks, ranks,
                 ranks);
}

void log_plan(const Config& cfg, const MeshShape& mesh, const schedule::Program& program,
              const DataLoader& data, const Communicator* process_world) {
  const char* devices = runs_on_gpus(cfg) ? "GPU" : "CPU";
  if (mesh.ranks() == 1) {
    spdlog::info("one {} device: the whole model as one stage, {} microbatch(es) in turn", devices,
                 program.layout.microbatches);
  } else {
    spdlog::info(
        "pipeline: {} schedule, D={} replicas x S={} stages x F={} FSDP = {} logical {} devices "
        "({}), R={} repeats, M={} microbatches{}; program validated and deadlock-free",
        cfg.pipeline_schedule, mesh.data, mesh.stages, mesh.fsdp, mesh.ranks(), devices,
        process_world ? "one process each" : "threads of this process", program.layout.repeats,
        program.layout.microbatches,
        mesh.fsdp > 1 ? fmt::format(", weight slots {}", cfg.weight_slots()) : std::string());
  }
  spdlog::info("model: {} parameters; data: {}; batch {} x {} tokens", parameter_count(cfg.model),
               data.describe(), cfg.global_batch(), cfg.model.max_target_length);
}

// Every rank must run the same config, program and build: under mpirun a process started with
// other arguments or another binary would train something else, or wait forever for a
// collective the others never issue. Each rank hashes what it will run (FNV-1a over the config
// table, the program text and the build stamp) and the hashes are compared before step 1.
void check_ranks_agree(Communicator& world, Backend& be, const Config& cfg,
                       const schedule::Program& program) {
  std::string identity = schedule::to_text(program) + "\nbuilt " __DATE__ " " __TIME__ "\n";
  for (const auto& key : config_keys()) identity += key.name + "=" + key.get(cfg) + "\n";
  std::uint64_t hash = 1469598103934665603ull;
  for (const unsigned char byte : identity) hash = (hash ^ byte) * 1099511628211ull;
  const std::vector<std::int32_t> mine = {std::int32_t(hash >> 32), std::int32_t(hash)};
  Tensor all = be.empty({2 * world.size()}, DType::I32);
  world.all_gather(be.from_host(mine, {2}), all).wait();
  const auto hashes = be.to_host<std::int32_t>(all);
  std::vector<int> differ;
  for (int r = 1; r < world.size(); ++r) {
    if (hashes[2 * r] != hashes[0] || hashes[2 * r + 1] != hashes[1]) differ.push_back(r);
  }
  CAROUSEL_CHECK(differ.empty(),
                 "rank(s) {} run a different config, schedule or build than rank 0 (hashes of "
                 "config keys, program and build stamp differ); start every process of the job "
                 "with the same carousel binary and the same arguments",
                 fmt::join(differ, ", "));
}

// Resuming a run directory whose checkpoint was saved with another config: the model must be the
// same (a clear error, before any tensor is read); another mesh or schedule is fine (checkpoints
// are layout-free) and said; other differences (learning rate, data, ...) are warned about, so
// resuming an unrelated run by accident does not go unnoticed. Steps, logging, outputs and
// timeouts may change freely.
void compare_with_checkpoint(const Config& cfg, const std::string& dir) {
  const auto saved = checkpoint_config(dir);
  static const std::set<std::string> free = {"steps",
                                             "log_period",
                                             "metrics_file",
                                             "log_level",
                                             "profiler_steps",
                                             "skip_first_n_steps_for_profiler",
                                             "run_name",
                                             "base_output_directory",
                                             "collective_timeout_seconds",
                                             "checkpoint_period",
                                             "enable_checkpointing",
                                             "load_parameters_path"};
  std::vector<std::string> model, layout, other;
  for (const auto& key : config_keys()) {
    const auto it = saved.find(key.name);
    const std::string now = key.get(cfg);
    // The schedule_cost_* keys only feed predictions, never the arithmetic.
    const bool prediction_only = key.name.rfind("schedule_cost", 0) == 0;
    if (it == saved.end() || it->second == now || free.count(key.name) || prediction_only) continue;
    const std::string change = fmt::format("{}={} (saved: {})", key.name, now, it->second);
    const bool mesh =
        key.name.rfind("ici_", 0) == 0 || key.name.find("pipeline") != std::string::npos ||
        key.name == "shard_optimizer_over_data" || key.name == "per_device_batch_size";
    (key.model_key ? model : mesh ? layout : other).push_back(change);
  }
  CAROUSEL_CHECK(model.empty(),
                 "the run directory's checkpoint '{}' holds another model: {}; a resumed run keeps "
                 "its model. Use another run_name for a new run (load_parameters_path starts one "
                 "from these weights when the shapes agree)",
                 dir, fmt::join(model, ", "));
  if (!layout.empty()) {
    spdlog::info("resuming on another layout ({}): checkpoints are layout-free",
                 fmt::join(layout, ", "));
  }
  if (!other.empty()) {
    spdlog::warn("resuming '{}' with a config that differs from the one it was saved with: {}", dir,
                 fmt::join(other, ", "));
  }
}

// Each rank's end-of-run figures, known to every process.
struct RankFigures {
  std::vector<double> peak_bytes, all_gathers;
  std::vector<std::string> device_names;  // with processes, only this process's own is known
};

// Whether any rank was asked to stop (a signal may reach the processes of a job, or be seen by
// the rank threads of one process, at different steps): a sum over all ranks, so every rank
// decides the same. It is also the end-of-step barrier.
bool agree_to_stop(Communicator& world, Backend& be, bool asked) {
  Tensor flag = be.from_host(std::vector<std::int32_t>{asked ? 1 : 0}, {1});
  world.all_reduce(flag, flag, ReduceOp::Sum).wait();
  return be.to_host<std::int32_t>(flag)[0] > 0;
}

void share_figures(Communicator& world, int rank, RankFigures& figures) {
  CpuBackend be(rank);
  for (std::vector<double>* v : {&figures.peak_bytes, &figures.all_gathers}) {
    Tensor all = be.zeros({world.size()}, DType::F64);
    world.all_gather(be.from_host(std::vector<double>{(*v)[rank]}, {1}), all).wait();
    *v = be.to_host<double>(all);
  }
}

// The measured trace of the profiled steps with the predicted schedule beside it: one file for
// the ranks of this process (trace.json, or trace-rank<r>.json for a process of an mpirun job).
void write_trace(const Config& cfg, const std::vector<StepTrace>& traces,
                 const schedule::Program& program, const Communicator* process_world,
                 TrainResult& result) {
  std::vector<const StepTrace*> ranks;
  for (const StepTrace& t : traces) {
    if (!t.steps().empty()) ranks.push_back(&t);
  }
  if (ranks.empty()) {
    spdlog::warn(
        "profiler_steps={}: no step was profiled (the run had fewer than "
        "skip_first_n_steps_for_profiler={} steps after its start)",
        cfg.profiler_steps, cfg.skip_first_n_steps_for_profiler);
    return;
  }
  const std::string name =
      process_world ? fmt::format("trace-rank{}.json", process_world->rank()) : "trace.json";
  const std::string path = (std::filesystem::path(cfg.run_directory()) / name).string();
  const schedule::StageLayers layers = stage_layers(cfg);
  const CalibratedCosts measured_costs = calibrate_costs(ranks, layers, cfg.schedule_cost_head);
  const schedule::Costs calibrated =
      calibrated_schedule_costs(measured_costs, layers, schedule_costs(cfg, layers));
  const TracedPredictions predicted =
      predict_traced_steps(ranks, program, calibrated, measured_costs.handoffs);
  write_text_file(path, step_trace_json(ranks, program, predicted.mean_cost));
  const MeasuredSchedule measured = measure_schedule(ranks);
  result.measured_bubble = measured.bubble;
  result.measured_span_ms = measured.span_us / 1e3;
  result.exposed_gather_ms = measured.exposed_gather_us / 1e3;
  result.predicted_bubble = predicted.mean_cost.bubble_fraction;
  result.predicted_span_ms = predicted.mean_cost.step_time / 1e3;
  result.spread_span_ms = predicted.spread.span_us / 1e3;
  result.spread_bubble = predicted.spread.bubble;
  result.replayed_span_ms = predicted.replayed.span_us / 1e3;
  result.replayed_bubble = predicted.replayed.bubble;
  result.trace_path = path;
  // The measured costs, for `carousel schedule` / the planner (schedule_costs_file=...).
  const std::string costs_path =
      (std::filesystem::path(cfg.run_directory()) /
       (process_world ? fmt::format("schedule_costs-rank{}.yml", process_world->rank())
                      : "schedule_costs.yml"))
          .string();
  write_text_file(
      costs_path,
      schedule_costs_yaml(
          measured_costs,
          fmt::format("{} on {}, {}, S={} R={} M={}, steps {}-{}", cfg.model_name, cfg.device,
                      cfg.pipeline_schedule, program.layout.ranks, program.layout.repeats,
                      program.layout.microbatches, ranks.front()->steps().front().step + 1,
                      ranks.front()->steps().back().step + 1)) +
          plan::measured_on_yaml(cfg, measured_costs.measured_head));  // for carousel plan
  result.costs_path = costs_path;
  const auto& steps = ranks.front()->steps();
  spdlog::info(
      "trace of steps {}-{}: {} (chrome://tracing or ui.perfetto.dev); measured bubble "
      "{:.1f} %, predicted {:.1f} % (cost model calibrated from these steps; {:.1f} % with the "
      "spread of their durations), replayed {:.1f} % (these steps' own durations through the "
      "schedule)",
      steps.front().step + 1, steps.back().step + 1, path, 100 * result.measured_bubble,
      100 * result.predicted_bubble, 100 * result.spread_bubble, 100 * result.replayed_bubble);
}

// Where the run starts: the newest usable checkpoint of the run directory (its config compared
// first), else load_parameters_path's weights, else the initial values (nullopt). Sets the
// result's start step and skip count.
std::optional<CheckpointContents> starting_point(const Config& cfg, CpuBackend& host,
                                                 const CheckpointContents& whole,
                                                 TrainResult& result) {
  std::optional<CheckpointContents> start_from;
  if (const auto dir = cfg.enable_checkpointing ? latest_checkpoint(cfg) : std::nullopt) {
    compare_with_checkpoint(cfg, *dir);
    const TrainingState state = load_checkpoint(host, *dir, whole);
    result.start_step = state.step;
    result.skipped_steps = state.skipped_steps;
    start_from = whole;
    spdlog::info("resuming from {} at step {}", *dir, result.start_step);
  } else if (!cfg.load_parameters_path.empty()) {
    load_parameters(host, cfg.model, cfg.load_parameters_path, *whole.params);
    start_from = CheckpointContents{whole.params, nullptr, nullptr};
    spdlog::info("parameters loaded from {}", cfg.load_parameters_path);
  }
  CAROUSEL_CHECK(result.start_step <= cfg.steps,
                 "the run directory's checkpoint is at step {} but steps={}; raise steps to "
                 "continue training",
                 result.start_step, cfg.steps);
  return start_from;
}

// One line per rank (device, place, peak memory, gathers) and the result's summary of them.
void report_figures(const MeshShape& mesh, const RankFigures& figures, TrainResult& result) {
  for (int rank = 0; rank < mesh.ranks(); ++rank) {
    const RankPlace place = RankPlace::of(rank, mesh);
    const std::string& name = figures.device_names[rank];
    spdlog::info(
        "rank {} {}(data rank {}, stage rank {}, fsdp rank {}): peak memory {}, {} weight "
        "all-gathers",
        rank, name.empty() ? "" : "on " + name + " ", place.data_rank, place.stage_rank,
        place.fsdp_rank, format_bytes(std::size_t(figures.peak_bytes[rank])),
        std::int64_t(figures.all_gathers[rank]));
    result.peak_device_bytes =
        std::max(result.peak_device_bytes, std::size_t(figures.peak_bytes[rank]));
    result.all_gathers_per_device.push_back(std::int64_t(figures.all_gathers[rank]));
  }
}

}  // namespace

TrainResult train(const Config& requested, Communicator* process_world) {
  Config cfg = requested;
  if (resolve_run_name(cfg, process_world)) log_fresh_run_name(cfg);
  const MeshShape mesh = MeshShape::of(cfg);
  check_mesh(cfg, mesh, process_world);
  const schedule::Program program = lowered_program(cfg);
  const MachineView machine = this_machine(process_world);
  const TransportChoice transport =
      process_world ? agree_on_transport(cfg, mesh.ranks(), machine, *process_world)
                    : choose_transport(cfg, mesh.ranks(), machine);
  // The tokenizer and the data, read once per process and shared by its ranks (reading the
  // data is const).
  const std::optional<TokenizerInfo> tokenizer = read_run_tokenizer(cfg);
  const std::unique_ptr<DataLoader> data = make_data_loader(cfg);
  const std::unique_ptr<DataLoader> eval_data =
      cfg.eval_interval > 0 ? make_eval_data_loader(cfg) : nullptr;
  const std::int64_t eval_count = eval_data ? eval_batches(cfg, *eval_data) : 0;
  log_plan(cfg, mesh, program, *data, process_world);
  spdlog::info("communication: {}", transport.reason);

  // Whole-model parameters and moments on the host: checkpoints are written from and read into
  // these, so every layout writes the files of the single-device run and reads them back.
  CpuBackend host(mesh.ranks());
  const auto specs = param_table(cfg.model);
  const ParamSet whole_params = ParamSet::allocate(host, specs, DType::F32);
  const ParamSet whole_m = ParamSet::allocate(host, specs, DType::F32);
  const ParamSet whole_v = ParamSet::allocate(host, specs, DType::F32);
  const CheckpointContents whole{&whole_params, &whole_m, &whole_v};
  // Outputs are checked before step 1 in every process (an unwritable directory or metrics
  // file would otherwise surface only after the first steps' work); leftover partial saves are
  // cleaned first, so the checkpoint to resume from is chosen among complete ones.
  check_outputs_writable(cfg);
  TrainResult result;
  result.run_directory = cfg.run_directory();
  const std::optional<CheckpointContents> start_from = starting_point(cfg, host, whole, result);

  const int processes = process_world ? process_world->size() : 1;
  std::optional<StepReporter> reporter;  // rank 0 reports
  if (!process_world || process_world->rank() == 0) {
    reporter.emplace(cfg);
    // Before the ranks start, so no rank computes on the cores the CPU GEMM is timed on.
    reporter->set_peak_flops(run_peak_flops(cfg, host, mesh.ranks(), process_world == nullptr,
                                            rank_threads(mesh.ranks(), process_world)));
  }
  RankFigures figures{std::vector<double>(mesh.ranks()), std::vector<double>(mesh.ranks()),
                      std::vector<std::string>(mesh.ranks())};
  std::vector<FlightRecorder> recorders(mesh.ranks());  // this process's ranks' last actions
  std::vector<StepTrace> traces(mesh.ranks());          // profiled steps (profiler_steps)
  const std::int64_t first_profiled = result.start_step + cfg.skip_first_n_steps_for_profiler;
  auto profiled = [&](std::int64_t step) {
    return step >= first_profiled && step < first_profiled + cfg.profiler_steps;
  };
  const StopSignals stop_signals;  // SIGTERM / SIGINT: finish the step, save, exit 0

  auto rank_main = [&](int rank, Backend& be, Communicator& world, Communicator& host_world) {
    const RankPlace place = RankPlace::of(rank, mesh);
    FlightRecorder& recorder = recorders[rank];
    traces[rank] = StepTrace(rank, place.data_rank * mesh.fsdp + place.fsdp_rank);
    check_ranks_agree(world, be, cfg, program);
    RankCommunicators comms =
        split_communicators(world, place, program.layout, cfg.model.logits_via_embedding);
    ShardedParams params(cfg, program.layout, place, be, comms);
    RankExecutor executor(cfg, program, place, be, comms, params, *data, recorder);
    if (start_from) params.exchange(host, *start_from, /*to_whole=*/false);
    std::int64_t skipped = result.skipped_steps;
    // Held-out evaluation every eval_interval steps (and after the last step).
    auto evaluate = [&] {  // the mean token loss over the eval batches, the same on every rank
      Tensor t = be.from_host(std::vector<double>{executor.evaluate(*eval_data, eval_count)}, {1});
      world.all_reduce(t, t, ReduceOp::Sum).wait();
      return be.to_host<double>(t)[0] / double(eval_count);
    };
    for (std::int64_t step = result.start_step; step < cfg.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      const StepOutcome outcome =
          executor.step(step, step - skipped, profiled(step) ? &traces[rank] : nullptr);
      be.synchronize();
      const double step_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::optional<double> eval_loss;
      if (eval_data && ((step + 1) % cfg.eval_interval == 0 || step + 1 == cfg.steps)) {
        recorder.note(step, "evaluation");
        eval_loss = evaluate();
        recorder.complete();
      }
      if (outcome.skipped) ++skipped;
      maybe_raise_signal(rank, process_world || rank == 0, step);  // a test's fault
      recorder.note(step, "end-of-step agreement");
      const bool stop = agree_to_stop(world, be, StopSignals::received() != 0);
      recorder.complete();
      // The step's metrics first: a crash during the save must not lose the record of a step
      // whose checkpoint may already be complete.
      if (rank == 0) {
        result.steps.push_back(reporter->report(step, outcome.loss, outcome.grad_norm, step_seconds,
                                                eval_loss, be.allocator().stats().peak_bytes));
        if (outcome.skipped) {
          spdlog::warn(
              "step {}: loss {} / gradient norm {} is not finite; update skipped "
              "(skip_step_on_nonfinite; {} skipped in this run so far)",
              step + 1, outcome.loss, outcome.grad_norm, skipped);
        }
      }
      if (checkpoint_due(cfg, step) || (stop && cfg.enable_checkpointing)) {
        recorder.note(step, "checkpoint");
        CAROUSEL_CHECK(params.weights_finite(),
                       "step {}: a parameter is not finite after the update; no checkpoint is "
                       "written (the previous ones are kept)",
                       step + 1);
        const auto written = params.exchange(host, whole, /*to_whole=*/true);
        world.barrier().wait();
        if (processes > 1) {
          collect_on_rank_zero(host_world, host, written,
                               {whole.params, whole.adam_m, whole.adam_v});
        }
        if (rank == 0) {
          spdlog::info("checkpoint saved: {}",
                       save_checkpoint(host, cfg, whole, {step + 1, skipped},
                                       tokenizer ? &*tokenizer : nullptr));
        }
        world.barrier().wait();
        recorder.complete();
      }
      if (stop) {
        if (rank == 0) result.stopped_by_signal = true;
        break;
      }
    }
    if (rank == 0) result.skipped_steps = skipped;
    figures.peak_bytes[rank] = double(be.allocator().stats().peak_bytes);
    figures.all_gathers[rank] = double(params.all_gathers());
    figures.device_names[rank] = be.allocator().name();
    if (processes > 1) share_figures(host_world, rank, figures);
  };
  // Where every rank of this process is: after a failure, the stuck edge of a stall can be read
  // off (one rank in a RECV, its peer still computing or waiting elsewhere).
  auto report_ranks = [&] {
    for (int rank = 0; rank < mesh.ranks(); ++rank) {
      if (process_world && rank != process_world->rank()) continue;
      spdlog::error("rank {}: {}", rank, recorders[rank].report());
    }
  };
  const StuckRanks stuck{kStuckRankGraceSeconds,
                         [&](const std::vector<int>& running, const std::string& failure) {
                           spdlog::error("{}", failure);
                           spdlog::error(
                               "rank(s) {} did not stop within {} s of that failure (stuck in a "
                               "computation); where every rank is:",
                               fmt::join(running, ", "), kStuckRankGraceSeconds);
                           report_ranks();
                           spdlog::error("exiting with status 2");
                           spdlog::default_logger()->flush();
                         }};
  try {
    launch_ranks(cfg, mesh.ranks(), transport.transport, process_world, rank_main, stuck);
  } catch (const NonFiniteError&) {
    throw;  // every rank stopped at the same point, by design
  } catch (const std::exception&) {
    report_ranks();
    throw;
  }
  if (cfg.profiler_steps > 0) write_trace(cfg, traces, program, process_world, result);
  if (result.stopped_by_signal) {
    spdlog::warn("stopped by {} after step {} of {}{}; run the same command to resume",
                 signal_name(StopSignals::received()),
                 result.start_step + std::int64_t(result.steps.size()), cfg.steps,
                 cfg.enable_checkpointing ? ", checkpoint saved"
                                          : " (enable_checkpointing=false: nothing saved)");
  }
  report_figures(mesh, figures, result);
  return result;
}

}  // namespace carousel
