// params.h — the one parameter table, and tensors allocated from it.
//
// param_table(cfg) lists every parameter once: its name (the Hugging Face name, so checkpoints
// need no mapping), shape, the layer it belongs to, which dimension FSDP shards, whether weight
// decay applies and how it is initialised. Allocation, initialisation, optimizer state,
// checkpoints, sharding and tests all derive from this table.
//
// Mixture-of-experts layers (cfg.is_moe_layer) hold the DeepSeek-V3 / Qwen-MoE names: the router
// mlp.gate.weight, each routed expert's mlp.experts.{j}.{gate,up,down}_proj.weight — all gate
// matrices, then all up, then all down, so each kind is one [X, ., .] block of the flat buffer
// (ParamSet::stacked) — and the shared experts fused into one MLP mlp.shared_experts.* of width
// shared_experts x Fe.
//
// With tensor parallelism (docs/parallelism.md#tensor-parallelism) param_table(cfg, split) gives
// one tensor rank's table: the same names, each entry holding its part of the whole tensor —
// column-parallel weights (q/k/v, gate/up) a block of rows, row-parallel ones (o, down) a block
// of columns, norm gains whole. KV projections are split when num_kv_heads is a multiple of T
// and otherwise (T a multiple of num_kv_heads) each rank holds the one KV head its query heads
// use, shared with T / num_kv_heads neighbours.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "models/model_config.h"
#include "models/placement.h"

namespace carousel {

// What a parameter is for; layer code finds its weights by role.
// clang-format off
enum class ParamRole {
  Embedding,     // model.embed_tokens.weight [V,E]
  AttnNorm,      // input_layernorm [E]
  Wq, Wk, Wv,    // self_attn.{q,k,v}_proj [H*hd,E], [Hkv*hd,E], [Hkv*hd,E]
  Wo,            // self_attn.o_proj [E,H*hd]
  MlpNorm,       // post_attention_layernorm [E]
  WGate, WUp,    // mlp.{gate,up}_proj [Fm,E]; MoE layers: mlp.shared_experts.* [Fs,E]
  WDown,         // mlp.down_proj [E,Fm]; MoE layers: mlp.shared_experts.down_proj [E,Fs]
  Router,        // mlp.gate.weight [X,E]
  ExpertGate,    // mlp.experts.{j}.gate_proj.weight [Fe,E], j = 0..X-1, consecutive
  ExpertUp,      // mlp.experts.{j}.up_proj.weight [Fe,E]
  ExpertDown,    // mlp.experts.{j}.down_proj.weight [E,Fe]
  FinalNorm,     // model.norm.weight [E]
  LmHead,        // lm_head.weight [V,E]
  SimpleW,       // simple block: layers.{i}.w [E,E], y = x W
};
// clang-format on

struct ParamSpec {
  std::string name;  // Hugging Face name, e.g. model.layers.3.self_attn.q_proj.weight
  Shape shape;
  ParamRole role;
  int layer = -1;            // decoder layer index, -1 for embedding / final norm / head
  bool weight_decay = true;  // matrices decay, norm gains do not
  bool init_ones = false;    // norm gains start at 1, matrices ~ Normal(0, 0.02)
  // Where this parameter lives on the model's own mesh axes (models/placement.h); the runtime
  // adds the others. Tensor: column-parallel weights (q/k/v, gate/up) a block of rows,
  // row-parallel ones (o, down) a block of columns, the embedding and lm_head a block of
  // vocabulary rows, a shared KV head held by several ranks, norm gains and the router replicated.
  // Expert: a routed expert's matrices are dealt to one expert rank; the rest is replicated.
  Placement tensor = Placement::replicate();
  Placement expert = Placement::replicate();
  // With tensor parallelism `shape` is this rank's part of the whole tensor (empty: the same).
  Shape whole_shape = {};

