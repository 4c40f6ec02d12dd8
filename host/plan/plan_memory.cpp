// plan_memory.cpp — bytes held by one device of a candidate mesh (the bytes it sends are in
// plan_traffic.cpp). The exact parts follow ShardedParams' layout
// (host/runtime/sharded_params.cpp, stage by stage) and the executor's stash; the working set
// is a bound (see plan_memory.h).
#include "host/plan/plan_memory.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "compute/error.h"
#include "host/config/schedule_config.h"
#include "models/params.h"
#include "models/stage.h"

namespace carousel::plan {

namespace sch = schedule;

namespace {

// A model's parameter table at (T, E), with each entry's element count and the prefix sums of
// the decoder layers' counts (param_layout asks for them for every stage rank of every
// candidate: counting the shapes each time was most of a 16,384-device search).
struct CountedTable {
  std::vector<ParamSpec> table;
  std::vector<std::int64_t> numel;         // of table[i]
  std::vector<std::int64_t> layer_prefix;  // [l]: the elements of layers 0 .. l-1
  std::vector<std::size_t> non_layer;      // the entries of no decoder layer, in table order
  // The decoder layers' entries, layer by layer (each in table order); layer l's are
  // by_layer[layer_offset[l] .. layer_offset[l + 1]).
  std::vector<const ParamSpec*> by_layer;
  std::vector<std::size_t> layer_offset;
};

const CountedTable& counted_table_of(const ModelConfig& m, int tensor, int experts) {
  thread_local ModelConfig cached;
  // By (tensor degree, expert degree): every tensor and expert rank holds as many elements.
  thread_local std::map<std::pair<int, int>, CountedTable> tables;
  const auto shape = [](const ModelConfig& c) {
    return std::tie(c.decoder_block, c.vocab_size, c.emb_dim, c.num_layers, c.num_query_heads,
                    c.num_kv_heads, c.mlp_dim, c.logits_via_embedding, c.num_experts, c.moe_mlp_dim,
                    c.shared_experts, c.first_num_dense_layers);
  };
  if (tables.empty() || shape(cached) != shape(m)) {
    tables.clear();
    cached = m;
  }
  const std::pair<int, int> degrees{tensor, experts};
  auto it = tables.find(degrees);
  if (it == tables.end()) {
    CountedTable t;
    t.table = param_table(llama_twin(m), {0, tensor}, {0, experts});
    if (gpt_mlp(m)) {  // the two matrices of GPT's MLP: up_proj as fc1, down_proj as fc2
      std::erase_if(t.table, [](const ParamSpec& s) { return s.role == ParamRole::WGate; });
    }
    std::vector<std::int64_t> layer(std::size_t(m.num_layers), 0);
    for (const ParamSpec& spec : t.table) {
      t.numel.push_back(numel(spec.shape));
      if (spec.layer >= 0 && spec.layer < m.num_layers)
        layer[std::size_t(spec.layer)] += t.numel.back();
      else
        t.non_layer.push_back(t.numel.size() - 1);
    }
    std::vector<std::vector<const ParamSpec*>> specs(layer.size());
    for (const ParamSpec& spec : t.table)
      if (spec.layer >= 0 && spec.layer < m.num_layers)
        specs[std::size_t(spec.layer)].push_back(&spec);
    t.layer_offset.push_back(0);
    for (const auto& l : specs) {
      t.by_layer.insert(t.by_layer.end(), l.begin(), l.end());
      t.layer_offset.push_back(t.by_layer.size());
    }
    t.layer_prefix.assign(layer.size() + 1, 0);
    std::partial_sum(layer.begin(), layer.end(), t.layer_prefix.begin() + 1);
    it = tables.emplace(degrees, std::move(t)).first;
  }
  return it->second;
}

}  // namespace

const std::vector<ParamSpec>& table_of(const ModelConfig& m, int tensor, int experts) {
  return counted_table_of(m, tensor, experts).table;
}

std::span<const ParamSpec* const> layer_specs_of(const ModelConfig& m, int tensor, int experts,
                                                 int first_layer, int layers) {
  const CountedTable& t = counted_table_of(m, tensor, experts);
  const std::size_t from = t.layer_offset[std::size_t(first_layer)],
                    to = t.layer_offset[std::size_t(first_layer + layers)];
  return {t.by_layer.data() + from, to - from};
}

bool gpt_mlp(const ModelConfig& m) { return m.decoder_block == kGptBlock; }

ModelConfig llama_twin(const ModelConfig& m) {
  if (!gpt_mlp(m)) return m;
  CAROUSEL_CHECK(!m.is_moe(),
                 "the GPT-style MLP is dense only (num_experts={}); plan a mixture of experts "
                 "with the Llama block",
                 m.num_experts);
  ModelConfig twin = m;
  twin.decoder_block = "llama";
  return twin;
}

int dense_mlp_matrices(const ModelConfig& m) { return gpt_mlp(m) ? 2 : 3; }

double ring_share(int group, double n) { return group > 1 ? n * double(group - 1) / group : 0.0; }

LayerShare layer_share(const ModelConfig& m, int T, int layer) {
  const std::int64_t mlp =
      (m.is_moe_layer(layer) ? m.shared_experts * m.expert_mlp_dim() : m.mlp_dim) / T;
  return {m.num_query_heads / T * m.head_dim(), kv_heads_per_rank(m, T) * m.head_dim(), mlp};
}

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// What a layer's MLP keeps per token: gate, up and act of its dense MLP (GPT's: fc1's output
// and the GeLU's), and in an MoE layer for each of the k routed rows x_perm, out_perm, gate, up,
// act and its token and weight (models/moe_mlp.h MoeSaved; the int32 and float32 ones counted at
// one element each).
std::int64_t mlp_saved_elements(const ModelConfig& m, int T, int E, int layer) {
  const std::int64_t dense = dense_mlp_matrices(m) * layer_share(m, T, layer).mlp;
  if (!m.is_moe_layer(layer)) return dense;
  // With E > 1 expert ranks the rows this rank's experts received (as many as it sent, with
  // balanced routing) are a tensor of their own, with their regrouping order and its inverse.
  const std::int64_t received = E > 1 ? m.emb_dim + 2 : 0;
  // With T tensor ranks each computes Fe / T columns of every expert on all the rows.
  return dense +
         m.num_experts_per_tok * (2 * m.emb_dim + 3 * m.expert_mlp_dim() / T + 2 + received);
}

// A layer's saved activations (models/layer.h LayerSaved) for `Nc` tokens of a context rank on
// one of T tensor ranks (and of `experts` expert ranks), in elements of the compute dtype; the
// float32 statistics (rstd, lse) are counted at 2 elements each so the sum is an upper bound in
// either dtype.
std::int64_t layer_saved_elements(const ModelConfig& m, std::int64_t Nc, int T, int C, int experts,
                                  int layer) {
  const std::int64_t E = m.emb_dim, n = Nc / T;
  const LayerShare l = layer_share(m, T, layer);
  // x, h, rstd1, rstd2: this rank's rows; xn1, hn: gathered [Nc, E]; q, att: [Nc, q];
  // k, v: [Nc, kv]; the MLP's; lse: [Nc, q / hd]; with C > 1 every context rank's keys and
  // values [Nc x C, kv] twice.
  const std::int64_t context = C > 1 ? 2 * Nc * C * l.kv : 0;
  return 2 * n * E + 2 * Nc * E + 2 * Nc * l.q + 2 * Nc * l.kv +
         Nc * mlp_saved_elements(m, T, experts, layer) + 2 * (2 * n + Nc * (l.q / m.head_dim())) +
         context;
}

// layer_saved_elements of every layer: layers differ only by being MoE layers or not
// (ModelConfig::is_moe_layer: from first_num_dense_layers on), so two values stand for all
// (the search asks for them for every stage rank of every candidate).
struct SavedPerLayer {
  std::int64_t dense = 0, moe = 0;  // 0 when the model has no layer of that kind
  int first_moe = 0;                // layers from here on are MoE layers
  std::int64_t of(int l) const { return l >= first_moe ? moe : dense; }
  // The largest layer's (the backward's temporaries are bounded by it).
  std::int64_t largest() const { return std::max(dense, moe); }
};
SavedPerLayer saved_per_layer(const ModelConfig& m, std::int64_t Nc, int T, int C, int E) {
  SavedPerLayer s;
  s.first_moe = m.is_moe() ? int(std::clamp<std::int64_t>(m.first_num_dense_layers, 0,
                                                            m.num_layers))
                           : m.num_layers;
  if (s.first_moe > 0) s.dense = layer_saved_elements(m, Nc, T, C, E, 0);
  if (s.first_moe < m.num_layers) s.moe = layer_saved_elements(m, Nc, T, C, E, s.first_moe);
  return s;
}

// What a stage's forward keeps per layer for its backward, by remat policy (models/stage.h):
// none, every activation; full, nothing per layer (the stage input, counted apart); the
// selective policies, the layer input and the tensors they name (models/layer.h RematKeep).
std::int64_t remat_kept_elements(const Config& cfg, std::int64_t Nc, int T, int C, int layer) {
  const RematPolicy policy = parse_remat_policy(cfg.remat_policy);
  const ModelConfig& m = cfg.model;
  if (policy == RematPolicy::None)
    return layer_saved_elements(m, Nc, T, C, int(cfg.ici_expert_parallelism), layer);
  if (policy == RematPolicy::Full) return 0;
  const RematKeep keep = remat_keep(policy);
  const std::int64_t n = Nc / T;
  const LayerShare l = layer_share(m, T, layer);
  std::int64_t kept = n * m.emb_dim;            // x
  if (keep.qkv) kept += Nc * (l.q + 2 * l.kv);  // q, k, v
  if (keep.context) {                           // att, lse (float32: 2 each)
    kept += Nc * l.q + 2 * Nc * (l.q / m.head_dim()) + (C > 1 ? 2 * Nc * C * l.kv : 0);
  }
  if (keep.out_proj) kept += n * m.emb_dim;  // h
  if (keep.mlp_in) kept += (dense_mlp_matrices(m) - 1) * Nc * l.mlp;  // gate, up (GPT: fc1)
  return kept;
}

// What a deferred weight gradient (an I done, its W pending) keeps per layer: the GEMM inputs
// (xn1, att, hn, act) and the output gradients (dq, dk, dv, d attention out, dgate, dup, dy;
// GPT's MLP: dfc1 instead of dgate and dup). An MoE layer's routed experts are not deferred
// (models/layer.h).
std::int64_t deferred_elements(const ModelConfig& m, std::int64_t Nc, int T, int layer) {
  const LayerShare l = layer_share(m, T, layer);
  return Nc * (4 * m.emb_dim + 2 * l.q + 2 * l.kv + dense_mlp_matrices(m) * l.mlp);
}

// The most `per_layer(l)` sums to over the layers of one of the rank's stages.
template <class PerLayer>
std::int64_t largest_stage_sum(const ParamLayout& p, PerLayer per_layer) {
  std::int64_t largest = 0;
  for (const StageElements& s : p.stages) {
    std::int64_t sum = 0;
    for (int l = s.first_layer; l < s.first_layer + s.layers; ++l) sum += per_layer(l);
    largest = std::max(largest, sum);
  }
  return largest;
}

// Peak count of buffers alive in program order between an opening and a closing action of
// the same (stage, microbatch) on one rank.
int peak_open(const std::vector<sch::Action>& actions, sch::Kind open,
              std::initializer_list<sch::Kind> close) {
  std::set<std::pair<int, int>> live;  // (stage, microbatch) opened and not yet closed
  std::size_t peak = 0;
  for (const auto& a : actions) {
    if (a.kind == open) {
      live.insert({a.stage, a.index});
      peak = std::max(peak, live.size());
    }
    // A closing action whose input was local (no RECV opened it) closes nothing.
    if (std::find(close.begin(), close.end(), a.kind) != close.end())
      live.erase({a.stage, a.index});
  }
  return int(peak);
}

}  // namespace

