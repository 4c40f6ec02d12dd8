// model.h — the whole model on one device: embedding, all layers as one stage, head and loss.
//
// This is what `carousel train` runs on a single device, and the sequential reference that
// every pipeline schedule must reproduce (docs/circular-pipeline.md#the-contract).
#pragma once

#include <vector>

#include "models/embed_head.h"
#include "models/stage.h"

namespace carousel {

// One microbatch: llama takes int32 tokens [b,T] and next-token targets [b,T]; simple takes
// activations [b,T,E] and targets [b,T,E].
struct Microbatch {
  Tensor inputs;
  Tensor targets;
};

// Layer views of every layer of a parameter set, in order.
std::vector<LayerWeights> all_layers(const ModelConfig& cfg, const ParamSet& set);

// Forward and backward of one microbatch; gradients accumulate into `grads`. Returns the sum of
// the microbatch's losses (the caller divides by the global count; loss_scale = 1 / that count).
// The objective differentiated is loss_scale x (that sum + the MoE layers' balancing-loss sum),
// the latter added into `router` (when set) with the layers' loads. `router_bias`: each MoE
// layer's auxiliary-loss-free bias by layer index (empty: none).
double model_forward_backward(Backend& be, const ModelConfig& cfg, const ParamSet& params,
                              const ParamSet& grads, const RopeTables& rope, const Microbatch& mb,
                              double loss_scale, RematPolicy remat, RouterStats* router = nullptr,
                              const std::vector<std::vector<double>>& router_bias = {});

}  // namespace carousel
