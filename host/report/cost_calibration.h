// cost_calibration.h — the cost model's inputs measured on this machine: per-layer durations of
// F, B, I, W, weight gathers and gradient reductions, and the head's cost in layers, taken from
// the traced steps of a run (profiler_steps). The trace's predicted rows simulate with them, and
// the run writes them to <run dir>/schedule_costs.yml, which `carousel schedule` (and the
// planner) read back with schedule_costs_file=<that file> instead of unit costs.
//
// Per layer: a slice of stage v counts count(v) layers. The last stage also runs the final
// norm, logits and loss (the head), so its compute is left out of the per-layer means and the
// head is what it took beyond count(last) layers: head = sum over kinds of (mean last-stage
// duration - count(last) x per-layer mean) / sum of per-layer means, in layers (>= 0). With one
// stage the head cannot be told apart from the layers and the configured value is kept.
//
// p2p: for each F of stage v > 0 (its producer: the F of v - 1) and each B or I of a stage
// below the last (its producer: the B or I of v + 1), producers being of the same microbatch
// and step, whose producer ran on another traced rank and ended after the consumer's rank
// finished its previous action, the consumer's start minus the producer's end (not for the F of
// an overlapped F&B pair, which may have waited for its B's input): the hand-off the
// simulator adds to every cross-rank input. Ranks are matched by the traces' clock, so only the
// ranks of one process (one node) are compared.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "host/report/step_trace.h"
#include "host/schedule/simulate.h"
#include "host/schedule/stage_layers.h"

namespace carousel {

struct CalibratedCosts {
  // Microseconds per layer; b = i + w when split; without W slices, w = b / 2 (the unit model's
  // share) so a zero-bubble schedule simulated with these costs has one.
  double f = 0, b = 0, i = 0, w = 0;
  double all_gather = 0, reduce_scatter = 0;  // microseconds per layer's weights
  // Microseconds per expert exchange, their mean: from posting (or, when it queued behind the
  // rank's exchange before it, that one's completion) to completion.
  double exchange = 0;
  double turn = 0;  // microseconds from an F&B pair's half passing the turn to the other's waking
  double head = 0;  // in layers, added to the last stage (or to each OUTSIDE action)
  bool measured_head = false;                 // false: `head` is the configured value
  int outside_layers = 0;  // layers after the pipeline (pipeline_parallel_layers): OUTSIDE runs
  bool full_remat = false;  // the stages' B recompute the forward, an OUTSIDE's does not
  // Microseconds from a producer's end on one rank to the start of its consumer on another, when
  // the consumer's rank was idle waiting for it: every such hand-off, and their median (0 if
  // none), which the simulator adds to every cross-rank input.
  std::vector<double> handoffs;
  double p2p = 0;
};

// Each of one rank's exchanges' own time, from their (posted, completed) times in any order: one
// expert communicator runs them one at a time, so an exchange posted while the one before was in
// flight starts when that one completes (as the simulator's expert stream). In posting order.
std::vector<double> exchange_times(std::vector<std::pair<double, double>> posted_completed);

CalibratedCosts calibrate_costs(const std::vector<const StepTrace*>& ranks,
                                const schedule::StageLayers& layers, double configured_head,
                                int outside_layers = 0, bool full_remat = false);

// `base` (forward delay) with the calibrated durations and hand-off: per-layer costs scaled by each
// stage's layer count, the head added to the last stage.
schedule::Costs calibrated_schedule_costs(const CalibratedCosts& measured,
                                          const schedule::StageLayers& layers,
                                          schedule::Costs base);

// The traced steps replayed through the schedule's dependencies: each step simulated with the
// durations its compute actions measured (averaged over a stage's FSDP / data replicas) and
// `calibrated`'s hand-off and collectives, instead of per-kind means. Pooled as
// measure_schedule pools the measured steps (mean span; total busy / (ranks x total span)).
// Against the measured span it shows what the dependency model explains; against the mean-cost
// prediction, what the spread of action durations costs (docs/performance.md).
struct Replay {
  double span_us = 0, bubble = 0;
};
Replay replay_traced_steps(const std::vector<const StepTrace*>& ranks,
                           const schedule::Program& program, const schedule::Costs& calibrated);

// The prediction with the spread of durations: `samples` simulations in which every compute
// action takes a duration drawn (seeded, so the same traces give the same figure) from those its
// stage and kind measured over the traced steps and replicas, and every cross-rank hand-off one
// of `handoffs` (CalibratedCosts::handoffs, one pool); pooled like the replay. A slow action on
// the critical path delays everything behind it while a fast one off it gains nothing, so this
// is longer than the mean-cost prediction by what the spread costs.
inline constexpr int kSpreadSamples = 64;
Replay predict_with_spread(const std::vector<const StepTrace*>& ranks,
                           const schedule::Program& program, const schedule::Costs& calibrated,
                           const std::vector<double>& handoffs, int samples = kSpreadSamples);

// The traced steps' predictions with the `calibrated` costs, side by side: the mean-cost
// simulation (the trace's predicted rows), the prediction with the spread of durations (hand-offs
// drawn from `handoffs`) and the replay.
struct TracedPredictions {
  schedule::SimResult mean_cost;
  Replay spread, replayed;
};
TracedPredictions predict_traced_steps(const std::vector<const StepTrace*>& ranks,
                                       const schedule::Program& program,
                                       const schedule::Costs& calibrated,
                                       const std::vector<double>& handoffs);

// The schedule_cost_* keys of `measured` as YAML, `description` (machine, run) in comments.
std::string schedule_costs_yaml(const CalibratedCosts& measured, const std::string& description);

}  // namespace carousel
