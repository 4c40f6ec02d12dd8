// pipeline_trainer.cpp — the executor of lowered schedules: data replicas x pipeline stages x
// FSDP ranks as threads, each with its own CPU device and communicators.
#include "host/pipeline_trainer.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>

#include "collectives/local_communicator.h"
#include "cuda/cpu_backend.h"
#include "cuda/device_info.h"
#include "host/checkpoint.h"
#include "host/data.h"
#include "host/optimizer.h"
#include "host/schedule/generators.h"
#include "host/schedule/passes.h"
#include "host/schedule_config.h"
#include "host/step_report.h"
#include "models/model.h"

namespace carousel {

namespace sch = schedule;

namespace {

// The parameters of one virtual stage on one rank. FSDP shards the stage's parameters as one
// flat buffer of `padded` elements (their total size rounded up to a multiple of F): rank f
// keeps elements [f * padded / F, (f + 1) * padded / F) of the weights, their gradient and both
// AdamW moments. With F = 1 the shard is the whole stage and is used in place.
//
// ZeRO-1 (shard_optimizer_over_data, D > 1) splits each shard once more over the D data
// replicas for the optimizer: data rank d owns elements [d * zero, d * zero + zero) of the
// shard (the last piece may be shorter or empty), keeps AdamW moments only for them, receives
// the replicas' summed gradient only for them (a reduce-scatter instead of an all-reduce), and
// all-gathers the updated weights.
struct StageShard {
  std::vector<ParamSpec> specs;
  std::int64_t padded = 0, shard = 0;
  std::int64_t zero = 0;  // ZeRO-1 piece length (= shard without ZeRO-1)
  Tensor weights, grads;  // [shard] each, float32
  Tensor m, v;            // [zero] AdamW moments of the owned piece, float32
  Tensor compute;         // [shard] the weights in the compute dtype (= weights in float32)
};

// A piece of a flat parameter buffer that belongs to one parameter (for per-parameter weight
// decay, and to know which parameter it is).
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

// Where a rank sits in the D x S x F mesh: data replica d, pipeline stage rank s, FSDP rank f.
struct RankPlace {
  int data_rank, stage_rank, fsdp_rank, D, S, F;
  int device() const { return (data_rank * S + stage_rank) * F + fsdp_rank; }
  // This rank's part of a microbatch: sequences are split over the F x D ranks of a stage.
  int batch_part() const { return data_rank * F + fsdp_rank; }
  // Writes whole-model state (checkpoints): one rank per stage, and per replicated tensor.
  bool writes_shards() const { return data_rank == 0; }
  bool writes_replicated() const { return data_rank == 0 && fsdp_rank == 0; }
};

// One rank's part of a step: walks its pipeline rank's instruction list.
class RankExecutor {
 public:
  // tie: with logits_via_embedding, the two ranks (same data and FSDP index) of the first and
  // the last stage, which both hold the embedding; nullptr when one rank holds both or untied.
  RankExecutor(const Config& cfg, const sch::Program& program, RankPlace place, Communicator& world,
               Communicator& pipe, Communicator& fsdp, Communicator& data, Communicator* tie)
      : cfg_(cfg),
        layout_(program.layout),
        place_(place),
        actions_(program.ranks[place.stage_rank]),
        world_(world),
        pipe_(pipe),
        fsdp_(fsdp),
        data_comm_(data),
        tie_(tie),
        zero1_(cfg.shard_optimizer_over_data && place.D > 1),
        compute_(cfg.dtype == "bfloat16" ? DType::BF16 : DType::F32),
        backend_(make_device_backend(cfg, place.device())),
        be_(*backend_),
        data_(make_data_loader(cfg)),
        rope_(make_rope_tables(be_, cfg.model.max_target_length, cfg.model.head_dim(),
                               cfg.model.rope_max_timescale)),
        remat_(parse_remat_policy(cfg.remat_policy)) {
    const int L = int(cfg.num_layers_per_pipeline_stage);
    std::vector<ParamSpec> extras;
    for (const auto& spec : param_table(cfg.model)) {
      if (spec.layer >= 0) {
        const int v = spec.layer / L;
        if (layout_.rank_of(v) == place_.stage_rank) stages_[v].specs.push_back(spec);
      } else if (holds_extra(spec.role)) {
        extras.push_back(spec);
      }
    }
    const std::uint64_t seed = std::uint64_t(cfg.init_weights_seed);
    for (auto& [v, s] : stages_) {
      const std::int64_t n = ParamSet::total_numel(s.specs);
      s.padded = (n + place_.F - 1) / place_.F * place_.F;
      s.shard = s.padded / place_.F;
      s.zero = zero1_ ? (s.shard + place_.D - 1) / place_.D : s.shard;
      for (Tensor* t : {&s.weights, &s.grads}) *t = be_.zeros({s.shard});
      for (Tensor* t : {&s.m, &s.v}) *t = be_.zeros({s.zero});
      std::vector<double> full;  // initial values by name, so every layout starts the same
      for (const auto& spec : s.specs) {
        const auto values = initial_values(spec, seed);
        full.insert(full.end(), values.begin(), values.end());
      }
      full.resize(s.padded, 0.0);
      upload_shard(s, s.weights, full);
      max_padded_ = std::max(max_padded_, s.padded);
    }
    extras_ = ParamSet::allocate(be_, extras, DType::F32);
    extras_grads_ = ParamSet::allocate(be_, extras, DType::F32);
    init_params(be_, extras_, seed);
    extras_piece_ = (extras_.flat.numel() + place_.F - 1) / place_.F;
    extras_m_ = be_.zeros({extras_piece_});
    extras_v_ = be_.zeros({extras_piece_});
    // dtype=bfloat16: forward and backward read bf16 copies of the float32 weights (refreshed at
    // the start of every step), FSDP gathers those (half the bytes), activations are bf16.
    for (auto& [v, s] : stages_) {
      s.compute = compute_ == DType::F32 ? s.weights : be_.empty({s.shard}, compute_);
    }
    extras_compute_ = compute_ == DType::F32 ? extras_ : ParamSet::allocate(be_, extras, compute_);
  }

