// sharded_checkpoint.cpp — moving one rank's parameters and AdamW moments to and from the
// whole-model sets that checkpoints are written from and read into (global names, unsharded: the
// files a single-device run writes, so any layout can resume any other).
#include "host/parallel/sharded_checkpoint.h"

#include <algorithm>
#include <cmath>

#include "host/parallel/sharded_params.h"

namespace carousel {

namespace {

// dst[name] = src[name] for every name of `src` that `dst` has.
void copy_by_name(Backend& src_be, const ParamSet& src, Backend& dst_be, const ParamSet& dst) {
  for (std::size_t i = 0; i < src.specs.size(); ++i) {
    const int j = dst.index_of(src.specs[i].name);
    if (j >= 0) dst_be.upload(src_be.to_host<float>(src.tensors[i]).data(), dst.tensors[j]);
  }
}

// The values of `specs` in `whole`, concatenated in order (a stage's or the extras' flat layout;
// with tensor parallelism each spec's part of its whole tensor).
std::vector<double> flat_values(Backend& host, const ParamSet& whole,
                                const std::vector<ParamSpec>& specs) {
  std::vector<double> values;
  for (const auto& spec : specs) {
    const auto f = host.to_host<float>(whole.tensors[whole.index_of(spec.name)]);
    const auto part = part_of_whole(spec, std::vector<double>(f.begin(), f.end()));
    values.insert(values.end(), part.begin(), part.end());
  }
  return values;
}

// The whole tensors of `specs` assembled from every tensor rank's buffer [T x padded] (a stage's
// or the extras'): rank r's buffer at r x padded holds its parts of `specs` back to back, each
// cut as param_table(model, {r, T}) says (the same names and sizes on every rank, other slices).
std::vector<std::vector<float>> assemble(const ModelConfig& model,
                                         const std::vector<ParamSpec>& specs, std::int64_t padded,
                                         int tensor_size, Backend& be, const Tensor& parts) {
  const auto all = be.to_host<float>(parts);
  std::vector<std::vector<float>> whole;
  for (const auto& spec : specs) whole.emplace_back(std::size_t(numel(spec.whole())));
  for (int r = 0; r < tensor_size; ++r) {
    const std::vector<ParamSpec> table = param_table(model, {r, tensor_size});
    std::int64_t offset = r * padded;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto it = std::find_if(table.begin(), table.end(),
                                   [&](const ParamSpec& p) { return p.name == specs[i].name; });
      CAROUSEL_ASSERT(it != table.end(), "'{}' is not in tensor rank {}'s parameter table",
                      specs[i].name, r);
      const ParamSpec& spec = *it;
      const auto first = all.begin() + offset;
      place_in_whole(spec, std::vector<float>(first, first + numel(spec.shape)), whole[i]);
      offset += numel(spec.shape);
    }
  }
  return whole;
}

}  // namespace

