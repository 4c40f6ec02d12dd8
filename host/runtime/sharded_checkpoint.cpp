// sharded_checkpoint.cpp — one rank's share of a checkpoint (the whole tensors it writes) and
// its parameters and AdamW moments read back from a checkpoint's whole tensors. Checkpoints hold
// global names and whole tensors (the files a single-device run writes), so any layout resumes
// any other; each tensor has one writing rank, so writes run in parallel and no rank gathers
// the model.
#include <algorithm>
#include <cmath>

#include "host/runtime/sharded_params.h"

namespace carousel {

namespace {

struct Kind {
  Tensor StageShard::*member;
  const char* suffix;  // of the tensor names in the checkpoint
  bool moment() const { return *suffix != '\0'; }
};
constexpr Kind kKinds[] = {{&StageShard::weights, ""},
                           {&StageShard::adam_m, ".exp_avg"},
                           {&StageShard::adam_v, ".exp_avg_sq"}};

// Elements [lo, hi) of the flat buffer that holds `specs` back to back (this tensor rank's parts
// of the whole tensors `files` holds, names + `suffix`); zeros past the last spec (padding).
// Only the tensors overlapping the range are read.
std::vector<float> flat_range(const TensorFiles& files, const std::vector<ParamSpec>& specs,
                              const char* suffix, std::int64_t lo, std::int64_t hi) {
  std::vector<float> out(std::size_t(std::max<std::int64_t>(hi - lo, 0)), 0.0f);
  std::int64_t offset = 0;
  for (const auto& spec : specs) {
    const std::int64_t n = numel(spec.shape);
    const std::int64_t a = std::max(lo, offset), b = std::min(hi, offset + n);
    if (a < b) {
      const std::vector<float> whole = files.read_f32(spec.name + suffix, spec.whole());
      for (std::int64_t i = a; i < b; ++i) out[i - lo] = whole[spec.whole_index(i - offset)];
    }
    offset += n;
  }
  return out;
}

}  // namespace

// The whole tensors of specs[i] for every i with `wanted(i)`, from `local` (this tensor rank's
// parts of `specs` back to back, `padded` elements). With tensor parallelism the tensor group
// gathers every rank's parts and tensor rank 0 assembles them (the others get nothing); each
// part is cut as param_table(model, {r, T}) says (the same names on every rank, other slices).
std::vector<std::vector<float>> ShardedParams::whole_tensors(
    const std::vector<ParamSpec>& specs, std::int64_t padded, const Tensor& local,
    const std::function<bool(std::size_t)>& wanted) {
  const int tensor_size = place_.mesh.tensor;
  std::vector<std::vector<float>> whole(specs.size());
  if (tensor_size == 1) {
    const ParamSet views = ParamSet::over(specs, local.view(0, {ParamSet::total_numel(specs)}));
    for (std::size_t i = 0; i < specs.size(); ++i) {
      if (wanted(i)) whole[i] = be_.to_host<float>(views.tensors[i]);
    }
    return whole;
  }
  Tensor parts = be_.empty({padded * tensor_size});
  comms_.tensor->all_gather(local, parts).wait();
  if (place_.tensor_rank != 0) return whole;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (wanted(i)) whole[i].resize(std::size_t(numel(specs[i].whole())));
  }
  for (int r = 0; r < tensor_size; ++r) {
    const std::vector<ParamSpec> table = param_table(cfg_.model, {r, tensor_size});
    std::int64_t offset = r * padded;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto it = std::find_if(table.begin(), table.end(),
                                   [&](const ParamSpec& p) { return p.name == specs[i].name; });
      CAROUSEL_ASSERT(it != table.end(), "'{}' is not in tensor rank {}'s parameter table",
                      specs[i].name, r);
      const std::int64_t n = numel(it->shape);
      if (wanted(i)) place_in_whole(*it, be_.to_host<float>(parts.view(offset, {n})), whole[i]);
      offset += n;
    }
  }
  return whole;
}