  // Runs one step; returns (loss, grad norm), identical on every rank.
  std::pair<double, double> step(std::int64_t step) {
    if (compute_ != DType::F32) {
      for (auto& [v, s] : stages_) be_.cast(s.weights, s.compute);
      be_.cast(extras_.flat, extras_compute_.flat);
    }
    be_.fill(extras_grads_.flat, 0.0);
    for (auto& [v, s] : stages_) be_.fill(s.grads, 0.0);
    const std::int64_t B = cfg_.global_batch(), M = layout_.microbatches, b = B / M;
    const std::int64_t T = cfg_.model.max_target_length, b_local = b / (place_.F * place_.D);
    const double scale = 1.0 / double(B * T);
    double loss_sum = 0;
    std::map<std::int64_t, Microbatch> batches;
    auto batch = [&](int m) -> const Microbatch& {  // this FSDP rank's share of microbatch m
      auto it = batches.find(m);
      if (it == batches.end()) {
        const TokenBatch tb = data_->batch(step, B, m * b + place_.batch_part() * b_local, b_local);
        it = batches
                 .emplace(m, Microbatch{be_.from_host(tb.inputs, {b_local, T}),
                                        be_.from_host(tb.targets, {b_local, T})})
                 .first;
      }
      return it->second;
    };
    const int V = layout_.stages();
    for (std::size_t i = 0; i < actions_.size();) {
      const sch::Action& a = actions_[i];
      if (a.is_p2p()) {  // one group: the run of consecutive p2p actions
        pipe_.group_start();
        std::vector<Key> sent_f, sent_b;
        for (; i < actions_.size() && actions_[i].is_p2p(); ++i) {
          const sch::Action& p = actions_[i];
          const Key k{p.stage, p.index};
          switch (p.kind) {
            case sch::Kind::SEND_F:
              pipe_.send(out_f_.at(k), p.peer), sent_f.push_back(k);
              break;
            case sch::Kind::SEND_B:
              pipe_.send(out_b_.at(k), p.peer), sent_b.push_back(k);
              break;
            case sch::Kind::RECV_F:
              pipe_.recv(in_f_[k] = activation(b_local, T), p.peer);
              break;
            default:
              pipe_.recv(in_b_[k] = activation(b_local, T), p.peer);
              break;  // RECV_B
          }
        }
        pipe_.group_end().wait();
        for (const auto& k : sent_f) out_f_.erase(k);
        for (const auto& k : sent_b) out_b_.erase(k);
        continue;
      }
      const int v = a.stage, m = a.index;
      const Key k{v, m};
      switch (a.kind) {
        case sch::Kind::F: {
          Tensor x = v == 0 ? embed_forward(be_, extras_compute_, batch(m).inputs) : take(in_f_, k);
          Tensor y =
              stage_forward(be_, cfg_.model, layers(weights(v)), rope_, x, remat_, saved_[k]);
          if (v == V - 1) {
            HeadResult head = head_loss(be_, cfg_.model, extras_compute_, extras_grads_, y,
                                        batch(m).targets, scale);
            loss_sum += head.loss_sum;
            in_b_[k] = head.dx;
          } else if (layout_.rank_of(v + 1) == place_.stage_rank) {
            in_f_[{v + 1, m}] = y;  // local hand-off (no send)
          } else {
            out_f_[k] = y;
          }
          break;
        }
        case sch::Kind::B:
        case sch::Kind::I: {  // I: the input gradient now, the weight gradients at W
          std::vector<DeferredWeightGrad>* defer = a.kind == sch::Kind::I ? &deferred_[k] : nullptr;
          Tensor dx = stage_backward(be_, cfg_.model, layers(weights(v)), layers(gradients(v)),
                                     rope_, saved_.at(k), take(in_b_, k), defer);
          saved_.erase(k);
          if (v == 0) {
            embed_backward(be_, extras_grads_, batch(m).inputs, dx);
          } else if (layout_.rank_of(v - 1) == place_.stage_rank) {
            in_b_[{v - 1, m}] = dx;
          } else {
            out_b_[k] = dx;
          }
          break;
        }
        case sch::Kind::W:
          apply_weight_grads(be_, deferred_.at(k));
          deferred_.erase(k);
          break;
        case sch::Kind::AG_ISSUE: {  // gather stage v's weights into slot `index`
          Tensor& slot = slots_[a.index];
          if (!slot.defined()) slot = be_.empty({max_padded_}, compute_);
          const StageShard& s = stages_.at(v);
          gathers_[a.index] = fsdp_.all_gather(s.compute, slot.view(0, {s.padded}));
          ++all_gathers_;
          break;
        }
        case sch::Kind::AG_WAIT:
          gathers_.at(a.index).wait();
          resident_[v] = a.index;
          break;
        case sch::Kind::RELEASE:
          resident_.erase(v);
          break;
        case sch::Kind::REDUCE_SCATTER: {  // the stage's gradients are complete on this rank
          const Tensor full = full_grads_.at(v);
          reduce_scatters_.push_back(
              {fsdp_.reduce_scatter(full, stages_.at(v).grads, ReduceOp::Sum), full});
          full_grads_.erase(v);
          break;
        }
        case sch::Kind::OPTIMIZER:
          return optimizer_step(step, loss_sum * scale);
        default:
          fail("pipeline executor: unexpected action {}", sch::to_string(a));
      }
      ++i;
    }
    fail("pipeline executor: stage rank {}'s program has no OPTIMIZER action", place_.stage_rank);
  }

