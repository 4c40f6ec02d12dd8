// replica_check.h — data-parallel replicas hold the same bits. Replicas start from the same
// weights and apply the same updates, so after any step every rank's master weights equal, bit
// for bit, those of the ranks with its stage and FSDP rank in the other replicas (with ZeRO-1 too,
// once the updated pieces are gathered). A flipped bit on one GPU (silent data corruption) or a
// bug that lets replicas drift breaks that without any loss showing it for many steps.
//
// Every replica_check_interval steps, and before every checkpoint save, each rank hashes its
// weights per parameter (fnv1a64_words, compute/hash.h: any change of one 8-byte word changes
// the hash) and the data group compares one combined hash; a group that differs compares the
// per-parameter hashes to find the first parameter that differs, and the whole world learns it
// in one gather. On a mismatch every rank throws ReplicaMismatchError naming the step, the
// replica, its rank and the parameter — before the step's checkpoint, so the checkpoints on disk
// stay good. With layers outside the pipeline (pipeline_parallel_layers) every stage rank holds
// a copy of them (ShardedParams::stage_held_weights), compared over the stage ranks the same way.
#pragma once

#include <cstdint>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/mesh/mesh.h"
#include "host/runtime/sharded_params.h"

namespace carousel {

struct ReplicaMismatchError : Error {
  using Error::Error;
};

class ReplicaCheck {
 public:
  explicit ReplicaCheck(const Config& cfg) : cfg_(cfg) {}

  // Whether step `step` (0-based, its update applied) is checked: D x C > 1 (data replicas
  // and context ranks hold the same weights) or stage ranks hold copies, and the interval is on,
  // at every interval-th step and at every step a checkpoint is saved.
  bool due(std::int64_t step, bool checkpoint_due) const;

  // Compares this rank's weights with its replicas'; every rank of the world must call it.
  void verify(std::int64_t step, const ShardedParams& params, const RankCommunicators& comms,
              const RankPlace& place, Backend& be) const;

 private:
  const Config& cfg_;
};

}  // namespace carousel
