// sharded_optimizer.cpp — the optimizer step of one rank: gradients completed over the mesh, the
// global norm, clipping and AdamW on the elements this rank owns.
//
// Gradients are complete once every reduce-scatter has landed, the shards are summed over the
// data replicas (only the owned piece with ZeRO-1), the tied embedding's two uses are added, and
// the replicated extras' gradients are summed over the FSDP group and the replicas. Loss and
// squared gradient norm are summed over all ranks in rank order, each shard and each replicated
// tensor counted once; every rank then clips and steps AdamW on what it owns, and replicas apply
// identical updates to identical values.
#include <cmath>

#include "host/optimizer.h"
#include "host/sharded_params.h"

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
  for (auto& [event, buffer] : reduce_scatters_) event.wait();
  reduce_scatters_.clear();
  if (place_.mesh.data > 1) {
    for (auto& [stage, s] : stages_) {
      if (zero1_) {
        reduce_into_owned(stage_pieces(s), s.grads);  // only the owned piece's sum
      } else {
        comms_.data->all_reduce(s.grads, s.grads, ReduceOp::Sum).wait();
      }
    }
  }
  // Extras: the tied table's two uses first (full gradients on both ranks), then FSDP rank f
  // gets the group's sum for its piece only, summed over the replicas too.
  if (comms_.tie) {
    const Tensor& g = extras_grads_.at(ParamRole::Embedding);
    comms_.tie->all_reduce(g, g, ReduceOp::Sum).wait();
  }
  const Pieces extras = extras_pieces();
  if (extras.n > 0) {
    reduce_into_owned(extras, extras_grads_.flat,
                      place_.mesh.data > 1 ? comms_.data.get() : nullptr);
  }
}

// This rank's share of the squared global norm: each element counted on exactly one rank.
double ShardedParams::owned_sum_of_squares() {
  double squares = 0;
  const Pieces extras = extras_pieces();
  if (place_.data_rank == 0) {  // each extras element once per FSDP group, a tied copy never
    for (const Segment& seg :
         segments_in(extras_.specs, extras.begin(), extras.begin() + extras.length())) {
      if (!tied_copy(seg.spec->role)) {
        squares += be_.sum_squares(extras_grads_.flat.view(seg.begin, {seg.length}));
      }
    }
  }
  if (zero1_ || place_.writes_shards()) {  // each element of each shard counted once
    for (const auto& [stage, s] : stages_) {
      const Pieces p = stage_pieces(s);
      if (p.length() > 0) squares += be_.sum_squares(s.grads.view(p.begin(), {p.length()}));
    }
  }
  return squares;
}

std::pair<double, double> ShardedParams::optimizer_step(std::int64_t step, double local_loss) {
  reduce_gradients();
  std::vector<double> sums = {local_loss, owned_sum_of_squares()};
  Tensor t = be_.from_host(sums, {2});
  comms_.world->all_reduce(t, t, ReduceOp::Sum).wait();
  sums = be_.to_host<double>(t);
  const double norm = std::sqrt(sums[1]);
  const double lr = learning_rate_at(cfg_, step);
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
                     adamw_params(cfg_, step, lr, clip, seg.spec->weight_decay));
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
                       adamw_params(cfg_, step, lr, clip, seg.spec->weight_decay));
    }
    if (zero1_) gather_owned(p, s.weights);  // every replica gets every updated piece
  }
  return {sums[0], norm};
}

}  // namespace carousel