  std::size_t peak_bytes() const { return be_.allocator().stats().peak_bytes; }
  std::string device_name() const { return be_.allocator().name(); }
  std::int64_t all_gathers() const { return all_gathers_; }

  // Copies this rank's parameters and AdamW moments into (to_full) or out of (!to_full) the
  // whole-model sets on `host`, by parameter name. FSDP shards are gathered first; FSDP rank 0
  // writes, every rank reads its own shard. Returns the names this rank wrote.
  std::vector<std::string> exchange(Backend& host, const ParamSet* full_params,
                                    const ParamSet* full_m, const ParamSet* full_v, bool to_full) {
    std::vector<std::string> written;
    const std::pair<const ParamSet*, Tensor StageShard::*> parts[] = {
        {full_params, &StageShard::weights}, {full_m, &StageShard::m}, {full_v, &StageShard::v}};
    for (auto& [v, s] : stages_) {
      for (const auto& [full, member] : parts) {
        if (!full) continue;
        const Tensor& mine = s.*member;  // [shard], or a ZeRO-1 piece [zero] of a moment
        const bool piece = zero1_ && member != &StageShard::weights;
        if (to_full) {
          const Tensor shard = piece ? gather_pieces(stage_pieces(s), mine) : mine;
          Tensor whole = be_.empty({s.padded});
          fsdp_.all_gather(shard, whole).wait();
          if (place_.writes_shards() && place_.fsdp_rank == 0) {
            copy_by_name(be_, ParamSet::over(s.specs, whole), host, *full);
            if (member == &StageShard::weights) {
              for (const auto& spec : s.specs) written.push_back(spec.name);
            }
          }
        } else {
          std::vector<double> values;
          for (const auto& spec : s.specs) {
            const auto f = host.to_host<float>(full->tensors[full->index_of(spec.name)]);
            values.insert(values.end(), f.begin(), f.end());
          }
          values.resize(s.padded, 0.0);
          upload_shard(s, mine, values, piece ? stage_pieces(s).begin() : 0);
        }
      }
    }
    // The replicated weights are whole on every rank; the moments are pieces (FSDP rank f owns
    // extras elements [f * piece, f * piece + piece)), gathered to write, cut out to read.
    const std::pair<const ParamSet*, Tensor> extras[] = {
        {full_params, extras_.flat}, {full_m, extras_m_}, {full_v, extras_v_}};
    for (const auto& [full, mine] : extras) {
      if (!full || extras_.flat.numel() == 0) continue;
      const bool whole = mine.raw() == extras_.flat.raw();  // the weights, not a moment piece
      if (to_full) {
        const ParamSet set =
            ParamSet::over(extras_.specs, whole ? mine : gather_pieces(extras_pieces(), mine));
        if (!place_.writes_replicated()) continue;
        for (std::size_t i = 0; i < set.specs.size(); ++i) {
          if (tied_copy(set.specs[i].role)) continue;  // the first stage's to write
          host.upload(be_.to_host<float>(set.tensors[i]).data(),
                      full->tensors[full->index_of(set.specs[i].name)]);
          if (whole) written.push_back(set.specs[i].name);
        }
      } else {
        std::vector<float> values;
        for (const auto& spec : extras_.specs) {
          const auto f = host.to_host<float>(full->tensors[full->index_of(spec.name)]);
          values.insert(values.end(), f.begin(), f.end());
        }
        values.resize(extras_piece_ * place_.F, 0.0f);
        be_.upload(values.data() + (whole ? 0 : place_.fsdp_rank * extras_piece_), mine);
      }
    }
    return written;
  }

