// mesh.h — the device mesh of a run: where each rank sits, the communicators it talks on, the
// device it computes on, and how the ranks are started.
//
// The mesh is an ordered list of named axes (mesh_axes.h), slowest first:
//   replica (D) x expert (E) x stage (S) x fsdp (F) x context (C) x tensor (T) = N ranks
// (one device is the trivial mesh). Rank numbers count the last axis fastest:
// rank = (((((replica * E + expert) * S + stage) * F + fsdp) * C + context) * T + tensor.
// Expert parallelism (docs/moe.md) is carved from the data axis: the config's data ranks are
// D x E, data rank = replica * E + expert, so each E consecutive data ranks are an expert group
// that splits the batch like replicas and the routed experts between them (they exchange tokens
// in every MoE layer); the replicas of one expert rank's experts are the D x C ranks of the same
// expert index.
//
// Every communicator is the group over some axes (split_group): the ranks agreeing with this one
// on every other axis, ordered by rank (mesh_group below lists each communicator's axes). The
// stage ring of a position, the FSDP group of a stage, the replica group — the D x E x C ranks
// that hold the same weights and sum their gradients —, the tensor and context groups that
// compute a rank's layers together (they run the same program) and, with tied embeddings on two
// stages, the first and last stage's ranks.
//
// Nodes follow from the order, as MaxText's ici/dcn split: ranks fill a node's processes in rank
// order (mpirun's default by-slot placement, or --map-by ppr:N:node), so the fastest axes stay
// inside a node and the slowest cross nodes. With P processes per node, a group over the fastest
// axes never leaves a node when P is a multiple of its size: the tensor group (T ranks, the most
// traffic: activations at every layer) when P is a multiple of T — under mpirun choose_transport
// refuses any other P —, then the context group (keys and values) when P is a multiple of C x T,
// and so on outwards; the replica axis, which only sums gradients once a step, is the one to span
// nodes.
//
// Ranks are threads of this process (in-process communicator), or this process is one rank of
// an mpirun job (MPI communicator).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "collectives/communicator.h"
#include "collectives/local_communicator.h"
#include "compute/backend.h"
#include "host/config/config.h"
#include "host/mesh/mesh_axes.h"
#include "host/schedule/ir.h"

namespace carousel {

// The sizes of the mesh's axes, as the config names them (callers read these fields).
struct MeshShape {
  int data = 1, stages = 1, fsdp = 1, tensor = 1, context = 1;  // D x E, S, F, T, C
  int expert = 1;  // E: each E consecutive data ranks split the routed experts (E divides data)
  // The named axes, slowest first (replica = data / expert).
  MeshAxes axes() const;
  int ranks() const { return axes().ranks(); }
  // Ranks holding the same weights (with expert parallelism: the same dense weights; each
  // expert's holders are data / expert x context of them): one replica group's size.
  int replicas() const;
  // The replicas holding one expert rank's experts (all of them without expert parallelism).
  int expert_replicas() const;
  static MeshShape of(const Config& cfg);
};

// The axes each communicator of RankCommunicators spans, and the groups some places count in.
namespace mesh_group {
inline constexpr Axes pipe{Axis::Stage};
inline constexpr Axes fsdp{Axis::Fsdp};
inline constexpr Axes data{Axis::Replica, Axis::Expert, Axis::Context};  // same weights
inline constexpr Axes tensor{Axis::Tensor};
inline constexpr Axes context{Axis::Context};
inline constexpr Axes expert{Axis::Expert};
inline constexpr Axes expert_data{Axis::Replica, Axis::Context};  // same experts
// The ranks splitting a stage's microbatch into parts (a count only, no communicator of its own).
inline constexpr Axes batch{Axis::Replica, Axis::Expert, Axis::Fsdp};
}  // namespace mesh_group

// Where a rank sits in the mesh. The fields are the config's view (callers read and set them);
// everything else is read from the named coordinates they give.
struct RankPlace {
  MeshShape mesh;
  int data_rank = 0, stage_rank = 0, fsdp_rank = 0, tensor_rank = 0, context_rank = 0;

