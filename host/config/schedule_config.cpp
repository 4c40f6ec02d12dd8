// schedule_config.cpp — Config -> ScheduleSpec and Costs.
#include "host/config/schedule_config.h"

#include "host/schedule/passes.h"
#include "host/schedule/registry.h"
#include "models/stage.h"

namespace carousel {

namespace sch = schedule;

sch::ScheduleSpec schedule_spec(const Config& cfg) {
  sch::ScheduleSpec spec;
  spec.kind = cfg.pipeline_schedule;
  spec.layout = {int(cfg.ici_pipeline_parallelism), int(cfg.repeats()), int(cfg.microbatches())};
  spec.layout.outside = cfg.pipelined_layers() < cfg.model.num_layers;
  spec.group_size = int(cfg.pipeline_microbatch_group_size);
  spec.forward_delay = cfg.pipeline_delay_activation_forwarding ? 2 : 1;
  return spec;
}

sch::Costs schedule_costs(const Config& cfg) {
  return schedule_costs(cfg, sch::StageLayers(cfg.stage_layer_counts()));
}

sch::Costs schedule_costs(const Config& cfg, const sch::StageLayers& layers) {
  // Per stage scales when the given stages differ: unequal layer counts, or the head's cost on
  // the last stage; otherwise each stage's L layers are in the costs. With layers outside the
  // pipeline the head is theirs: an OUTSIDE action runs them and the head, forward and backward.
  const std::int64_t outside = cfg.model.num_layers - layers.layers();
  const bool scaled = !layers.is_even() || (cfg.schedule_cost_head > 0 && outside == 0);
  const double L = scaled ? 1.0 : double(layers.count(0));
  sch::Costs c;
  if (scaled) {
    for (const int n : layers.counts()) c.stage_scale.push_back(double(n));
    if (outside == 0) c.stage_scale.back() += cfg.schedule_cost_head;
  }
  if (outside > 0) {  // the OUTSIDE action recomputes nothing (remat none inside it)
    const double f = cfg.schedule_cost_f, b = cfg.schedule_cost_b;
    const bool full = parse_remat_policy(cfg.remat_policy) == RematPolicy::Full;
    c.outside = sch::outside_cost(double(outside), cfg.schedule_cost_head, f, b, full);
  }
  c.f = cfg.schedule_cost_f * L;
  c.b = cfg.schedule_cost_b * L;
  c.w = cfg.schedule_cost_w * L;
  c.i = c.b - c.w;
  c.p2p = cfg.schedule_cost_p2p;
  c.all_gather = cfg.schedule_cost_all_gather * L;
  c.reduce_scatter = cfg.schedule_cost_reduce_scatter * L;
  c.forward_delay = schedule_spec(cfg).forward_delay;
  // Expert exchanges: a dispatch and a combine per MoE layer in a forward; the backward sends
  // the gradients both ways, after recomputing the forward's (recomputes_routed_experts).
  c.exchange = cfg.schedule_cost_exchange;
  // An OUTSIDE action (the last entry with layers after the pipeline) recomputes nothing.
  const RematPolicy remat = parse_remat_policy(cfg.remat_policy);
  const int backward_factor = recomputes_routed_experts(remat) ? 2 : 1;
  const std::vector<int> exchanging = exchanging_layers(cfg, layers);
  for (std::size_t v = 0; v < exchanging.size(); ++v) {
    const int n = exchanging[v];
    c.exchanges_f.push_back(2 * n);
    c.exchanges_b.push_back(2 * n * (int(v) < layers.stages() ? backward_factor : 1));
  }
  return c;
}

std::vector<int> exchanging_layers(const Config& cfg, const sch::StageLayers& layers) {
  std::vector<int> out;
  if (cfg.ici_expert_parallelism <= 1) return out;
  const auto moe_layers = [&](int first, int end) {
    int n = 0;
    for (int l = first; l < end; ++l) n += cfg.model.is_moe_layer(l) ? 1 : 0;
    return n;
  };
  for (int v = 0; v < layers.stages(); ++v)
    out.push_back(moe_layers(layers.first(v), layers.first(v) + layers.count(v)));
  if (layers.layers() < cfg.model.num_layers)  // the outside stage
    out.push_back(moe_layers(layers.layers(), int(cfg.model.num_layers)));
  return out;
}

sch::StageLayers stage_layers(const Config& cfg) {
  if (cfg.num_devices() == 1) return sch::StageLayers({int(cfg.model.num_layers)});
  return sch::StageLayers(cfg.stage_layer_counts());
}

sch::Program lowered_program(const Config& cfg) {
  sch::ScheduleSpec spec = schedule_spec(cfg);
  if (cfg.num_devices() == 1)
    spec = {.kind = std::string(sch::one_device_schedule().name),
            .layout = {1, 1, int(cfg.microbatches())}};
  const sch::Program program = sch::place_exchanges(
      sch::lower(sch::generate(spec), {cfg.weight_slots(), int(cfg.pipeline_prefetch_lookahead),
                                       /*fsdp=*/cfg.ici_fsdp_parallelism > 1}),
      exchanging_layers(cfg, stage_layers(cfg)));
  sch::replay(program);
  return program;
}

}  // namespace carousel
