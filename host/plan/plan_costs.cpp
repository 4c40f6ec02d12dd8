// plan_costs.cpp — a candidate's schedule costs from the FLOP model.
#include "host/plan/plan_costs.h"

#include <fmt/format.h>

#include "compute/error.h"
#include "models/params.h"

namespace carousel::plan {

namespace {

double link(const Cluster& c, bool inter) {
  return inter ? c.inter_node_bytes_per_second : c.intra_node_bytes_per_second;
}

// The share of a buffer each member of a ring of `group` sends in an all-gather or
// reduce-scatter: (G-1)/G.
double ring_fraction(std::int64_t group) { return double(group - 1) / double(group); }

double layer_elements(const ModelConfig& m) {
  double n = 0;
  for (const auto& spec : table_of(m)) n += spec.layer == 0 ? double(numel(spec.shape)) : 0.0;
  return n;
}

// The FLOP model: compute at peak x efficiency, communication over the links' bandwidths.
void set_flop_model_costs(Config& cfg, const Cluster& cluster, const MeshLinks& links) {
  const ModelConfig& m = cfg.model;
  const double tokens = double(microbatch_rows(cfg) * m.max_target_length);
  const double f =
      layer_forward_flops_per_token(m) * tokens / (cluster.peak_flops * cluster.compute_efficiency);
  cfg.schedule_cost_f = f;
  cfg.schedule_cost_b = (cfg.remat_policy == "full" ? 3 : 2) * f;
  cfg.schedule_cost_w = f;
  const double c = compute_bytes(cfg);
  cfg.schedule_cost_p2p =
      cfg.ici_pipeline_parallelism > 1
          ? tokens * double(m.emb_dim) * c / link(cluster, links.any_hop_inter())
          : 0.0;
  const double share =
      ring_fraction(cfg.ici_fsdp_parallelism) * layer_elements(m) / link(cluster, links.fsdp_inter);
  cfg.schedule_cost_all_gather = share * c;
  cfg.schedule_cost_reduce_scatter = share * 4;  // float32 gradients
}

}  // namespace

double layer_forward_flops_per_token(const ModelConfig& m) {
  double matmul = 0;
  for (const auto& spec : table_of(m)) {
    if (spec.layer == 0 && spec.shape.size() == 2) matmul += double(numel(spec.shape));
  }
  return 2 * matmul + 2.0 * double(m.max_target_length) * double(m.emb_dim);
}

double head_layers(const ModelConfig& m, const std::string& remat_policy, const Cluster& cluster) {
  // The lm_head GEMM, its input and weight gradients: 6 V E FLOPs per token, in layers of
  // forward + backward, so the last stage's F and B together cost it exactly.
  const double head = 6.0 * double(m.vocab_size) * double(m.emb_dim);
  return head / ((1.0 + (remat_policy == "full" ? 3 : 2)) * layer_forward_flops_per_token(m));
}

void set_planner_costs(Config& cfg, const Cluster& cluster, const MeshLinks& links) {
  CAROUSEL_CHECK(cluster.peak_flops > 0 && cluster.compute_efficiency > 0 &&
                     cluster.intra_node_bytes_per_second > 0 &&
                     cluster.inter_node_bytes_per_second > 0,
                 "the planner needs a positive peak, efficiency and bandwidths");
  set_flop_model_costs(cfg, cluster, links);
  cfg.schedule_cost_head = head_layers(cfg.model, cfg.remat_policy, cluster);
}

}  // namespace carousel::plan
