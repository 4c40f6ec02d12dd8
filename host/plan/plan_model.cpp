// plan_model.cpp — a candidate's config, its schedule costs in seconds, and its prediction from
// the schedule simulator plus the memory and bytes arithmetic of plan_memory.cpp.
#include "host/plan/plan_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "compute/error.h"
#include "host/schedule/passes.h"
#include "host/schedule/simulate.h"
#include "host/schedule_config.h"
#include "models/params.h"

namespace carousel::plan {

namespace sch = schedule;

namespace {

// Forward FLOPs of one layer for one token: the matmuls and causal attention's QK^T and AV.
double layer_forward_flops_per_token(const ModelConfig& m) {
  double matmul = 0;
  for (const auto& spec : table_of(m)) {
    if (spec.layer == 0 && spec.shape.size() == 2) matmul += double(numel(spec.shape));
  }
  return 2 * matmul + 2.0 * double(m.max_target_length) * double(m.emb_dim);
}

double rate(const Cluster& c) { return c.peak_flops * c.compute_efficiency; }

double link(const Cluster& c, bool inter) {
  return inter ? c.inter_node_bytes_per_second : c.intra_node_bytes_per_second;
}

// Replica and extras reductions of the optimizer step: nothing else runs meanwhile.
double exposed_seconds(const LinkBytes& b, const Cluster& cluster, const MeshLinks& links) {
  return b.data / link(cluster, links.data_inter) + b.extras / link(cluster, links.fsdp_inter);
}

MeshLinks links_of(const Config& cfg, const Cluster& cluster) {
  return mesh_links(int(cfg.ici_pipeline_parallelism), int(cfg.ici_fsdp_parallelism),
                    int(cfg.ici_data_parallelism), cluster.devices_per_node);
}

}  // namespace

Config candidate_config(const Workload& w, const Candidate& c) {
  Config cfg;
  cfg.model_name = "plan";
  cfg.model = w.model;
  cfg.dtype = w.dtype;
  cfg.remat_policy = w.remat_policy;
  cfg.ici_pipeline_parallelism = c.stages;
  cfg.ici_fsdp_parallelism = c.fsdp;
  cfg.ici_data_parallelism = c.data;
  cfg.num_pipeline_microbatches = c.microbatches;
  cfg.num_pipeline_repeats = c.repeats;
  cfg.num_layers_per_pipeline_stage = c.layers_per_stage;
  cfg.pipeline_schedule = c.schedule;
  cfg.pipeline_fsdp_ag_per_repeat = c.weight_slots == 2;
  cfg.pipeline_fsdp_ag_once = c.weight_slots == -1;
  cfg.shard_optimizer_over_data = c.zero1;
  CAROUSEL_CHECK(c.weight_slots == 0 || c.weight_slots == 2 || c.weight_slots == -1,
                 "weight slots {} is not a weight mode; use 0 (gather per use), 2 (BSW) or -1 "
                 "(once per step)",
                 c.weight_slots);
  cfg.per_device_batch_size = double(w.global_batch) / double(cfg.num_devices());
  CAROUSEL_CHECK(cfg.global_batch() == w.global_batch,
                 "a global batch of {} sequences is not a whole number of per-device sequences "
                 "on {} devices",
                 w.global_batch, cfg.num_devices());
  cfg.validate_pipeline();
  microbatch_rows(cfg);  // throws when B does not split into M x F x D
  return cfg;
}

std::string candidate_keys(const Config& cfg) {
  std::string keys = fmt::format(
      "ici_pipeline_parallelism={} ici_fsdp_parallelism={} ici_data_parallelism={} "
      "num_pipeline_microbatches={} num_pipeline_repeats={} num_layers_per_pipeline_stage={} "
      "pipeline_schedule={} per_device_batch_size={} dtype={} remat_policy={}",
      cfg.ici_pipeline_parallelism, cfg.ici_fsdp_parallelism, cfg.ici_data_parallelism,
      cfg.microbatches(), cfg.repeats(), cfg.num_layers_per_pipeline_stage, cfg.pipeline_schedule,
      cfg.per_device_batch_size, cfg.dtype, cfg.remat_policy);
  if (cfg.pipeline_fsdp_ag_per_repeat) keys += " pipeline_fsdp_ag_per_repeat=true";
  if (cfg.pipeline_fsdp_ag_once) keys += " pipeline_fsdp_ag_once=true";
  if (cfg.shard_optimizer_over_data) keys += " shard_optimizer_over_data=true";
  return keys;
}

void set_planner_costs(Config& cfg, const Cluster& cluster, const MeshLinks& links) {
  CAROUSEL_CHECK(cluster.peak_flops > 0 && cluster.compute_efficiency > 0 &&
                     cluster.intra_node_bytes_per_second > 0 &&
                     cluster.inter_node_bytes_per_second > 0,
                 "the planner needs a positive peak, efficiency and bandwidths");
  const ModelConfig& m = cfg.model;
  const double tokens = double(microbatch_rows(cfg) * m.max_target_length);
  const double f = layer_forward_flops_per_token(m) * tokens / rate(cluster);
  const bool remat = cfg.remat_policy == "full";
  cfg.schedule_cost_f = f;
  cfg.schedule_cost_b = (remat ? 3 : 2) * f;
  cfg.schedule_cost_w = f;
  const int S = int(cfg.ici_pipeline_parallelism);
  double hop = 0;
  for (int s = 0; s < S; ++s) {
    for (int t = 0; t < S; ++t) hop = std::max(hop, 1.0 / link(cluster, links.hop_inter[s][t]));
  }
  const double c = compute_bytes(cfg);
  cfg.schedule_cost_p2p = S > 1 ? tokens * double(m.emb_dim) * c * hop : 0.0;
  const double F = double(cfg.ici_fsdp_parallelism);
  const ParamLayout p = param_layout(cfg, schedule_spec(cfg).layout, 0);
  const double per_layer = double(p.padded) / double(cfg.num_layers_per_pipeline_stage);
  const double share = (F - 1) / F / link(cluster, links.fsdp_inter);
  cfg.schedule_cost_all_gather = per_layer * c * share;
  cfg.schedule_cost_reduce_scatter = per_layer * 4 * share;
  // The head (lm_head GEMM, its input and weight gradients: 6 V E FLOPs per token) in layers of
  // forward + backward, so the last stage's F and B together cost it exactly.
  const double head = 6.0 * double(m.vocab_size) * double(m.emb_dim);
  cfg.schedule_cost_head = head / ((1.0 + (remat ? 3 : 2)) * layer_forward_flops_per_token(m));
}

std::int64_t memory_lower_bound(const Config& cfg) {
  const sch::Layout layout = schedule_spec(cfg).layout;
  std::int64_t most = 0;
  for (const int s : {0, layout.ranks - 1}) {
    const ParamLayout p = param_layout(cfg, layout, s);
    const std::int64_t held = p.local_stages * p.shard + p.extras;
    const std::int64_t c = compute_bytes(cfg);
    std::int64_t bytes =
        (8 + (c == 4 ? 0 : c)) * held + 8 * (p.local_stages * p.piece + p.extras_piece);
    if (cfg.ici_fsdp_parallelism > 1) bytes += p.local_stages * p.padded * 4 + p.padded * c;
    most = std::max(most, bytes);
  }
  return most;
}

double step_time_lower_bound(const Config& cfg, const Cluster& cluster) {
  Config timed = cfg;
  const MeshLinks links = links_of(cfg, cluster);
  set_planner_costs(timed, cluster, links);
  // The last stage's rank: its stages' layers and the head, for every microbatch.
  const double layers = double(cfg.repeats() * cfg.num_layers_per_pipeline_stage);
  const double compute = double(cfg.microbatches()) * (layers + timed.schedule_cost_head) *
                         (timed.schedule_cost_f + timed.schedule_cost_b);
  // The reductions need the layout only, not the program's actions.
  double exposed = 0;
  const sch::Layout layout = schedule_spec(cfg).layout;
  for (const int s : {0, layout.ranks - 1}) {
    sch::Program shell;
    shell.layout = layout;
    shell.ranks.assign(layout.ranks, {});
    exposed =
        std::max(exposed, exposed_seconds(device_link_bytes(cfg, shell, s, links), cluster, links));
  }
  return compute + exposed;
}

Prediction predict(const Workload& w, const Cluster& cluster, const Candidate& candidate) {
  Config cfg = candidate_config(w, candidate);
  const MeshLinks links = links_of(cfg, cluster);
  set_planner_costs(cfg, cluster, links);
  const sch::Program program = lowered_program(cfg);
  const sch::SimResult sim = sch::simulate(program, schedule_costs(cfg));
  Prediction p;
  p.candidate = candidate;
  double exposed = 0, most_bytes = -1;
  for (int s = 0; s < program.layout.ranks; ++s) {
    const MemoryBreakdown mem = device_memory(cfg, program, s, sim.peak_activations[s]);
    if (mem.total() > p.memory.total()) {
      p.memory = mem;
      p.memory_stage_rank = s;
    }
    const LinkBytes bytes = device_link_bytes(cfg, program, s, links);
    exposed = std::max(exposed, exposed_seconds(bytes, cluster, links));
    if (bytes.intra + bytes.inter > most_bytes) {
      most_bytes = bytes.intra + bytes.inter;
      p.bytes = bytes;
    }
  }
  const double tokens = double(w.global_batch * w.model.max_target_length);
  p.pipeline_seconds = sim.step_time;
  p.head_layers = cfg.schedule_cost_head;
  p.exposed_comm_seconds = exposed;
  p.step_seconds = p.pipeline_seconds + p.exposed_comm_seconds;
  p.bubble = sim.bubble_fraction;
  p.tokens_per_second = tokens / p.step_seconds;
  p.mfu = train_flops_per_token(w.model) * tokens /
          (p.step_seconds * double(cluster.devices) * cluster.peak_flops);
  p.fits = double(p.memory.total()) <= cluster.memory_bytes;
  p.keys =
      (w.model_keys.empty() ? "" : w.model_keys + " ") + candidate_keys(cfg) +
      fmt::format(
          " schedule_cost_f={:.6g} schedule_cost_b={:.6g} schedule_cost_w={:.6g} "
          "schedule_cost_p2p={:.6g} schedule_cost_all_gather={:.6g} "
          "schedule_cost_reduce_scatter={:.6g} schedule_cost_head={:.6g}",
          cfg.schedule_cost_f, cfg.schedule_cost_b, cfg.schedule_cost_w, cfg.schedule_cost_p2p,
          cfg.schedule_cost_all_gather, cfg.schedule_cost_reduce_scatter, cfg.schedule_cost_head);
  return p;
}

}  // namespace carousel::plan
