// stage.h — a pipeline stage's compute: L consecutive decoder layers, forward and backward,
// with MaxText's rematerialisation.
//
// remat_policy=full (MaxText's default): the forward keeps only the stage input; the backward
// recomputes the stage's forward from it, then back-propagates. remat_policy=none: the forward
// keeps every layer's activations. Both give bitwise the same gradients.
#pragma once

#include <string>
#include <vector>

#include "models/layer.h"

namespace carousel {

enum class RematPolicy { None, Full };
RematPolicy parse_remat_policy(const std::string& name);  // "none" | "full"

// What a stage's forward keeps for its backward.
struct StageSaved {
  Tensor input;                    // [b,T,E] the stage input (all that remat=full keeps)
  std::vector<LayerSaved> layers;  // remat=none: each layer's activations
};

// y = layers[L-1](...layers[0](x)); x [b,T,E] -> y [b,T,E] (a new tensor); with tensor
// parallelism this rank's rows of them (layer.h).
Tensor stage_forward(Backend& be, const ModelConfig& cfg, const std::vector<LayerWeights>& layers,
                     const RopeTables& rope, const Tensor& x, RematPolicy remat, StageSaved& saved,
                     const LayerParallel& parallel = {});

// dx for dy = d(loss)/d(y); weight gradients accumulate into `grads` (one per layer), or with
// `deferred` set their GEMMs are collected there for a later apply_weight_grads (the I of an
// I/W split). Frees what `saved` held.
Tensor stage_backward(Backend& be, const ModelConfig& cfg, const std::vector<LayerWeights>& layers,
                      const std::vector<LayerWeights>& grads, const RopeTables& rope,
                      StageSaved& saved, const Tensor& dy,
                      std::vector<DeferredWeightGrad>* deferred = nullptr,
                      const LayerParallel& parallel = {});

}  // namespace carousel
