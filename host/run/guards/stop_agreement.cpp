// stop_agreement.cpp — the end-of-step agreement to stop, and what a stopped run says.
#include "host/run/guards/stop_agreement.h"

#include <spdlog/spdlog.h>

#include <vector>

#include "host/reliability/fault_injection.h"

namespace carousel {

bool StopAgreement::agree(std::int64_t step, int rank, Communicator& world, Backend& be,
                          FlightRecorder& recorder) {
  maybe_raise_signal(rank, ranks_are_processes_ || rank == 0, step);  // a test's fault
  recorder.note(step, "end-of-step agreement");
  Tensor flag = be.from_host(std::vector<std::int32_t>{StopSignals::received() != 0 ? 1 : 0}, {1});
  world.all_reduce(flag, flag, ReduceOp::Sum).wait();
  const bool stop = be.to_host<std::int32_t>(flag)[0] > 0;
  recorder.complete();
  if (stop) stopped_after_ = step + 1;
  return stop;
}

void StopAgreement::finish(const Config& cfg, TrainResult& result) const {
  if (stopped_after_ < 0) return;
  result.stopped_by_signal = true;
  if (!reports_) return;
  spdlog::warn("stopped by {} after step {} of {}{}; run the same command to resume",
               signal_name(StopSignals::received()), stopped_after_.load(), cfg.steps,
               cfg.enable_checkpointing ? ", checkpoint saved"
                                        : " (enable_checkpointing=false: nothing saved)");
}

}  // namespace carousel
