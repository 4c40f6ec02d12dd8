// sharded_params.cpp — the parameter layout of one rank: initial values, compute views, FSDP
// weight gathers and gradient reduce-scatters, and the piece helpers ZeRO-1 and the extras'
// moments share.
#include "host/runtime/sharded_params.h"

#include <algorithm>

#include "host/config/schedule_config.h"

namespace carousel {

namespace {
// Elements one OpenMP thread generates at a time: norm gains (ones) cost nothing beside matrices,
// so blocks are handed out dynamically; at 64 Ki elements (about a millisecond of Box-Muller)
// handing them out costs nothing either.
constexpr std::int64_t kInitBlock = std::int64_t(1) << 16;
}  // namespace

void initial_flat_values(const std::vector<ParamSpec>& specs, std::uint64_t seed,
                         std::int64_t begin, std::int64_t count, float* out) {
  std::vector<std::int64_t> starts(specs.size() + 1, 0);  // flat offset of each spec, then the end
  for (std::size_t k = 0; k < specs.size(); ++k) starts[k + 1] = starts[k] + numel(specs[k].shape);
  const std::int64_t blocks = (count + kInitBlock - 1) / kInitBlock;
  // Each element is a pure function of (seed, name, index) (models/params.h): the split over
  // threads and the schedule do not change a bit of the result.
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::int64_t lo = begin + b * kInitBlock;
    const std::int64_t hi = std::min(begin + count, lo + kInitBlock);
    // The spec holding element lo: the last one starting at or before it (specs.size(): past
    // the end, the padding).
    std::size_t k =
        std::size_t(std::upper_bound(starts.begin(), starts.end(), lo) - starts.begin() - 1);
    for (; lo < hi && k < specs.size(); ++k) {
      const std::int64_t end = std::min(hi, starts[k + 1]);
      initial_values_into(specs[k], seed, lo - starts[k], end - starts[k], out + (lo - begin));
      lo = end;
    }
    std::fill(out + (lo - begin), out + (hi - begin), 0.0f);  // padding past the last spec
  }
}

ShardedParams::ShardedParams(const Config& cfg, const schedule::Layout& layout,
                             const RankPlace& place, Backend& be, RankCommunicators& comms)
    : cfg_(cfg),
      layout_(layout),
      place_(place),
      be_(be),
      comms_(comms),
      zero1_(cfg.shard_optimizer_over_data && place.mesh.expert_replicas() > 1),
      compute_(cfg.dtype == "bfloat16" ? DType::BF16 : DType::F32) {
  const schedule::StageLayers map = stage_layers(cfg);  // uneven stages hold other counts
  CAROUSEL_ASSERT(
      map.stages() == layout.stages() && (map.layers() < cfg.model.num_layers) == layout.outside,
      "the stage layout {} does not fit the program's {} virtual stages{}", map.to_string(),
      layout.stages(), layout.outside ? " and layers outside the pipeline" : "");
  // ZeRO-1 splits a shard's moments over the ranks holding the same parameters: the replicas,
  // or with expert parallelism those of one expert rank (each holds its own experts).
  const int fsdp = place.mesh.fsdp, data = place.mesh.expert_replicas();
  std::vector<ParamSpec> extras;
  // This tensor rank's parts of every weight (whole tensors without tensor parallelism).
  for (const auto& spec :
       param_table(cfg.model, tensor_split(), {place.expert_rank(), place.mesh.expert})) {
    if (spec.layer >= 0 && spec.layer < map.layers()) {
      const int stage = map.stage_of(spec.layer);
      if (layout_.rank_of(stage) == place_.stage_rank) stages_[stage].specs.push_back(spec);
    } else if (holds_extra(spec.role)) {  // a layer after the pipeline is an extra
      extras.push_back(spec);
    }
  }
  for (auto& [stage, s] : stages_) {
    const std::int64_t n = ParamSet::total_numel(s.specs);
    s.padded = (n + fsdp - 1) / fsdp * fsdp;
    s.shard = s.padded / fsdp;
    s.piece = zero1_ ? (s.shard + data - 1) / data : s.shard;
    s.weights = be_.empty({s.shard});  // every element is written below
    s.grads = be_.zeros({s.shard});
    for (Tensor* t : {&s.adam_m, &s.adam_v}) *t = be_.zeros({s.piece});
    // Initial values by name, so every layout starts the same: this FSDP rank's elements of the
    // stage's flat buffer.
    upload_initial(s.specs, s.weights, place_.fsdp_rank * s.shard);
    max_padded_ = std::max(max_padded_, s.padded);
  }
  extras_ = ParamSet::allocate(be_, extras, DType::F32);
  extras_grads_ = ParamSet::allocate(be_, extras, DType::F32);
  upload_initial(extras, extras_.flat, 0);
  extras_piece_ = (extras_.flat.numel() + fsdp - 1) / fsdp;
  extras_m_ = be_.zeros({extras_piece_});
  extras_v_ = be_.zeros({extras_piece_});
  // dtype=bfloat16: forward and backward read bf16 copies of the float32 weights (refreshed at
  // the start of every step), FSDP gathers those (half the bytes), activations are bf16.
  for (auto& [stage, s] : stages_) {
    s.compute = compute_ == DType::F32 ? s.weights : be_.empty({s.shard}, compute_);
  }
  extras_compute_ = compute_ == DType::F32 ? extras_ : ParamSet::allocate(be_, extras, compute_);
}

void ShardedParams::begin_step() {
  if (compute_ != DType::F32) {
    for (auto& [stage, s] : stages_) be_.cast(s.weights, s.compute);
    be_.cast(extras_.flat, extras_compute_.flat);
  }
  be_.fill(extras_grads_.flat, 0.0);
  for (auto& [stage, s] : stages_) be_.fill(s.grads, 0.0);
}

