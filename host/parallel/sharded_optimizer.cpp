// sharded_optimizer.cpp — the optimizer step of one rank: gradients completed over the mesh, the
// global norm, clipping and AdamW on the elements this rank owns.
//
// Gradients are complete once every reduce-scatter has landed, the shards are summed over the
// data replicas (only the owned piece with ZeRO-1), the tied embedding's two uses are added, and
// the replicated extras' gradients are summed over the FSDP group and the replicas. Loss and
// squared gradient norm are summed over all ranks in rank order, each shard and each replicated
// tensor counted once; every rank then clips and steps AdamW on what it owns, and replicas apply
// identical updates to identical values.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "host/parallel/optimizer.h"
#include "host/parallel/sharded_params.h"
#include "host/reliability/fault_injection.h"

namespace carousel {

namespace {

// A piece of a flat parameter buffer that belongs to one parameter (for its weight decay).
struct Segment {
  std::int64_t begin, length;  // in the flat buffer of `specs`
  const ParamSpec* spec;
};

// The parameter pieces of elements [lo, hi) of the flat buffer of `specs` (laid out in order).
std::vector<Segment> segments_in(const std::vector<ParamSpec>& specs, std::int64_t lo,
                                 std::int64_t hi) {
  std::vector<Segment> out;
  std::int64_t offset = 0;
  for (const auto& spec : specs) {
    const std::int64_t a = std::max(offset, lo), b = std::min(offset + numel(spec.shape), hi);
    if (a < b) out.push_back({a, b - a, &spec});
    offset += numel(spec.shape);
  }
  return out;
}

}  // namespace

void ShardedParams::reduce_gradients() {
  finish_gathers();
  for (auto& [event, buffer] : reduce_scatters_) event.wait();
  reduce_scatters_.clear();
  if (place_.mesh.replicas() > 1) {
    for (auto& [stage, s] : stages_) {
      if (zero1_) {
        // With expert parallelism the dense tensors' sums over the expert ranks first, then the
        // owned piece's sum over this expert rank's replicas.
        if (place_.mesh.expert > 1) reduce_dense_over_expert_ranks(s);
        reduce_into_owned(stage_pieces(s), s.grads);  // only the owned piece's sum
      } else {
        reduce_over_replicas(s);
      }
    }
  }
  // Extras: the tied table's two uses first (full gradients on both ranks), then FSDP rank f
  // gets the group's sum for its piece only, summed over the replicas too.
  if (comms_.tie) {
    const Tensor& g = extras_grads_.at(ParamRole::Embedding);
    comms_.tie->all_reduce(g, g, ReduceOp::Sum).wait();
  }
  // Layers outside the pipeline, the final norm and lm_head (the extras after the embedding, in
  // table order): every stage rank ran some microbatches through them.
  if (layout_.outside && place_.mesh.stages > 1) {
    const std::int64_t begin =
        extras_.has(ParamRole::Embedding) ? extras_.at(ParamRole::Embedding).numel() : 0;
    const Tensor g = extras_grads_.flat.view(begin, {extras_grads_.flat.numel() - begin});
    comms_.pipe->all_reduce(g, g, ReduceOp::Sum).wait();
  }
  const Pieces extras = extras_pieces();
  if (extras.n > 0) {
    const bool replicas = place_.mesh.replicas() > 1;
    reduce_into_owned(extras, extras_grads_.flat,
                      replicas && place_.mesh.expert == 1 ? comms_.data.get() : nullptr);
    if (replicas && place_.mesh.expert > 1) reduce_extras_over_replicas(extras);
  }
  reduce_tensor_replicas();
}

// The extras' routed experts (layers after the pipeline) are this expert rank's own: the owned
// piece's runs of dense tensors are summed over every replica, those of routed experts over the
// replicas of this expert rank. Every rank of a group holds the same layout.
void ShardedParams::reduce_extras_over_replicas(const Pieces& p) {
  const auto segments = segments_in(extras_.specs, p.begin(), p.begin() + p.length());
  for (std::size_t i = 0; i < segments.size();) {
    const bool expert = is_routed_expert(segments[i].spec->role);
    std::size_t j = i + 1;
    while (j < segments.size() && is_routed_expert(segments[j].spec->role) == expert) ++j;
    const std::int64_t begin = segments[i].begin;
    const std::int64_t end = segments[j - 1].begin + segments[j - 1].length;
    const Tensor run = extras_grads_.flat.view(begin, {end - begin});
    (expert ? comms_.expert_data : comms_.data)->all_reduce(run, run, ReduceOp::Sum).wait();
    i = j;
  }
}

void ShardedParams::reduce_over_replicas(const StageShard& s) {
  if (place_.mesh.expert == 1) {
    comms_.data->all_reduce(s.grads, s.grads, ReduceOp::Sum).wait();
    return;
  }
  for_each_run(s, [&](bool expert, const Tensor& run) {
    (expert ? comms_.expert_data : comms_.data)->all_reduce(run, run, ReduceOp::Sum).wait();
  });
}

void ShardedParams::reduce_dense_over_expert_ranks(const StageShard& s) {
  for_each_run(s, [&](bool expert, const Tensor& run) {
    if (!expert) comms_.expert->all_reduce(run, run, ReduceOp::Sum).wait();
  });
}

// Every rank of a group has the same layout (expert ranks hold as many experts), so the runs
// and their order are the same on all of them.
template <class Visit>
void ShardedParams::for_each_run(const StageShard& s, Visit&& visit) {
  const std::int64_t shard_lo = place_.fsdp_rank * s.shard;
  const auto segments = segments_in(s.specs, shard_lo, shard_lo + s.shard);
  for (std::size_t i = 0; i < segments.size();) {
    const bool expert = is_routed_expert(segments[i].spec->role);
    std::size_t j = i + 1;
    while (j < segments.size() && is_routed_expert(segments[j].spec->role) == expert) ++j;
    const std::int64_t begin = segments[i].begin - shard_lo;
    const std::int64_t end = segments[j - 1].begin + segments[j - 1].length - shard_lo;
    visit(expert, s.grads.view(begin, {end - begin}));
    i = j;
  }
}

Communicator* ShardedParams::tensor_replica_group(const ParamSpec& spec) const {
  if (spec.tensor_replicas == 1) return nullptr;
  return spec.tensor_replicas == place_.mesh.tensor ? comms_.tensor.get() : comms_.kv_share.get();
}

// Parts of parameters held by several tensor ranks: each rank's gradient is a partial sum (its
// own rows for a norm gain, its own query heads for a shared KV head), summed over them on the
// elements this rank applies. The T ranks of a group share one layout, so they visit the same
// parts in the same order.
void ShardedParams::reduce_tensor_replicas() {
  if (place_.mesh.tensor == 1) return;
  const Pieces extras = extras_pieces();
  for (const Segment& seg :
       segments_in(extras_.specs, extras.begin(), extras.begin() + extras.length())) {
    if (Communicator* group = tensor_replica_group(*seg.spec)) {
      const Tensor g = extras_grads_.flat.view(seg.begin, {seg.length});
      group->all_reduce(g, g, ReduceOp::Sum).wait();
    }
  }
  for (auto& [stage, s] : stages_) {
    const Pieces p = stage_pieces(s);
    const std::int64_t shard_lo = place_.fsdp_rank * s.shard;
    for (const Segment& seg :
         segments_in(s.specs, shard_lo + p.begin(), shard_lo + p.begin() + p.length())) {
      Communicator* group = tensor_replica_group(*seg.spec);
      if (!group) continue;
      const Tensor g = s.grads.view(seg.begin - shard_lo, {seg.length});
      group->all_reduce(g, g, ReduceOp::Sum).wait();
    }
  }
}

// Every gradient element this rank applies (what optimizer_step updates here): its extras piece
// and each stage's piece — on replicas too, which apply values they do not count in the norm.
template <class Visit>
void ShardedParams::for_each_applied_gradient(Visit&& visit) {
  for_each_applied_extra(visit);
  for_each_applied_stage_gradient(visit);
}

template <class Visit>
void ShardedParams::for_each_applied_extra(Visit&& visit) {
  const Pieces extras = extras_pieces();
  for (const Segment& seg :
       segments_in(extras_.specs, extras.begin(), extras.begin() + extras.length())) {
    visit(*seg.spec, extras_grads_.flat.view(seg.begin, {seg.length}));
  }
}

template <class Visit>
void ShardedParams::for_each_applied_stage_gradient(Visit&& visit) {
  for (const auto& [stage, s] : stages_) {
    const Pieces p = stage_pieces(s);
    const std::int64_t shard_lo = place_.fsdp_rank * s.shard;
    for (const Segment& seg :
         segments_in(s.specs, shard_lo + p.begin(), shard_lo + p.begin() + p.length())) {
      visit(*seg.spec, s.grads.view(seg.begin - shard_lo, {seg.length}));
    }
  }
}

// Whether a gradient this rank applies but does not count in the norm (a data replica's copy) is
// not finite: a value corrupted after the reductions on a replica would otherwise pass the
// global check, which sees only the owners' copies, and be applied there alone.
bool ShardedParams::uncounted_gradient_nonfinite() {
  bool bad = false;
  for_each_applied_extra([&](const ParamSpec& spec, const Tensor& grad) {
    if (!counts_extra(spec)) bad |= !std::isfinite(be_.sum_squares(grad));
  });
  if (place_.mesh.expert > 1) {  // the tensors another replica of them counts
    for_each_applied_stage_gradient([&](const ParamSpec& spec, const Tensor& grad) {
      if (!(counts_owned(spec) && counts_tensor_part(spec)))
        bad |= !std::isfinite(be_.sum_squares(grad));
    });
  } else if (!(zero1_ || place_.writes_shards())) {
    for (const auto& [stage, s] : stages_) {
      const Pieces p = stage_pieces(s);
      if (p.length() > 0)
        bad |= !std::isfinite(be_.sum_squares(s.grads.view(p.begin(), {p.length()})));
    }
  } else if (place_.mesh.tensor > 1) {  // parts another tensor rank counts
    for_each_applied_stage_gradient([&](const ParamSpec& spec, const Tensor& grad) {
      if (!counts_tensor_part(spec)) bad |= !std::isfinite(be_.sum_squares(grad));
    });
  }
  return bad;
}

// This rank's share of the squared global norm, each element of the model on exactly one rank:
// the extras on the first replica holding them (a stage copy never; the final norm's gain on
// tensor rank 0), each shard's piece on its owner (every rank with ZeRO-1, data rank 0 without),
// summed per extras parameter and per whole shard piece (the order every layout's tests pin
// down); with tensor parallelism per parameter part, a part several tensor ranks hold counted
// on the first of them.
double ShardedParams::owned_sum_of_squares() {
  double squares = 0;
  for_each_applied_extra([&](const ParamSpec& spec, const Tensor& grad) {
    if (counts_extra(spec)) squares += be_.sum_squares(grad);
  });
  if (place_.mesh.expert > 1) {  // each tensor on the first of the replicas holding it (a part
                                 // several tensor ranks hold: on the first of them)
    for_each_applied_stage_gradient([&](const ParamSpec& spec, const Tensor& grad) {
      if (counts_owned(spec) && counts_tensor_part(spec)) squares += be_.sum_squares(grad);
    });
  } else if (zero1_ || place_.writes_shards()) {
    for (const auto& [stage, s] : stages_) {
      const Pieces p = stage_pieces(s);
      if (place_.mesh.tensor == 1) {
        if (p.length() > 0) squares += be_.sum_squares(s.grads.view(p.begin(), {p.length()}));
        continue;
      }
      const std::int64_t shard_lo = place_.fsdp_rank * s.shard;
      for (const Segment& seg :
           segments_in(s.specs, shard_lo + p.begin(), shard_lo + p.begin() + p.length())) {
        if (counts_tensor_part(*seg.spec))
          squares += be_.sum_squares(s.grads.view(seg.begin - shard_lo, {seg.length}));
      }
    }
  }
  return squares;
}

void ShardedParams::fail_nonfinite(std::int64_t step, double loss, double norm) {
  // The first parameter in model order whose gradient holds a non-finite value, over all ranks:
  // each rank offers its first one (its index in the parameter table), rank order decides none.
  const auto table = param_table(cfg_.model);
  std::int32_t first = std::int32_t(table.size());
  for_each_applied_gradient([&](const ParamSpec& spec, const Tensor& grad) {
    if (std::isfinite(be_.sum_squares(grad))) return;
    for (std::size_t i = 0; i < table.size(); ++i) {
      if (table[i].name == spec.name) first = std::min(first, std::int32_t(i));
    }
  });
  Tensor all = be_.empty({comms_.world->size()}, DType::I32);
  comms_.world->all_gather(be_.from_host(std::vector<std::int32_t>{first}, {1}), all).wait();
  const auto offered = be_.to_host<std::int32_t>(all);
  first = *std::min_element(offered.begin(), offered.end());
  throw NonFiniteError(fmt::format(
      "step {}: the loss is {} and the gradient norm is {}; {}. The parameters are left as they "
      "were after step {} (no update was applied). Lower learning_rate or raise warmup, or set "
      "skip_step_on_nonfinite=true to skip such steps",
      step + 1, loss, norm,
      first < std::int32_t(table.size())
          ? fmt::format("the first parameter whose gradient is not finite is '{}'",
                        table[first].name)
          : std::string("every gradient is finite"),
      step));
}

std::vector<std::pair<const ParamSpec*, Tensor>> ShardedParams::stage_held_weights() const {
  std::vector<std::pair<const ParamSpec*, Tensor>> out;
  if (!layout_.outside || place_.mesh.stages == 1) return out;
  for (const Segment& seg : segments_in(extras_.specs, 0, extras_.flat.numel())) {
    // The embedding is every stage rank's only when tied (else the first stage's alone).
    if (seg.spec->role != ParamRole::Embedding || comms_.tie)
      out.emplace_back(seg.spec, extras_.flat.view(seg.begin, {seg.length}));
  }
  return out;
}

std::vector<std::pair<const ParamSpec*, Tensor>> ShardedParams::held_weights() const {
  std::vector<std::pair<const ParamSpec*, Tensor>> out;
  for (const Segment& seg : segments_in(extras_.specs, 0, extras_.flat.numel())) {
    out.emplace_back(seg.spec, extras_.flat.view(seg.begin, {seg.length}));
  }
  for (const auto& [stage, s] : stages_) {
    const std::int64_t shard_lo = place_.fsdp_rank * s.shard;
    for (const Segment& seg : segments_in(s.specs, shard_lo, shard_lo + s.shard)) {
      out.emplace_back(seg.spec, s.weights.view(seg.begin - shard_lo, {seg.length}));
    }
  }
  return out;
}

StepOutcome ShardedParams::optimizer_step(std::int64_t step, std::int64_t update, double local_loss,
                                          double local_aux_loss,
                                          const std::vector<std::int64_t>& local_load) {
  reduce_gradients();
  if (should_inject_nonfinite(place_.rank(), step) && !stages_.empty()) {  // a test's fault
    const float nan = std::numeric_limits<float>::quiet_NaN();
    be_.upload(&nan, stages_.begin()->second.grads.view(0, {1}));
  }
  // Loss, squared norm, how many ranks apply a non-finite value they do not count, and the MoE
  // balancing loss and expert loads (token counts: exact in double below 2^53).
  std::vector<double> sums = {local_loss, owned_sum_of_squares(),
                              uncounted_gradient_nonfinite() ? 1.0 : 0.0, local_aux_loss};
  sums.insert(sums.end(), local_load.begin(), local_load.end());
  Tensor t = be_.from_host(sums, {std::int64_t(sums.size())});
  comms_.world->all_reduce(t, t, ReduceOp::Sum).wait();
  sums = be_.to_host<double>(t);
  const double norm = sums[2] > 0 ? std::numeric_limits<double>::quiet_NaN() : std::sqrt(sums[1]);
  StepOutcome outcome{.loss = sums[0], .grad_norm = norm, .moe_aux_loss = sums[3]};
  for (std::size_t i = 4; i < sums.size(); ++i)
    outcome.expert_load.push_back(std::int64_t(std::llround(sums[i])));
  // The same values on every rank, so every rank takes the same branch.
  if (!std::isfinite(sums[0]) || !std::isfinite(norm)) {
    if (cfg_.skip_step_on_nonfinite) {
      outcome.skipped = true;
      return outcome;
    }
    fail_nonfinite(step, sums[0], norm);
  }
  const double lr = learning_rate_at(cfg_, update);
  const double clip = clip_scale(norm, cfg_.gradient_clipping_threshold);

  const Pieces extras = extras_pieces();
  for (const Segment& seg :
       segments_in(extras_.specs, extras.begin(), extras.begin() + extras.length())) {
    auto in_whole = [&](const Tensor& t) { return t.view(seg.begin, {seg.length}); };
    auto in_piece = [&](const Tensor& t) {
      return t.view(seg.begin - extras.begin(), {seg.length});
    };
    be_.adamw_update(in_whole(extras_.flat), in_whole(extras_grads_.flat), in_piece(extras_m_),
                     in_piece(extras_v_),
                     adamw_params(cfg_, update, lr, clip, seg.spec->weight_decay));
  }
  if (extras.n > 0) gather_owned(extras, extras_.flat);  // every FSDP rank gets every piece
  for (auto& [stage, s] : stages_) {
    const Pieces p = stage_pieces(s);
    const std::int64_t begin = p.begin(), shard_lo = place_.fsdp_rank * s.shard;
    for (const Segment& seg :
         segments_in(s.specs, shard_lo + begin, shard_lo + begin + p.length())) {
      const std::int64_t at = seg.begin - shard_lo;  // in the shard
      auto in_shard = [&](const Tensor& t) { return t.view(at, {seg.length}); };
      auto in_piece = [&](const Tensor& t) { return t.view(at - begin, {seg.length}); };
      be_.adamw_update(in_shard(s.weights), in_shard(s.grads), in_piece(s.adam_m),
                       in_piece(s.adam_v),
                       adamw_params(cfg_, update, lr, clip, seg.spec->weight_decay));
    }
    if (zero1_) gather_owned(p, s.weights);  // every replica gets every updated piece
  }
  // A test's fault: one bit of the first weight this rank holds that another rank holds too (a
  // stage copy of the layers outside the pipeline, or its first stage's shard).
  const auto copies = stage_held_weights();
  if (should_flip_weight_bit(place_.rank(), step) && (!copies.empty() || !stages_.empty())) {
    const Tensor first = copies.empty() ? stages_.begin()->second.weights.view(0, {1})
                                        : copies.front().second.view(0, {1});
    auto value = be_.to_host<float>(first);
    std::uint32_t bits;
    std::memcpy(&bits, value.data(), sizeof(bits));
    bits ^= 1u;  // the lowest mantissa bit: a change no loss would show for many steps
    std::memcpy(value.data(), &bits, sizeof(bits));
    be_.upload(value.data(), first);
  }
  outcome.learning_rate = lr;
  return outcome;
}

}  // namespace carousel
