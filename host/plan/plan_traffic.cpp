// plan_traffic.cpp — the bytes one device of a candidate mesh sends per step over each link
// (plan_memory.h): pipeline hand-offs, FSDP gathers and reduce-scatters, the replicas' gradient
// sums, the tensor, context and expert groups' traffic, and where each group sits on nodes.
#include <algorithm>
#include <iterator>
#include <utility>

#include "compute/error.h"
#include "host/config/schedule_config.h"
#include "host/runtime/sharded_params.h"
#include "host/plan/plan_memory.h"
#include "models/stage.h"

namespace carousel::plan {

namespace sch = schedule;

MeshLinks mesh_links(int stages, int fsdp, int data, int devices_per_node, int tensor,
                     int context) {
  CAROUSEL_ASSERT(
      stages >= 1 && fsdp >= 1 && data >= 1 && devices_per_node >= 1 && tensor >= 1 && context >= 1,
      "mesh {} x {} x {} x {} x {} on nodes of {}", stages, fsdp, data, tensor, context,
      devices_per_node);
  const int S = stages, F = fsdp, D = data, T = tensor, C = context, G = devices_per_node;
  // host/mesh/mesh.h's rank numbers, node by node.
  auto node = [&](int d, int s, int f, int c, int t) {
    return ((((d * S + s) * F + f) * C + c) * T + t) / G;
  };
  MeshLinks links;
  links.hop_inter.assign(S, std::vector<bool>(S, false));
  for (int d = 0; d < D; ++d) {
    for (int s = 0; s < S; ++s) {
      for (int f = 0; f < F; ++f) {
        for (int c = 0; c < C; ++c) {
          for (int t = 0; t < T; ++t) {
            const int here = node(d, s, f, c, t);
            links.fsdp_inter = links.fsdp_inter || here != node(d, s, 0, c, t);
            links.data_inter = links.data_inter || here != node(0, s, f, 0, t);
            links.tensor_inter = links.tensor_inter || here != node(d, s, f, c, 0);
            links.context_inter = links.context_inter || here != node(d, s, f, 0, t);
            for (int u = 0; u < S; ++u) {
              if (here != node(d, u, f, c, t)) links.hop_inter[s][u] = true;
            }
          }
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

namespace {

// An all-reduce of `elements` float32 values over `n` ranks: each sends 2 (n - 1) / n of them.
double all_reduce_bytes(int n, std::int64_t elements) {
  return n > 1 ? 2 * ring_share(n, double(elements) * 4) : 0.0;
}

// visit(spec, elements) for each parameter's elements in [lo, hi) of `specs` laid back to back
// (a flat buffer's padding past the last is none of them).
template <class Visit>
void for_each_segment(std::span<const ParamSpec* const> specs, std::int64_t lo, std::int64_t hi,
                      Visit&& visit) {
  std::int64_t at = 0;
  for (const ParamSpec* spec : specs) {
    if (at >= hi) break;  // the rest lie past the segment
    const std::int64_t n = numel(spec->shape);
    const std::int64_t here = std::min(at + n, hi) - std::max(at, lo);
    if (here > 0) visit(*spec, here);
    at += n;
  }
}

}  // namespace

// The optimizer step's sums, as the executor makes them: each parameter's gradient over its holders
// by the placement rule (gradient_holders, host/runtime/sharded_params.h), run by run — its stage
// holders, its data holders, its tensor holders — plus the buffers' reduce-scatters and gathers
// (the extras over FSDP, a ZeRO-1 shard over its piece owners).
LinkBytes optimizer_link_bytes(const Config& cfg, const sch::Layout& layout, int stage_rank,
                               const MeshLinks& links, int fsdp_rank, int replica_rank) {
  const ParamLayout p = param_layout(cfg, layout, stage_rank);
  const MeshShape mesh = MeshShape::of(cfg);
  const MeshAxes axes = mesh.axes();
  const bool sliced = cfg.shard_optimizer_over_data && mesh.expert_replicas() > 1;
  // This replica's piece among the owners (the replicas of its expert rank).
  const int C = mesh.context, E = mesh.expert;
  const int piece_rank = replica_rank / C / E * C + replica_rank % C;
  const auto holders = [&](const ParamSpec& spec, bool extra) {
    return gradient_holders(spec, extra, extra ? false : sliced, cfg.model, mesh, layout,
                            stage_rank);
  };
  LinkBytes b;
  // A data sum over the expert ranks alone (ZeRO-1's dense tensors with E > 1) is the expert
  // group's traffic; any sum over replicas or context ranks the data group's.
  const auto data_sum = [&](const GradientHolders& g, std::int64_t n) {
    const double bytes = all_reduce_bytes(axes.size(g.data), n);
    (g.data == mesh_group::expert ? b.expert : b.data) += bytes;
  };
  // Each layer's parameters in table order (one tensor and expert rank's: every rank of a group
  // has the same layout).
  for (const StageElements& s : p.stages) {
    const std::span<const ParamSpec* const> specs =
        layer_specs_of(cfg.model, mesh.tensor, E, s.first_layer, s.layers);
    const std::int64_t lo = fsdp_rank * s.shard;
    for_each_segment(specs, lo, lo + s.shard,
                     [&](const ParamSpec& spec, std::int64_t n) { data_sum(holders(spec, false), n); });
    if (sliced) {  // the gradient's reduce-scatter and the updated weights' all-gather
      b.data += 2 * ring_share(mesh.expert_replicas(), double(s.piece * mesh.expert_replicas()) * 4);
    }
    const std::int64_t piece_lo = lo + (sliced ? std::min(s.shard, piece_rank * s.piece) : 0);
    const std::int64_t piece_hi = std::min(lo + s.shard, piece_lo + s.piece);
    for_each_segment(specs, piece_lo, piece_hi, [&](const ParamSpec& spec, std::int64_t n) {
      b.tensor += all_reduce_bytes(holders(spec, false).tensor, n);
    });
  }
  // Extras: summed over their stage holders, reduce-scattered and gathered over FSDP, and this
  // FSDP rank's piece summed over its data and tensor holders.
  const std::vector<const ParamSpec*>& extras = p.extras_specs;
  for_each_segment(extras, 0, p.extras, [&](const ParamSpec& spec, std::int64_t n) {
    b.stage_sum += all_reduce_bytes(holders(spec, true).stage, n);
  });
  if (p.extras > 0) b.extras = 2 * ring_share(mesh.fsdp, double(p.extras_piece * mesh.fsdp) * 4);
  const std::int64_t extras_lo = fsdp_rank * p.extras_piece;
  for_each_segment(extras, extras_lo, extras_lo + p.extras_piece,
                   [&](const ParamSpec& spec, std::int64_t n) {
                     const GradientHolders g = holders(spec, true);
                     data_sum(g, n);
                     b.tensor += all_reduce_bytes(g.tensor, n);
                   });
  b.inter = (links.fsdp_inter ? b.extras : 0) + (links.data_inter ? b.data + b.expert : 0) +
            (links.tensor_inter ? b.tensor : 0) + (links.any_hop_inter() ? b.stage_sum : 0);
  b.intra = b.data + b.extras + b.tensor + b.expert + b.stage_sum - b.inter;
  return b;
}

// One way of the rows' exchange: (E-1)/E of the k x tokens rows, balanced routing. The MoE block
// routes every token of the context rank's microbatch on each tensor rank (the gathered rows).
double expert_rows_bytes(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  const int E = int(cfg.ici_expert_parallelism);
  return double(context_tokens(cfg) * m.num_experts_per_tok) * double(E - 1) / E *
         double(m.emb_dim) * compute_bytes(cfg);
}

namespace {
double expert_counts_bytes(const Config& cfg) {
  return double(cfg.ici_expert_parallelism - 1) * double(cfg.model.num_experts) * 8;
}
}  // namespace

double expert_exchange_bytes(const Config& cfg) {
  if (cfg.ici_expert_parallelism == 1) return 0;
  return expert_counts_bytes(cfg) + 2 * expert_rows_bytes(cfg);
}

namespace {

// The tensor group's collectives in a layer's forward: one per tensor-parallel piece of the
// layer (models/parallel/linear.h), each moving an [N, E] activation of (T - 1) x this rank's rows.
constexpr int kTensorCollectivesPerLayer = int(std::size(kLlamaTensorPieces));

// The share of them a backward's recomputation runs again under `policy` (models/layer.h).
double tensor_replay_share(RematPolicy policy) {
  if (policy == RematPolicy::None) return 0;
  if (policy == RematPolicy::Full) return 1;  // the whole forward again
  const RematKeep keep = remat_keep(policy);
  int replayed = 0;
  for (const TensorPiece& p : kLlamaTensorPieces) replayed += recompute_replays(p.piece, keep);
  return double(replayed) / kTensorCollectivesPerLayer;
}

}  // namespace

int tensor_collectives_per_layer() { return kTensorCollectivesPerLayer; }

LayerTraffic layer_traffic(const Config& cfg) {
  const int T = int(cfg.ici_tensor_parallelism), C = int(cfg.ici_context_parallelism);
  const double c = compute_bytes(cfg);
  const double rows = double(rank_rows(cfg) * cfg.model.emb_dim) * c;
  const double keys = double(context_tokens(cfg) * layer_share(cfg.model, T, 0).kv) * c;
  const ModelConfig& m = cfg.model;
  const double moe_share =
      m.is_moe() ? double(m.num_layers - m.first_num_dense_layers) / double(m.num_layers) : 0.0;
  return {double(kTensorCollectivesPerLayer) * (T - 1) * rows, 2.0 * (C - 1) * keys, moe_share * expert_exchange_bytes(cfg),
          moe_share * expert_counts_bytes(cfg)};
}

LinkBytes device_link_bytes(const Config& cfg, const sch::Program& lowered, int stage_rank,
                            const MeshLinks& links, int fsdp_rank, int replica_rank) {
  const ParamLayout p = param_layout(cfg, lowered.layout, stage_rank);
  const int F = int(cfg.ici_fsdp_parallelism), T = int(cfg.ici_tensor_parallelism);
  const double c = compute_bytes(cfg);
  const double act = double(rank_rows(cfg) * cfg.model.emb_dim) * c;
  LinkBytes b =
      optimizer_link_bytes(cfg, lowered.layout, stage_rank, links, fsdp_rank, replica_rank);
  const double optimizer_tensor = b.tensor, optimizer_expert = b.expert;
  const LayerTraffic layer = layer_traffic(cfg);
  // A backward first recomputes (part of) the forward: its tensor pieces' collectives as
  // tensor_replay_share says, and the context gathers unless the attention output is kept.
  const RematPolicy policy = parse_remat_policy(cfg.remat_policy);
  const RematKeep keep = remat_keep(policy);
  const double tensor_replay = tensor_replay_share(policy);
  const double context_replay = policy == RematPolicy::None ? 0 : keep.context ? 0 : 1.0;
  const sch::StageLayers map = stage_layers(cfg);
  // Expert parallelism, per MoE layer: a forward all-gathers the [X] row counts and sends its
  // rows to their experts and the results back; a backward sends the row gradients both ways,
  // after recomputing the forward (recomputes_routed_experts: every policy but none).
  const ModelConfig& m = cfg.model;
  const double exchange_forward = expert_exchange_bytes(cfg);
  const double exchange_backward =
      2 * expert_rows_bytes(cfg) + (recomputes_routed_experts(policy) ? exchange_forward : 0.0);
  // Context parallelism with the balancing loss: each MoE layer's forward (and recomputation)
  // all-reduces its sequences' [X] counts and score sums over the context group, in double.
  const int C = int(cfg.ici_context_parallelism);
  const double pool = m.is_moe() && m.load_balance_loss_weight != 0 && C > 1
                          ? 2 * ring_share(C, double(microbatch_rows(cfg) * m.num_experts * 2 * 8))
                          : 0.0;
  const double pool_backward = policy == RematPolicy::None ? 0.0 : pool;
  // Tensor parallelism: an MoE layer's backward all-reduces the combine weights' gradients (one
  // float32 per routed row: each tensor rank's experts' columns contribute a part).
  const double combine_dots =
      m.is_moe() && T > 1
          ? 2 * ring_share(T, double(context_tokens(cfg) * m.num_experts_per_tok) * 4)
          : 0.0;
  const auto moe_layers = [&](int stage) {
    int n = 0;
    for (int l = map.first(stage); l < map.first(stage) + map.count(stage); ++l)
      n += m.is_moe_layer(l) ? 1 : 0;
    return double(n);
  };
  const int last = lowered.layout.stages() - 1;
  const bool outside = lowered.layout.outside;
  // The head's vocabulary parallelism: it gathers the normalised rows, two float32 statistics
  // per token, and reduce-scatters its input gradient (its backward runs with its forward).
  const double head_tensor = 2 * (T - 1) * act + 2.0 * (T - 1) * double(context_tokens(cfg)) * 4;
  double pipe_inter = 0;
  for (const auto& a : lowered.ranks.at(stage_rank)) {
    if (a.kind == sch::Kind::OUTSIDE) {  // the layers after the pipeline: forward and backward,
                                         // nothing recomputed; the head
      double n = 0, moe = 0;
      for (int l = map.layers(); l < m.num_layers; ++l) {
        n += 1;
        moe += m.is_moe_layer(l) ? 1 : 0;
      }
      b.tensor += 2 * n * layer.tensor + head_tensor + moe * combine_dots;
      b.context += 2 * n * layer.context + moe * pool;
      b.expert += moe * (exchange_forward + 2 * expert_rows_bytes(cfg));
      continue;
    }
    const double layers = a.is_compute() ? double(map.count(a.stage)) : 0.0;
    if (a.kind == sch::Kind::F) {
      b.expert += moe_layers(a.stage) * exchange_forward;
      b.context += moe_layers(a.stage) * pool;
    }
    if (a.kind == sch::Kind::B || a.kind == sch::Kind::I) {
      b.expert += moe_layers(a.stage) * exchange_backward;
      b.context += moe_layers(a.stage) * pool_backward;
      b.tensor += moe_layers(a.stage) * combine_dots;
    }
    if (a.kind == sch::Kind::F) {
      b.tensor += layers * layer.tensor;
      b.context += layers * layer.context;
      // Vocabulary parallelism: the embedding reduce-scatters its looked-up rows; the head (on
      // the last stage unless layers run outside the pipeline) as above.
      if (a.stage == 0) b.tensor += (T - 1) * act;
      if (a.stage == last && !outside) b.tensor += head_tensor;
    } else if (a.kind == sch::Kind::B || a.kind == sch::Kind::I) {
      b.tensor += layers * layer.tensor * (1 + tensor_replay);
      b.context += layers * layer.context * (1 + context_replay);
      if (a.stage == 0) b.tensor += (T - 1) * act;  // the embedding's gradient, every row
    }
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
  const double layers_tensor = b.tensor - optimizer_tensor;
  const double layers_expert = b.expert - optimizer_expert;
  // An expert group sits on the data axis: its exchange crosses the replicas' links.
  const double inter = pipe_inter + (links.fsdp_inter ? fsdp : 0) +
                       (links.tensor_inter ? layers_tensor : 0) +
                       (links.context_inter ? b.context : 0) +
                       (links.data_inter ? layers_expert : 0);
  b.inter += inter;
  b.intra += b.pipeline + fsdp + layers_tensor + b.context + layers_expert - inter;
  return b;
}

}  // namespace carousel::plan