  static RankPlace of(int rank, const MeshShape& mesh);
  // This rank's coordinate on every axis (the data rank split into replica and expert).
  Coordinates coordinates() const;
  int coordinate(Axis a) const { return carousel::coordinate(coordinates(), a); }
  // This rank's place in its group over `axes` (its rank in that group's communicator).
  int index_in(Axes axes) const { return mesh.axes().index(coordinates(), axes); }
  int rank() const { return index_in(Axes::all()); }
  // This rank's part of a microbatch: its sequences are split over the D x E x F ranks of a stage
  // (the T x C ranks of its tensor and context groups share them; context ranks split tokens).
  int batch_part() const { return index_in(mesh_group::batch); }
  // Among the D x E x C ranks holding the same weights (gradients summed, ZeRO-1 pieces).
  int replica_rank() const { return index_in(mesh_group::data); }
  // Among the replicas, the one whose ranks write checkpoints (each dense tensor once; each
  // routed expert is written by expert_replica_rank() 0).
  bool writes_shards() const { return replica_rank() == 0; }
  // Expert parallelism: this rank's index in its expert group (which experts it holds), and
  // among the D x C ranks holding those experts (gradients summed, the checkpoint's writer).
  int expert_rank() const { return coordinate(Axis::Expert); }
  int expert_replica_rank() const { return index_in(mesh_group::expert_data); }
};

// The world.split() arguments of `place`'s group over `axes`: the colour numbers the group by the
// coordinates its ranks share, the key is the rank's place in it (index_in(axes)).
struct GroupSplit {
  int color, key;
};
GroupSplit group_split(const RankPlace& place, Axes axes);
// The communicator of `place`'s group over `axes`: the ranks with its coordinates on every other
// axis, ordered by rank (reductions sum in communicator-rank order, so this order is part of
// every run's numbers). Collective over `world` (every rank of the mesh, in rank order): each
// rank makes the same calls in the same order. A rank with `joins` false gets nullptr, and the
// communicator is the group's ranks that join (the tie: only the stages holding the embedding).
std::unique_ptr<Communicator> split_group(Communicator& world, const RankPlace& place, Axes axes,
                                          bool joins = true);

// A rank's communicators, split from the world of all ranks. Communicators of size one are
// real communicators too (their operations complete at once), so the code has no special case.
struct RankCommunicators {
  Communicator* world;                 // every rank: the step's loss and gradient norm
  std::unique_ptr<Communicator> pipe;  // the stage ring of this replica and FSDP index
  std::unique_ptr<Communicator> fsdp;  // the FSDP group of this stage
  // The same (stage, fsdp, tensor) rank in every data replica and context rank: D x E x C ranks
  // holding the same weights.
  std::unique_ptr<Communicator> data;
  // The T ranks that compute this rank's layers together (tensor parallelism), and among them
  // the ranks holding the same KV head when T exceeds the KV heads (nullptr otherwise).
  std::unique_ptr<Communicator> tensor;
  std::unique_ptr<Communicator> kv_share;
  std::unique_ptr<Communicator> context;  // the C ranks splitting this rank's sequences
  // Expert parallelism: the E ranks exchanging tokens with this one, and the D x C ranks holding
  // the same experts (nullptr without expert parallelism).
  std::unique_ptr<Communicator> expert;
  std::unique_ptr<Communicator> expert_data;
  // With logits_via_embedding, the first and the last stage's ranks (same data and FSDP
  // index), which both hold the embedding, or every stage rank with layers outside the pipeline
  // (each runs the head); nullptr when one rank holds both, or untied.
  std::unique_ptr<Communicator> tie;
};
RankCommunicators split_communicators(Communicator& world, const RankPlace& place,
                                      const schedule::Layout& layout, const ModelConfig& model);

// Whether the ranks compute on GPUs: device=cuda, or device=auto with a GPU visible.
bool runs_on_gpus(const Config& cfg);

// How the ranks of a run exchange tensors. Decided once, printed at start-up with the reason,
// and unit-tested on CPUs (tests/parallel/test_mesh.cpp): the NCCL glue only follows the decision.
enum class Transport {
  Local,  // ranks are threads; in-process communicator (CPU memory, GPU memory via host copies)
  Mpi,    // ranks are mpirun processes on CPUs; MPI communicator
  Nccl,   // one GPU per rank, ranks as threads or as mpirun processes; NCCL communicators
};
std::string_view transport_name(Transport t);  // "NCCL on GPUs", for messages
struct TransportChoice {
  Transport transport;
  std::string reason;
};
struct MachineView {
  int visible_gpus = 0;
  bool nccl_built = false;
  int processes = 1;        // of the mpirun job (1: no job)
  int local_processes = 1;  // of the job on this node
};
// Throws carousel::Error for what cannot run: GPU ranks under mpirun without NCCL, more
// processes on a node than GPUs, device=cuda without a visible GPU.
TransportChoice choose_transport(const Config& cfg, int ranks, const MachineView& machine);
MachineView this_machine(const Communicator* process_world);
// Under mpirun each process decides from its own node (choose_transport). A job whose nodes
// decide differently (device=auto with GPUs on some nodes only; device=cuda with a node that
// has none) must fail on every process at once rather than hang in its first collective, so the
// processes exchange their decisions over `processes` first. Returns the common choice; throws
// carousel::Error on every process otherwise: the process's own reason where it refused, else
// one message naming the processes that refused or what each would have used.
TransportChoice agree_on_transport(const Config& cfg, int ranks, const MachineView& machine,
                                   Communicator& processes);

// The device of rank `rank`: a CPU device, or on GPUs logical device `rank` on GPU
// rank % visible GPUs (several logical devices share a GPU when there are more ranks).
std::unique_ptr<Backend> make_device_backend(const Config& cfg, int rank);

// Runs `rank_main(rank, device, world, host_world)` for every rank this process hosts: with
// `process_world` (mpirun) its one rank; otherwise all `ranks` as threads of this process over an
// in-process world (one rank runs on the calling thread). Each rank's device (make_device_backend)
// is made before its world communicator and outlives it, so a communicator never frees a tensor
// into a device that is gone, even when a rank fails mid-step. A rank's failure ends the other
// ranks' waits at once and is rethrown. Each rank's OpenMP loops get threads_per_rank threads.
// With threads, `stuck` says what to do when a rank failed and another does not come back (a
// thread stuck inside a computation cannot be stopped: report, then exit with status 2).
// `world` moves tensors of `device`; `host_world` (the same ranks) moves host memory: with NCCL
// they differ (NCCL reaches only GPU memory), otherwise they are the same communicator.
// OpenMP threads for each of `ranks_sharing_cores` ranks on this machine: cores / ranks (at
// least 1), or OMP_NUM_THREADS when the user set a smaller number — never more than the share,
// so ranks x threads never exceeds the cores (docs/performance.md, threads).
int threads_per_rank(int ranks_sharing_cores);
// The OpenMP threads launch_ranks gives each rank of this process: threads_per_rank over the
// job's processes on this machine (mpirun) or over the `ranks` rank threads.
int rank_threads(int ranks, const Communicator* process_world);

using RankMain =
    std::function<void(int rank, Backend& device, Communicator& world, Communicator& host_world)>;
void launch_ranks(const Config& cfg, int ranks, Transport transport, Communicator* process_world,
                  const RankMain& rank_main, const StuckRanks& stuck = {});

}  // namespace carousel