int compute_bytes(const Config& cfg) { return cfg.dtype == "bfloat16" ? 2 : 4; }

std::int64_t microbatch_rows(const Config& cfg) { return cfg.check_microbatch_split(); }
std::int64_t context_tokens(const Config& cfg) {
  return microbatch_rows(cfg) * cfg.model.max_target_length / cfg.ici_context_parallelism;
}
std::int64_t rank_rows(const Config& cfg) {
  return context_tokens(cfg) / cfg.ici_tensor_parallelism;
}

namespace {
std::int64_t sum_over(const std::vector<StageElements>& stages,
                      std::int64_t StageElements::*count) {
  std::int64_t n = 0;
  for (const auto& s : stages) n += s.*count;
  return n;
}
}  // namespace

std::int64_t ParamLayout::shards() const { return sum_over(stages, &StageElements::shard); }
std::int64_t ParamLayout::pieces() const { return sum_over(stages, &StageElements::piece); }
std::int64_t ParamLayout::padded() const { return sum_over(stages, &StageElements::padded); }
std::int64_t ParamLayout::max_padded() const {
  std::int64_t n = 0;
  for (const auto& s : stages) n = std::max(n, s.padded);
  return n;
}
const StageElements& ParamLayout::stage(int v) const {
  for (const auto& s : stages) {
    if (s.stage == v) return s;
  }
  CAROUSEL_ASSERT(false, "virtual stage {} is not on this rank", v);
  return stages.front();
}

