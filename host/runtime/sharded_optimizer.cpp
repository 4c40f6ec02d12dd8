// sharded_optimizer.cpp — the optimizer step of one rank: gradients completed over the mesh, the
// global norm, clipping and AdamW on the elements this rank owns.
//
// Gradients are completed by the placement rule (ShardedParams::holders, models/placement.h):
// each element summed over its holders on every axis, in one fixed order of axes. Loss and
// squared gradient norm are summed over all ranks in rank order, each element counted once, on
// the holder of its original; every rank then clips and steps AdamW on what it owns, and holders
// apply identical updates to identical values.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "host/runtime/optimizer.h"
#include "host/runtime/sharded_params.h"
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

GradientHolders gradient_holders(const ParamSpec& spec, bool extra, bool sliced,
                                 const ModelConfig& model, const MeshShape& mesh,
                                 const schedule::Layout& layout, int stage_rank) {
  GradientHolders g;
  // Stage axis: a layer's parameters live on their stage's rank. An extra lives on the ranks that
  // use it: a tied table on the first and the last stage's (every stage rank's with layers after
  // the pipeline), those layers, the final norm and lm_head on every stage rank with them. The
  // original is where its stage runs: the first stage for the table, the last for the others.
  if (extra) {
    const int first = layout.rank_of(0), last = layout.rank_of(layout.stages() - 1);
    if (spec.role == ParamRole::Embedding) {
      const bool tied =
          model.logits_via_embedding && layout.ranks > 1 && (layout.outside || first != last);
      if (tied) g.stage = layout.outside ? layout.ranks : 2;
      g.stage_original = !tied || stage_rank == first;
    } else if (layout.outside) {
      g.stage = layout.ranks;
      g.stage_original = stage_rank == last;
    }
  }
  // Data axes: replicated over the data replicas and context ranks, and over the expert ranks
  // unless dealt to one of them; a sliced buffer's pieces are owned over {replica, context}.
  const bool routed = spec.expert.sharded() && mesh.expert > 1;
  if (!sliced) {
    g.data = routed ? mesh_group::expert_data : mesh_group::data;
  } else if (!routed) {
    g.data = mesh_group::expert;
  }
  g.tensor = spec.tensor.holders_of(mesh.tensor);
  return g;
}

ShardedParams::Holders ShardedParams::holders(const ParamSpec& spec, bool extra,
                                              bool sliced) const {
  const GradientHolders g =
      gradient_holders(spec, extra, sliced, cfg_.model, place_.mesh, layout_, place_.stage_rank);
  // A group of one holds nothing to sum: no group.
  const auto group = [](const std::unique_ptr<Communicator>& c) {
    return c && c->size() > 1 ? c.get() : nullptr;
  };
  Holders h;
  if (g.stage > 1) h.stage = group(spec.role == ParamRole::Embedding ? comms_.tie : comms_.pipe);
  if (place_.mesh.axes().size(g.data) > 1) {
    h.data = g.data == mesh_group::data          ? group(comms_.data)
             : g.data == mesh_group::expert_data ? group(comms_.expert_data)
                                                 : group(comms_.expert);
    CAROUSEL_ASSERT(h.data && h.data->size() == place_.mesh.axes().size(g.data),
                    "'{}': no communicator spans its data holders", spec.name);
  }
  h.original = g.stage_original && (!h.data || h.data->rank() == 0);
  if (g.tensor > 1)
    h.tensor = g.tensor == place_.mesh.tensor ? comms_.tensor.get() : comms_.kv_share.get();
  return h;
}

template <class Group>
void ShardedParams::sum_runs(const std::vector<ParamSpec>& specs, std::int64_t lo, std::int64_t hi,
                             const Tensor& buffer, std::int64_t base, Group&& group) {
  const auto segments = segments_in(specs, lo, hi);
  for (std::size_t i = 0; i < segments.size();) {
    Communicator* g = group(*segments[i].spec);
    std::size_t j = i + 1;
    while (j < segments.size() && group(*segments[j].spec) == g) ++j;
    if (g) {
      const std::int64_t begin = segments[i].begin;
      const std::int64_t end = segments[j - 1].begin + segments[j - 1].length;
      const Tensor run = buffer.view(begin - base, {end - begin});
      g->all_reduce(run, run, ReduceOp::Sum).wait();
    }
    i = j;
  }
}

