// evaluator.h — the held-out loss every eval_interval steps and after the last step.
//
// The eval data (eval_dataset_path, or synthetic) is opened once per process (RunSetup) and read
// by its ranks; each evaluation runs batches 0 .. eval_batches - 1 forward only through the rank's
// executor (host/runtime/rank_executor.h) and sums the ranks' shares over the world.
#pragma once

#include <cstdint>
#include <optional>

#include "collectives/communicator.h"
#include "host/config/config.h"
#include "host/data/data.h"
#include "host/runtime/rank_executor.h"
#include "host/reliability/flight_recorder.h"

namespace carousel {

class Evaluator {
 public:
  // `data`: the eval data (RunSetup::eval_data, null for none; it must outlive the evaluator),
  // read `batches` batches per evaluation.
  Evaluator(const Config& cfg, const DataLoader* data, std::int64_t batches)
      : cfg_(cfg), data_(data), batches_(batches) {}

  // After 0-based `step`: the mean token loss over the eval batches when an evaluation is due
  // (the same on every rank), else nullopt. Collective over `world` when due.
  std::optional<double> after_step(std::int64_t step, RankExecutor& executor, Communicator& world,
                                   Backend& be, FlightRecorder& recorder) const;

 private:
  const Config& cfg_;
  const DataLoader* data_;  // null: no evaluation
  std::int64_t batches_;
};

}  // namespace carousel
