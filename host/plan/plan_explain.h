// plan_explain.h — `carousel plan --explain`: where a candidate's predicted step time goes.
//
// The step is the simulated schedule plus the optimizer step's exposed reductions
// (plan_model.h). The schedule's part is taken apart by simulating it again with one kind of
// communication made free at a time, in a fixed order: the FSDP gathers and reduce-scatters,
// then the pipeline hand-offs, then the tensor, the context and the expert groups' collectives
// (the waits inside each layer's F and B, and the expert exchanges). What each removal saves is
// that communication's exposed time; what is left is the busiest rank's compute and the
// pipeline's bubble (the rest of that communication-free schedule). The parts add up to the
// step exactly; each is a marginal saving in that order, so a different order could move time
// between two kinds that hide behind each other.
//
// Not modelled, and shown as such: the optimizer's own time (AdamW is memory-bound, a few ms per
// step on a GPU; the planner adds nothing for it), data loading, host overheads.
#pragma once

#include "host/plan/plan_model.h"

namespace carousel::plan {

struct StepBreakdown {
  double step = 0;  // = the sum of every part below
  // The busiest rank's compute with every communication free, and what it runs: F, B (or I),
  // W (the zero-bubble schedules' weight gradients) and the layers after the pipeline with the
  // head (OUTSIDE). The head on the last stage is inside its F and B.
  double compute = 0;
  double forward = 0, backward = 0, weight_gradient = 0, outside = 0;
  double bubble = 0;  // the communication-free schedule's idle time on that rank
  // Exposed communication inside the schedule, in seconds of the step.
  double fsdp = 0, p2p = 0, tensor = 0, context = 0, expert = 0;
  // After the last backward: the optimizer step's reductions (the stage rank waiting longest).
  ExposedReductions reductions;
  int busiest_rank = 0;  // the stage rank whose compute is counted
};

// The breakdown of `c`'s predicted step (the same costs predict() simulates).
StepBreakdown explain_step(const Cluster& cluster, const CostedCandidate& c);

}  // namespace carousel::plan