ParamLayout param_layout(const Config& cfg, const sch::Layout& layout, int stage_rank) {
  // ZeRO-1 shards over the ranks holding the same parameters: D data replicas x C context ranks
  // (of one expert rank with expert parallelism).
  const std::int64_t F = cfg.ici_fsdp_parallelism,
                     D = cfg.ici_data_parallelism * cfg.ici_context_parallelism;
  const bool zero1 = cfg.shard_optimizer_over_data && D > 1;
  // The stage map ShardedParams uses: even stages, uneven ones (pipeline_stage_layers), or the
  // whole model as one stage on one device.
  const sch::StageLayers map = stage_layers(cfg);
  CAROUSEL_ASSERT(map.stages() == layout.stages(), "the stage layout {} does not fit {} stages",
                  map.to_string(), layout.stages());
  const bool first = layout.rank_of(0) == stage_rank;
  // Where the head runs: the last stage's rank, or every rank with layers outside the pipeline.
  const bool head = layout.outside || layout.rank_of(layout.stages() - 1) == stage_rank;
  ParamLayout p;
  // Each pipelined decoder layer's parameters (dense and mixture-of-experts layers differ); the
  // layers after the pipeline are extras.
  const CountedTable& t =
      counted_table_of(cfg.model, int(cfg.ici_tensor_parallelism), int(cfg.ici_expert_parallelism));
  const auto extra = [&](std::size_t i) {
    const ParamSpec& spec = t.table[i];
    if (spec.role == ParamRole::Embedding ? first || (head && cfg.model.logits_via_embedding)
                                          : head) {
      p.extras_specs.push_back(&spec);
      p.extras += t.numel[i];
      if (layout.outside && spec.role != ParamRole::Embedding) p.stage_summed += t.numel[i];
    }
  };
  if (map.layers() >= cfg.model.num_layers) {  // every layer pipelined: only the others
    for (const std::size_t i : t.non_layer) extra(i);
  } else {
    for (std::size_t i = 0; i < t.table.size(); ++i) {
      const int layer = t.table[i].layer;
      if (layer < 0 || layer >= map.layers()) extra(i);
    }
  }
  for (int v = 0; v < layout.stages(); ++v) {
    if (layout.rank_of(v) != stage_rank) continue;
    StageElements s;
    s.stage = v;
    s.layers = map.count(v);
    s.first_layer = map.first(v);
    const std::size_t from = std::size_t(map.first(v)), to = from + std::size_t(map.count(v));
    s.padded = ceil_div(t.layer_prefix[to] - t.layer_prefix[from], F) * F;
    s.shard = s.padded / F;
    s.piece = zero1 ? ceil_div(s.shard, D) : s.shard;
    p.stages.push_back(s);
  }
  p.extras_piece = ceil_div(p.extras, F);
  return p;
}

