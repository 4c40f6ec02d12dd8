// plan_memory.cpp — bytes held and bytes sent by one device of a candidate mesh. The exact parts
// follow ShardedParams' layout (host/parallel/sharded_params.cpp, stage by stage) and the
// executor's stash; the working set is a bound (see plan_memory.h).
#include "host/plan/plan_memory.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "compute/error.h"
#include "host/config/schedule_config.h"
#include "models/params.h"

namespace carousel::plan {

namespace sch = schedule;

const std::vector<ParamSpec>& table_of(const ModelConfig& m) {
  thread_local ModelConfig cached;
  thread_local std::vector<ParamSpec> table;
  const auto shape = [](const ModelConfig& c) {
    return std::tie(c.decoder_block, c.vocab_size, c.emb_dim, c.num_layers, c.num_query_heads,
                    c.num_kv_heads, c.mlp_dim, c.logits_via_embedding);
  };
  if (table.empty() || shape(cached) != shape(m)) {
    table = param_table(m);
    cached = m;
  }
  return table;
}

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Sends (F-1)/F of a buffer of n bytes per device in a ring all-gather or reduce-scatter.
double ring_share(int group, double n) { return group > 1 ? n * double(group - 1) / group : 0.0; }

// A layer's saved activations (models/layer.h LayerSaved) for `rows` tokens, in elements of the
// compute dtype; the float32 statistics (rstd, lse) are counted at 2 elements each so the sum is
// an upper bound in either dtype.
std::int64_t layer_saved_elements(const ModelConfig& m, std::int64_t rows) {
  const std::int64_t E = m.emb_dim, kv = m.num_kv_heads * m.head_dim(), Fm = m.mlp_dim;
  // x, xn1, q, att, h, hn: [rows, E]; k, v: [rows, kv]; gate, up, act: [rows, Fm];
  // rstd1, rstd2: [rows]; lse: [rows, H] (b x H x T).
  return rows * (6 * E + 2 * kv + 3 * Fm) + 2 * rows * (2 + m.num_query_heads);
}

// What a deferred weight gradient (an I done, its W pending) keeps per layer: the GEMM inputs
// (xn1, att, hn, act) and the output gradients (dq, dk, dv, d attention out, dgate, dup, dy).
std::int64_t deferred_elements(const ModelConfig& m, std::int64_t rows) {
  const std::int64_t E = m.emb_dim, kv = m.num_kv_heads * m.head_dim(), Fm = m.mlp_dim;
  return rows * (6 * E + 2 * kv + 3 * Fm);
}

// Peak count of buffers alive in program order between an opening and a closing action of
// the same (stage, microbatch) on one rank.
int peak_open(const std::vector<sch::Action>& actions, sch::Kind open,
              std::initializer_list<sch::Kind> close) {
  std::set<std::pair<int, int>> live;  // (stage, microbatch) opened and not yet closed
  std::size_t peak = 0;
  for (const auto& a : actions) {
    if (a.kind == open) {
      live.insert({a.stage, a.index});
      peak = std::max(peak, live.size());
    }
    // A closing action whose input was local (no RECV opened it) closes nothing.
    if (std::find(close.begin(), close.end(), a.kind) != close.end())
      live.erase({a.stage, a.index});
  }
  return int(peak);
}

}  // namespace

int compute_bytes(const Config& cfg) { return cfg.dtype == "bfloat16" ? 2 : 4; }

std::int64_t microbatch_rows(const Config& cfg) { return cfg.check_microbatch_split(); }

namespace {
std::int64_t sum_over(const std::vector<StageElements>& stages,
                      std::int64_t StageElements::*count) {
  std::int64_t n = 0;
  for (const auto& s : stages) n += s.*count;
  return n;
}
}  // namespace

std::int64_t ParamLayout::shards() const { return sum_over(stages, &StageElements::shard); }
std::int64_t ParamLayout::pieces() const { return sum_over(stages, &StageElements::piece); }
std::int64_t ParamLayout::padded() const { return sum_over(stages, &StageElements::padded); }
std::int64_t ParamLayout::max_padded() const {
  std::int64_t n = 0;
  for (const auto& s : stages) n = std::max(n, s.padded);
  return n;
}
int ParamLayout::max_layers() const {
  int n = 0;
  for (const auto& s : stages) n = std::max(n, s.layers);
  return n;
}
const StageElements& ParamLayout::stage(int v) const {
  for (const auto& s : stages) {
    if (s.stage == v) return s;
  }
  CAROUSEL_ASSERT(false, "virtual stage {} is not on this rank", v);
  return stages.front();
}

