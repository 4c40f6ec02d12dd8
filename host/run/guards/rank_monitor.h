// rank_monitor.h — what is known about each rank of this process: where it is (for failure
// reports), and its end-of-run figures (device, peak memory, weight gathers).
//
// Each rank notes its actions in its own flight recorder (host/reliability/flight_recorder.h).
// After a failure every rank's last action is printed, so the stuck edge of a stall can be read
// off (one rank in a RECV, its peer still computing or waiting elsewhere); when a rank thread
// does not come back within kStuckRankGraceSeconds, the process reports, with what each stuck
// thread is doing (running a computation, or blocked in a wait that cannot be cut short, such as
// a slow simulated link's transfer: FlightRecorder::thread_state), and exits with status 2 (such
// a thread can be neither joined nor stopped).
#pragma once

#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/local_communicator.h"
#include "compute/backend.h"
#include "host/mesh/mesh.h"
#include "host/runtime/sharded_params.h"
#include "host/reliability/flight_recorder.h"
#include "host/run/train_result.h"

namespace carousel {

class RankMonitor {
 public:
  RankMonitor(const MeshShape& mesh, const Communicator* process_world);

  FlightRecorder& recorder(int rank) { return recorders_[std::size_t(rank)]; }

  // At the end of rank `rank`'s loop: its figures, shared with every process over `host_world`
  // when the ranks are processes (collective there).
  // `graph_replays`: steps launched from a captured graph (host/runtime/step_capture.h).
  void record_end(int rank, Backend& be, const ShardedParams& params, std::int64_t graph_replays,
                  Communicator& host_world);

  // Where every rank of this process is, as error lines (after a failure).
  void report_ranks() const;
  // For launch_ranks: what to do when a rank failed and another does not come back.
  StuckRanks stuck_ranks() const;
  // One line per rank (device, place, peak memory, gathers, graph replays) and the result's
  // summary of them.
  void report_figures(TrainResult& result) const;

 private:
  MeshShape mesh_;
  const Communicator* process_world_;
  std::vector<FlightRecorder> recorders_;
  std::vector<double> peak_bytes_, all_gathers_, graph_replays_;
  std::vector<std::string> device_names_;  // with processes, only this process's own is known
};

}  // namespace carousel
