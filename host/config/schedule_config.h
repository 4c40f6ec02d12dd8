// schedule_config.h — the schedule and cost model a Config asks for (pipeline keys of
// host/config/config.h mapped onto host/schedule types); shared by config validation (the
// registry's checks), `carousel schedule` and the pipeline executor.
#pragma once

#include "host/config/config.h"
#include "host/schedule/generators/generators.h"
#include "host/schedule/simulate.h"
#include "host/schedule/stage_layers.h"

namespace carousel {

schedule::ScheduleSpec schedule_spec(const Config& cfg);
// Per virtual stage of `layers` (the trainer's: stage_layers(cfg)); stages of unequal layer
// counts or a head cost make the costs per layer and stage_scale each stage's layer count (the
// last stage's plus schedule_cost_head); otherwise one number per stage (cost x its L layers)
// and no scale.
schedule::Costs schedule_costs(const Config& cfg, const schedule::StageLayers& layers);
// The same for the config's own stages (cfg.stage_layer_counts()).
schedule::Costs schedule_costs(const Config& cfg);

// Per virtual stage of `layers` (and the outside stage after them when layers run outside the
// pipeline): its MoE layers whose experts are split over expert ranks (ici_expert_parallelism
// > 1), each exchanging rows all-to-all; empty when E = 1.
std::vector<int> exchanging_layers(const Config& cfg, const schedule::StageLayers& layers);

// Which layers each virtual stage of lowered_program(cfg) runs: the config's layout, or the
// whole model as one stage on one device.
schedule::StageLayers stage_layers(const Config& cfg);

// The lowered, deadlock-checked program every rank of a training run walks. One device (the
// trivial mesh) runs the whole model as one stage and its microbatches one after the other,
// forward then backward (gradient accumulation), whatever pipeline_schedule says.
schedule::Program lowered_program(const Config& cfg);

}  // namespace carousel