ParamLayout param_layout(const Config& cfg, const sch::Layout& layout, int stage_rank) {
  const std::int64_t F = cfg.ici_fsdp_parallelism, D = cfg.ici_data_parallelism;
  const bool zero1 = cfg.shard_optimizer_over_data && D > 1;
  // The stage map ShardedParams uses: even stages, uneven ones (pipeline_stage_layers), or the
  // whole model as one stage on one device.
  const sch::StageLayers map = stage_layers(cfg);
  CAROUSEL_ASSERT(map.stages() == layout.stages(), "the stage layout {} does not fit {} stages",
                  map.to_string(), layout.stages());
  const bool first = layout.rank_of(0) == stage_rank;
  const bool last = layout.rank_of(layout.stages() - 1) == stage_rank;
  ParamLayout p;
  std::vector<std::int64_t> elements(std::size_t(layout.stages()), 0);
  for (const auto& spec : table_of(cfg.model)) {
    if (spec.layer >= 0) {
      elements[std::size_t(map.stage_of(int(spec.layer)))] += numel(spec.shape);
    } else if (spec.role == ParamRole::Embedding ? first || (last && cfg.model.logits_via_embedding)
                                                 : last) {
      p.extras += numel(spec.shape);
    }
  }
  for (int v = 0; v < layout.stages(); ++v) {
    if (layout.rank_of(v) != stage_rank) continue;
    StageElements s;
    s.stage = v;
    s.layers = map.count(v);
    s.padded = ceil_div(elements[std::size_t(v)], F) * F;
    s.shard = s.padded / F;
    s.piece = zero1 ? ceil_div(s.shard, D) : s.shard;
    p.stages.push_back(s);
  }
  p.extras_piece = ceil_div(p.extras, F);
  return p;
}

MemoryBreakdown state_memory(const Config& cfg, const sch::Layout& layout, int stage_rank) {
  const ParamLayout p = param_layout(cfg, layout, stage_rank);
  const std::int64_t c = compute_bytes(cfg);
  const std::int64_t held = p.shards() + p.extras;
  MemoryBreakdown mem;
  mem.weights = 4 * held + (c == 4 ? 0 : c * held);  // bf16 compute copies beside the masters
  mem.gradients = 4 * held;
  mem.optimizer = 2 * 4 * (p.pieces() + p.extras_piece);
  if (cfg.ici_fsdp_parallelism > 1) mem.gradient_buffers = p.padded() * 4;
  return mem;
}

MemoryBreakdown device_memory(const Config& cfg, const sch::Program& lowered, int stage_rank,
                              int peak_stashed) {
  CAROUSEL_ASSERT(stage_rank >= 0 && stage_rank < lowered.layout.ranks,
                  "stage rank {} of a {}-rank program", stage_rank, lowered.layout.ranks);
  const ParamLayout p = param_layout(cfg, lowered.layout, stage_rank);
  const ModelConfig& m = cfg.model;
  const std::int64_t c = compute_bytes(cfg), F = cfg.ici_fsdp_parallelism;
  // Layers of the rank's largest stage: what one stage's stash, recompute and deferred weight
  // gradients hold at most (every stage's count with even stages).
  const std::int64_t L = p.max_layers();
  const std::int64_t rows = microbatch_rows(cfg) * m.max_target_length;  // tokens of a microbatch
  const auto& actions = lowered.ranks.at(stage_rank);
  MemoryBreakdown mem = state_memory(cfg, lowered.layout, stage_rank);
  if (F > 1) {
    std::set<int> slots;  // a slot's buffer, once allocated, is kept for the run
    for (const auto& a : actions) {
      if (a.kind == sch::Kind::AG_ISSUE) slots.insert(a.index);
    }
    mem.weight_slots = std::int64_t(slots.size()) * p.max_padded() * c;
  }
  const bool no_remat = cfg.remat_policy == "none";
  const std::int64_t stash = rows * m.emb_dim + (no_remat ? L * layer_saved_elements(m, rows) : 0);
  mem.activations = std::int64_t(peak_stashed) * stash * c;

  // Working set (a bound): receives posted before their compute, sends in flight, deferred
  // weight gradients, then the largest of one stage's backward (remat recomputes L layers; each
  // layer's backward temporaries as much again), the head's logits and the optimizer's buffers.
  const std::int64_t act = rows * m.emb_dim * c;
  const int receives = peak_open(actions, sch::Kind::RECV_F, {sch::Kind::F}) +
                       peak_open(actions, sch::Kind::RECV_B, {sch::Kind::B, sch::Kind::I});
  const int pending_w = peak_open(actions, sch::Kind::I, {sch::Kind::W});
  const std::int64_t backward = ((no_remat ? 0 : L) + 2) * layer_saved_elements(m, rows) * c;
  const bool last = lowered.layout.rank_of(lowered.layout.stages() - 1) == stage_rank;
  const bool first = lowered.layout.rank_of(0) == stage_rank;
  const std::int64_t head = last ? 2 * rows * m.vocab_size * c + 4 * rows * m.emb_dim * c : 0;
  std::int64_t largest_shard = 0;
  for (const auto& s : p.stages) largest_shard = std::max(largest_shard, s.shard);
  const std::int64_t optimizer =
      4 * (2 * std::max(p.extras, largest_shard) + 2 * F * p.extras_piece);
  const std::int64_t tokens = (first || last) ? 2 * cfg.microbatches() * rows * 4 : 0;
  const std::int64_t rope = 2 * m.max_target_length * m.head_dim() * 8;
  mem.working_set = (receives + 2) * act + pending_w * L * deferred_elements(m, rows) * c +
                    std::max({backward, head, optimizer}) + tokens + rope;
  return mem;
}