 private:
  using Key = std::pair<int, int>;  // (stage, microbatch)

  // Whether this rank keeps a replica of a non-layer parameter: the embedding on the first
  // stage's rank (and, with logits_via_embedding, on the last stage's, which multiplies by it),
  // the final norm and lm_head on the last stage's.
  bool holds_extra(ParamRole role) const {
    const bool first = layout_.rank_of(0) == place_.stage_rank;
    const bool last = layout_.rank_of(layout_.stages() - 1) == place_.stage_rank;
    if (role == ParamRole::Embedding) return first || (last && cfg_.model.logits_via_embedding);
    return last;
  }
  // Tied embeddings on two ranks: the last stage's replica is a copy (not counted in the norm,
  // not written to checkpoints); the first stage's is the original.
  bool tied_copy(ParamRole role) const {
    return role == ParamRole::Embedding && tie_ != nullptr &&
           layout_.rank_of(0) != place_.stage_rank;
  }

  // dst[name] = src[name] for every name of `src`.
  static void copy_by_name(Backend& src_be, const ParamSet& src, Backend& dst_be,
                           const ParamSet& dst) {
    for (std::size_t i = 0; i < src.specs.size(); ++i) {
      const int j = dst.index_of(src.specs[i].name);
      if (j >= 0) dst_be.upload(src_be.to_host<float>(src.tensors[i]).data(), dst.tensors[j]);
    }
  }

  // t = this rank's part of the stage's whole flat values `full` [padded]: shard elements
  // [begin, begin + t.numel()), zero past the shard's end (the padding of a ZeRO-1 piece).
  void upload_shard(const StageShard& s, const Tensor& t, const std::vector<double>& full,
                    std::int64_t begin = 0) {
    const std::int64_t lo = place_.fsdp_rank * s.shard + begin;
    std::vector<float> part(t.numel(), 0.0f);
    for (std::int64_t i = 0; i < t.numel() && begin + i < s.shard; ++i)
      part[i] = float(full[lo + i]);
    be_.upload(part.data(), t);
  }

  // A flat buffer of n elements split over `group` in pieces of `piece` elements (the ZeRO-1
  // layout): its rank r owns elements [r * piece, r * piece + piece) of [0, n). Without a group
  // the one rank owns all of it.
  struct Pieces {
    Communicator* group;
    std::int64_t n, piece;
    std::int64_t begin() const { return group ? std::min(n, group->rank() * piece) : 0; }
    std::int64_t length() const { return std::min(piece, n - begin()); }
  };
  // Stage shards: over the data replicas with ZeRO-1. Extras: their moments over the FSDP group.
  Pieces stage_pieces(const StageShard& s) const {
    return zero1_ ? Pieces{&data_comm_, s.shard, s.zero} : Pieces{nullptr, s.shard, s.shard};
  }
  Pieces extras_pieces() const { return {&fsdp_, extras_.flat.numel(), extras_piece_}; }