MemoryBreakdown state_memory(const Config& cfg, const sch::Layout& layout, int stage_rank) {
  const ParamLayout p = param_layout(cfg, layout, stage_rank);
  const std::int64_t c = compute_bytes(cfg);
  const std::int64_t held = p.shards() + p.extras;
  MemoryBreakdown mem;
  mem.weights = 4 * held + (c == 4 ? 0 : c * held);  // bf16 compute copies beside the masters
  mem.gradients = 4 * held;
  mem.optimizer = 2 * 4 * (p.pieces() + p.extras_piece);
  if (cfg.ici_fsdp_parallelism > 1) mem.gradient_buffers = p.padded() * 4;
  return mem;
}

std::int64_t program_free_working_set(const Config& cfg, const sch::Layout& layout,
                                      int stage_rank) {
  const ParamLayout p = param_layout(cfg, layout, stage_rank);
  const ModelConfig& m = cfg.model;
  const std::int64_t c = compute_bytes(cfg), F = cfg.ici_fsdp_parallelism;
  const int T = int(cfg.ici_tensor_parallelism), C = int(cfg.ici_context_parallelism);
  const std::int64_t Nc = context_tokens(cfg), n = rank_rows(cfg);
  const RematPolicy remat = parse_remat_policy(cfg.remat_policy);
  // What a backward recomputes at once: full, the stage's layers; selective, one at a time.
  const int E = int(cfg.ici_expert_parallelism);
  const SavedPerLayer saved = saved_per_layer(m, Nc, T, C, E);
  const std::int64_t layer = saved.largest();
  const std::int64_t recomputed =
      remat == RematPolicy::None ? 0
      : remat == RematPolicy::Full ? largest_stage_sum(p, [&](int l) { return saved.of(l); })
                                   : layer;
  // An MoE layer's router logits, in the compute dtype and twice in double (models/moe_mlp.cpp).
  const std::int64_t router = m.is_moe() ? Nc * m.num_experts * (2 * c + 16) : 0;
  // Sends in flight, then the largest of one stage's backward (remat recomputes L layers; each
  // layer's backward temporaries as much again), the head's logits and the optimizer's buffers.
  const std::int64_t act = n * m.emb_dim * c;
  // Context parallelism's chunk copies: a chunk's key and value prefixes, their gradients and
  // the gathered gradients of every key, at most 8 times every rank's keys.
  const std::int64_t context_copies = C > 1 ? 8 * Nc * C * layer_share(m, T, 0).kv * c : 0;
  const std::int64_t backward = (recomputed + 2 * layer) * c + context_copies + router;
  const bool last = layout.rank_of(layout.stages() - 1) == stage_rank;
  const bool first = layout.rank_of(0) == stage_rank;
  // Layers outside the pipeline: this rank runs microbatches m = stage_rank mod S of them, and
  // the head on those instead of the last stage on all.
  const std::int64_t M = cfg.microbatches(), S = layout.ranks;
  const std::int64_t outside_runs = layout.outside ? (M - stage_rank + S - 1) / S : 0;
  const std::int64_t heads = layout.outside ? outside_runs : last ? M : 0;
  // The head: logits of this rank's vocabulary part and their gradient in place, the normalised
  // rows gathered and their gradient; vocabulary-parallel, each part's two statistics per token
  // gathered from every rank and combined (float32).
  const std::int64_t head = heads > 0 ? 2 * Nc * (m.vocab_size / T) * c + 4 * Nc * m.emb_dim * c +
                                            (T > 1 ? (2 * T + 4) * Nc * 4 : 0)
                                      : 0;
  // An OUTSIDE keeps every activation of its layers (remat none: its backward follows at once)
  // while the head or one of their backwards runs.
  std::int64_t outside_saved = 0;
  for (int l = int(stage_layers(cfg).layers()); outside_runs > 0 && l < m.num_layers; ++l)
    outside_saved += layer_saved_elements(m, Nc, T, C, E, l);
  const std::int64_t outside =
      outside_runs > 0 ? outside_saved * c + std::max(head, 2 * layer * c + context_copies + router)
                       : 0;
  std::int64_t largest_shard = 0;
  for (const auto& s : p.stages) largest_shard = std::max(largest_shard, s.shard);
  const std::int64_t optimizer =
      4 * (2 * std::max(p.extras, largest_shard) + 2 * F * p.extras_piece);
  // Kept from step to step (a captured step's fixed addresses): every microbatch's input and
  // target ids on the first stage and where the head runs (the last stage, or the OUTSIDE
  // actions; with packing on every rank, whose attention follows the documents), and the
  // per-token float32 losses of the heads it runs.
  const std::int64_t token_batches =
      cfg.packing || first || (last && !layout.outside) ? M : outside_runs;
  const std::int64_t tokens = 2 * token_batches * Nc * 4 + heads * Nc * 4;
  const std::int64_t rope = (C > 1 ? 2 : 1) * 2 * m.max_target_length * m.head_dim() * 8;
  return 2 * act + std::max({backward, head, optimizer, outside}) + tokens + rope;
}

