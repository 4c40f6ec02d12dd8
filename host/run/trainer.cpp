// trainer.cpp — train(): the components of a run, sequenced; run_rank(): one rank's loop;
// train_rank(): that loop, a device out of memory reported with the rank, the tensor and the
// planner's estimate.
#include "host/run/trainer.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "compute/cpu_backend.h"
#include "host/config/run_name.h"
#include "host/config/schedule_config.h"
#include "host/data/data.h"
#include "host/runtime/rank_executor.h"
#include "host/plan/plan_memory.h"
#include "host/run/checkpointer.h"
#include "host/run/device_peak.h"
#include "host/run/evaluator.h"
#include "host/run/guards/rank_monitor.h"
#include "host/run/guards/replica_check.h"
#include "host/run/guards/stop_agreement.h"
#include "host/run/profiler.h"
#include "host/run/run_setup.h"
#include "host/schedule/simulate.h"

namespace carousel {

namespace {

// The components of a run, shared by the ranks of this process.
struct Run {
  const Config& cfg;
  const RunSetup& plan;
  Checkpointer& checkpointer;
  const Evaluator& evaluator;
  Profiler& profiler;
  StopAgreement& stop;
  const ReplicaCheck& replicas;
  StepReporter* reporter;  // world rank 0's process only
  RankMonitor& monitor;
  TrainResult& result;                      // rank 0 writes it while the ranks run
  std::int64_t start_step, skipped_before;  // where the run starts (read by every rank)
};

// One rank, from its communicators to its last step: the same for threads and processes.
void run_rank(const Run& run, int rank, Backend& be, Communicator& world,
              Communicator& host_world) {
  const Config& cfg = run.cfg;
  const RankPlace place = RankPlace::of(rank, run.plan.mesh);
  FlightRecorder& recorder = run.monitor.recorder(rank);
  check_ranks_agree(world, be, cfg, run.plan.program);
  RankCommunicators comms = split_communicators(world, place, run.plan.program.layout, cfg.model);
  ShardedParams params(cfg, run.plan.program.layout, place, be, comms);
  RankExecutor executor(cfg, run.plan.program, place, be, comms, params, *run.plan.data, recorder);
  run.checkpointer.restore(params, executor);
  std::int64_t skipped = run.skipped_before;
  for (std::int64_t step = run.start_step; step < cfg.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const StepOutcome outcome = executor.step(step, step - skipped, run.profiler.trace(rank, step));
    be.synchronize();
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    const auto eval_loss = run.evaluator.after_step(step, executor, world, be, recorder);
    if (outcome.skipped) ++skipped;
    // World rank 0's process watches the metrics file it writes (removed with the run directory,
    // or replaced): the run stops and saves rather than lose every later record.
    const bool stop = run.stop.agree(step, rank, world, be, recorder,
                                     rank == 0 && run.reporter ? run.reporter->lost_output() : "");
    if (run.replicas.due(step, run.checkpointer.due(step, stop))) {
      run.replicas.verify(step, params, comms, place, be);  // before the record and the save
    }
    // The step's record first: a crash during the save must not lose the record of a step
    // whose checkpoint may already be complete.
    if (rank == 0) {
      run.result.steps.push_back(run.reporter->report(step, outcome, seconds.count(), eval_loss,
                                                      be.allocator().stats().peak_bytes, skipped));
    }
    if (run.checkpointer.due(step, stop)) {
      run.checkpointer.save(step, skipped, executor.router_bias(), rank, params, world, host_world,
                            recorder);
    }
    if (stop) break;
  }
  if (rank == 0) run.result.skipped_steps = skipped;
  run.monitor.record_end(rank, be, params, executor.graph_replays(), host_world);
}

// A rank's device out of memory, said with what to change: which rank, what was being allocated
// (the allocator's words), the planner's estimate for this config and rank — what `carousel plan`
// models: plan::device_memory with the simulated peak of stashed activations — and the keys that
// lower it. A bare "out of memory on cuda:0" says none of that.
[[noreturn]] void fail_out_of_memory(const Run& run, int rank, const OutOfMemoryError& oom) {
  const Config& cfg = run.cfg;
  const MeshShape& mesh = run.plan.mesh;
  const RankPlace place = RankPlace::of(rank, mesh);
  std::string where = fmt::format("stage rank {}, FSDP rank {}, data rank {}", place.stage_rank,
                                  place.fsdp_rank, place.data_rank);
  if (mesh.tensor > 1) where += fmt::format(", tensor rank {}", place.tensor_rank);
  if (mesh.context > 1) where += fmt::format(", context rank {}", place.context_rank);
  std::string estimate;
  try {  // the report must not hide the failure it reports
    const schedule::SimResult sim = schedule::simulate(run.plan.program, schedule_costs(cfg));
    const plan::MemoryBreakdown m = plan::device_memory(cfg, run.plan.program, place.stage_rank,
                                                        sim.peak_activations.at(place.stage_rank));
    const auto bytes = [](std::int64_t b) { return format_bytes(std::size_t(b)); };
    const std::size_t limit = oom.stats().limit_bytes;  // 0: not known (a GPU)
    std::string against;
    if (limit > 0 && std::size_t(m.total()) > limit) {
      against = fmt::format(", more than this device's {}", format_bytes(limit));
    } else if (limit > 0) {
      against = fmt::format(
          ", within this device's {}: the planner's model misses what this run allocated (worth "
          "reporting with this message)",
          format_bytes(limit));
    }
    estimate = fmt::format(
        "The planner estimates stage rank {}'s devices at <= {} for this config (weights {}, "
        "gradients {}, AdamW moments {}, FSDP weight slots {}, FSDP gradient buffers {}, stashed "
        "activations {}, working set <= {}){}",
        place.stage_rank, bytes(m.total()), bytes(m.weights), bytes(m.gradients),
        bytes(m.optimizer), bytes(m.weight_slots), bytes(m.gradient_buffers), bytes(m.activations),
        bytes(m.working_set), against);
  } catch (const std::exception& e) {
    estimate = fmt::format("The planner's estimate is not available: {}", e.what());
  }
  std::vector<std::string> changes = {
      "more ranks sharing the model (ici_fsdp_parallelism, ici_pipeline_parallelism, "
      "ici_tensor_parallelism)",
      "smaller microbatches (per_device_batch_size, num_pipeline_microbatches)"};
  if (cfg.remat_policy != "full") changes.emplace_back("remat_policy=full");
  if (cfg.dtype != "bfloat16") changes.emplace_back("dtype=bfloat16");
  throw Error(fmt::format(
      "rank {} ({}) is out of device memory: {}. {}. To need less per device: {}; `carousel plan "
      "--device-memory SIZE` lists meshes that fit",
      rank, where, oom.what(), estimate, fmt::join(changes, ", ")));
}

void train_rank(const Run& run, int rank, Backend& be, Communicator& world,
                Communicator& host_world) {
  try {
    run_rank(run, rank, be, world, host_world);
  } catch (const OutOfMemoryError& oom) {
    fail_out_of_memory(run, rank, oom);
  }
}

}  // namespace

TrainResult train(const Config& requested, Communicator* process_world) {
  Config cfg = requested;
  if (resolve_run_name(cfg, process_world)) log_fresh_run_name(cfg);
  resolve_eos_id(cfg);
  const RunSetup plan = set_up_run(cfg, process_world);
  TrainResult result;
  result.run_directory = cfg.run_directory();
  const int ranks = plan.mesh.ranks();
  const Evaluator evaluator(cfg, plan.eval_data.get(), plan.eval_batches);
  Checkpointer checkpointer(cfg, ranks, process_world, plan.tokenizer ? &*plan.tokenizer : nullptr,
                            result);
  std::unique_ptr<StepReporter> reporter;  // world rank 0 reports
  if (!process_world || process_world->rank() == 0) {
    reporter = std::make_unique<StepReporter>(cfg, result.start_step);
    // Before the ranks start, so no rank computes on the cores the CPU GEMM is timed on.
    CpuBackend scratch(ranks);
    reporter->set_peak_flops(run_peak_flops(cfg, scratch, ranks, process_world == nullptr,
                                            rank_threads(ranks, process_world)));
  }
  Profiler profiler(cfg, plan.mesh, result.start_step);
  RankMonitor monitor(plan.mesh, process_world);
  StopAgreement stop(process_world != nullptr,
                     reporter != nullptr);  // SIGTERM / SIGINT: finish the step, save, exit 0
  const ReplicaCheck replicas(cfg);
  const Run run{cfg,      plan,   checkpointer,      evaluator,
                profiler, stop,   replicas,          reporter.get(),
                monitor,  result, result.start_step, result.skipped_steps};
  try {
    launch_ranks(
        cfg, ranks, plan.transport.transport, process_world,
        [&](int rank, Backend& be, Communicator& world, Communicator& host_world) {
          train_rank(run, rank, be, world, host_world);
        },
        monitor.stuck_ranks());
  } catch (const NonFiniteError&) {
    throw;  // every rank stopped at the same point, by design
  } catch (const ReplicaMismatchError&) {
    throw;  // likewise
  } catch (const std::exception&) {
    monitor.report_ranks();
    throw;
  }
  checkpointer.finish();  // the last checkpoint is complete before the run returns
  profiler.finish(plan.program, process_world, result);
  stop.finish(cfg, result);
  monitor.report_figures(result);
  return result;
}

}  // namespace carousel
