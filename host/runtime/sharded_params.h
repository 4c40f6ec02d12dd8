// sharded_params.h — where every parameter element of one rank lives, and everything done to
// parameters as a whole: FSDP shards and their weight slots, ZeRO-1 pieces, the replicated
// embedding / head, the gradient reductions, the global norm, the AdamW step and each rank's
// share of a checkpoint.
//
// Layer parameters. The rank holds the virtual stages the layout places on its pipeline rank;
// which layers a stage holds comes from the stage map (stage_layers(cfg), uneven stages
// included), so stages may differ in size and the weight slots fit the largest.
// FSDP shards each stage's parameters as one flat buffer of `padded` elements (their total
// rounded up to a multiple of F): FSDP rank f keeps elements [f * padded / F, (f + 1) * padded
// / F) of the weights, their gradient and both AdamW moments. With F = 1 the shard is the whole
// stage and compute reads it in place; with F > 1 compute reads a weight slot that an all-gather
// filled (AG_ISSUE / AG_WAIT / RELEASE) and accumulates into a full gradient buffer that a
// reduce-scatter folds into the shard (REDUCE_SCATTER).
//
// Replicas: the D data replicas x C context ranks of a (stage, fsdp, tensor) position hold the
// same weights and sum their gradients (context ranks computed other tokens of the same
// sequences); "data rank" below means the rank among those D x C replicas (replica_rank()).
//
// ZeRO-1 (shard_optimizer_over_data, D x C > 1) splits each shard once more over the replicas for
// the optimizer: data rank d owns elements [d * piece, d * piece + piece) of the shard, keeps
// moments only for them, receives the replicas' summed gradient only for them (reduce-scatter
// instead of all-reduce) and all-gathers the updated weights.
//
// Extras (embedding, final norm, lm_head): on the ranks that use them (the first stage's and the
// last stage's), not FSDP-sharded, since every microbatch part needs them; their AdamW moments
// are split over the FSDP group like a ZeRO-1 piece. With layers outside the pipeline
// (pipeline_parallel_layers) those layers, the final norm and lm_head are extras of every stage
// rank, each computing other microbatches: their gradients are summed over the stage group too.
//
// Tensor parallelism (T > 1): each tensor rank holds its part of every weight
// (param_table(cfg, split); the embedding and lm_head by vocabulary rows); FSDP, ZeRO-1 and the
// data replicas shard and reduce those parts exactly as whole tensors, the T ranks of a group
// laid out alike.
//
// Gradients follow one rule, read from each parameter's placements (models/placement.h,
// ShardedParams::holders): summed over its holders on every axis — the stage ranks using an
// extra, the FSDP ranks of an extra, the data replicas, context ranks and (unless it is a routed
// expert) expert ranks, the tensor ranks holding the same part — in that fixed order, sliced where
// it is sharded, and counted in the norm and written to checkpoints by the holder of its original.
// No reduction is written per axis combination.
//
// Files: sharded_params.cpp (layout, initial values, compute views, gathers and scatters),
// sharded_optimizer.cpp (gradient reductions, global norm, AdamW), sharded_checkpoint.cpp
// (checkpoint shares and restores).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "host/config/config.h"
#include "host/io/checkpoint.h"
#include "host/mesh/mesh.h"
#include "models/params.h"

