// simulate.h — the cost model: predicted timeline, bubble, activation and weight memory, and
// communication counts of a (lowered or compute-only) program, before any math runs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "host/schedule/ir.h"

namespace carousel::schedule {

// Durations per virtual stage (one stage = L layers), in any unit (unit costs reproduce the
// textbook bubble formulas). Uneven stages (stage_layers.h) set stage_scale: stage v's compute,
// all-gather and reduce-scatter cost stage_scale[v] times the numbers here (schedule_costs
// makes those per-layer numbers and the scale each stage's layer count).
struct Costs {
  double f = 1, b = 2, i = 1, w = 1;  // forward, full backward, input grad, weight grad
  double p2p = 0;                     // latency of a cross-rank activation / gradient hand-off
  // An OUTSIDE action (ir.h): the forward, loss and backward of the layers after the pipeline
  // and the head, for one microbatch; not scaled by stage_scale.
  double outside = 0;
  double all_gather = 0, reduce_scatter = 0;  // per stage's weights, on the rank's comm stream
  int forward_delay = 1;  // MaxText's d: a forward output reaches the next rank d-1 forwards later
  std::vector<double> stage_scale;  // per virtual stage; empty = 1 for every stage
  double cost(Kind k) const;        // of a stage of scale 1
  double scale(int stage) const;    // stage_scale[stage], or 1 when stage_scale is empty
  double cost(Kind k, int stage) const { return cost(k) * scale(stage); }
  // A compute action's time in the model (F, B, I, W of its stage; OUTSIDE), measured or not.
  double compute_cost(const Action& a) const;
  // Replay of a measured step: when set, the duration of each compute action (F, B, I, W of a
  // stage and microbatch, unique within a step) instead of its kind's cost. Gathers and
  // reduce-scatters keep theirs (host/report/cost_calibration.h, replay_traced_steps).
  std::function<double(const Action&)> measured_compute;
  // Spread prediction: when set, each cross-rank hand-off's latency instead of p2p (called once
  // per consuming action). The delayed forwarding of forward_delay > 1 still counts forwards at
  // their kind's cost.
  std::function<double()> measured_p2p;
  // Expert exchanges (ir.h A2A_F / A2A_B): the time of one all-to-all of an MoE layer's routed
  // rows on the rank's expert communicator (one at a time), and per virtual stage how many its
  // F and its B or I run (empty: none; with layers outside the pipeline one more entry, the
  // outside stage's, whose OUTSIDE runs both). A compute action of n exchanges runs in n + 1
  // equal parts, each exchange between two parts.
  double exchange = 0;
  std::vector<int> exchanges_f, exchanges_b;
  int exchanges(const Action& compute) const;
  // An F&B pair passing the turn between its halves (the executor's two host threads waking
  // up): a cost of the executor measured by the trace, not a config key.
  double turn = 0;
  // How long `a` runs: a compute action on its stream, an AG_ISSUE / REDUCE_SCATTER on the
  // comm stream (the stage's weights), 0 for markers, p2p and the optimizer.
  double duration(const Action& a) const;
};

// An OUTSIDE action's time: `layers` layers forward and backward with nothing recomputed (a
// layer's b less the forward it recomputes under full remat; the selective policies' partial
// recompute is left in), and the head, `head` layers of the run's f + b.
inline double outside_cost(double layers, double head, double f, double b, bool full_remat) {
  return layers * (f + (full_remat ? b - f : b)) + head * (f + b);
}

struct Interval {
  int rank;
  Action action;
  double start, end;
  int part = 0, parts = 1;  // a compute action with expert exchanges runs in parts
};

struct SimResult {
  double step_time = 0;
  double bubble_fraction = 0;                     // 1 - compute busy time / (ranks x step time)
  std::vector<Interval> timeline;                 // compute and collective intervals
  std::vector<double> busy;                       // per rank
  std::vector<int> peak_activations;              // per rank: stage activations alive at once
  std::vector<int> peak_weight_slots;             // per rank: gathered stage weights alive at once
  std::vector<int> all_gathers, reduce_scatters;  // per rank
};

// Runs every rank's actions in order on a compute stream (and AG/RS on a comm stream). A compute
// action starts when its rank is free, its input is ready (the producing action's end + p2p, or
// + (d-1) forwards for a delayed forward), and its weights are gathered (AG_WAIT). An overlapped
// F&B pair (Action::overlap) starts when the inputs of both halves are ready, and its halves run
// one after the other: what DualPipe's overlap hides is communication, and compute-bound halves
// sharing one device do not finish sooner together. A compute action after an A2A_F / A2A_B
// runs in parts with its expert exchanges between them (Costs::exchanges) and waits for each
// before its next part; in an F&B pair the halves take turns as the executor runs them
// (host/runtime/overlapped_pair.h): the F's first part, then while its exchange is in flight
// the B's first part, then the F's next part once its exchange is done, and so on, so each
// half's exchanges hide behind the other's parts.
// Activations of (stage, microbatch) live from the start of F to the end of B (or of W when split).
// Throws carousel::Error if the dependencies can never be satisfied.
SimResult simulate(const Program& program, const Costs& costs);

}  // namespace carousel::schedule
