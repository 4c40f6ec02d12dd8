// embed_head.cpp — embedding, final norm + lm_head + cross-entropy, simple squared error.
#include "models/embed_head.h"

#include "models/layer.h"  // stats_dtype

namespace carousel {

Tensor embed_forward(Backend& be, const ParamSet& params, const Tensor& tokens) {
  const Tensor& table = params.at(ParamRole::Embedding);
  Tensor x = be.empty({tokens.dim(0), tokens.dim(1), table.dim(1)}, table.dtype());
  be.embedding_forward(table, tokens, x);
  return x;
}

void embed_backward(Backend& be, const ParamSet& grads, const Tensor& tokens, const Tensor& dx) {
  be.embedding_backward(dx, tokens, grads.at(ParamRole::Embedding));
}

namespace {
const Tensor& head_weight(const ModelConfig& cfg, const ParamSet& set) {
  return set.at(cfg.logits_via_embedding ? ParamRole::Embedding : ParamRole::LmHead);
}
}  // namespace

HeadResult head_loss(Backend& be, const ModelConfig& cfg, const ParamSet& params,
                     const ParamSet& grads, const Tensor& x, const Tensor& targets,
                     double loss_scale) {
  const DType dt = x.dtype();
  const std::int64_t N = x.rows(), E = x.cols();
  HeadResult r;
  r.dx = be.empty(x.shape(), dt);
  if (!cfg.is_llama()) {
    // loss = sum (x - t)^2;  dx = 2 (x - t) * loss_scale
    Tensor diff = be.empty(x.shape(), dt);
    be.copy(x, diff);
    be.axpy(-1.0, targets, diff);
    r.loss_sum = be.sum_squares(diff);
    be.copy(diff, r.dx);
    be.scale(r.dx, 2.0 * loss_scale);
    return r;
  }
  const std::int64_t V = cfg.vocab_size;
  const Tensor& head = head_weight(cfg, params);
  // Forward: xn = rms(x, g_final) [N,E]; logits = xn head^T [N,V]; losses [N].
  Tensor xn = be.empty({N, E}, dt), rstd = be.empty({N}, stats_dtype(dt));
  be.rmsnorm_forward(x.reshape({N, E}), params.at(ParamRole::FinalNorm), cfg.norm_eps, xn, rstd);
  Tensor logits = be.empty({N, V}, dt), losses = be.empty({N}, stats_dtype(dt));
  be.gemm(false, true, 1.0, xn, head, 0.0, logits);
  const Tensor flat_targets = targets.reshape({N});
  be.cross_entropy_forward(logits, flat_targets, losses);
  r.loss_sum = be.sum(losses);
  // Backward, reusing the logits buffer for their gradient.
  be.cross_entropy_backward(logits, flat_targets, loss_scale, logits);
  Tensor dxn = be.empty({N, E}, dt);
  be.gemm(false, false, 1.0, logits, head, 0.0, dxn);                   // [N,V] x [V,E]
  be.gemm(true, false, 1.0, logits, xn, 1.0, head_weight(cfg, grads));  // d head += dlogits^T xn
  be.rmsnorm_backward(dxn, x.reshape({N, E}), params.at(ParamRole::FinalNorm), rstd,
                      r.dx.reshape({N, E}), grads.at(ParamRole::FinalNorm));
  return r;
}

}  // namespace carousel
