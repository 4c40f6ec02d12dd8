// embed_head.cpp — embedding, final norm + lm_head + cross-entropy, simple squared error.
#include "models/embed_head.h"

#include "models/layer.h"

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

namespace {

// The llama head's forward: xn = rms(x, g_final) [N,E], logits = xn head^T [N,V], the summed
// token losses. What the backward reuses is kept.
struct HeadForward {
  Tensor xn, rstd, logits;
  Tensor losses;  // [N], per token
};

HeadForward llama_head_forward(Backend& be, const ModelConfig& cfg, const ParamSet& params,
                               const Tensor& x, const Tensor& flat_targets) {
  const DType dt = x.dtype();
  const std::int64_t N = x.rows(), E = x.cols(), V = cfg.vocab_size;
  HeadForward f{be.empty({N, E}, dt), be.empty({N}, stats_dtype(dt)), be.empty({N, V}, dt),
                be.empty({N}, stats_dtype(dt))};
  be.rmsnorm_forward(x.reshape({N, E}), params.at(ParamRole::FinalNorm), cfg.norm_eps, f.xn,
                     f.rstd);
  be.gemm(false, true, 1.0, f.xn, head_weight(cfg, params), 0.0, f.logits);
  be.cross_entropy_forward(f.logits, flat_targets, f.losses);
  return f;
}

// simple: diff = x - t.
Tensor simple_diff(Backend& be, const Tensor& x, const Tensor& targets) {
  Tensor diff = be.empty(x.shape(), x.dtype());
  be.copy(x, diff);
  be.axpy(-1.0, targets, diff);
  return diff;
}

}  // namespace

HeadResult head_loss(Backend& be, const ModelConfig& cfg, const ParamSet& params,
                     const ParamSet& grads, const Tensor& x, const Tensor& targets,
                     double loss_scale) {
  HeadResult r;
  if (!cfg.is_llama()) {
    // loss = sum (x - t)^2;  dx = 2 (x - t) * loss_scale
    r.losses = {simple_diff(be, x, targets), /*squared=*/true};
    r.dx = be.empty(x.shape(), x.dtype());
    be.copy(r.losses.values, r.dx);
    be.scale(r.dx, 2.0 * loss_scale);
    return r;
  }
  r.dx = be.empty(x.shape(), x.dtype());
  const std::int64_t N = x.rows(), E = x.cols();
  const Tensor& head = head_weight(cfg, params);
  const Tensor flat_targets = targets.reshape({N});
  HeadForward f = llama_head_forward(be, cfg, params, x, flat_targets);
  r.losses = {f.losses};
  // Backward, reusing the logits buffer for their gradient.
  be.cross_entropy_backward(f.logits, flat_targets, loss_scale, f.logits);
  Tensor dxn = be.empty({N, E}, x.dtype());
  be.gemm(false, false, 1.0, f.logits, head, 0.0, dxn);  // [N,V] x [V,E]
  be.gemm(true, false, 1.0, f.logits, f.xn, 1.0,
          head_weight(cfg, grads));  // d head += dlogits^T xn
  be.rmsnorm_backward(dxn, x.reshape({N, E}), params.at(ParamRole::FinalNorm), f.rstd,
                      r.dx.reshape({N, E}), grads.at(ParamRole::FinalNorm));
  return r;
}

double head_loss_sum(Backend& be, const ModelConfig& cfg, const ParamSet& params, const Tensor& x,
                     const Tensor& targets) {
  if (!cfg.is_llama()) return be.sum_squares(simple_diff(be, x, targets));
  return be.sum(llama_head_forward(be, cfg, params, x, targets.reshape({x.rows()})).losses);
}

}  // namespace carousel