MemoryBreakdown device_memory(const Config& cfg, const sch::Program& lowered, int stage_rank,
                              int peak_stashed) {
  CAROUSEL_ASSERT(stage_rank >= 0 && stage_rank < lowered.layout.ranks,
                  "stage rank {} of a {}-rank program", stage_rank, lowered.layout.ranks);
  const ParamLayout p = param_layout(cfg, lowered.layout, stage_rank);
  const ModelConfig& m = cfg.model;
  const std::int64_t c = compute_bytes(cfg), F = cfg.ici_fsdp_parallelism;
  const int T = int(cfg.ici_tensor_parallelism), C = int(cfg.ici_context_parallelism);
  const std::int64_t Nc = context_tokens(cfg), n = rank_rows(cfg);  // tokens, this rank's rows
  const auto& actions = lowered.ranks.at(stage_rank);
  MemoryBreakdown mem = state_memory(cfg, lowered.layout, stage_rank);
  if (F > 1) {
    std::set<int> slots;  // a slot's buffer, once allocated, is kept for the run
    for (const auto& a : actions) {
      if (a.kind == sch::Kind::AG_ISSUE) slots.insert(a.index);
    }
    mem.weight_slots = std::int64_t(slots.size()) * p.max_padded() * c;
  }
  // The stage input, then each layer's kept tensors (a selective policy's layer 0 input is the
  // stage input: not counted twice). The simulation holds them from F to W in an I/W split; an
  // MoE layer's routed rows go at I already, so there this is an upper bound.
  const RematPolicy remat = parse_remat_policy(cfg.remat_policy);
  const bool selective = remat != RematPolicy::None && remat != RematPolicy::Full;
  const std::int64_t stash = (selective ? 0 : n * m.emb_dim) + largest_stage_sum(p, [&](int l) {
                               return remat_kept_elements(cfg, Nc, T, C, l);
                             });
  mem.activations = std::int64_t(peak_stashed) * stash * c;

  // Working set (a bound): receives posted before their compute, deferred weight gradients, and
  // what every program holds (program_free_working_set).
  const std::int64_t act = n * m.emb_dim * c;
  const int receives = peak_open(actions, sch::Kind::RECV_F, {sch::Kind::F, sch::Kind::OUTSIDE}) +
                       peak_open(actions, sch::Kind::RECV_B, {sch::Kind::B, sch::Kind::I});
  const int pending_w = peak_open(actions, sch::Kind::I, {sch::Kind::W});
  const std::int64_t deferred =
      largest_stage_sum(p, [&](int l) { return deferred_elements(m, Nc, T, l); });
  mem.working_set = receives * act + pending_w * deferred * c +
                    program_free_working_set(cfg, lowered.layout, stage_rank);
  return mem;
}

}  // namespace carousel::plan