CheckpointPart ShardedParams::checkpoint_part(bool moments) {
  CheckpointPart part;
  const int fsdp = place_.mesh.fsdp;
  // A tensor's writer: the holder of its original (ShardedParams::holders: the first of the
  // replicas holding it, the stage that runs it), tensor rank 0 (which assembles the parts), and
  // among the FSDP ranks the one the tensor's index deals it to, so a stage's FSDP group writes
  // in parallel and each holds about 1/F of the stage on the host.
  const auto dealt_here = [&](std::size_t i) {
    return int(i % std::size_t(fsdp)) == place_.fsdp_rank;
  };
  // With expert parallelism a routed expert's writer is the first replica of its expert rank.
  const bool writes_experts = place_.mesh.expert > 1 && place_.expert_replica_rank() == 0;
  const auto keep = [&](const ParamSpec& spec, const Kind& kind, std::vector<float>&& values) {
    (kind.moment() ? part.moments : part.params)
        .push_back({spec.name + kind.suffix, spec.whole(), std::move(values)});
  };
  for (auto& stage_shard : stages_) {
    StageShard& s = stage_shard.second;  // named: clang 14 (the fuzz build) cannot capture a
                                         // structured binding in a lambda
    for (const Kind& kind : kKinds) {
      if (kind.moment() && !moments) continue;
      const Tensor& mine = s.*kind.member;  // [shard], or a ZeRO-1 piece [piece] of a moment
      const Tensor shard =
          zero1_ && kind.moment() ? gather_pieces(stage_pieces(s), mine) : mine;  // all replicas
      if (!place_.writes_shards() && !writes_experts) continue;
      const auto written_here = [&](std::size_t i) {
        return dealt_here(i) && holders(s.specs[i], false, false).original;
      };
      Tensor gathered = be_.empty({s.padded});
      comms_.fsdp->all_gather(shard, gathered).wait();
      auto whole = whole_tensors(s.specs, s.padded, gathered, written_here);
      if (place_.tensor_rank != 0) continue;
      for (std::size_t i = 0; i < s.specs.size(); ++i) {
        if (written_here(i)) keep(s.specs[i], kind, std::move(whole[i]));
      }
    }
  }
  // The extras' weights are whole on every FSDP rank; their moments are pieces (FSDP rank f owns
  // extras elements [f * piece, f * piece + piece)), gathered first. A stage copy (a tied table's
  // on the last stage, what every stage rank holds of the layers after the pipeline) is not
  // written; routed experts after the pipeline are written by their expert rank's first replica.
  if (extras_.flat.numel() == 0) return part;
  const auto extras_dealt_here = [&](std::size_t i) {
    return dealt_here(i) && extra_holders(extras_.specs[i]).original;
  };
  for (const Kind& kind : kKinds) {
    if (kind.moment() && !moments) continue;
    const Tensor flat =
        !kind.moment() ? extras_.flat
                       : gather_pieces(extras_pieces(),
                                       kind.member == &StageShard::adam_m ? extras_m_ : extras_v_);
    if (!place_.writes_shards() && !writes_experts) continue;
    auto whole = whole_tensors(extras_.specs, flat.numel(), flat, extras_dealt_here);
    if (place_.tensor_rank != 0) continue;
    for (std::size_t i = 0; i < extras_.specs.size(); ++i) {
      if (extras_dealt_here(i)) keep(extras_.specs[i], kind, std::move(whole[i]));
    }
  }
  return part;
}

void ShardedParams::restore(const TensorFiles& files, bool moments) {
  // Stage shards: FSDP rank f's shard is elements [f * shard, (f + 1) * shard) of the stage's
  // flat buffer; a ZeRO-1 moment piece is the replica's piece of that shard.
  for (auto& [stage, s] : stages_) {
    for (const Kind& kind : kKinds) {
      if (kind.moment() && !moments) continue;
      const Tensor& mine = s.*kind.member;
      const std::int64_t begin = zero1_ && kind.moment() ? stage_pieces(s).begin() : 0;
      const std::int64_t lo = place_.fsdp_rank * s.shard + begin;
      const std::int64_t n = std::min(mine.numel(), s.shard - begin);
      std::vector<float> values = flat_range(files, s.specs, kind.suffix, lo, lo + n);
      values.resize(std::size_t(mine.numel()), 0.0f);
      be_.upload(values.data(), mine);
    }
  }
  // Extras: the weights whole, each moment this FSDP rank's piece.
  if (extras_.flat.numel() == 0) return;
  for (const Kind& kind : kKinds) {
    if (kind.moment() && !moments) continue;
    const Tensor& mine = !kind.moment()                       ? extras_.flat
                         : kind.member == &StageShard::adam_m ? extras_m_
                                                              : extras_v_;
    const std::int64_t lo = kind.moment() ? place_.fsdp_rank * extras_piece_ : 0;
    const std::int64_t hi = std::min(lo + mine.numel(), extras_.flat.numel());
    std::vector<float> values = flat_range(files, extras_.specs, kind.suffix, lo, hi);
    values.resize(std::size_t(mine.numel()), 0.0f);
    be_.upload(values.data(), mine);
  }
}

bool ShardedParams::weights_finite() {
  double squares = extras_.flat.numel() > 0 ? be_.sum_squares(extras_.flat) : 0.0;
  for (const auto& [stage, s] : stages_) squares += be_.sum_squares(s.weights);
  Tensor t = be_.from_host(std::vector<double>{squares}, {1});
  comms_.world->all_reduce(t, t, ReduceOp::Sum).wait();
  return std::isfinite(be_.to_host<double>(t)[0]);
}

}  // namespace carousel
