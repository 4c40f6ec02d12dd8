// layer.h — one decoder layer, forward and backward, for each decoder block.
//
// llama (docs/model.md#the-llama-block):
//   h = x + o_proj(attn(rope(q_proj(rms(x, g1))), rope(k_proj(rms(x, g1))), v_proj(rms(x, g1))))
//   y = h + down_proj(silu(gate_proj(rms(h, g2))) * up_proj(rms(h, g2)))
// A mixture-of-experts layer (docs/moe.md) replaces the MLP by the routed experts (moe_mlp.h)
// plus, with shared experts, a dense MLP of their fused width:
//   y = h + moe(rms(h, g2)) [+ shared_down(silu(shared_gate(rms(h, g2))) * shared_up(...))]
// simple (MaxText's pipeline test layer): y = x W.
//
// The forward can save what the backward needs (LayerSaved); remat recomputes it instead
// (see stage.h). Weight gradients accumulate into `grads`; dx is overwritten.
#pragma once

#include <string>
#include <vector>

#include "compute/backend.h"
#include "models/model_config.h"
#include "models/moe_mlp.h"
#include "models/parallel/layer_parallel.h"
#include "models/parallel/linear.h"
#include "models/params.h"

namespace carousel {

// Views of one layer's parameters — or of their gradients, or of a gathered copy.
struct LayerWeights {
  int layer = -1;                                                    // index in the model
  Tensor attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;  // llama (MoE: shared)
  MoeWeights moe;                   // MoE layers: router and stacked routed experts
  std::vector<double> router_bias;  // MoE: the auxiliary-loss-free bias [X], or empty
  Tensor w;                         // simple
  bool is_moe() const { return moe.router.defined(); }
  bool has_dense_mlp() const { return w_gate.defined(); }  // dense, or MoE's shared experts
  static LayerWeights from(const ParamSet& set, int layer);
};

// What a forward's MoE layers report of their routing, summed over the microbatches and layers
// a stage ran (the step log and the loss): the balancing loss in the units of the loss sum
// (tokens x the per-sequence loss, so loss_scale makes it the mean over sequences) and each
// layer's tokens per expert.
struct RouterStats {
  double aux_loss_sum = 0;
  std::vector<std::int64_t> load;  // [num_layers * X]: layer l's counts at l * X
  void add(const ModelConfig& cfg, int layer, const Routing& routing);
  void merge(const RouterStats& other);
};

// The auxiliary-loss-free balancing's biases (routed_bias; models/moe_router.h): one [X] vector
// per MoE layer, by layer index (empty for dense layers, all empty without routed_bias). They
// are state, not parameters: the same on every rank, moved after each step by the step's global
// loads, and saved in checkpoints' training state.
using RouterBias = std::vector<std::vector<double>>;
RouterBias initial_router_bias(const ModelConfig& cfg);
// bias[l][e] += rate * sign(mean load - load[l * X + e]) for each MoE layer l; `load` is a
// step's RouterStats::load over the whole global batch.
void update_router_bias(const ModelConfig& cfg, RouterBias& bias,
                        const std::vector<std::int64_t>& load);
// Throws naming `where` unless `bias` has cfg's shape.
void check_router_bias(const ModelConfig& cfg, const RouterBias& bias, const std::string& where);

// Activations of one layer's forward kept for its backward. Shapes for x [b,T,E], N = b*T; with
// tensor parallelism over R ranks H, Hkv and Fm are this rank's (H/R, ...) and the tensors
// marked "mine" hold this rank's rows only (n = N/R rows; tensor_parallel.h):
struct LayerSaved {
  Tensor x;              // [b,T,E] layer input (mine)
  Tensor xn1, rstd1;     // [N,E], [N]     rms(x, g1) (rstd1 mine), gathered for q/k/v
  Tensor q, k, v;        // [b,T,H,hd], [b,T,Hkv,hd] x2   (q, k after RoPE)
  Tensor att, lse;       // [b,T,H,hd], [b,H,T]          attention output, log-sum-exp
  ContextSaved context;  // context parallelism: every rank's keys and values
  Tensor h;              // [b,T,E]        after the attention residual (mine)
  Tensor hn, rstd2;      // [N,E], [N]     rms(h, g2) (rstd2 mine), gathered for gate/up
  Tensor gate, up, act;  // [N,Fm] x3    act = silu(gate) * up (MoE: the shared experts')
  MoeSaved moe;          // MoE layers: the routed experts' activations and routing
};

// A selective remat policy's choice among a layer's tensors (the layer input x is always kept):
// the projections q, k, v (after RoPE), the attention output with its lse (and context
// parallelism's gathered keys and values), h (x plus the out projection), gate and up.
struct RematKeep {
  bool qkv = false, context = false, out_proj = false, mlp_in = false;
};
// Drops from a full LayerSaved what `keep` does not keep (the dropped buffers are freed).
void keep_only(LayerSaved& saved, const RematKeep& keep);
// Whether the recomputation of a layer's forward under `keep` (layer_recompute) runs `piece`'s
// forward collective again: the input gathers always (xn1 and hn are never kept), the out
// projection's reduce-scatter unless h is kept, the down projection's never (a recomputation
// stops before the layer's output). A full remat reruns the whole forward: every piece. The
// planner counts a backward's tensor traffic by it.
bool recompute_replays(LayerPiece piece, const RematKeep& keep);
// Fills in what keep_only dropped, recomputing from saved.x and skipping every GEMM (and the
// attention) whose output was kept: the same ops on the same inputs as the forward, so the same
// bits.
void layer_recompute(Backend& be, const ModelConfig& cfg, const LayerWeights& w,
                     const RopeTables& rope, LayerSaved& saved, const LayerParallel& parallel = {});

// y = layer(x); x and y are [b,T,E] and distinct. When `saved` is set, the activations the
// backward needs are allocated and kept there; `router`, when set, gets an MoE layer's routing.
// With a tensor group of R > 1 ranks (llama only) x and y are this rank's rows [N/R, E] and `w`
// this rank's parts of the weights; with a context group, T is this rank's tokens of each sequence
// and `rope` holds their positions.
void layer_forward(Backend& be, const ModelConfig& cfg, const LayerWeights& w,
                   const RopeTables& rope, const Tensor& x, const Tensor& y, LayerSaved* saved,
                   const LayerParallel& parallel = {}, RouterStats* router = nullptr);

// dx = d layer / dx (dy); weight gradients += into `grads`, or, when `deferred` is set, the
// weight-gradient GEMMs are appended there instead (norm gains, and an MoE layer's experts and
// router, are still done here). dx may not alias dy. loss_scale: the weight of the microbatch's
// loss sum in the objective (head_loss's), which an MoE layer's balancing loss shares.
void layer_backward(Backend& be, const ModelConfig& cfg, const LayerWeights& w,
                    const LayerWeights& grads, const RopeTables& rope, const LayerSaved& saved,
                    const Tensor& dy, const Tensor& dx, double loss_scale,
                    std::vector<DeferredWeightGrad>* deferred = nullptr,
                    const LayerParallel& parallel = {});

}  // namespace carousel