ParamSet ShardedParams::weights(int stage) const {
  const StageShard& s = stages_.at(stage);
  if (place_.mesh.fsdp == 1) return ParamSet::over(s.specs, s.compute);
  const auto it = resident_.find(stage);
  CAROUSEL_CHECK(it != resident_.end(),
                 "pipeline executor: stage {} is used without its weights gathered (AG_WAIT "
                 "missing in the program)",
                 stage);
  return ParamSet::over(s.specs, slots_.at(it->second));
}

ParamSet ShardedParams::gradients(int stage) {
  const StageShard& s = stages_.at(stage);
  if (place_.mesh.fsdp == 1) return ParamSet::over(s.specs, s.grads);
  auto it = full_grads_.find(stage);
  if (it == full_grads_.end()) it = full_grads_.emplace(stage, be_.zeros({s.padded})).first;
  return ParamSet::over(s.specs, it->second);
}

Event ShardedParams::issue_gather(int stage, int slot) {
  Tensor& buffer = slots_[slot];
  if (!buffer.defined()) buffer = be_.empty({max_padded_}, compute_);
  const StageShard& s = stages_.at(stage);
  gathers_[slot] = comms_.fsdp->all_gather(s.compute, buffer.view(0, {s.padded}));
  ++all_gathers_;
  return gathers_[slot];
}

void ShardedParams::wait_gather(int stage, int slot, void* device_queue) {
  gathers_.at(slot).order_before(device_queue);
  resident_[stage] = slot;
}

void ShardedParams::finish_gathers() {
  for (const auto& [slot, gathered] : gathers_) gathered.wait();
}

std::int64_t ShardedParams::fsdp_bytes(int stage, schedule::Kind kind) const {
  const StageShard& s = stages_.at(stage);
  const DType dtype = kind == schedule::Kind::AG_ISSUE ? compute_ : DType::F32;
  return s.padded * std::int64_t(dtype_size(dtype));
}

Event ShardedParams::reduce_scatter(int stage) {
  const Tensor full = full_grads_.at(stage);
  const Event done = comms_.fsdp->reduce_scatter(full, stages_.at(stage).grads, ReduceOp::Sum);
  reduce_scatters_.push_back({done, full});
  full_grads_.erase(stage);
  return done;
}

// The embedding on the first stage's rank (and, with logits_via_embedding, where the head runs,
// which multiplies by it); the final norm and lm_head where the head runs: the last stage's
// rank, or with layers outside the pipeline every stage rank, which holds those layers too.
bool ShardedParams::holds_extra(ParamRole role) const {
  const bool first = layout_.rank_of(0) == place_.stage_rank;
  const bool head = layout_.outside || layout_.rank_of(layout_.stages() - 1) == place_.stage_rank;
  if (role == ParamRole::Embedding) return first || (head && cfg_.model.logits_via_embedding);
  return head;
}

// t = elements [begin, begin + t.numel()) of the initial values of `specs` back to back, staged
// through the host a chunk at a time: a GPU's weights need a host copy to upload from, and a
// chunk bounds it (16 MiB) where a whole stage of the 1B llama would take 4.6 GB.
void ShardedParams::upload_initial(const std::vector<ParamSpec>& specs, const Tensor& t,
                                   std::int64_t begin) {
  CAROUSEL_ASSERT(t.dtype() == DType::F32, "initial weights go to float32 masters, not {}",
                  t.describe());
  const std::uint64_t seed = std::uint64_t(cfg_.init_weights_seed);
  std::vector<float> staged(std::size_t(std::min(t.numel(), kInitChunk)));
  for (std::int64_t done = 0; done < t.numel(); done += kInitChunk) {
    const std::int64_t n = std::min(kInitChunk, t.numel() - done);
    initial_flat_values(specs, seed, begin + done, n, staged.data());
    be_.upload(staged.data(), t.view(done, {n}));
  }
}

// Stage shards are split over the data replicas with ZeRO-1 (those of this expert rank with
// expert parallelism), and not at all without it.
Pieces ShardedParams::stage_pieces(const StageShard& s) const {
  if (!zero1_) return Pieces{nullptr, s.shard, s.shard};
  return {place_.mesh.expert > 1 ? comms_.expert_data.get() : comms_.data.get(), s.shard, s.piece};
}

// buffer [n]: its owned range becomes the group's sum over that range (a reduce-scatter); the
// rest of buffer is left as it was.
void ShardedParams::reduce_into_owned(const Pieces& p, const Tensor& buffer) {
  Tensor padded = be_.zeros({p.piece * p.group->size()});
  be_.copy(buffer, padded.view(0, {p.n}));
  const Tensor mine = padded.view(p.group->rank() * p.piece, {p.piece});
  p.group->reduce_scatter(padded, mine, ReduceOp::Sum).wait();
  if (p.length() > 0) be_.copy(mine.view(0, {p.length()}), buffer.view(p.begin(), {p.length()}));
}

// The whole [n] from every group rank's [piece] tensor (an all-gather).
Tensor ShardedParams::gather_pieces(const Pieces& p, const Tensor& piece) {
  Tensor all = be_.empty({p.piece * p.group->size()});
  p.group->all_gather(piece, all).wait();
  return all.view(0, {p.n});
}

// buffer [n] = every group rank's owned range of it.
void ShardedParams::gather_owned(const Pieces& p, const Tensor& buffer) {
  Tensor mine = be_.zeros({p.piece});
  if (p.length() > 0) be_.copy(buffer.view(p.begin(), {p.length()}), mine.view(0, {p.length()}));
  be_.copy(gather_pieces(p, mine), buffer);
}

}  // namespace carousel
