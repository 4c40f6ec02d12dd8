// stage.cpp — stage forward/backward over consecutive layers, with or without remat.
#include "models/stage.h"

#include <utility>

#include "compute/error.h"

namespace carousel {

RematPolicy parse_remat_policy(const std::string& name) {
  static const std::pair<const char*, RematPolicy> kPolicies[] = {
      {"none", RematPolicy::None},
      {"full", RematPolicy::Full},
      {"minimal", RematPolicy::Minimal},
      {"save_dot_with_context_except_mlp", RematPolicy::SaveDotWithContextExceptMlp},
      {"save_qkv_proj", RematPolicy::SaveQkvProj},
      {"save_out_proj", RematPolicy::SaveOutProj}};
  for (const auto& [n, policy] : kPolicies) {
    if (name == n) return policy;
  }
  fail(
      "remat_policy='{}' is not valid; use full (keep stage inputs, recompute), none (keep all "
      "activations), or keep each layer's input and: minimal (its projections' outputs), "
      "save_dot_with_context_except_mlp (q, k, v, attention output, out_proj), save_qkv_proj, "
      "save_out_proj",
      name);
}

RematKeep remat_keep(RematPolicy policy) {
  switch (policy) {
    case RematPolicy::Minimal:
      return {.qkv = true, .context = false, .out_proj = true, .mlp_in = true};
    case RematPolicy::SaveDotWithContextExceptMlp:
      return {.qkv = true, .context = true, .out_proj = true, .mlp_in = false};
    case RematPolicy::SaveQkvProj:
      return {.qkv = true};
    case RematPolicy::SaveOutProj:
      return {.out_proj = true};
    case RematPolicy::None:
    case RematPolicy::Full:
      break;
  }
  return {};
}

namespace {
// Runs the layers from x, keeping every layer's activations in `layers_saved`.
Tensor forward_keeping_all(Backend& be, const ModelConfig& cfg,
                           const std::vector<LayerWeights>& layers, const RopeTables& rope,
                           const Tensor& x, std::vector<LayerSaved>& layers_saved,
                           const LayerParallel& parallel, RouterStats* router) {
  layers_saved.assign(layers.size(), LayerSaved{});
  Tensor cur = x;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    Tensor next = be.empty(x.shape(), x.dtype());
    layer_forward(be, cfg, layers[i], rope, cur, next, &layers_saved[i], parallel, router);
    cur = next;
  }
  return cur;
}
}  // namespace

Tensor stage_forward(Backend& be, const ModelConfig& cfg, const std::vector<LayerWeights>& layers,
                     const RopeTables& rope, const Tensor& x, RematPolicy remat, StageSaved& saved,
                     const LayerParallel& parallel) {
  saved.input = x;
  saved.partial = false;
  saved.router = RouterStats{};
  if (remat == RematPolicy::None)
    return forward_keeping_all(be, cfg, layers, rope, x, saved.layers, parallel, &saved.router);
  if (remat != RematPolicy::Full) {  // selective: each layer's input and the policy's tensors
    saved.layers.assign(layers.size(), LayerSaved{});
    saved.partial = true;
    const RematKeep keep = remat_keep(remat);
    Tensor cur = x;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      Tensor next = be.empty(x.shape(), x.dtype());
      layer_forward(be, cfg, layers[i], rope, cur, next, &saved.layers[i], parallel, &saved.router);
      keep_only(saved.layers[i], keep);
      cur = next;
    }
    return cur;
  }
  saved.layers.clear();
  Tensor cur = x;
  for (const auto& w : layers) {
    Tensor next = be.empty(x.shape(), x.dtype());
    layer_forward(be, cfg, w, rope, cur, next, nullptr, parallel, &saved.router);
    cur = next;  // the previous activation is released here
  }
  return cur;
}

Tensor stage_backward(Backend& be, const ModelConfig& cfg, const std::vector<LayerWeights>& layers,
                      const std::vector<LayerWeights>& grads, const RopeTables& rope,
                      StageSaved& saved, const Tensor& dy, double loss_scale,
                      std::vector<DeferredWeightGrad>* deferred, const LayerParallel& parallel) {
  CAROUSEL_CHECK(saved.input.defined(), "stage_backward called without a stage forward");
  if (saved.layers.size() != layers.size()) {  // remat: recompute from the stage input
    forward_keeping_all(be, cfg, layers, rope, saved.input, saved.layers, parallel, nullptr);
  }
  Tensor grad = dy;
  for (std::size_t i = layers.size(); i-- > 0;) {
    if (saved.partial) layer_recompute(be, cfg, layers[i], rope, saved.layers[i], parallel);
    Tensor dx = be.empty(dy.shape(), dy.dtype());
    layer_backward(be, cfg, layers[i], grads[i], rope, saved.layers[i], grad, dx, loss_scale,
                   deferred, parallel);
    saved.layers[i] = LayerSaved{};  // free this layer's activations as soon as possible
    grad = dx;
  }
  saved = StageSaved{};
  return grad;
}

}  // namespace carousel