  // buffer [n]: its owned range becomes the group's sum over that range (a reduce-scatter),
  // then summed over `also` (the replicas) when given; the rest of buffer is left as it was.
  void reduce_into_owned(const Pieces& p, const Tensor& buffer, Communicator* also = nullptr) {
    Tensor padded = be_.zeros({p.piece * p.group->size()});
    be_.copy(buffer, padded.view(0, {p.n}));
    const Tensor mine = padded.view(p.group->rank() * p.piece, {p.piece});
    p.group->reduce_scatter(padded, mine, ReduceOp::Sum).wait();
    if (also) also->all_reduce(mine, mine, ReduceOp::Sum).wait();
    if (p.length() > 0) be_.copy(mine.view(0, {p.length()}), buffer.view(p.begin(), {p.length()}));
  }
  // The whole [n] from every rank's [piece] tensor (an all-gather).
  Tensor gather_pieces(const Pieces& p, const Tensor& piece) {
    Tensor all = be_.empty({p.piece * p.group->size()});
    p.group->all_gather(piece, all).wait();
    return all.view(0, {p.n});
  }
  // buffer [n] = every rank's owned range of it.
  void gather_owned(const Pieces& p, const Tensor& buffer) {
    Tensor mine = be_.zeros({p.piece});
    if (p.length() > 0) be_.copy(buffer.view(p.begin(), {p.length()}), mine.view(0, {p.length()}));
    be_.copy(gather_pieces(p, mine), buffer);
  }

  // The weights of stage v: the gathered slot with FSDP, the stage's own buffer without.
  ParamSet weights(int v) {
    const StageShard& s = stages_.at(v);
    if (place_.F == 1) return ParamSet::over(s.specs, s.compute);
    const auto it = resident_.find(v);
    CAROUSEL_CHECK(it != resident_.end(),
                   "pipeline executor: stage {} is used without its "
                   "weights gathered (AG_WAIT missing in the program)",
                   v);
    return ParamSet::over(s.specs, slots_.at(it->second));
  }
  // Gradients of stage v: accumulated in place without FSDP, into a full (unsharded) buffer
  // with FSDP until its REDUCE_SCATTER.
  ParamSet gradients(int v) {
    const StageShard& s = stages_.at(v);
    if (place_.F == 1) return ParamSet::over(s.specs, s.grads);
    auto it = full_grads_.find(v);
    if (it == full_grads_.end()) it = full_grads_.emplace(v, be_.zeros({s.padded})).first;
    return ParamSet::over(s.specs, it->second);
  }
  // The stage's layers in order (its specs are grouped by layer).
  static std::vector<LayerWeights> layers(const ParamSet& set) {
    std::vector<LayerWeights> w;
    int last = -1;
    for (const auto& spec : set.specs) {
      if (spec.layer != last) w.push_back(LayerWeights::from(set, last = spec.layer));
    }
    return w;
  }

  Tensor activation(std::int64_t b, std::int64_t T) {
    return be_.empty({b, T, cfg_.model.emb_dim}, compute_);
  }
  static Tensor take(std::map<Key, Tensor>& map, const Key& k) {
    auto it = map.find(k);
    CAROUSEL_CHECK(it != map.end(), "pipeline executor: no tensor for stage {} microbatch {}",
                   k.first, k.second);
    Tensor t = it->second;
    map.erase(it);
    return t;
  }

  // Gradients are complete once every reduce-scatter has landed, the shards are summed over the
  // data replicas, and the replicated embedding / head gradients over the FSDP group and the
  // replicas. Loss and squared gradient norm are summed over all ranks in rank order (each
  // shard and each replicated tensor counted once), then every rank clips and steps AdamW on
  // what it owns; replicas apply identical updates to identical values.
  std::pair<double, double> optimizer_step(std::int64_t step, double loss) {
    for (auto& [event, buffer] : reduce_scatters_) event.wait();
    reduce_scatters_.clear();
    if (place_.D > 1) {
      for (auto& [v, s] : stages_) {
        if (!zero1_) {
          data_comm_.all_reduce(s.grads, s.grads, ReduceOp::Sum).wait();
          continue;
        }
        reduce_into_owned(stage_pieces(s), s.grads);  // ZeRO-1: only the owned piece's sum
      }
    }
    // Extras: the tied table's two uses first (full gradients on both ranks), then FSDP rank f
    // gets the group's sum for its piece only, summed over the replicas too.
    if (tie_) {
      const Tensor& g = extras_grads_.at(ParamRole::Embedding);
      tie_->all_reduce(g, g, ReduceOp::Sum).wait();
    }
    const Pieces extras = extras_pieces();
    if (extras.n > 0)
      reduce_into_owned(extras, extras_grads_.flat, place_.D > 1 ? &data_comm_ : nullptr);
    double squares = 0;
    if (place_.data_rank == 0) {  // each extras element once per FSDP group, a tied copy never
      for (const Segment& seg :
           segments_in(extras_.specs, extras.begin(), extras.begin() + extras.length())) {
        if (!tied_copy(seg.spec->role)) {
          squares += be_.sum_squares(extras_grads_.flat.view(seg.begin, {seg.length}));
        }
      }
    }
    if (zero1_ || place_.writes_shards()) {  // each element of each shard counted once
      for (const auto& [v, s] : stages_) {
        const Pieces p = stage_pieces(s);
        if (p.length() > 0) squares += be_.sum_squares(s.grads.view(p.begin(), {p.length()}));
      }
    }
    std::vector<double> sums = {loss, squares};
    Tensor t = be_.from_host(sums, {2});
    world_.all_reduce(t, t, ReduceOp::Sum).wait();
    sums = be_.to_host<double>(t);
    const double norm = std::sqrt(sums[1]);
    const double lr = learning_rate_at(cfg_, step);
    const double clip = clip_scale(norm, cfg_.gradient_clipping_threshold);
    for (const Segment& seg :
         segments_in(extras_.specs, extras.begin(), extras.begin() + extras.length())) {
      auto whole = [&](const Tensor& t) { return t.view(seg.begin, {seg.length}); };
      auto piece = [&](const Tensor& t) {
        return t.view(seg.begin - extras.begin(), {seg.length});
      };
      be_.adamw_update(whole(extras_.flat), whole(extras_grads_.flat), piece(extras_m_),
                       piece(extras_v_),
                       adamw_params(cfg_, step, lr, clip, seg.spec->weight_decay));
    }
    if (extras.n > 0) gather_owned(extras, extras_.flat);  // every FSDP rank gets every piece
    for (auto& [v, s] : stages_) {
      const Pieces p = stage_pieces(s);
      const std::int64_t begin = p.begin(), shard_lo = place_.fsdp_rank * s.shard;
      for (const Segment& seg :
           segments_in(s.specs, shard_lo + begin, shard_lo + begin + p.length())) {
        const std::int64_t at = seg.begin - shard_lo;  // in the shard
        auto in_shard = [&](const Tensor& t) { return t.view(at, {seg.length}); };
        auto in_piece = [&](const Tensor& t) { return t.view(at - begin, {seg.length}); };
        be_.adamw_update(in_shard(s.weights), in_shard(s.grads), in_piece(s.m), in_piece(s.v),
                         adamw_params(cfg_, step, lr, clip, seg.spec->weight_decay));
      }
      if (zero1_) gather_owned(p, s.weights);  // every replica gets every updated piece
    }
    return {sums[0], norm};
  }

