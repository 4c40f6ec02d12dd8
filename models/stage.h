// stage.h — a pipeline stage's compute: L consecutive decoder layers, forward and backward,
// with MaxText's rematerialisation.
//
// remat_policy=full (MaxText's default): the forward keeps only the stage input; the backward
// recomputes the stage's forward from it, then back-propagates. remat_policy=none: the forward
// keeps every layer's activations. The selective policies (MaxText's names) keep each layer's
// input and some of its tensors (layer.h RematKeep); the backward recomputes the rest of one
// layer at a time, skipping the GEMMs whose outputs it kept. All give bitwise the same gradients.
#pragma once

#include <string>
#include <vector>

#include "models/layer.h"

namespace carousel {

enum class RematPolicy {
  None,                         // keep every activation
  Full,                         // keep the stage input
  Minimal,                      // keep the projections' outputs: q, k, v, out_proj, gate, up
  SaveDotWithContextExceptMlp,  // q, k, v, the attention output (context) and out_proj
  SaveQkvProj,                  // q, k, v
  SaveOutProj,                  // out_proj
};
// "none", "full", "minimal", "save_dot_with_context_except_mlp", "save_qkv_proj",
// "save_out_proj"; anything else is an error listing them.
RematPolicy parse_remat_policy(const std::string& name);
// What a selective policy keeps of each layer (None and Full: nothing to choose).
RematKeep remat_keep(RematPolicy policy);
// Whether a backward recomputes its MoE layers' routed experts, and so runs their forward's
// expert exchanges again: under every policy but none (no RematKeep keeps the routed rows).
inline bool recomputes_routed_experts(RematPolicy policy) { return policy != RematPolicy::None; }

// What a stage's forward keeps for its backward.
struct StageSaved {
  Tensor input;                    // [b,T,E] the stage input (all that remat=full keeps)
  std::vector<LayerSaved> layers;  // remat=none: each layer's activations; selective: some
  bool partial = false;            // selective: layers hold what remat_keep() keeps
  RouterStats router;              // MoE layers' routing in this forward (not its recomputation)
};

// y = layers[L-1](...layers[0](x)); x [b,T,E] -> y [b,T,E] (a new tensor); with tensor
// parallelism this rank's rows of them (layer.h).
Tensor stage_forward(Backend& be, const ModelConfig& cfg, const std::vector<LayerWeights>& layers,
                     const RopeTables& rope, const Tensor& x, RematPolicy remat, StageSaved& saved,
                     const LayerParallel& parallel = {});

// dx for dy = d(loss)/d(y); weight gradients accumulate into `grads` (one per layer), or with
// `deferred` set their GEMMs are collected there for a later apply_weight_grads (the I of an
// I/W split). loss_scale: the microbatch loss sum's weight in the objective (MoE layers' balancing
// loss). Frees what `saved` held.
Tensor stage_backward(Backend& be, const ModelConfig& cfg, const std::vector<LayerWeights>& layers,
                      const std::vector<LayerWeights>& grads, const RopeTables& rope,
                      StageSaved& saved, const Tensor& dy, double loss_scale,
                      std::vector<DeferredWeightGrad>* deferred = nullptr,
                      const LayerParallel& parallel = {});

}  // namespace carousel
