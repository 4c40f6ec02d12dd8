// plan_model.cpp — a candidate's config (costed once, plan_costs.cpp), its bounds, and its
// prediction from the schedule simulator plus the memory and bytes arithmetic of
// plan_memory.cpp.
#include "host/plan/plan_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "compute/error.h"
#include "host/config/schedule_config.h"
#include "host/schedule/passes.h"
#include "host/schedule/simulate.h"
#include "models/params.h"
#include "models/stage.h"

namespace carousel::plan {

namespace sch = schedule;

namespace {

double link(const Cluster& c, bool inter) {
  return inter ? c.inter_node_bytes_per_second : c.intra_node_bytes_per_second;
}

double exposed_seconds(const LinkBytes& b, const Cluster& cluster, const MeshLinks& links) {
  return exposed_reductions(b, cluster, links).total();
}

// The layout lowered_program(cfg) runs: one device runs the whole model as one stage.
sch::Layout program_layout(const Config& cfg) {
  if (cfg.num_devices() == 1) return {1, 1, int(cfg.microbatches())};
  return schedule_spec(cfg).layout;
}

// lowered_program(cfg), kept for the programs asked for lately: the program depends only on the
// schedule, S, R, M, the layers outside the pipeline, the weight slots, the prefetch, FSDP and
// the expert exchanges per stage, and the search simulates many meshes (F, D, T, C) and costs
// with the same one (lowering was over half of a simulation's time). At most kCachedUnits
// actions' worth of programs (S x M x R units each) are kept (a few tens of MiB).
constexpr std::int64_t kCachedUnits = 1 << 14;
const sch::Program& cached_lowered_program(const Config& cfg) {
  using Key = std::tuple<std::string, int, int, int, bool, int, int, bool, int, int, bool,
                         std::vector<int>>;
  thread_local std::map<Key, sch::Program> cache;
  thread_local std::int64_t units = 0;
  const sch::ScheduleSpec spec = schedule_spec(cfg);
  Key key{spec.kind,
          spec.layout.ranks,
          spec.layout.repeats,
          spec.layout.microbatches,
          spec.layout.outside,
          spec.group_size,
          spec.forward_delay,
          cfg.num_devices() == 1,
          cfg.weight_slots(),
          int(cfg.pipeline_prefetch_lookahead),
          cfg.ici_fsdp_parallelism > 1,
          exchanging_layers(cfg, stage_layers(cfg))};
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const std::int64_t n = std::int64_t(spec.layout.ranks) * spec.layout.repeats *
                         spec.layout.microbatches;
  if (units + n > kCachedUnits) {
    cache.clear();
    units = 0;
  }
  units += n;
  return cache.emplace(std::move(key), lowered_program(cfg)).first->second;
}

}  // namespace

ExposedReductions exposed_reductions(const LinkBytes& b, const Cluster& cluster,
                                     const MeshLinks& links) {
  const double message = cluster.message_seconds;
  return {.data = b.data > 0 ? b.data / link(cluster, links.data_inter) + 2 * message : 0.0,
          .extras = b.extras > 0 ? b.extras / link(cluster, links.fsdp_inter) + message : 0.0,
          .stage_sum =
              b.stage_sum > 0 ? b.stage_sum / link(cluster, links.any_hop_inter()) + message : 0.0};
}

Config candidate_config(const Workload& w, const Candidate& c) {
  Config cfg;
  cfg.model_name = "plan";
  cfg.model = w.model;
  cfg.dtype = w.dtype;
  cfg.remat_policy = w.remat_policy;
  cfg.ici_pipeline_parallelism = c.stages;
  cfg.ici_fsdp_parallelism = c.fsdp;
  cfg.ici_data_parallelism = c.data;
  cfg.ici_tensor_parallelism = c.tensor;
  cfg.ici_context_parallelism = c.context;
  cfg.ici_expert_parallelism = c.expert;
  cfg.num_pipeline_microbatches = c.microbatches;
  cfg.num_pipeline_repeats = c.repeats;
  cfg.pipeline_parallel_layers = c.pipeline_layers;
  if (c.stage_layers.empty()) {
    cfg.num_layers_per_pipeline_stage = c.layers_per_stage;
  } else {  // uneven stages: the counts give every stage's layers (L stays at its default 1)
    cfg.pipeline_stage_layers.assign(c.stage_layers.begin(), c.stage_layers.end());
  }
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
  // Heads, KV heads, MLP columns, vocabulary: T ways (a GPT-style MLP's columns as Llama's).
  check_tensor_split(llama_twin(cfg.model), c.tensor);
  CAROUSEL_CHECK(c.expert == 1 || (cfg.model.is_moe() && cfg.model.num_experts % c.expert == 0),
                 "{} expert ranks need a model whose experts they divide (num_experts={})",
                 c.expert, cfg.model.num_experts);
  CAROUSEL_CHECK(c.context == 1 || cfg.model.max_target_length % (2 * c.context) == 0,
                 "max_target_length={} does not split into 2 x {} chunks",
                 cfg.model.max_target_length, c.context);
  cfg.validate_pipeline();
  microbatch_rows(cfg);  // throws when B does not split into M x F x D, or the tokens over T
  return cfg;
}

std::string candidate_keys(const Config& cfg) {
  const std::string stages =
      cfg.pipeline_stage_layers.empty()
          ? fmt::format("num_layers_per_pipeline_stage={}", cfg.num_layers_per_pipeline_stage)
          : fmt::format("pipeline_stage_layers={}", fmt::join(cfg.pipeline_stage_layers, ","));
  // One device runs the whole model as one stage: its stage layout and schedule would be keys
  // without effect, which `carousel train` refuses (host/config/config_effect.h).
  const std::string layout =
      cfg.num_devices() == 1
          ? std::string()
          : fmt::format(" num_pipeline_repeats={} {} pipeline_schedule={}", cfg.repeats(), stages,
                        cfg.pipeline_schedule) +
                (cfg.pipeline_parallel_layers == -1
                     ? std::string()
                     : fmt::format(" pipeline_parallel_layers={}", cfg.pipeline_parallel_layers));
  std::string keys = fmt::format(
      "ici_pipeline_parallelism={} ici_fsdp_parallelism={} ici_data_parallelism={} "
      "num_pipeline_microbatches={}{} per_device_batch_size={} dtype={} remat_policy={}",
      cfg.ici_pipeline_parallelism, cfg.ici_fsdp_parallelism, cfg.ici_data_parallelism,
      cfg.microbatches(), layout, cfg.per_device_batch_size, cfg.dtype, cfg.remat_policy);
  if (cfg.pipeline_fsdp_ag_per_repeat) keys += " pipeline_fsdp_ag_per_repeat=true";
  if (cfg.pipeline_fsdp_ag_once) keys += " pipeline_fsdp_ag_once=true";
  if (cfg.shard_optimizer_over_data) keys += " shard_optimizer_over_data=true";
  if (cfg.ici_tensor_parallelism > 1)
    keys += fmt::format(" ici_tensor_parallelism={}", cfg.ici_tensor_parallelism);
  if (cfg.ici_context_parallelism > 1)
    keys += fmt::format(" ici_context_parallelism={}", cfg.ici_context_parallelism);
  if (cfg.ici_expert_parallelism > 1)
    keys += fmt::format(" ici_expert_parallelism={}", cfg.ici_expert_parallelism);
  return keys;
}

CostedCandidate cost_candidate(const Cluster& cluster, const Candidate& c, Config cfg,
                               const MeshLinks* links) {
  CostedCandidate out{c, std::move(cfg), {}};
  out.links =
      links ? *links
            : mesh_links(c.stages, c.fsdp, c.data, cluster.devices_per_node, c.tensor, c.context);
  set_planner_costs(out.cfg, cluster, out.links);
  return out;
}

std::int64_t memory_lower_bound(const Config& cfg) {
  const sch::Layout layout = program_layout(cfg);
  std::int64_t most = 0;
  for (int s = 0; s < layout.ranks; ++s) {
    std::int64_t bytes =
        state_memory(cfg, layout, s).exact() + program_free_working_set(cfg, layout, s);
    // With FSDP a program uses at least one weight slot: its largest stage, gathered.
    if (cfg.ici_fsdp_parallelism > 1)
      bytes += param_layout(cfg, layout, s).max_padded() * compute_bytes(cfg);
    most = std::max(most, bytes);
  }
  return most;
}

double step_time_lower_bound(const CostedCandidate& c, const Cluster& cluster) {
  const Config& cfg = c.cfg;
  const sch::Layout layout = program_layout(cfg);
  const sch::StageLayers layers = stage_layers(cfg);
  // The busiest rank: its stages' layers (and the head on the last stage's rank) for every
  // microbatch, forward and backward; with layers outside the pipeline, those and the head for
  // the microbatches m = rank mod S.
  const double M = double(cfg.microbatches());
  const double f = cfg.schedule_cost_f, b = cfg.schedule_cost_b;
  const bool full = parse_remat_policy(cfg.remat_policy) == RematPolicy::Full;
  const double outside = sch::outside_cost(double(cfg.model.num_layers - layers.layers()),
                                           cfg.schedule_cost_head, f, b, full) /
                         (f + b);  // in layers of f + b, as the rest of `load`
  std::vector<double> load(std::size_t(layout.ranks), 0.0);
  for (int v = 0; v < layers.stages(); ++v) {
    const bool head = v == layers.stages() - 1 && !layout.outside;
    load[std::size_t(layout.rank_of(v))] +=
        M * (layers.count(v) + (head ? cfg.schedule_cost_head : 0.0));
  }
  for (int m = 0; layout.outside && m < int(M); ++m)
    load[std::size_t(layout.rank_of(layout.stages(), m))] += outside;
  // A rank starts no sooner than the first microbatch's forward has passed every stage before
  // its first one v0 (their layers at f each, nothing else counted), and ends no sooner than
  // that plus its load. Every forward and input-gradient backward of the rank comes before its
  // last backward of v0 (a stage's backward of a microbatch follows the later stages' and its
  // own forward), and that backward is followed by the input-gradient backwards of the stages
  // before v0: with at most b - w of a layer's backward on the input gradient (zero-bubble
  // schedules move w to W actions, which may come last), the step ends no sooner than the
  // start, the rank's load at f + b - w and those stages' layers at b - w.
  std::vector<double> start(std::size_t(layout.ranks), -1.0), tail(start.size(), 0.0);
  const double input_b = std::max(0.0, b - cfg.schedule_cost_w);
  double before_f = 0, before_b = 0;
  for (int v = 0; v < layers.stages(); ++v) {
    const std::size_t r = std::size_t(layout.rank_of(v));
    if (start[r] < 0) start[r] = before_f, tail[r] = before_b;
    before_f += layers.count(v) * f;
    before_b += layers.count(v) * input_b;
  }
  double compute = 0;
  for (std::size_t r = 0; r < load.size(); ++r) {
    const double begin = std::max(start[r], 0.0);
    compute = std::max({compute, begin + load[r] * (f + b),
                        begin + load[r] * (f + input_b) + tail[r]});
  }
  double exposed = 0;
  for (int s = 0; s < layout.ranks; ++s) {
    exposed = std::max(
        exposed, exposed_seconds(optimizer_link_bytes(cfg, layout, s, c.links), cluster, c.links));
  }
  return compute + exposed;
}

Prediction predict(const Workload& w, const Cluster& cluster, const Candidate& c) {
  return predict(w, cluster, cost_candidate(cluster, c, candidate_config(w, c)));
}

Prediction predict(const Workload& w, const Cluster& cluster, const CostedCandidate& costed) {
  const Config& cfg = costed.cfg;
  const MeshLinks& links = costed.links;
  const sch::Program& program = cached_lowered_program(cfg);
  const sch::SimResult sim = sch::simulate(program, schedule_costs(cfg));
  Prediction p;
  p.candidate = costed.candidate;
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
  p.tflops_per_device = model_flops_per_token(w.model) * tokens /
                        (p.step_seconds * double(cluster.devices)) / 1e12;
  p.mfu = p.tflops_per_device * 1e12 / cluster.peak_flops;
  p.device_memory_bytes = cluster.memory_bytes;
  p.fits = double(p.memory.total()) <= cluster.memory_bytes;
  p.keys =
      (w.model_keys.empty() ? "" : w.model_keys + " ") + candidate_keys(cfg) +
      fmt::format(
          " schedule_cost_f={:.6g} schedule_cost_b={:.6g} schedule_cost_w={:.6g} "
          "schedule_cost_p2p={:.6g} schedule_cost_all_gather={:.6g} "
          "schedule_cost_reduce_scatter={:.6g} schedule_cost_head={:.6g}",
          cfg.schedule_cost_f, cfg.schedule_cost_b, cfg.schedule_cost_w, cfg.schedule_cost_p2p,
          cfg.schedule_cost_all_gather, cfg.schedule_cost_reduce_scatter, cfg.schedule_cost_head);
  if (cfg.ici_expert_parallelism > 1)
    p.keys += fmt::format(" schedule_cost_exchange={:.6g}", cfg.schedule_cost_exchange);
  return p;
}

}  // namespace carousel::plan
