// checkpointer.cpp — the starting point of a run (resume, load_parameters_path or the initial
// values) and the saves on their cadence.
#include "host/run/checkpointer.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <numeric>
#include <utility>
#include <vector>

#include "compute/cpu_backend.h"
#include "host/io/huggingface/hf_architectures.h"
#include "host/runtime/optimizer.h"
#include "host/runtime/rank_executor.h"
#include "host/run/train_result.h"
#include "models/layer.h"

namespace carousel {

namespace {

// Resuming a run directory whose checkpoint was saved with another config: each changed key's
// ResumeClass (the key table's column) says what the change means. Another model is a clear
// error before any tensor is read; another layout is fine (checkpoints are layout-free) and
// said; another training setting (learning rate, data, ...) is warned about, so resuming an
// unrelated run by accident does not go unnoticed; run control may change freely.
void compare_with_checkpoint(const Config& cfg, const std::string& dir) {
  const auto saved = checkpoint_config(dir);
  std::vector<std::string> model, layout, training;
  for (const auto& key : config_keys()) {
    const auto it = saved.find(key.name);
    const std::string now = key.get(cfg);
    if (it == saved.end() || it->second == now) continue;
    const std::string change = fmt::format("{}={} (saved: {})", key.name, now, it->second);
    switch (key.resume) {
      case ResumeClass::Model:
        model.push_back(change);
        break;
      case ResumeClass::Layout:
        layout.push_back(change);
        break;
      case ResumeClass::Training:
        training.push_back(change);
        break;
      case ResumeClass::RunControl:
        break;
    }
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
  if (!training.empty()) {
    spdlog::warn("resuming '{}' with a config that differs from the one it was saved with: {}", dir,
                 fmt::join(training, ", "));
  }
}

// A resume that changes what the learning-rate schedule is computed from (steps, with
// learning_rate_schedule_steps following it, or the schedule's own keys) changes the rate of
// the steps still to run: said with the first step that differs, both rates there and, when
// only `steps` moved it, the key that keeps the saved schedule (before: silently).
void say_schedule_change(const Config& cfg, const std::string& dir, std::int64_t step) {
  Config saved = cfg;
  try {
    for (const auto& [name, value] : checkpoint_config(dir)) {
      for (const auto& key : config_keys()) {
        if (key.name == name) key.set(saved, value);
      }
    }
  } catch (const std::exception&) {
    return;  // an older checkpoint's value this build reads otherwise: nothing to compare
  }
  const std::int64_t last = std::min(cfg.steps, step + 1'000'000);  // the steps to run, bounded
  for (std::int64_t k = step; k < last; ++k) {
    const double now = learning_rate_at(cfg, k), then = learning_rate_at(saved, k);
    if (now == then) continue;
    const bool follows_steps =
        cfg.learning_rate_schedule_steps < 0 && saved.schedule_steps() != cfg.schedule_steps();
    spdlog::warn("resuming '{}' with another learning-rate schedule: from step {} the rate is {:.6g} "
                 "where the saved run's would be {:.6g}{}",
                 dir, k + 1, now, then,
                 follows_steps
                     ? fmt::format(" (learning_rate_schedule_steps follows steps={}; the saved "
                                   "run's schedule spans {} steps: set "
                                   "learning_rate_schedule_steps={} to keep it)",
                                   cfg.steps, saved.schedule_steps(), saved.schedule_steps())
                     : std::string());
    return;
  }
}

// World rank 0's pid on every process: it names the temporary directory of each checkpoint,
// which every process writes its parts into.
long leader_pid(Communicator* process_world) {
  const long pid = ::getpid();
  if (!process_world || process_world->size() == 1) return pid;
  CpuBackend host;
  const Tensor t = host.from_host(std::vector<std::int32_t>{std::int32_t(pid)}, {1});
  process_world->broadcast(t, t, /*root=*/0).wait();
  return host.to_host<std::int32_t>(t)[0];
}

}  // namespace

Checkpointer::Checkpointer(const Config& cfg, int ranks, Communicator* process_world,
                           const TokenizerInfo* tokenizer, TrainResult& result)
    : cfg_(cfg),
      tokenizer_(tokenizer),
      owner_pid_(leader_pid(process_world)),
      writers_(std::size_t(ranks)) {
  // Outputs are checked before step 1 in every process (an unwritable directory or metrics
  // file would otherwise surface only after the first steps' work); leftover partial saves are
  // cleaned first, so the checkpoint to resume from is chosen among complete ones.
  check_outputs_writable(cfg);
  if (cfg.enable_checkpointing && !hf_export_caveats(cfg.model).empty() &&
      (!process_world || process_world->rank() == 0)) {
    spdlog::warn("{}", hf_export_caveats(cfg.model));
  }
  if (const auto dir = cfg.enable_checkpointing ? latest_checkpoint(cfg) : std::nullopt) {
    compare_with_checkpoint(cfg, *dir);
    start_.emplace(open_checkpoint_tensors(*dir, param_table(cfg.model), /*moments=*/true,
                                           /*verified=*/true));  // by latest_checkpoint
    start_moments_ = true;
    const TrainingState state = read_training_state(*dir);
    result.start_step = state.step;
    result.skipped_steps = state.skipped_steps;
    if (cfg.model.routed_bias) {
      check_router_bias(cfg.model, state.router_bias,
                        fmt::format("checkpoint state '{}/state.json'", *dir));
    }
    start_router_bias_ = state.router_bias;
    spdlog::info("resuming from {} at step {}", *dir, result.start_step);
    say_schedule_change(cfg, *dir, result.start_step);
  } else if (!cfg.load_parameters_path.empty()) {
    start_.emplace(open_parameters(cfg.load_parameters_path, cfg.model));
    spdlog::info("parameters loaded from {}", cfg.load_parameters_path);
  }
  CAROUSEL_CHECK(result.start_step <= cfg.steps,
                 "the run directory's checkpoint is at step {} but steps={}; raise steps to "
                 "continue training",
                 result.start_step, cfg.steps);
}

void Checkpointer::restore(ShardedParams& params, RankExecutor& executor) {
  if (start_) params.restore(*start_, start_moments_);
  if (cfg_.model.routed_bias && !start_router_bias_.empty()) {
    executor.set_router_bias(start_router_bias_);
  }
}

bool Checkpointer::due(std::int64_t step, bool stopping) const {
  const bool periodic = cfg_.checkpoint_period > 0 && (step + 1) % cfg_.checkpoint_period == 0;
  return cfg_.enable_checkpointing && (periodic || step + 1 == cfg_.steps || stopping);
}

void Checkpointer::save(std::int64_t step, std::int64_t skipped_steps,
                        const std::vector<std::vector<double>>& router_bias, int rank,
                        ShardedParams& params, Communicator& world, Communicator& host_world,
                        FlightRecorder& recorder) {
  recorder.note(step, "checkpoint");
  const auto started = std::chrono::steady_clock::now();
  CAROUSEL_CHECK(params.weights_finite(),
                 "step {}: a parameter is not finite after the update; no checkpoint is written "
                 "(the previous ones are kept)",
                 step + 1);
  // The previous checkpoint's parts are written (rank 0: the whole checkpoint is finished)
  // before this one's directory is prepared and its tensors copied.
  wait_for_write(rank);
  if (rank == 0) begin_checkpoint(cfg_, step + 1, owner_pid_);
  world.barrier().wait();
  Writer& w = writers_.at(std::size_t(rank));
  w.part = params.checkpoint_part(/*moments=*/true);
  // Number the writing ranks: this rank writes part k of n.
  std::vector<std::int32_t> writes(std::size_t(world.size()), 0);
  writes[std::size_t(rank)] = w.part.empty() ? 0 : 1;
  CpuBackend host;
  const Tensor t = host.from_host(writes, {std::int64_t(writes.size())});
  host_world.all_reduce(t, t, ReduceOp::Sum).wait();
  writes = host.to_host<std::int32_t>(t);
  const int k = int(std::accumulate(writes.begin(), writes.begin() + rank, 0));
  const int n = int(std::accumulate(writes.begin(), writes.end(), 0));
  w.step = step;
  w.state = {step + 1, skipped_steps, router_bias};
  w.started = started;
  if (cfg_.async_checkpointing) {
    w.thread = std::thread([this, &w, rank, k, n, step] {
      try {
        write(rank, k, n);
      } catch (const std::exception& e) {  // said now; the run stops at the next wait
        spdlog::error("checkpoint {}: the background write failed: {}", step + 1, e.what());
        w.error = std::current_exception();
      } catch (...) {
        w.error = std::current_exception();
      }
    });
  } else {
    write(rank, k, n);
  }
  world.barrier().wait();
  recorder.complete();
}

void Checkpointer::write(int rank, int k, int n) {
  Writer& w = writers_.at(std::size_t(rank));
  const std::int64_t step = w.step;
  const std::string tmp = checkpoint_temp_dir(cfg_, step + 1, owner_pid_);
  if (!w.part.empty()) write_checkpoint_part(tmp, step + 1, k, n, w.part);
  w.part = {};  // the host copy is gone once on disk
  if (rank != 0) return;
  const std::string saved =
      finish_checkpoint(cfg_, tmp, n, w.state, tokenizer_, cfg_.collective_timeout_seconds);
  spdlog::info("checkpoint saved: {} ({} part{}, {:.2f} s{})", saved, n, n == 1 ? "" : "s",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - w.started).count(),
               cfg_.async_checkpointing ? " in the background" : "");
  prune_checkpoints(cfg_, step + 1);
}

void Checkpointer::wait_for_write(int rank) {
  Writer& w = writers_.at(std::size_t(rank));
  if (w.thread.joinable()) w.thread.join();
  if (!w.error) return;
  const std::exception_ptr error = std::exchange(w.error, nullptr);
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    fail("checkpoint {}: the background write failed: {}", w.step + 1, e.what());
  }
}

void Checkpointer::finish() {
  for (std::size_t rank = 0; rank < writers_.size(); ++rank) wait_for_write(int(rank));
}

Checkpointer::~Checkpointer() {
  for (auto& w : writers_) {
    if (w.thread.joinable()) w.thread.join();  // a failure was said by the writer
  }
}

}  // namespace carousel
