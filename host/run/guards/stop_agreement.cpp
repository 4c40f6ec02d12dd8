// stop_agreement.cpp — the end-of-step agreement to stop, and what a stopped run says.
#include "host/run/guards/stop_agreement.h"

#include <spdlog/spdlog.h>

#include <csignal>
#include <iterator>
#include <vector>

#include "compute/error.h"
#include "host/reliability/fault_injection.h"

namespace carousel {

namespace {
// The signals that ask a run to stop (host/reliability/stop_signals.h), in the agreement's order.
constexpr int kAgreedSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
}  // namespace

bool StopAgreement::agree(std::int64_t step, int rank, Communicator& world, Backend& be,
                          FlightRecorder& recorder, const std::string& lost_output) {
  maybe_raise_signal(rank, ranks_are_processes_ || rank == 0, step);  // a test's fault
  recorder.note(step, "end-of-step agreement");
  if (!lost_output.empty() && lost_output_.empty()) lost_output_ = lost_output;  // rank 0 only
  // [ranks that lost an output, then ranks asked to stop by each stop signal]: every process
  // learns which signals stopped the run, also the processes that received none (under mpirun
  // a scheduler may signal one process, or Slurm's SIGUSR1 reach them all).
  std::vector<std::int32_t> local{lost_output.empty() ? 0 : 1};
  for (const int signal : kAgreedSignals) local.push_back(StopSignals::received() == signal);
  Tensor flags = be.from_host(local, {std::int64_t(local.size())});
  world.all_reduce(flags, flags, ReduceOp::Sum).wait();
  const auto sums = be.to_host<std::int32_t>(flags);
  recorder.complete();
  if (sums[0] > 0) output_lost_ = true;
  int signals = 0;  // bit i: kAgreedSignals[i] reached some rank
  for (std::size_t i = 0; i < std::size(kAgreedSignals); ++i) {
    if (sums[i + 1] > 0) signals |= 1 << i;
  }
  const bool stop = signals != 0 || sums[0] > 0;
  if (stop) {
    signals_agreed_ |= signals;
    stopped_after_ = step + 1;
  }
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
  std::string names;
  for (std::size_t i = 0; i < std::size(kAgreedSignals); ++i) {
    if (signals_agreed_ & (1 << i)) {
      names += fmt::format("{}{}", names.empty() ? "" : " and ", signal_name(kAgreedSignals[i]));
    }
  }
  spdlog::warn("stopped by {} after step {} of {}{}; run the same command to resume",
               names.empty() ? "a signal" : names, stopped_after_.load(), cfg.steps,
               cfg.enable_checkpointing ? ", checkpoint saved"
                                        : " (enable_checkpointing=false: nothing saved)");
}

}  // namespace carousel