  const Config& cfg_;
  sch::Layout layout_;
  RankPlace place_;
  std::vector<sch::Action> actions_;
  Communicator& world_;  // every rank: the step's loss and gradient norm
  Communicator& pipe_;
  Communicator& fsdp_;
  Communicator& data_comm_;           // the same (stage, FSDP) rank in every data replica
  Communicator* tie_;                 // first and last stage's ranks when they share the embedding
  bool zero1_;                        // shard_optimizer_over_data with D > 1 (ZeRO-1)
  DType compute_;                     // float32, or bfloat16 (mixed precision)
  std::unique_ptr<Backend> backend_;  // this rank's device (CPU, or a logical device on a GPU)
  Backend& be_;
  std::unique_ptr<DataLoader> data_;
  RopeTables rope_;
  RematPolicy remat_;
  std::map<int, StageShard> stages_;
  // Embedding / final norm / head: weights and gradients replicated over the FSDP group (each
  // microbatch part needs them whole), AdamW moments sharded over it: FSDP rank f keeps them
  // for extras elements [f * extras_piece_, (f + 1) * extras_piece_) only.
  ParamSet extras_, extras_grads_;
  ParamSet extras_compute_;  // extras_ in the compute dtype (= extras_ in float32)
  std::int64_t extras_piece_ = 0;
  Tensor extras_m_, extras_v_;  // [extras_piece_]
  std::int64_t max_padded_ = 0;
  std::map<int, Tensor> slots_;       // weight slots: gathered stage weights
  std::map<int, Event> gathers_;      // slot -> its in-flight all-gather
  std::map<int, int> resident_;       // stage -> slot holding its gathered weights
  std::map<int, Tensor> full_grads_;  // stage -> unsharded gradient until REDUCE_SCATTER
  std::vector<std::pair<Event, Tensor>> reduce_scatters_;  // in flight (buffer kept alive)
  std::int64_t all_gathers_ = 0;
  std::map<Key, StageSaved> saved_;                          // forward state kept for the backward
  std::map<Key, std::vector<DeferredWeightGrad>> deferred_;  // I done, W pending
  std::map<Key, Tensor> in_f_, in_b_;    // received / handed-over inputs of F and B
  std::map<Key, Tensor> out_f_, out_b_;  // outputs waiting for their SEND
};

// With ranks in separate processes each process's whole-model sets hold only what its rank
// wrote (exchange). Process 0 receives the rest: every process announces which parameters it
// wrote (an all-reduce of writer ids: each parameter has exactly one writer), then each writer
// sends its sets to process 0, which keeps the parameters that writer owns.
void collect_on_rank_zero(Communicator& comm, Backend& be, const std::vector<std::string>& written,
                          const std::vector<ParamSet*>& sets) {
  const ParamSet& layout = *sets.front();
  std::vector<std::int32_t> writer(layout.specs.size(), 0);  // writer rank + 1
  for (const auto& name : written) writer[layout.index_of(name)] = comm.rank() + 1;
  Tensor t = be.from_host(writer, {std::int64_t(writer.size())});
  comm.all_reduce(t, t, ReduceOp::Sum).wait();
  writer = be.to_host<std::int32_t>(t);
  for (int r = 1; r < comm.size(); ++r) {
    if (std::find(writer.begin(), writer.end(), r + 1) == writer.end()) continue;
    for (ParamSet* set : sets) {
      if (comm.rank() == r) comm.send(set->flat, 0).wait();
      if (comm.rank() != 0) continue;
      Tensor theirs = be.empty(set->flat.shape());
      comm.recv(theirs, r).wait();
      const ParamSet from = ParamSet::over(set->specs, theirs);
      for (std::size_t i = 0; i < writer.size(); ++i) {
        if (writer[i] == r + 1) be.copy(from.tensors[i], set->tensors[i]);
      }
    }
  }
}

// How many processes of the job share this machine (Open MPI tells; else assume one).
int local_processes() {
  const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return v ? std::max(1, std::atoi(v)) : 1;
}

}  // namespace

TrainResult train_pipeline(const Config& cfg, Communicator* process_world) {
  const int D = int(cfg.ici_data_parallelism), S = int(cfg.ici_pipeline_parallelism),
            F = int(cfg.ici_fsdp_parallelism), N = D * S * F;
  CAROUSEL_CHECK(cfg.model.is_llama(), "pipeline training runs decoder_block=llama");
  const std::int64_t b = cfg.global_batch() / cfg.microbatches();
  CAROUSEL_CHECK(b % (F * D) == 0,
                 "each microbatch has {} sequences (global batch {} / {} microbatches), which "
                 "ici_fsdp_parallelism x ici_data_parallelism = {} x {} ranks cannot split "
                 "evenly; choose a batch or microbatch count that makes it a multiple of {}",
                 b, cfg.global_batch(), cfg.microbatches(), F, D, F * D);
  CAROUSEL_CHECK(!process_world || process_world->size() == N,
                 "mpirun started {} processes but the config has D x S x F = {} x {} x {} = {} "
                 "devices (ici_data_parallelism x ici_pipeline_parallelism x "
                 "ici_fsdp_parallelism); start {} processes (mpirun -np {}) or change the mesh",
                 process_world ? process_world->size() : 0, D, S, F, N, N, N);
  const sch::Program program =
      sch::lower(sch::generate(schedule_spec(cfg)),
                 {cfg.weight_slots(), int(cfg.pipeline_prefetch_lookahead), /*fsdp=*/F > 1});
  sch::replay(program);
  const bool on_gpus =
      cfg.device == "cuda" || (cfg.device == "auto" && !list_cuda_devices().devices.empty());
  CAROUSEL_CHECK(!on_gpus || !process_world,
                 "device={} with ranks as mpirun processes needs the NCCL communicator inside the "
                 "pipeline executor, which is not built yet; run without mpirun (the logical "
                 "devices then share the visible GPUs, exchanging through host memory) or use "
                 "device=cpu",
                 cfg.device);
  spdlog::info(
      "pipeline: {} schedule, D={} replicas x S={} stages x F={} FSDP = {} {} devices "
      "({}), R={} repeats, M={} microbatches{}; program validated and deadlock-free",
      cfg.pipeline_schedule, D, S, F, N, on_gpus ? "logical GPU" : "CPU",
      process_world ? "one process each" : "threads of this process", program.layout.repeats,
      program.layout.microbatches,
      F > 1 ? fmt::format(", weight slots {}", cfg.weight_slots()) : std::string());

  // Whole-model parameters and moments on a host device: checkpoints are written from and read
  // into these, so a pipeline checkpoint is the same file a single-device run writes (global
  // names, unsharded) and either can resume the other.
  CpuBackend host(N);
  const auto specs = param_table(cfg.model);
  ParamSet full_params = ParamSet::allocate(host, specs, DType::F32);
  ParamSet full_m = ParamSet::allocate(host, specs, DType::F32);
  ParamSet full_v = ParamSet::allocate(host, specs, DType::F32);
  TrainResult result;
  const auto resume_from = cfg.enable_checkpointing ? latest_checkpoint(cfg) : std::nullopt;
  bool load_params = false, load_moments = false;
  if (resume_from) {
    result.start_step = load_checkpoint(host, *resume_from, {&full_params, &full_m, &full_v}).step;
    load_params = load_moments = true;
    spdlog::info("resuming from {} at step {}", *resume_from, result.start_step);
  } else if (!cfg.load_parameters_path.empty()) {
    load_checkpoint(host, cfg.load_parameters_path, {&full_params, nullptr, nullptr});
    load_params = true;
    spdlog::info("parameters loaded from {}", cfg.load_parameters_path);
  }
  CAROUSEL_CHECK(result.start_step <= cfg.steps,
                 "the run directory's checkpoint is at step {} but steps={}; raise steps to "
                 "continue training",
                 result.start_step, cfg.steps);

  // One rank: its communicators split from `comm` (the world of all N ranks), its executor,
  // the steps. Rank 0 reports; checkpoints are gathered to whole-model sets and written by it.
  const int processes = process_world ? process_world->size() : 1;
  std::optional<StepReporter> reporter;
  if (!process_world || process_world->rank() == 0) reporter.emplace(cfg);
  std::vector<double> peaks(N, 0), gathers(N, 0);
  std::vector<std::string> names(N);  // with processes, only this process's own is known
  auto run_rank = [&](Communicator& comm) {
    const int device = comm.rank();
    const RankPlace place{device / (S * F), device / F % S, device % F, D, S, F};
    const int d = place.data_rank, s = place.stage_rank, f = place.fsdp_rank;
    auto pipe = comm.split(d * F + f, s);  // the ring of stages of one replica and FSDP index
    auto fsdp = comm.split(d * S + s, f);  // the FSDP group of one stage
    auto data = comm.split(s * F + f, d);  // the same rank in every replica
    const int first = program.layout.rank_of(0),
              last = program.layout.rank_of(program.layout.stages() - 1);
    const bool tied = cfg.model.logits_via_embedding && first != last && (s == first || s == last);
    auto tie = comm.split(tied ? d * F + f : -1, s == first ? 0 : 1);  // first stage, then last
    RankExecutor exec(cfg, program, place, comm, *pipe, *fsdp, *data, tie.get());
    if (load_params) {
      exec.exchange(host, &full_params, load_moments ? &full_m : nullptr,
                    load_moments ? &full_v : nullptr, /*to_full=*/false);
    }
    for (std::int64_t step = result.start_step; step < cfg.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto [loss, norm] = exec.step(step);
      comm.barrier().wait();
      if (checkpoint_due(cfg, step)) {
        const auto written = exec.exchange(host, &full_params, &full_m, &full_v, /*to_full=*/true);
        comm.barrier().wait();
        if (processes > 1)
          collect_on_rank_zero(comm, host, written, {&full_params, &full_m, &full_v});
        if (device == 0) {
          spdlog::info("checkpoint saved: {}",
                       save_checkpoint(host, cfg, {&full_params, &full_m, &full_v}, {step + 1}));
        }
        comm.barrier().wait();
      }
      if (device == 0) {
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        result.steps.push_back(reporter->report(step, loss, norm, seconds));
      }
    }
    peaks[device] = double(exec.peak_bytes());
    names[device] = exec.device_name();
    gathers[device] = double(exec.all_gathers());
    if (processes > 1) {  // every process learns every rank's figures
      CpuBackend be(device);
      for (std::vector<double>* v : {&peaks, &gathers}) {
        Tensor all = be.zeros({N}, DType::F64);
        comm.all_gather(be.from_host(std::vector<double>{(*v)[device]}, {1}), all).wait();
        *v = be.to_host<double>(all);
      }
    }
  };
  if (process_world) {
    omp_set_num_threads(std::max(1, omp_get_num_procs() / local_processes()));
    run_rank(*process_world);
  } else {
    LocalWorld world(N, cfg.collective_timeout_seconds);
    run_ranks(
        N,
        [&](int device) {
          // The ranks share the machine's cores: each rank's OpenMP loops (and OpenBLAS, which
          // uses the same pool) get cores / ranks threads, at least one.
          omp_set_num_threads(std::max(1, omp_get_num_procs() / N));
          run_rank(*world.communicator(device));
        },
        &world);  // a rank's error ends the others' waits at once
  }
  for (int d = 0; d < N; ++d) {
    spdlog::info(
        "rank {} {}(data rank {}, stage rank {}, fsdp rank {}): peak memory {}, {} "
        "weight all-gathers",
        d, names[d].empty() ? "" : "on " + names[d] + " ", d / (S * F), d / F % S, d % F,
        format_bytes(std::size_t(peaks[d])), std::int64_t(gathers[d]));
    result.peak_device_bytes = std::max(result.peak_device_bytes, std::size_t(peaks[d]));
    result.all_gathers_per_device.push_back(std::int64_t(gathers[d]));
  }
  return result;
}

}  // namespace carousel
