// step_trace.h — a measured trace of real steps (config profiler_steps), in the Chrome trace
// format that chrome://tracing and Perfetto open, with the predicted schedule of the same
// steps beside it.
//
// One process per rank with four rows: compute (F, B, I, W — in parts when split by expert
// exchanges —, the optimizer, and the waits for weight gathers and exchanges, so exposed
// communication shows), pipe (each p2p group, from posting to completion), fsdp (each
// all-gather and reduce-scatter, from issue to completion) and expert (each MoE rows exchange,
// from posting to completion). Transfers
// in flight at once go to lanes of their row ("pipe", "pipe 2", ...): complete ("X") slices
// that overlap on one row are dropped by Perfetto, and async events cannot carry the flow
// arrows. Every SEND is joined to its RECV by a flow arrow (ids below 2^53, JavaScript's exact
// integers), and every slice carries its step, microbatch, stage and peer, and communication its
// bytes. The file records its
// clock origin in Unix microseconds (otherData), so scripts/merge_traces.py can put the
// per-process traces of an mpirun run on one clock. The predicted rows (processes 1000 + rank) are
// the cost model's simulation of the same program with costs calibrated from these steps (mean
// measured F, B, I, W and gather durations), so measured and predicted bubble can be compared.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "compute/recording/op_timing.h"
#include "host/schedule/ir.h"
#include "host/schedule/simulate.h"

namespace carousel {

class StepTrace {
 public:
  using Clock = std::chrono::steady_clock;
  // rank: the global rank (the trace's process); ring: which stage ring it sends on (replica
  // and FSDP index), so flow arrows join only the ranks of one ring.
  StepTrace(int rank, int ring) : rank_(rank), ring_(ring) {}

  // What the executor reports while a profiled step runs.
  void begin_step(std::int64_t step, Clock::time_point at);
  void end_step(Clock::time_point at);
  void compute(const schedule::Action& action, Clock::time_point start, Clock::time_point end);
  // A p2p group posted at `start` whose event completes later (read at end_step): compute goes
  // on meanwhile, so the pipe row shows each group from posting to completion.
  // `bytes`: what the group moves (its sends and receives together).
  void p2p_group(const std::vector<schedule::Action>& group, Clock::time_point start,
                 const Event& done, std::int64_t bytes);
  // A collective issued at `issued` whose event completes later (read at end_step). `bytes`: its
  // whole buffer (the gathered stage weights, the gradient reduce-scattered).
  void collective(const schedule::Action& action, Clock::time_point issued, const Event& done,
                  std::int64_t bytes);
  // Part `part` of a compute action that runs in parts, its expert exchanges between them
  // (host/runtime/overlapped_pair.h); the wait for an exchange's unfinished rest is a
  // compute() of its A2A action.
  void compute_part(const schedule::Action& action, Clock::time_point start, Clock::time_point end,
                    int part);
  // An expert exchange (an A2A_F / A2A_B action) posted at `posted`, on the expert row until
  // `done` completes (read at end_step). `bytes`: the rows it sends and receives.
  void exchange(const schedule::Action& action, Clock::time_point posted, const Event& done,
                std::int64_t bytes);
  // An F&B pair's half that got the turn at `woke`, handed over at `from` (`exchange`: the A2A
  // of the half's exchanges): idle time between the halves' parts, on the compute row.
  void hand_over(const schedule::Action& exchange, Clock::time_point from, Clock::time_point woke);
  // The step's time by op kind on this rank's device (Backend::stop_op_timing).
  void add_op_times(const OpTimes& times) { accumulate(op_times_, times); }

  struct Slice {
    std::string name, row;  // row: compute | pipe | fsdp | expert
    double start_us, end_us;
    schedule::Action action;
    std::int64_t step;       // the step it belongs to
    std::int64_t bytes = 0;  // a p2p group's sends and receives, a collective's whole buffer
    int part = 0;            // a compute action run in parts (compute_part): which one
    bool hand_over = false;  // an F&B pair's turn passing between its halves
  };
  struct Flow {
    std::string id;  // step, ring, F|B, the sending stage, microbatch: the same on both ends
    bool is_send;
    double at_us;
    std::size_t slice;  // index in slices(): the p2p slice the arrow starts or ends on
  };
  struct Step {
    std::int64_t step;
    double start_us, optimizer_us, end_us;  // optimizer_us: when the OPTIMIZER action began
  };
  int rank() const { return rank_; }
  const std::vector<Slice>& slices() const { return slices_; }
  const std::vector<Flow>& flows() const { return flows_; }
  const std::vector<Step>& steps() const { return steps_; }
  const OpTimes& op_times() const { return op_times_; }

 private:
  struct Pending {
    std::vector<schedule::Action> actions;  // one collective, or the actions of a p2p group
    Clock::time_point issued;
    Event done;
    std::int64_t bytes = 0;
  };
  void add_p2p_slice(const std::vector<schedule::Action>& group, double start_us, double end_us,
                     std::int64_t bytes);
  int rank_ = 0, ring_ = 0;
  std::int64_t step_ = 0;
  std::vector<Slice> slices_;
  std::vector<Flow> flows_;
  std::vector<Step> steps_;
  std::vector<Pending> pending_;
  OpTimes op_times_;
};

// Measured bubble of the traced steps, defined like the simulator's: 1 - compute busy time /
// (ranks x span), the span of a step running from its earliest start to its latest OPTIMIZER
// over the ranks (the optimizer and the step-end agreement are not part of the schedule); waits
// for weight gathers count as idle. `span_us` is that span's mean over the traced steps, the
// measured counterpart of the simulator's step_time.
// `exposed_gather_us`: time a rank's compute waited for weight gathers (AG_WAIT), per rank and
// step: the all-gather time the schedule did not hide; `exposed_exchange_us` likewise for expert
// exchanges (A2A waits and a pair's hand-overs), and `exchange_us` their whole time from
// posting to completion.
struct MeasuredSchedule {
  double bubble = 0, span_us = 0, exposed_gather_us = 0, exposed_exchange_us = 0, exchange_us = 0;
};
MeasuredSchedule measure_schedule(const std::vector<const StepTrace*>& ranks);

// A traced compute action as a whole: from its first part's start to its last part's end,
// busy for the sum of its parts (one part unless it ran with expert exchanges). In trace order.
struct ComputeTime {
  schedule::Action action;
  std::int64_t step;
  double start_us, end_us, busy_us;
};
std::vector<ComputeTime> compute_times(const StepTrace& rank);

// The Chrome trace JSON of `ranks` (this process's ranks), with `predicted`, the simulation of
// `program` with costs calibrated from these traces (host/report/cost_calibration.h,
// predict_traced_steps), beside them.
std::string step_trace_json(const std::vector<const StepTrace*>& ranks,
                            const schedule::Program& program, const schedule::SimResult& predicted);

}  // namespace carousel