namespace carousel {

// The parameters of one virtual stage on one rank.
struct StageShard {
  std::vector<ParamSpec> specs;  // the stage's layer parameters, in flat-buffer order
  std::int64_t padded = 0;       // the stage's element count rounded up to a multiple of F
  std::int64_t shard = 0;        // padded / F: this FSDP rank's part
  std::int64_t piece = 0;        // ZeRO-1 piece of the shard (= shard without ZeRO-1)
  Tensor weights, grads;         // [shard] float32 masters and their gradient
  Tensor adam_m, adam_v;         // [piece] AdamW first and second moments
  Tensor compute;                // [shard] weights in the compute dtype (= weights in float32)
};

// A flat buffer of n elements split over `group` in pieces of `piece` elements: group rank r
// owns elements [r * piece, r * piece + piece) of [0, n). Without a group one rank owns it all.
struct Pieces {
  Communicator* group;
  std::int64_t n, piece;
  std::int64_t begin() const { return group ? std::min(n, group->rank() * piece) : 0; }
  std::int64_t length() const { return std::min(piece, n - begin()); }
};

// A step's loss or gradient norm is not finite (and skip_step_on_nonfinite is off): thrown on
// every rank at once, so no report of where the ranks were is needed.
struct NonFiniteError : Error {
  using Error::Error;
};

// What one optimizer step produced, the same on every rank.
struct StepOutcome {
  double loss = 0;           // mean over every token of the global batch
  double grad_norm = 0;      // global L2 norm before clipping
  bool skipped = false;      // non-finite loss or norm with skip_step_on_nonfinite: no update
  double learning_rate = 0;  // the rate applied: the schedule's at this update, 0 when skipped
  // Mixture of experts: the balancing loss (mean over sequences, summed over layers; not in
  // `loss`) and the tokens each layer's experts got in the step, [num_layers * X] (dense
  // layers' entries 0; empty for a dense model).
  double moe_aux_loss = 0;
  std::vector<std::int64_t> expert_load = {};
};

// The placement rule (models/placement.h) for a gradient of `spec` on a rank at `stage_rank` of
// `layout`, as group sizes and axes: the holders it is summed over beyond the FSDP reduce-scatter
// and the ZeRO-1 slicing, and whether this stage rank holds its original. `extra`: an extras
// tensor (embedding, final norm, lm_head, layers after the pipeline); `sliced`: the data axes'
// holders own pieces of its buffer (a stage shard with ZeRO-1), so only the holders beyond them
// sum here. ShardedParams maps it to the rank's communicators; the planner
// (host/plan/plan_traffic.cpp) to the bytes each sum moves.
struct GradientHolders {
  int stage = 1;               // stage ranks holding it: a tied table's, or every stage rank's
  bool stage_original = true;  // this stage rank holds the original (the stage that runs it)
  Axes data{};                 // the data axes (replica, expert, context) it is summed over
  int tensor = 1;              // tensor ranks holding the same part
};
GradientHolders gradient_holders(const ParamSpec& spec, bool extra, bool sliced,
                                 const ModelConfig& model, const MeshShape& mesh,
                                 const schedule::Layout& layout, int stage_rank);

// Elements [begin, begin + count) of the initial values of `specs` laid back to back (zeros past
// their end: FSDP padding), as float32 into out[0, count), generated on this thread's OpenMP
// threads. Bitwise the same for any thread count and any range split: the values of
// initial_values (models/params.h) rounded to float, as a single thread writes them.
void initial_flat_values(const std::vector<ParamSpec>& specs, std::uint64_t seed,
                         std::int64_t begin, std::int64_t count, float* out);

class ShardedParams {
 public:
  // Initial values are generated by parameter name, so every layout starts from the weights of
  // the single-device run. `comms` and `be` must outlive this object.
  ShardedParams(const Config& cfg, const schedule::Layout& layout, const RankPlace& place,
                Backend& be, RankCommunicators& comms);
  // Initial weights are generated on this thread's OpenMP threads (initial_flat_values) and
  // uploaded this many elements (16 MiB) at a time.
  static constexpr std::int64_t kInitChunk = std::int64_t(1) << 22;

  // Step start: refresh the compute-dtype copies from the masters, zero every gradient.
  void begin_step();

  // Compute views. weights(stage): with FSDP the slot its AG_WAIT made resident.
  ParamSet weights(int stage) const;
  ParamSet gradients(int stage);  // with FSDP a full buffer until the stage's REDUCE_SCATTER
  const ParamSet& extras_weights() const { return extras_compute_; }
  // Every float32 master weight this rank holds after an update, as (parameter, view) in a fixed
  // order; data replicas hold the same elements in the same order
  // (host/run/guards/replica_check.h).
  std::vector<std::pair<const ParamSpec*, Tensor>> held_weights() const;
  // Of those, the ones every stage rank holds (layers outside the pipeline: those layers, the
  // final norm, lm_head and a tied table), in the same order on every stage rank; empty without
  // layers outside or with one stage rank.
  std::vector<std::pair<const ParamSpec*, Tensor>> stage_held_weights() const;
  const ParamSet& extras_grads() const { return extras_grads_; }

  // FSDP weight residency and gradient folding, as the lowered program orders them. The events
  // returned complete with the collective (traces read their completion times).
  Event issue_gather(int stage, int slot);
  // Work queued next on `device_queue` (nullptr: the host) reads the slot after its gather.
  void wait_gather(int stage, int slot, void* device_queue);
  // Waits on the host for every gather issued (errors of those only ordered on a device queue
  // surface here); optimizer_step does it too.
  void finish_gathers();
  void release(int stage) { resident_.erase(stage); }
  Event reduce_scatter(int stage);
  // The whole buffer of a stage's AG_ISSUE (its weights in the compute dtype) or
  // REDUCE_SCATTER (its float32 gradient), in bytes: what traces report.
  std::int64_t fsdp_bytes(int stage, schedule::Kind kind) const;

  // Completes the gradients (reductions over FSDP, replicas and the tied pair), sums the loss
  // and the squared gradient norm over all ranks, clips and steps AdamW on what this rank owns.
  // `local_loss` is this rank's share of the step's mean loss (and `local_aux_loss`,
  // `local_load` its share of StepOutcome's MoE values, reduced alike); `update` counts the updates
  // applied before this one (the learning-rate schedule and AdamW's bias correction follow it;
  // it trails `step` by the steps skipped). A non-finite loss or norm skips the update on every
  // rank with skip_step_on_nonfinite, and otherwise throws on every rank naming the step and
  // the first parameter (in model order) whose gradient is not finite. In sharded_optimizer.cpp.
  StepOutcome optimizer_step(std::int64_t step, std::int64_t update, double local_loss,
                             double local_aux_loss, const std::vector<std::int64_t>& local_load);

