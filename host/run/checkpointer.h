// checkpointer.h — the run's checkpoints: where a run starts, and the saves on their cadence.
//
// Checkpoints are the whole-model files a single-device run writes (host/io/checkpoint.h), so any
// layout resumes any other, bitwise when the layout is the same. The checkpointer holds the
// whole-model parameters and AdamW moments on the host (one set per process): each rank's
// ShardedParams writes its part into them before a save and reads its part out of them at the
// start. Constructed once per process before the ranks start; its per-rank calls are collective
// over the ranks.
//
// async_checkpointing (the default): once the ranks have copied their parts into the host sets,
// world rank 0 writes the files on a thread of its own and the ranks go on training; the next
// save (or finish()) first waits for that write — at most one is in flight, and the host sets
// are never refilled while being written. A failed write is reported there: by the next save's
// rank 0 or by finish().
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <thread>

#include "collectives/communicator.h"
#include "compute/cpu_backend.h"
#include "host/config/config.h"
#include "host/io/checkpoint.h"
#include "host/parallel/sharded_params.h"
#include "host/reliability/flight_recorder.h"

namespace carousel {

struct TrainResult;

class Checkpointer {
 public:
  // Checks the outputs are writable (and cleans leftover partial saves), then chooses where the
  // run starts: the newest usable checkpoint of the run directory (its config compared first,
  // ResumeClass by key), else load_parameters_path's weights, else the initial values. Sets
  // result.start_step and result.skipped_steps. `tokenizer` (may be null) must outlive this.
  Checkpointer(const Config& cfg, int ranks, int processes, const TokenizerInfo* tokenizer,
               TrainResult& result);

  // Puts the starting weights (and moments, when resuming) into this rank's shards; nothing
  // when the run starts from the initial values.
  void restore(ShardedParams& params);

  // Whether a checkpoint is written after 0-based `step`: every checkpoint_period steps, at the
  // end, and when the ranks agreed to stop — only with enable_checkpointing.
  bool due(std::int64_t step, bool stopping) const;

  // After 0-based `step` when due(): every rank writes its shards into the whole-model sets,
  // process 0 (rank 0) saves them with the training state. Collective over the ranks.
  void save(std::int64_t step, std::int64_t skipped_steps, int rank, ShardedParams& params,
            Communicator& world, Communicator& host_world, FlightRecorder& recorder);

  // After the ranks stopped: waits for a write still in flight; throws if it failed.
  void finish();
  ~Checkpointer();  // waits too, reporting a failure in the log (never throws)
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

 private:
  void write(std::int64_t step, std::int64_t skipped_steps);  // the files, on rank 0
  void wait_for_write();


  const Config& cfg_;
  int processes_;
  const TokenizerInfo* tokenizer_;
  CpuBackend host_;
  ParamSet params_, adam_m_, adam_v_;        // whole model, float32
  std::optional<CheckpointContents> start_;  // what restore() puts into the shards
  std::thread writer_;                       // the write in flight (async_checkpointing)
  std::exception_ptr write_error_;           // how it failed, rethrown by the next wait
  std::int64_t write_step_ = 0;              // the 0-based step whose checkpoint it writes
};

}  // namespace carousel
