// placement.h — where a parameter lives on each axis of the device mesh (torchtitan's DTensor
// placements, for carousel's axes): the one fact that the optimizer's gradient reductions, the
// global norm, checkpoint writers, the replica check and the planner's bytes all read, instead of
// each restating "wq is column-parallel" or "routed experts are per expert rank".
//
// The mesh's axes, slowest first in the rank order (host/mesh/mesh.h): replica (D data
// replicas), expert (E, carved from the data axis), stage (S), fsdp (F), context (C), tensor (T).
// On one axis a parameter is
//   Shard      each rank holds its own part: rows or columns [begin, begin + shape[dim]) of the
//              whole tensor (tensor parallelism), or whole tensors dealt over the axis (dim -1: a
//              routed expert's matrices live on one expert rank); `holders` consecutive ranks
//              hold each part (> 1: a KV head shared by T / num_kv_heads tensor ranks);
//   Replicate  every rank of the axis holds the same values.
// Each holder computes its gradient from other tokens, rows or microbatches, so a gradient is a
// partial sum over the holders (DTensor's Partial). The one rule: a gradient is summed over the
// holders on every axis and sliced on every axis where the parameter is sharded, and it is counted
// in the global norm and written to checkpoints by one holder (the original: the first along each
// axis, the stage that runs it along the stage axis).
//
// The parameter table (models/params.h) gives the model's own axes — tensor and expert; the rank
// runtime (host/runtime/sharded_params.h) adds the others: a layer's parameters are sharded over
// stages and FSDP ranks, the embedding, final norm and head are replicated over the FSDP ranks
// (and over the stage ranks that use them), everything is replicated over data replicas and
// context ranks.
#pragma once

#include <cstdint>

namespace carousel {

// Slowest first in the rank order (host/mesh/mesh_axes.h numbers ranks by it).
enum class MeshAxis { Replica, Expert, Stage, Fsdp, Context, Tensor };

struct Placement {
  enum class Kind { Replicate, Shard };
  Kind kind = Kind::Replicate;
  int dim = -1;             // Shard: the dimension split (0 rows, 1 columns), -1 whole tensors
  std::int64_t begin = 0;   // Shard of a dimension: this rank's first index along it
  int holders = 1;          // Shard: consecutive ranks holding the same part

  static Placement replicate() { return {}; }
  // Rows (dim 0) or columns (dim 1) from `begin`, held by `holders` consecutive ranks.
  static Placement shard(int dim, std::int64_t begin, int holders = 1) {
    return {Kind::Shard, dim, begin, holders};
  }
  // Whole tensors dealt over the axis: this one lives on one rank of it.
  static Placement dealt() { return {Kind::Shard, -1, 0, 1}; }

  bool sharded() const { return kind == Kind::Shard; }
  // How many ranks of an axis of `size` hold the same values: the ones a gradient is summed over.
  int holders_of(int size) const { return sharded() ? holders : size; }
};

}  // namespace carousel