  // Checkpoints (sharded_checkpoint.cpp). checkpoint_part: the whole tensors this rank writes,
  // in host memory (the AdamW moments too with `moments`). Every tensor of the model has one
  // writer: a rank of replica 0 and tensor rank 0, the stage's tensors dealt over its FSDP
  // ranks; FSDP shards, ZeRO-1 pieces and tensor parts are gathered first. Collective over the
  // world. restore: this rank's parameters (and moments) read from a checkpoint's or a model's
  // whole tensors, only those overlapping what the rank holds, one at a time.
  CheckpointPart checkpoint_part(bool moments);
  void restore(const TensorFiles& files, bool moments);

  // Whether every master weight of every rank is finite (collective over the world): a
  // checkpoint is never written from non-finite parameters.
  bool weights_finite();

  std::int64_t all_gathers() const { return all_gathers_; }

 private:
  bool holds_extra(ParamRole role) const;
  TensorSplit tensor_split() const { return {place_.tensor_rank, place_.mesh.tensor}; }
  // The placement rule (models/placement.h) on this rank: the groups of ranks holding the same
  // values of `spec` — whose gradients are partial sums, summed over each group — and whether
  // this rank holds the original along the stage and data axes (counts it in the norm, with the
  // first of its tensor holders; writes it to checkpoints). `extra`: an extras tensor (the
  // embedding, the final norm, lm_head, layers after the pipeline); `sliced`: the data axes'
  // holders own pieces of the buffer (a stage shard with ZeRO-1), so only the holders beyond
  // them sum here (the expert ranks, for a dense tensor with expert parallelism) and each piece's
  // owner holds its original.
  struct Holders {
    Communicator* stage = nullptr;   // a tied table's first and last stage, or every stage rank
    Communicator* data = nullptr;    // among the replica, expert and context axes
    Communicator* tensor = nullptr;  // the tensor ranks holding the same part
    bool original = true;
    bool counted() const { return original && (!tensor || tensor->rank() == 0); }
    bool operator==(const Holders&) const = default;
  };
  Holders holders(const ParamSpec& spec, bool extra, bool sliced) const;
  Holders stage_holders(const ParamSpec& spec) const { return holders(spec, false, zero1_); }
  Holders extra_holders(const ParamSpec& spec) const { return holders(spec, true, false); }
  // Sums each run of equal `group(spec)` among the segments of [lo, hi) of `specs`' flat buffer
  // over that group; `buffer` holds the flat buffer from element `base` on.
  template <class Group>
  void sum_runs(const std::vector<ParamSpec>& specs, std::int64_t lo, std::int64_t hi,
                const Tensor& buffer, std::int64_t base, Group&& group);
  void upload_initial(const std::vector<ParamSpec>& specs, const Tensor& t, std::int64_t begin);
  Pieces stage_pieces(const StageShard& s) const;
  Pieces extras_pieces() const { return {comms_.fsdp.get(), extras_.flat.numel(), extras_piece_}; }
  std::vector<std::vector<float>> whole_tensors(const std::vector<ParamSpec>& specs,
                                                std::int64_t padded, const Tensor& local,
                                                const std::function<bool(std::size_t)>& wanted);
  void reduce_into_owned(const Pieces& p, const Tensor& buffer);
  Tensor gather_pieces(const Pieces& p, const Tensor& piece);
  void gather_owned(const Pieces& p, const Tensor& buffer);
  void reduce_gradients();
  double owned_sum_of_squares();
  // visit(spec, counted, buffer, at, length): the gradient segments this rank updates.
  template <class Visit>
  void for_each_applied_segment(Visit&& visit);
  template <class Visit>
  void for_each_applied_run(Visit&& visit);  // visit(counted, view): runs of those
  bool uncounted_gradient_nonfinite();
  [[noreturn]] void fail_nonfinite(std::int64_t step, double loss, double norm);

  const Config& cfg_;
  schedule::Layout layout_;
  RankPlace place_;
  Backend& be_;
  RankCommunicators& comms_;
  bool zero1_;     // shard_optimizer_over_data with replicas holding the same experts
  DType compute_;  // float32, or bfloat16 (mixed precision)
  std::map<int, StageShard> stages_;
  ParamSet extras_, extras_grads_;
  ParamSet extras_compute_;  // extras_ in the compute dtype (= extras_ in float32)
  std::int64_t extras_piece_ = 0;
  Tensor extras_m_, extras_v_;   // [extras_piece_] AdamW moments of this FSDP rank's piece
  std::int64_t max_padded_ = 0;  // the largest local stage: every weight slot holds this many
  // FSDP: weight slots and the gradient buffers of stages being computed.
  std::map<int, Tensor> slots_;       // slot -> gathered stage weights [max_padded_]
  std::map<int, Event> gathers_;      // slot -> its in-flight all-gather
  std::map<int, int> resident_;       // stage -> slot holding its gathered weights
  std::map<int, Tensor> full_grads_;  // stage -> unsharded gradient until REDUCE_SCATTER
  std::vector<std::pair<Event, Tensor>> reduce_scatters_;  // in flight (buffer kept alive)
  std::int64_t all_gathers_ = 0;
};

}  // namespace carousel
