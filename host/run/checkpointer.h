// checkpointer.h — the run's checkpoints: where a run starts, and the saves on their cadence.
//
// Checkpoints hold whole tensors under global names (host/io/checkpoint.h), so any layout resumes
// any other, bitwise when the layout is the same. Each tensor has one writing rank
// (ShardedParams::checkpoint_part): at a save every writing rank copies its tensors to the host
// and writes its own part of the checkpoint directory, in parallel, and world rank 0 finishes
// the directory once every part is on disk. No rank or process holds the whole model; the host
// copies exist only while a save is written. A resume opens the checkpoint's files once per
// process (headers) and each rank reads the tensors it holds, one at a time.
//
// async_checkpointing (the default): once the ranks have copied their tensors to the host, each
// writes its part on a thread of its own and the ranks go on training; the next save (or
// finish()) first waits for those writes — at most one checkpoint is in flight. A failed write
// is reported there, and said in the log at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <thread>

#include "collectives/communicator.h"
#include "host/config/config.h"
#include "host/io/checkpoint.h"
#include "host/runtime/sharded_params.h"
#include "host/reliability/flight_recorder.h"

namespace carousel {

class RankExecutor;
struct TrainResult;

class Checkpointer {
 public:
  // Checks the outputs are writable (and cleans leftover partial saves), then chooses where the
  // run starts: the newest usable checkpoint of the run directory (its config compared first,
  // ResumeClass by key), else load_parameters_path's weights, else the initial values. Sets
  // result.start_step and result.skipped_steps. `tokenizer` (may be null) must outlive this.
  Checkpointer(const Config& cfg, int ranks, Communicator* process_world,
               const TokenizerInfo* tokenizer, TrainResult& result);

  // Puts the starting point into this rank: the starting weights (and moments, when resuming)
  // into its shards and, resuming with routed_bias, the checkpoint's router biases
  // (TrainingState::router_bias) into its executor; nothing when the run starts from the
  // initial values.
  void restore(ShardedParams& params, RankExecutor& executor);

  // Whether a checkpoint is written after 0-based `step`: every checkpoint_period steps, at the
  // end, and when the ranks agreed to stop — only with enable_checkpointing.
  bool due(std::int64_t step, bool stopping) const;

  // After 0-based `step` when due(): every writing rank writes its part, world rank 0 finishes
  // the checkpoint with the training state (`router_bias`: RankExecutor::router_bias()).
  // Collective over the ranks (`host_world`: the same ranks over host memory, which numbers the
  // writing ranks).
  void save(std::int64_t step, std::int64_t skipped_steps,
            const std::vector<std::vector<double>>& router_bias, int rank, ShardedParams& params,
            Communicator& world, Communicator& host_world, FlightRecorder& recorder);

  // After the ranks stopped: waits for a write still in flight; throws if it failed.
  void finish();
  ~Checkpointer();  // waits too, reporting a failure in the log (never throws)
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

 private:
  // One rank's part of the checkpoint in flight.
  struct Writer {
    CheckpointPart part;       // its tensors, on the host until written
    std::thread thread;        // the write in flight (async_checkpointing)
    std::exception_ptr error;  // how it failed, rethrown by the next wait
    std::int64_t step = 0;     // the 0-based step whose checkpoint it writes
    TrainingState state;       // after that step (world rank 0 writes it)
    std::chrono::steady_clock::time_point started;  // when its save began (the log says how long)
  };
  // Writes rank `rank`'s part k of n; world rank 0 then finishes the checkpoint.
  void write(int rank, int k, int n);
  void wait_for_write(int rank);

  const Config& cfg_;
  const TokenizerInfo* tokenizer_;
  long owner_pid_;  // world rank 0's process: names the directory every part is written into
  std::optional<TensorFiles> start_;  // what restore() reads into the shards
  bool start_moments_ = false;        // resuming: the AdamW moments too
  // Resuming: the checkpoint's router biases, which restore() gives the rank's executor.
  std::vector<std::vector<double>> start_router_bias_;
  std::vector<Writer> writers_;  // by world rank (this process's ranks only are used)
};

}  // namespace carousel
