// checkpointer.cpp — the starting point of a run (resume, load_parameters_path or the initial
// values) and the saves on their cadence.
#include "host/run/checkpointer.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <utility>
#include <vector>

#include "host/parallel/sharded_checkpoint.h"
#include "host/run/train_result.h"

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

}  // namespace

Checkpointer::Checkpointer(const Config& cfg, int ranks, int processes,
                           const TokenizerInfo* tokenizer, TrainResult& result)
    : cfg_(cfg), processes_(processes), tokenizer_(tokenizer), host_(ranks) {
  const auto specs = param_table(cfg.model);
  params_ = ParamSet::allocate(host_, specs, DType::F32);
  adam_m_ = ParamSet::allocate(host_, specs, DType::F32);
  adam_v_ = ParamSet::allocate(host_, specs, DType::F32);
  // Outputs are checked before step 1 in every process (an unwritable directory or metrics
  // file would otherwise surface only after the first steps' work); leftover partial saves are
  // cleaned first, so the checkpoint to resume from is chosen among complete ones.
  check_outputs_writable(cfg);
  const CheckpointContents whole{&params_, &adam_m_, &adam_v_};
  if (const auto dir = cfg.enable_checkpointing ? latest_checkpoint(cfg) : std::nullopt) {
    compare_with_checkpoint(cfg, *dir);
    const TrainingState state = load_checkpoint(host_, *dir, whole);
    result.start_step = state.step;
    result.skipped_steps = state.skipped_steps;
    start_ = whole;
    spdlog::info("resuming from {} at step {}", *dir, result.start_step);
  } else if (!cfg.load_parameters_path.empty()) {
    load_parameters(host_, cfg.model, cfg.load_parameters_path, params_);
    start_ = CheckpointContents{&params_, nullptr, nullptr};
    spdlog::info("parameters loaded from {}", cfg.load_parameters_path);
  }
  CAROUSEL_CHECK(result.start_step <= cfg.steps,
                 "the run directory's checkpoint is at step {} but steps={}; raise steps to "
                 "continue training",
                 result.start_step, cfg.steps);
}

void Checkpointer::restore(ShardedParams& params) {
  if (start_) params.exchange(host_, *start_, /*to_whole=*/false);
}

bool Checkpointer::due(std::int64_t step, bool stopping) const {
  const bool periodic = cfg_.checkpoint_period > 0 && (step + 1) % cfg_.checkpoint_period == 0;
  return cfg_.enable_checkpointing && (periodic || step + 1 == cfg_.steps || stopping);
}

void Checkpointer::save(std::int64_t step, std::int64_t skipped_steps, int rank,
                        ShardedParams& params, Communicator& world, Communicator& host_world,
                        FlightRecorder& recorder) {
  recorder.note(step, "checkpoint");
  CAROUSEL_CHECK(params.weights_finite(),
                 "step {}: a parameter is not finite after the update; no checkpoint is written "
                 "(the previous ones are kept)",
                 step + 1);
  if (rank == 0) wait_for_write();  // the host sets are free again (or its failure is thrown)
  world.barrier().wait();
  const CheckpointContents whole{&params_, &adam_m_, &adam_v_};
  const auto written = params.exchange(host_, whole, /*to_whole=*/true);
  world.barrier().wait();
  if (processes_ > 1)
    collect_on_rank_zero(host_world, host_, written, {&params_, &adam_m_, &adam_v_});
  if (rank == 0) {
    if (cfg_.async_checkpointing) {
      write_step_ = step;
      writer_ = std::thread([this, step, skipped_steps] {
        try {
          write(step, skipped_steps);
        } catch (const std::exception& e) {  // said now; the run stops at the next wait
          spdlog::error("checkpoint {}: the background write failed: {}", step + 1, e.what());
          write_error_ = std::current_exception();
        } catch (...) {
          write_error_ = std::current_exception();
        }
      });
    } else {
      write(step, skipped_steps);
    }
  }
  world.barrier().wait();
  recorder.complete();
}

void Checkpointer::write(std::int64_t step, std::int64_t skipped_steps) {
  const CheckpointContents whole{&params_, &adam_m_, &adam_v_};
  spdlog::info("checkpoint saved: {}",
               save_checkpoint(host_, cfg_, whole, {step + 1, skipped_steps}, tokenizer_));
  prune_checkpoints(cfg_, step + 1);
}

void Checkpointer::wait_for_write() {
  if (writer_.joinable()) writer_.join();
  if (!write_error_) return;
  const std::exception_ptr error = std::exchange(write_error_, nullptr);
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    fail("checkpoint {}: the background write failed: {}", write_step_ + 1, e.what());
  }
}

void Checkpointer::finish() { wait_for_write(); }

Checkpointer::~Checkpointer() {
  try {
    wait_for_write();
  } catch (...) {  // already said by the writer
  }
}

}  // namespace carousel
