// stop_agreement.h — stopping a run early, the same step on every rank.
//
// SIGTERM, SIGINT, SIGHUP and SIGUSR1 (host/reliability/stop_signals.h) ask the run to stop; a
// signal may reach the processes of a job, or be seen by the rank threads of one process, at
// different steps, or reach one process only. After every step the ranks sum "was I asked to stop,
// and by which signal" over the world, so every rank decides the same (the sum is also the
// end-of-step barrier) and world rank 0 names the signal even when its own process got none; the
// checkpointer then saves and the loop ends.
#pragma once

#include <atomic>
#include <cstdint>

#include "collectives/communicator.h"
#include "host/config/config.h"
#include "host/reliability/flight_recorder.h"
#include "host/reliability/stop_signals.h"
#include "host/run/train_result.h"

namespace carousel {

class StopAgreement {
 public:
  // Installs the signal handlers for the run. `ranks_are_processes`: under mpirun (each process
  // hosts one rank, and each raises the faults tests inject into it). `reports`: this process
  // says that the run stopped (world rank 0's).
  StopAgreement(bool ranks_are_processes, bool reports)
      : ranks_are_processes_(ranks_are_processes), reports_(reports) {}

  // After 0-based `step`: whether every rank stops now. Collective over `world`. `lost_output`:
  // this rank found an output of the run gone (the metrics file or the run directory removed):
  // every rank stops as for a signal, the checkpointer saves, and finish() fails with it.
  bool agree(std::int64_t step, int rank, Communicator& world, Backend& be,
             FlightRecorder& recorder, const std::string& lost_output = "");

  // After the ranks ended: marks the result and (when this process reports) says after which
  // step the run stopped and how it goes on; throws carousel::Error when an output was lost.
  void finish(const Config& cfg, TrainResult& result) const;

 private:
  const StopSignals signals_;
  bool ranks_are_processes_, reports_;
  std::atomic<std::int64_t> stopped_after_{-1};  // the steps done when the ranks agreed; -1: none
  std::atomic<bool> output_lost_{false};         // some rank reported a lost output
  std::atomic<int> signals_agreed_{0};           // bit i: the i-th stop signal reached some rank
  std::string lost_output_;                      // what this process's rank 0 saw (set once)
};

}  // namespace carousel
