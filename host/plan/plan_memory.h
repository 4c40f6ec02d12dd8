// plan_memory.h — the planner's arithmetic for one candidate mesh that needs no cost model:
// the bytes one device holds (parameters, gradients, AdamW moments, FSDP weight slots and
// gradient buffers, stashed activations) and the bytes it sends per step over each link.
//
// Exact parts mirror what the executor allocates (host/runtime/sharded_params.cpp,
// rank_executor.cpp) and are tested equal to the device allocator's byte counts
// (tests/plan/test_plan_memory.cpp): weights, gradients, optimizer, weight slots, gradient buffers,
// stashed stage inputs. The working set (one stage's recomputed activations, backward temporaries,
// the head's logits) is an upper bound, not a count of the executor's temporaries (memory in
// plan_memory.cpp, bytes sent in plan_traffic.cpp). Uneven stages
// (pipeline_stage_layers) are laid out stage by stage as ShardedParams does: each virtual stage
// padded to F on its own, a weight slot the size of the rank's largest stage.
// docs/performance.md#planning-a-mesh.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "host/config/config.h"
#include "host/schedule/ir.h"
#include "models/params.h"

namespace carousel::plan {

// Bytes on one device, by what they hold.
struct MemoryBreakdown {
  std::int64_t weights = 0;    // float32 master shards and extras, plus their compute-dtype copies
  std::int64_t gradients = 0;  // float32 gradient shards and extras
  std::int64_t optimizer = 0;  // AdamW m and v of the owned pieces (ZeRO-1, extras over FSDP)
  std::int64_t weight_slots = 0;      // FSDP: gathered-stage buffers, one per slot the program uses
  std::int64_t gradient_buffers = 0;  // FSDP: unsharded stage gradients, alive until the optimizer
  std::int64_t activations = 0;       // stashed stage inputs (peak count x one input's bytes)
  std::int64_t working_set = 0;       // bound on transient buffers (see the header comment)
  std::int64_t exact() const {
    return weights + gradients + optimizer + weight_slots + gradient_buffers + activations;
  }
  std::int64_t total() const { return exact() + working_set; }
};

// Bytes one device sends per step, by traffic and by link (intra-node or inter-node).
struct LinkBytes {
  double pipeline = 0;      // activations and their gradients to the neighbouring stages
  double fsdp_gather = 0;   // weight all-gathers (ring: (F-1)/F of the stage per gather)
  double fsdp_scatter = 0;  // gradient reduce-scatters, float32
  double data = 0;          // replica gradient reduction (+ ZeRO-1 weight gather), extras too
  double extras = 0;        // embedding / head gradients and weights over FSDP (optimizer step)
  double tensor = 0;   // tensor parallelism: the layers' row gathers and scatters, the head's and
                       // embedding's gathers, the shared parts' gradient sums
  double context = 0;  // context parallelism: key/value gathers and their gradients' scatters
  double expert = 0;   // expert parallelism: each MoE layer's counts all-gather and routed rows
                       // to and from the other expert ranks (balanced routing: (E-1)/E of them)
  // Gradients summed over stage ranks at the optimizer step: the layers after the pipeline, the
  // final norm and lm_head over all of them, a tied table over the ranks using it.
  double stage_sum = 0;
  double intra = 0, inter = 0;  // the same bytes split by the link they cross
};

// Where the groups of a mesh sit on nodes of `devices_per_node` consecutive ranks (ranks run
// tensor-fastest, then context, then FSDP, host/mesh/mesh.h): whether each group or hop
// crosses a node boundary.
struct MeshLinks {
  bool fsdp_inter = false;                   // some FSDP group spans two nodes
  bool data_inter = false;                   // some replica group (data x context) spans two
  bool tensor_inter = false;                 // some tensor group spans two nodes
  bool context_inter = false;                // some context group spans two nodes
  std::vector<std::vector<bool>> hop_inter;  // [from stage rank][to stage rank]
  bool any_hop_inter() const;                // the slowest pipeline hop is inter-node
};
MeshLinks mesh_links(int stages, int fsdp, int data, int devices_per_node, int tensor = 1,
                     int context = 1);

// One virtual stage held by a pipeline rank, in elements, as ShardedParams lays it out.
struct StageElements {
  int stage = 0;            // virtual stage
  int layers = 0;           // its decoder layers (uneven stages differ)
  int first_layer = 0;      // the first of them (dense and MoE layers differ)
  std::int64_t padded = 0;  // its layer parameters rounded up to a multiple of F
  std::int64_t shard = 0;   // padded / F
  std::int64_t piece = 0;   // ZeRO-1: ceil(shard / D); else the shard
};

// Element counts of one candidate's parameter layout on one pipeline rank.
struct ParamLayout {
  std::vector<StageElements> stages;          // the rank's virtual stages, in stage order
  // Embedding / final norm / head on this rank, and the layers after the pipeline (every stage
  // rank's with pipeline_parallel_layers), in the extras' flat order.
  // (Entries of table_of's table: valid while it holds this model's.)
  std::vector<const ParamSpec*> extras_specs;
  std::int64_t extras = 0, extras_piece = 0;
  // Of those, what every stage rank holds with layers outside the pipeline (all but the
  // embedding), whose gradients the optimizer sums over the stage ranks; 0 without.
  std::int64_t stage_summed = 0;
  std::int64_t shards() const;  // sum over the stages
  std::int64_t pieces() const;
  std::int64_t padded() const;
  std::int64_t max_padded() const;          // a weight slot holds the largest stage
  const StageElements& stage(int v) const;  // a stage of this rank (asserts it is)
};
ParamLayout param_layout(const Config& cfg, const schedule::Layout& layout, int stage_rank);

// Sequences per microbatch on one device: B / (M x F x D) (its tensor and context ranks share
// them; a context rank holds max_target_length / C tokens of each).
std::int64_t microbatch_rows(const Config& cfg);
// Tokens of a microbatch on one context rank (what its head and attention see), and the rows
// each of its tensor ranks holds between blocks: microbatch_rows x T_seq / C, then / T.
std::int64_t context_tokens(const Config& cfg);
std::int64_t rank_rows(const Config& cfg);

// The parts a stage rank's devices hold whatever the program does: weights, gradients, optimizer
// and the FSDP gradient buffers (exact; the other parts 0). The search refuses with it before
// simulating; device_memory adds the program's parts to it.
MemoryBreakdown state_memory(const Config& cfg, const schedule::Layout& layout, int stage_rank);

// The part of device_memory's working set that does not depend on the program (every program
// of the layout holds at least this); the search refuses with it before simulating too.
std::int64_t program_free_working_set(const Config& cfg, const schedule::Layout& layout,
                                      int stage_rank);

// Bytes of stage rank `stage_rank`'s devices. `peak_stashed` is the simulator's peak count of
// (stage, microbatch) activations alive at once on that rank; the program is the lowered one.
MemoryBreakdown device_memory(const Config& cfg, const schedule::Program& lowered, int stage_rank,
                              int peak_stashed);

// What a forward of one layer sends per device in its tensor group (one [N, E] collective per
// tensor-parallel piece: the column pieces' row all-gathers, the row pieces' reduce-scatters) and in its context group (the key and value all-gathers, [Nc, kv]
// each); a backward sends as much again (the row gathers and scatters reversed; the key and
// value gradients reduce-scattered). Nothing overlaps them: they sit between the GEMMs.
struct LayerTraffic {
  double tensor = 0, context = 0;
  double expert = 0;         // an MoE layer's exchange, averaged over all layers
  double expert_counts = 0;  // of which the row counts' all-gather
};
// Expert parallelism: what a rank sends in one MoE layer's forward for a microbatch, with
// balanced routing: the [X] row counts to every other expert rank and its rows to the others'
// experts and back ((E-1)/E of its k x tokens rows, each way: expert_rows_bytes). 0 without
// expert parallelism.
double expert_exchange_bytes(const Config& cfg);
double expert_rows_bytes(const Config& cfg);
LayerTraffic layer_traffic(const Config& cfg);
// The tensor group's collectives in one layer's forward (one per piece, models/parallel/linear.h).
int tensor_collectives_per_layer();

// Bytes a device of stage rank `stage_rank` sends in the optimizer step (the replicas' gradient
// reduction and the extras' over FSDP and the replicas; with tensor parallelism the sums of the
// parts several tensor ranks hold, within the piece that FSDP rank `fsdp_rank` and replica
// `replica_rank` apply): they depend on the layout only.
LinkBytes optimizer_link_bytes(const Config& cfg, const schedule::Layout& layout, int stage_rank,
                               const MeshLinks& links, int fsdp_rank = 0, int replica_rank = 0);

// Every byte a device of stage rank `stage_rank` sends per step (ring collectives): the
// program's hand-offs, gathers and reduce-scatters, the tensor and context groups' traffic of
// each forward and backward, plus optimizer_link_bytes.
LinkBytes device_link_bytes(const Config& cfg, const schedule::Program& lowered, int stage_rank,
                            const MeshLinks& links, int fsdp_rank = 0, int replica_rank = 0);

// param_table(m, {0, tensor}, {0, experts}), kept for the last model and degrees asked about
// (the search asks for the same model's table for every candidate): every tensor rank's parts
// and every expert rank's experts have these sizes. A GPT-style model (gpt_mlp below): the
// Llama table of its twin without the gate matrices, up_proj and down_proj standing for the
// MLP's two matrices [Fm, E] and [E, Fm].
const std::vector<ParamSpec>& table_of(const ModelConfig& m, int tensor = 1, int experts = 1);
// The entries of table_of(m, tensor, experts) of decoder layers first_layer .. first_layer +
// layers - 1, layer by layer, each layer's in table order (valid while the table is kept).
std::span<const ParamSpec* const> layer_specs_of(const ModelConfig& m, int tensor, int experts,
                                                 int first_layer, int layers);

// The GPT-style MLP (GPT-3, Megatron's GPT: two matrices, GeLU between them, width mlp_dim,
// usually 4E) is the planner's arithmetic only: carousel trains the Llama block (SwiGLU's three
// matrices). The planner marks such a model decoder_block = "gpt" (kGptBlock), a value the
// trainer's ModelConfig::validate refuses, so no run is ever started from it; everything else of
// the block (attention, RMSNorm gains, rotary positions, untied or tied head) is Llama's.
inline constexpr const char* kGptBlock = "gpt";
bool gpt_mlp(const ModelConfig& m);
// The Llama model the planner's arithmetic starts from (decoder_block = llama), for the
// trainer's functions (check_tensor_split, validate, param_table).
ModelConfig llama_twin(const ModelConfig& m);
// Matrices of a dense MLP: 3 (gate, up, down) or 2 (GPT's fc1, fc2); activations a dense MLP
// keeps per token and column: gate, up, act (3) or fc1's output and the GeLU's (2).
int dense_mlp_matrices(const ModelConfig& m);

// Sends (G-1)/G of a buffer of n bytes per device in a ring all-gather or reduce-scatter over G.
double ring_share(int group, double n);
// One tensor rank's share of layer `layer`: its query heads x hd, KV heads x hd and the columns
// of its dense MLP (a mixture-of-experts layer's: its shared experts', fused).
struct LayerShare {
  std::int64_t q, kv, mlp;
};
LayerShare layer_share(const ModelConfig& m, int T, int layer);

// Bytes of one element in the compute dtype (bfloat16: 2, float32: 4).
int compute_bytes(const Config& cfg);

}  // namespace carousel::plan
