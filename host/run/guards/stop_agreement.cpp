// stop_agreement.cpp — the end-of-step agreement to stop, and what a stopped run says.
#include "host/run/guards/stop_agreement.h"

#include <spdlog/spdlog.h>

#include <vector>

#include "compute/error.h"
#include "host/reliability/fault_injection.h"

namespace carousel {

bool StopAgreement::agree(std::int64_t step, int rank, Communicator& world, Backend& be,
                          FlightRecorder& recorder, const std::string& lost_output) {
  maybe_raise_signal(rank, ranks_are_processes_ || rank == 0, step);  // a test's fault
  recorder.note(step, "end-of-step agreement");
  if (!lost_output.empty() && lost_output_.empty()) lost_output_ = lost_output;  // rank 0 only
  // [ranks asked to stop by a signal, ranks that lost an output]
  Tensor flags = be.from_host(
      std::vector<std::int32_t>{StopSignals::received() != 0 ? 1 : 0, lost_output.empty() ? 0 : 1},
      {2});
  world.all_reduce(flags, flags, ReduceOp::Sum).wait();
  const auto sums = be.to_host<std::int32_t>(flags);
  recorder.complete();
  if (sums[1] > 0) output_lost_ = true;
  const bool stop = sums[0] > 0 || sums[1] > 0;
  if (stop) stopped_after_ = step + 1;
  return stop;
}

void StopAgreement::finish(const Config& cfg, TrainResult& result) const {
  if (stopped_after_ < 0) return;
  if (output_lost_) {
    fail("{}; the run stopped after step {} of {}{}",
         lost_output_.empty() ? "an output of the "
                                "run (metrics file or run directory) vanished on another process"
                              : lost_output_,
         stopped_after_.load(), cfg.steps,
         cfg.enable_checkpointing ? ", checkpoint saved: run the same command to resume"
                                  : " (enable_checkpointing=false: nothing saved)");
  }
  result.stopped_by_signal = true;
  if (!reports_) return;
  spdlog::warn("stopped by {} after step {} of {}{}; run the same command to resume",
               signal_name(StopSignals::received()), stopped_after_.load(), cfg.steps,
               cfg.enable_checkpointing ? ", checkpoint saved"
                                        : " (enable_checkpointing=false: nothing saved)");
}

}  // namespace carousel