  const Shape& whole() const { return whole_shape.empty() ? shape : whole_shape; }
  // Index in the whole tensor (row-major) of element i of this rank's part.
  std::int64_t whole_index(std::int64_t i) const;
};

// One rank's place in the tensor-parallel group (size 1: no tensor parallelism).
struct TensorSplit {
  int rank = 0, size = 1;
};
// One rank's place in its expert group (size 1: no expert parallelism): it holds routed experts
// [rank X / size, (rank + 1) X / size) of each MoE layer, under their global names.
struct ExpertSplit {
  int rank = 0, size = 1;
};

// Throws carousel::Error naming the keys when `size` cannot split cfg's heads, KV heads, MLP
// columns (or the block is not llama); the valid sizes are named.
void check_tensor_split(const ModelConfig& cfg, int size);
// How many of `size` tensor ranks hold each KV head: 1 when the KV heads are split over them,
// size / num_kv_heads when there are fewer KV heads than ranks.
int kv_replicas(const ModelConfig& cfg, int size);
// The KV heads one of `size` tensor ranks holds: num_kv_heads / size, or the one it shares.
std::int64_t kv_heads_per_rank(const ModelConfig& cfg, int size);
std::vector<ParamSpec> param_table(const ModelConfig& cfg, TensorSplit split = {},
                                   ExpertSplit experts = {});

// One tensor per entry of a parameter table (weights, gradients, or an optimizer moment), all
// in one flat buffer so whole-model operations (zero, norm, AdamW) are single calls.
struct ParamSet {
  std::vector<ParamSpec> specs;
  Tensor flat;                  // [total elements]
  std::vector<Tensor> tensors;  // views into flat, specs[i].shape each

  static ParamSet allocate(Backend& backend, const std::vector<ParamSpec>& specs, DType dtype);
  // Views of `specs` laid out back to back at the start of an existing buffer (at least the
  // specs' total size): gathered FSDP weights, full gradient buffers.
  static ParamSet over(const std::vector<ParamSpec>& specs, const Tensor& buffer);
  static std::int64_t total_numel(const std::vector<ParamSpec>& specs);
  const Tensor& at(ParamRole role, int layer = -1) const;  // throws if absent
  bool has(ParamRole role, int layer = -1) const;
  // The consecutive tensors of one role in a layer (the routed experts' [Fe,E] matrices) as one
  // view [count, ...shape]; throws if absent or not consecutive.
  Tensor stacked(ParamRole role, int layer) const;
  int index_of(const std::string& name) const;  // -1 if absent
};

// Writes the initial values of docs/model.md#initialisation: Normal(0, 0.02) from a
// counter-based generator keyed by (seed, parameter name, element index), so a value does not
// depend on how the model is split over devices; norm gains = 1.
void init_params(Backend& backend, const ParamSet& params, std::uint64_t seed);

// The initial values of one parameter (this rank's part of it: the whole tensor's values at its
// indices), on the host.
std::vector<double> initial_values(const ParamSpec& spec, std::uint64_t seed);
// Elements [begin, end) of the same values (local row-major indices), written to out[0, end -
// begin) in the destination's precision (computed in double, rounded once). Every element is
// independent of the others, so ranges may be filled concurrently and in any split with the
// same bits: sharded init fills a stage's float32 shard on the OpenMP threads this way
// (host/runtime/sharded_params.cpp), without a double copy of it.
void initial_values_into(const ParamSpec& spec, std::uint64_t seed, std::int64_t begin,
                         std::int64_t end, float* out);
void initial_values_into(const ParamSpec& spec, std::uint64_t seed, std::int64_t begin,
                         std::int64_t end, double* out);

// This rank's part of a whole tensor's values (row-major), and the reverse: `part` written into
// its place in `whole`.
std::vector<double> part_of_whole(const ParamSpec& spec, const std::vector<double>& whole);
void place_in_whole(const ParamSpec& spec, const std::vector<float>& part,
                    std::vector<float>& whole);

}  // namespace carousel