// The placement rule applied in one order for every buffer, so each element's sum has one
// association whatever the mesh: over its stage holders, then the FSDP ranks (a stage's
// reduce-scatter in the executor; the extras' pieces here), then its data holders, then the
// ZeRO-1 slicing (a reduce-scatter over the data holders owning pieces), then its tensor holders.
// Every rank of a group has the same layout (tensor ranks the same parts, expert ranks as many
// experts), so the runs and their order agree on all of them.
void ShardedParams::reduce_gradients() {
  finish_gathers();
  for (auto& [event, buffer] : reduce_scatters_) event.wait();
  reduce_scatters_.clear();
  const std::int64_t n = extras_.flat.numel();
  if (n > 0) {
    const Tensor& g = extras_grads_.flat;
    sum_runs(extras_.specs, 0, n, g, 0, [&](const ParamSpec& p) { return extra_holders(p).stage; });
    const Pieces piece = extras_pieces();
    reduce_into_owned(piece, g);
    const std::int64_t lo = piece.begin(), hi = lo + piece.length();
    sum_runs(extras_.specs, lo, hi, g, 0, [&](const ParamSpec& p) { return extra_holders(p).data; });
    sum_runs(extras_.specs, lo, hi, g, 0,
             [&](const ParamSpec& p) { return extra_holders(p).tensor; });
  }
  for (auto& [stage, s] : stages_) {
    const std::int64_t shard_lo = place_.fsdp_rank * s.shard;
    sum_runs(s.specs, shard_lo, shard_lo + s.shard, s.grads, shard_lo,
             [&](const ParamSpec& p) { return stage_holders(p).data; });
    const Pieces piece = stage_pieces(s);
    if (zero1_) reduce_into_owned(piece, s.grads);
    const std::int64_t lo = shard_lo + piece.begin();
    sum_runs(s.specs, lo, lo + piece.length(), s.grads, shard_lo,
             [&](const ParamSpec& p) { return stage_holders(p).tensor; });
  }
}

// visit(spec, counted, buffer, at, length) for every gradient segment this rank applies (what
// optimizer_step updates here), elements [at, at + length) of `buffer`: its piece of the extras,
// then each stage's piece — on every holder, counted (Holders::counted) on the original's.
template <class Visit>
void ShardedParams::for_each_applied_segment(Visit&& visit) {
  const Pieces extras = extras_pieces();
  for (const Segment& seg :
       segments_in(extras_.specs, extras.begin(), extras.begin() + extras.length())) {
    visit(*seg.spec, extra_holders(*seg.spec).counted(), extras_grads_.flat, seg.begin,
          seg.length);
  }
  for (const auto& [stage, s] : stages_) {
    const Pieces p = stage_pieces(s);
    const std::int64_t shard_lo = place_.fsdp_rank * s.shard, lo = shard_lo + p.begin();
    for (const Segment& seg : segments_in(s.specs, lo, lo + p.length())) {
      visit(*seg.spec, stage_holders(*seg.spec).counted(), s.grads, seg.begin - shard_lo,
            seg.length);
    }
  }
}

// visit(counted, view) for each run of consecutive applied segments of one buffer that agree on
// `counted`: one sum per run, in the fixed order every rank of a layout shares.
template <class Visit>
void ShardedParams::for_each_applied_run(Visit&& visit) {
  const Tensor* buffer = nullptr;
  std::int64_t begin = 0, end = 0;
  bool counted = false;
  const auto flush = [&] {
    if (buffer) visit(counted, buffer->view(begin, {end - begin}));
  };
  for_each_applied_segment([&](const ParamSpec&, bool c, const Tensor& buf, std::int64_t at,
                               std::int64_t length) {
    if (buffer == &buf && at == end && c == counted) {
      end += length;
      return;
    }
    flush();
    buffer = &buf;
    begin = at;
    end = at + length;
    counted = c;
  });
  flush();
}

// Whether a gradient this rank applies but does not count in the norm (a holder's copy) is not
// finite: a value corrupted after the reductions on one holder would otherwise pass the global
// check, which sees only the originals, and be applied there alone.
bool ShardedParams::uncounted_gradient_nonfinite() {
  bool bad = false;
  for_each_applied_run([&](bool counted, const Tensor& grad) {
    if (!counted) bad |= !std::isfinite(be_.sum_squares(grad));
  });
  return bad;
}

// This rank's share of the squared global norm: every element of the model counted once, on the
// holder of its original (Holders::counted), summed run by run in the fixed order every rank of
// a layout shares.
double ShardedParams::owned_sum_of_squares() {
  double squares = 0;
  for_each_applied_run([&](bool counted, const Tensor& grad) {
    if (counted) squares += be_.sum_squares(grad);
  });
  return squares;
}

void ShardedParams::fail_nonfinite(std::int64_t step, double loss, double norm) {
  // The first parameter in model order whose gradient holds a non-finite value, over all ranks:
  // each rank offers its first one (its index in the parameter table), rank order decides none.
  const auto table = param_table(cfg_.model);
  std::int32_t first = std::int32_t(table.size());
  for_each_applied_segment([&](const ParamSpec& spec, bool, const Tensor& buffer, std::int64_t at,
                               std::int64_t length) {
    if (std::isfinite(be_.sum_squares(buffer.view(at, {length})))) return;
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
    if (extra_holders(*seg.spec).stage)
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
