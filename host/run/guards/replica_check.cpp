// replica_check.cpp — data replicas compared bit for bit (see replica_check.h).
#include "host/run/guards/replica_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "compute/hash.h"
#include "models/params.h"

namespace carousel {

bool ReplicaCheck::due(std::int64_t step, bool checkpoint_due) const {
  // The replica group: D data replicas x C context ranks hold the same weights; with layers
  // outside the pipeline every stage rank holds those.
  const bool replicas = cfg_.data_ranks() * cfg_.ici_context_parallelism > 1;
  const bool stage_copies = cfg_.num_devices() > 1 && cfg_.ici_pipeline_parallelism > 1 &&
                            cfg_.pipelined_layers() < cfg_.model.num_layers;
  if (!(replicas || stage_copies) || cfg_.replica_check_interval <= 0) return false;
  return checkpoint_due || (step + 1) % cfg_.replica_check_interval == 0;
}

namespace {

// Per-parameter hashes of the master weights this rank holds, in held_weights() order.
std::vector<std::int64_t> weight_hashes(
    const std::vector<std::pair<const ParamSpec*, Tensor>>& held, Backend& be) {
  std::vector<std::int64_t> hashes;
  std::vector<float> copy;
  for (const auto& [spec, view] : held) {
    const void* data = view.raw();
    if (!be.allocator().host_accessible()) {  // a GPU's weights come to the host first
      copy = be.to_host<float>(view);
      data = copy.data();
    }
    hashes.push_back(std::int64_t(fnv1a64_words(data, view.nbytes())));
  }
  return hashes;
}

std::vector<std::int64_t> gather(Communicator& group, Backend& be,
                                 const std::vector<std::int64_t>& mine) {
  const std::int64_t n = std::int64_t(mine.size());
  Tensor all = be.empty({n * group.size()}, DType::I64);
  group.all_gather(be.from_host(mine, {n}), all).wait();
  return be.to_host<std::int64_t>(all);
}

// Compares the weights `held` (the same parameters, in the same order, on every member of
// `group`) over the group; every rank of the world learns every group's verdict, and all throw
// the same error when one differs. `rank_of(j)`: the world rank of the group's member j.
// `member` names a member of the group in the message ("replica", "stage rank").
void compare_over(std::int64_t step, const std::vector<std::pair<const ParamSpec*, Tensor>>& held,
                  Communicator& group, const std::function<int(int)>& rank_of, const char* member,
                  const ModelConfig& model, const RankCommunicators& comms, Backend& be) {
  const std::vector<std::int64_t> hashes = weight_hashes(held, be);
  const std::int64_t combined = std::int64_t(fnv1a64_words(hashes.data(), 8 * hashes.size()));
  const std::vector<std::int64_t> combined_all = gather(group, be, {combined});
  // This group's report: the first member that differs from member 0 and the first parameter
  // (`held` order) where it does; -1 when the group agrees. Every member computes the same
  // report, from the same gathered values.
  std::int64_t replica = -1, parameter = -1;
  for (std::size_t j = 1; j < combined_all.size() && replica < 0; ++j) {
    if (combined_all[j] != combined_all[0]) replica = std::int64_t(j);
  }
  if (replica >= 0) {  // the whole group is here: find the parameter
    const std::vector<std::int64_t> all = gather(group, be, hashes);
    const std::size_t n = hashes.size();
    for (std::size_t i = 0; i < n && parameter < 0; ++i) {
      if (all[std::size_t(replica) * n + i] != all[i]) parameter = std::int64_t(i);
    }
  }
  // The parameter as its index in the model's parameter table, which every rank has.
  const auto table = param_table(model);
  std::int64_t table_index = -1;
  for (std::size_t i = 0; parameter >= 0 && i < table.size(); ++i) {
    if (table[i].name == held[std::size_t(parameter)].first->name) table_index = std::int64_t(i);
  }
  const int differing = rank_of(int(std::max<std::int64_t>(replica, 0)));
  const std::vector<std::int64_t> reports =
      gather(*comms.world, be, {replica, table_index, differing});
  for (std::size_t r = 0; r < reports.size(); r += 3) {
    if (reports[r] < 0) continue;
    const std::int64_t index = reports[r + 1];
    throw ReplicaMismatchError(fmt::format(
        "replica check after step {}: {} {} (rank {}) holds weights that differ from "
        "{} 0's{} — silent data corruption on a device, or replicas "
        "that drifted apart; the run stops before saving, so the checkpoints on disk stay good "
        "(resume from the last one, on other devices if one is suspect)",
        step + 1, member, reports[r], reports[r + 2], member,
        index >= 0 ? fmt::format(", first in '{}'", table[std::size_t(index)].name) : ""));
  }
}

}  // namespace

void ReplicaCheck::verify(std::int64_t step, const ShardedParams& params,
                          const RankCommunicators& comms, const RankPlace& place,
                          Backend& be) const {
  // With expert parallelism the routed experts are compared among the replicas of their expert
  // rank, everything else among all the replicas.
  const bool experts = place.mesh.expert > 1;
  std::vector<std::pair<const ParamSpec*, Tensor>> replicated, routed;
  for (const auto& held : params.held_weights())
    (experts && held.first->expert.sharded() ? routed : replicated).push_back(held);
  const int C = place.mesh.context, E = place.mesh.expert;
  compare_over(
      step, replicated, *comms.data,
      [&](int j) {  // in replica_rank() order
        RankPlace p = place;
        p.data_rank = j / C;
        p.context_rank = j % C;
        return p.rank();
      },
      "replica", cfg_.model, comms, be);
  // With layers outside the pipeline every stage rank holds them, a copy of the last stage's.
  const auto stage_held = params.stage_held_weights();
  if (!stage_held.empty()) {
    compare_over(
        step, stage_held, *comms.pipe,
        [&](int j) {  // in stage_rank order
          RankPlace p = place;
          p.stage_rank = j;
          return p.rank();
        },
        "stage rank", cfg_.model, comms, be);
  }
  if (!experts) return;
  compare_over(
      step, routed, *comms.expert_data,
      [&](int j) {  // in expert_replica_rank() order
        RankPlace p = place;
        p.data_rank = j / C * E + place.expert_rank();
        p.context_rank = j % C;
        return p.rank();
      },
      "replica", cfg_.model, comms, be);
}

}  // namespace carousel