std::vector<std::string> ShardedParams::exchange(Backend& host, const CheckpointContents& whole,
                                                 bool to_whole) {
  std::vector<std::string> written;
  // Stage shards: FSDP rank 0 of data rank 0 writes the gathered stage (tensor rank 0 of them
  // the whole tensors assembled from every tensor rank's parts); every rank reads its own shard
  // (or its ZeRO-1 piece of a moment) of its own parts.
  const std::pair<const ParamSet*, Tensor StageShard::*> parts[] = {
      {whole.params, &StageShard::weights},
      {whole.adam_m, &StageShard::adam_m},
      {whole.adam_v, &StageShard::adam_v}};
  for (auto& [stage, s] : stages_) {
    for (const auto& [set, member] : parts) {
      if (!set) continue;
      const Tensor& mine = s.*member;  // [shard], or a ZeRO-1 piece [piece] of a moment
      const bool piece = zero1_ && member != &StageShard::weights;
      if (to_whole) {
        const Tensor shard = piece ? gather_pieces(stage_pieces(s), mine) : mine;
        Tensor gathered = be_.empty({s.padded});
        comms_.fsdp->all_gather(shard, gathered).wait();
        const int tensor_size = place_.mesh.tensor;
        if (tensor_size > 1) {
          // The writing rank's tensor group (they share its replica and FSDP index, so all of
          // it or none of it is here) gathers every tensor rank's parts; tensor rank 0 assembles
          // the whole tensors from them.
          if (!(place_.writes_shards() && place_.fsdp_rank == 0)) continue;
          Tensor parts = be_.empty({s.padded * tensor_size});
          comms_.tensor->all_gather(gathered, parts).wait();
          if (place_.tensor_rank == 0) {
            const auto whole_tensors =
                assemble(cfg_.model, s.specs, s.padded, tensor_size, be_, parts);
            for (std::size_t i = 0; i < s.specs.size(); ++i) {
              host.upload(whole_tensors[i].data(), set->tensors[set->index_of(s.specs[i].name)]);
              if (member == &StageShard::weights) written.push_back(s.specs[i].name);
            }
          }
        } else if (place_.writes_shards() && place_.fsdp_rank == 0) {
          copy_by_name(be_, ParamSet::over(s.specs, gathered), host, *set);
          if (member == &StageShard::weights) {
            for (const auto& spec : s.specs) written.push_back(spec.name);
          }
        }
      } else {
        std::vector<double> values = flat_values(host, *set, s.specs);
        values.resize(s.padded, 0.0);
        upload_shard(s, mine, values, piece ? stage_pieces(s).begin() : 0);
      }
    }
  }
  // The extras' weights are whole on every FSDP rank; the moments are pieces (FSDP rank f owns
  // extras elements [f * piece, f * piece + piece)), gathered to write, cut out to read. With
  // tensor parallelism each tensor rank holds its vocabulary rows: the writer's tensor group
  // gathers them and its tensor rank 0 assembles the whole tensors.
  const std::pair<const ParamSet*, Tensor> extras[] = {
      {whole.params, extras_.flat}, {whole.adam_m, extras_m_}, {whole.adam_v, extras_v_}};
  for (const auto& [set, mine] : extras) {
    if (!set || extras_.flat.numel() == 0) continue;
    const bool is_weights = mine.raw() == extras_.flat.raw();  // not a moment piece
    if (to_whole) {
      const Tensor flat = is_weights ? mine : gather_pieces(extras_pieces(), mine);
      const int tensor_size = place_.mesh.tensor;
      if (place_.replica_rank() != 0 || place_.fsdp_rank != 0) continue;  // not the writer's group
      std::vector<std::vector<float>> whole_tensors;
      if (tensor_size > 1) {
        Tensor parts = be_.empty({flat.numel() * tensor_size});
        comms_.tensor->all_gather(flat, parts).wait();
        if (place_.tensor_rank != 0) continue;
        whole_tensors = assemble(cfg_.model, extras_.specs, flat.numel(), tensor_size, be_, parts);
      } else {
        for (const Tensor& t : ParamSet::over(extras_.specs, flat).tensors)
          whole_tensors.push_back(be_.to_host<float>(t));
      }
      for (std::size_t i = 0; i < extras_.specs.size(); ++i) {
        const ParamSpec& spec = extras_.specs[i];
        if (tied_copy(spec.role)) continue;  // the first stage's to write
        host.upload(whole_tensors[i].data(), set->tensors[set->index_of(spec.name)]);
        if (is_weights) written.push_back(spec.name);
      }
    } else {
      const std::vector<double> values = flat_values(host, *set, extras_.specs);
      std::vector<float> padded(extras_piece_ * place_.mesh.fsdp, 0.0f);
      std::copy(values.begin(), values.end(), padded.begin());
      be_.upload(padded.data() + (is_weights ? 0 : place_.fsdp_rank * extras_piece_), mine);
    }
  }
  return written;
}

bool ShardedParams::weights_finite() {
  double squares = extras_.flat.numel() > 0 ? be_.sum_squares(extras_.flat) : 0.0;
  for (const auto& [stage, s] : stages_) squares += be_.sum_squares(s.weights);
  Tensor t = be_.from_host(std::vector<double>{squares}, {1});
  comms_.world->all_reduce(t, t, ReduceOp::Sum).wait();
  return std::isfinite(be_.to_host<double>(t)[0]);
}

void collect_on_rank_zero(Communicator& world, Backend& host,
                          const std::vector<std::string>& written,
                          const std::vector<const ParamSet*>& sets) {
  const ParamSet& layout = *sets.front();
  std::vector<std::int32_t> writer(layout.specs.size(), 0);  // writer rank + 1
  for (const auto& name : written) writer[layout.index_of(name)] = world.rank() + 1;
  Tensor t = host.from_host(writer, {std::int64_t(writer.size())});
  world.all_reduce(t, t, ReduceOp::Sum).wait();
  writer = host.to_host<std::int32_t>(t);
  for (int r = 1; r < world.size(); ++r) {
    if (std::find(writer.begin(), writer.end(), r + 1) == writer.end()) continue;
    for (const ParamSet* set : sets) {
      if (world.rank() == r) world.send(set->flat, 0).wait();
      if (world.rank() != 0) continue;
      Tensor theirs = host.empty(set->flat.shape());
      world.recv(theirs, r).wait();
      const ParamSet from = ParamSet::over(set->specs, theirs);
      for (std::size_t i = 0; i < writer.size(); ++i) {
        if (writer[i] == r + 1) host.copy(from.tensors[i], set->tensors[i]);
      }
    }
  }
}

}  // namespace carousel
