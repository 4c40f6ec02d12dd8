// plan_explain.cpp — a candidate's step taken apart: its schedule simulated again with each kind
// of communication made free in turn (plan_explain.h), and the optimizer step's reductions.
#include "host/plan/plan_explain.h"

#include <algorithm>

#include "host/config/schedule_config.h"
#include "host/schedule/simulate.h"

namespace carousel::plan {

namespace sch = schedule;

StepBreakdown explain_step(const Cluster& cluster, const CostedCandidate& c) {
  const sch::Program program = lowered_program(c.cfg);
  Config cfg = c.cfg;
  auto span = [&](const Config& with) {
    return sch::simulate(program, schedule_costs(with)).step_time;
  };
  StepBreakdown out;
  const double full = span(cfg);
  // FSDP's gathers and reduce-scatters free.
  cfg.schedule_cost_all_gather = cfg.schedule_cost_reduce_scatter = 0;
  const double no_fsdp = span(cfg);
  out.fsdp = full - no_fsdp;
  // The pipeline's hand-offs free.
  cfg.schedule_cost_p2p = 0;
  const double no_p2p = span(cfg);
  out.p2p = no_fsdp - no_p2p;
  // Each group's waits inside a layer's F and B (plan_costs.h layer_waits), one group at a time.
  const LayerWaits waits = layer_waits(c.cfg, cluster, c.links);
  auto without = [&](double seconds) {
    cfg.schedule_cost_f -= seconds;
    cfg.schedule_cost_b -= waits.backward_factor * seconds;
    return span(cfg);
  };
  const double no_tensor = without(waits.tensor);
  out.tensor = no_p2p - no_tensor;
  const double no_context = without(waits.context);
  out.context = no_tensor - no_context;
  cfg.schedule_cost_exchange = 0;  // the expert exchanges between an MoE layer's parts
  const double no_expert = without(waits.expert);
  out.expert = no_context - no_expert;
  // What is left: compute on the busiest rank and the schedule's idle time around it.
  const sch::SimResult bare = sch::simulate(program, schedule_costs(cfg));
  out.busiest_rank = int(std::max_element(bare.busy.begin(), bare.busy.end()) - bare.busy.begin());
  for (const sch::Interval& i : bare.timeline) {
    if (i.rank != out.busiest_rank || !i.action.is_compute()) continue;
    const double d = i.end - i.start;
    switch (i.action.kind) {
      case sch::Kind::F: out.forward += d; break;
      case sch::Kind::B:
      case sch::Kind::I: out.backward += d; break;
      case sch::Kind::W: out.weight_gradient += d; break;
      default: out.outside += d; break;
    }
  }
  out.compute = out.forward + out.backward + out.weight_gradient + out.outside;
  out.bubble = no_expert - out.compute;
  // The optimizer step's reductions: the stage rank that waits longest, as predict() takes it.
  for (int s = 0; s < program.layout.ranks; ++s) {
    const ExposedReductions r = exposed_reductions(
        optimizer_link_bytes(c.cfg, program.layout, s, c.links), cluster, c.links);
    if (s == 0 || r.total() > out.reductions.total()) out.reductions = r;
  }
  out.step = full + out.reductions.total();
  return out;
}

}  // namespace carousel::plan
