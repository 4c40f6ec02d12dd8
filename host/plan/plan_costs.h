// plan_costs.h — what a candidate's schedule actions cost, in seconds per layer (the config's
// schedule_cost_* keys the simulator reads): the FLOP model (the device's peak x an efficiency,
// and the link bandwidths).
#pragma once

#include <cstdint>
#include <string>

#include "host/config.h"
#include "host/plan/plan_memory.h"

namespace carousel::plan {

// The machines. Bandwidths are per device and per direction.
struct Cluster {
  int devices = 1;
  int devices_per_node = 1;
  double memory_bytes = 0;  // per device
  double peak_flops = 0;    // per device, dense, in the compute dtype
  double intra_node_bytes_per_second = 0;
  double inter_node_bytes_per_second = 0;
  double compute_efficiency = 0.6;  // fraction of the peak a layer's forward/backward reach
};

// Forward FLOPs of one layer for one token: the matmuls and causal attention's QK^T and AV.
double layer_forward_flops_per_token(const ModelConfig& m);

// The head's cost in layers, charged to the last stage: the lm_head's 6 V E FLOPs per token over
// a layer's forward + backward. The same for every candidate of a workload (a ratio of two costs
// that both scale with the tokens).
double head_layers(const ModelConfig& m, const std::string& remat_policy, const Cluster& cluster);

// Sets cfg's schedule_cost_* keys (seconds per layer) for its mesh on `cluster`: the FLOP model
// (docs/performance.md#the-cost-model).
void set_planner_costs(Config& cfg, const Cluster& cluster, const MeshLinks& links);

}  // namespace carousel::plan
