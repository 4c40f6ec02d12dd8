// model.cpp — embedding -> stage of all layers -> head, and back.
#include "models/model.h"

namespace carousel {

std::vector<LayerWeights> all_layers(const ModelConfig& cfg, const ParamSet& set) {
  std::vector<LayerWeights> layers;
  for (int i = 0; i < cfg.num_layers; ++i) layers.push_back(LayerWeights::from(set, i));
  return layers;
}

double model_forward_backward(Backend& be, const ModelConfig& cfg, const ParamSet& params,
                              const ParamSet& grads, const RopeTables& rope, const Microbatch& mb,
                              double loss_scale, RematPolicy remat, RouterStats* router,
                              const std::vector<std::vector<double>>& router_bias) {
  auto weights = all_layers(cfg, params);
  for (std::size_t l = 0; l < router_bias.size(); ++l) weights[l].router_bias = router_bias[l];
  const auto layer_grads = all_layers(cfg, grads);
  const Tensor x = cfg.is_llama() ? embed_forward(be, params, mb.inputs) : mb.inputs;
  StageSaved saved;
  const Tensor y = stage_forward(be, cfg, weights, rope, x, remat, saved);
  HeadResult head = head_loss(be, cfg, params, grads, y, mb.targets, loss_scale);
  if (router) router->merge(saved.router);
  const Tensor dx = stage_backward(be, cfg, weights, layer_grads, rope, saved, head.dx, loss_scale);
  if (cfg.is_llama()) embed_backward(be, grads, mb.inputs, dx);
  return head.losses.sum(be);
}

}  // namespace carousel