MeshLinks mesh_links(int stages, int fsdp, int data, int devices_per_node) {
  CAROUSEL_ASSERT(stages >= 1 && fsdp >= 1 && data >= 1 && devices_per_node >= 1,
                  "mesh {} x {} x {} on nodes of {}", stages, fsdp, data, devices_per_node);
  const int S = stages, F = fsdp, D = data, G = devices_per_node;
  auto node = [&](int d, int s, int f) { return ((d * S + s) * F + f) / G; };
  MeshLinks links;
  links.hop_inter.assign(S, std::vector<bool>(S, false));
  for (int d = 0; d < D; ++d) {
    for (int s = 0; s < S; ++s) {
      for (int f = 0; f < F; ++f) {
        links.fsdp_inter = links.fsdp_inter || node(d, s, f) != node(d, s, 0);
        links.data_inter = links.data_inter || node(d, s, f) != node(0, s, f);
        for (int t = 0; t < S; ++t) {
          if (node(d, s, f) != node(d, t, f)) links.hop_inter[s][t] = true;
        }
      }
    }
  }
  return links;
}

bool MeshLinks::any_hop_inter() const {
  for (const auto& row : hop_inter) {
    for (const bool inter : row) {
      if (inter) return true;
    }
  }
  return false;
}

LinkBytes optimizer_link_bytes(const Config& cfg, const sch::Layout& layout, int stage_rank,
                               const MeshLinks& links) {
  const ParamLayout p = param_layout(cfg, layout, stage_rank);
  const int F = int(cfg.ici_fsdp_parallelism), D = int(cfg.ici_data_parallelism);
  const bool zero1 = cfg.shard_optimizer_over_data && D > 1;
  // Replicas: all-reduce of the float32 shards (2 (D-1)/D), or with ZeRO-1 a reduce-scatter of
  // the gradient and an all-gather of the updated weights (the same bytes). Extras: a
  // reduce-scatter and an all-gather over FSDP of the float32 table, and an all-reduce over the
  // replicas of this rank's piece.
  const double shards = double(zero1 ? p.pieces() * D : p.shards()) * 4;
  const double replicas = 2 * ring_share(D, shards);
  const double extras_fsdp = p.extras > 0 ? 2 * ring_share(F, double(p.extras_piece * F) * 4) : 0;
  const double extras_data = 2 * ring_share(D, double(p.extras_piece) * 4);
  LinkBytes b;
  b.data = replicas + extras_data;
  b.extras = extras_fsdp;
  b.inter = (links.fsdp_inter ? b.extras : 0) + (links.data_inter ? b.data : 0);
  b.intra = b.data + b.extras - b.inter;
  return b;
}

LinkBytes device_link_bytes(const Config& cfg, const sch::Program& lowered, int stage_rank,
                            const MeshLinks& links) {
  const ParamLayout p = param_layout(cfg, lowered.layout, stage_rank);
  const int F = int(cfg.ici_fsdp_parallelism);
  const double c = compute_bytes(cfg);
  const double act =
      double(microbatch_rows(cfg) * cfg.model.max_target_length * cfg.model.emb_dim) * c;
  LinkBytes b = optimizer_link_bytes(cfg, lowered.layout, stage_rank, links);
  double pipe_inter = 0;
  for (const auto& a : lowered.ranks.at(stage_rank)) {
    if (a.kind == sch::Kind::SEND_F || a.kind == sch::Kind::SEND_B) {
      b.pipeline += act;
      pipe_inter += links.hop_inter[stage_rank].at(a.peer) ? act : 0.0;
    } else if (a.kind == sch::Kind::AG_ISSUE) {
      b.fsdp_gather += ring_share(F, double(p.stage(a.stage).padded) * c);
    } else if (a.kind == sch::Kind::REDUCE_SCATTER) {
      b.fsdp_scatter += ring_share(F, double(p.stage(a.stage).padded) * 4);
    }
  }
  const double fsdp = b.fsdp_gather + b.fsdp_scatter;
  const double inter = pipe_inter + (links.fsdp_inter ? fsdp : 0);
  b.inter += inter;
  b.intra += b.pipeline + fsdp - inter;
  return b;
}

}  // namespace carousel::plan
