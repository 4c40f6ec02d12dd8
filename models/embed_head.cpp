// embed_head.cpp — embedding, final norm + lm_head + cross-entropy, simple squared error.
#include "models/embed_head.h"

#include "models/layer.h"

namespace carousel {

Tensor embed_forward(Backend& be, const ParamSet& params, const Tensor& tokens,
                     const TensorGroup& tensor) {
  const Tensor& table = params.at(ParamRole::Embedding);
  Tensor x = be.empty({tokens.dim(0), tokens.dim(1), table.dim(1)}, table.dtype());
  if (tensor.size() == 1) {
    be.embedding_forward(table, tokens, x);
    return x;
  }
  const std::int64_t part = table.dim(0);  // this rank's rows of the vocabulary
  be.embedding_part_forward(table, tokens, tensor.rank() * part, part * tensor.size(), x);
  return tensor.reduce_scatter_rows(be, x.reshape({x.rows(), x.cols()}));
}

void embed_backward(Backend& be, const ParamSet& grads, const Tensor& tokens, const Tensor& dx,
                    const TensorGroup& tensor) {
  const Tensor& dtable = grads.at(ParamRole::Embedding);
  if (tensor.size() == 1) {
    be.embedding_backward(dx, tokens, dtable);
    return;
  }
  const Tensor whole =
      tensor.gather_rows(be, dx).reshape({tokens.dim(0), tokens.dim(1), dx.cols()});
  const std::int64_t part = dtable.dim(0);
  be.embedding_part_backward(whole, tokens, tensor.rank() * part, part * tensor.size(), dtable);
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
  Linear(head_weight(cfg, params)).forward(be, f.xn, f.logits);
  be.cross_entropy_forward(f.logits, flat_targets, f.losses);
  return f;
}

// The vocabulary-parallel head's forward (T > 1 ranks): this rank's rows x [n,E] normalised,
// gathered (xn [N,E]), times its part of the head [V/T,E]; every token's loss from the parts'
// statistics. What the backward reuses is kept.
struct PartHeadForward {
  Tensor rstd, xn, logits;  // [n], [N,E], [N,V/T]
  Tensor lse, losses;       // [N] over the whole vocabulary, the same on every rank
};

PartHeadForward part_head_forward(Backend& be, const ModelConfig& cfg, const ParamSet& params,
                                  const Tensor& x, const Tensor& flat_targets,
                                  const TensorGroup& tensor) {
  const DType dt = x.dtype(), st = stats_dtype(dt);
  const std::int64_t n = x.rows(), E = x.cols(), N = flat_targets.numel();
  const Tensor& head = head_weight(cfg, params);
  const std::int64_t part = head.dim(0), first = tensor.rank() * part;
  PartHeadForward f{
      be.empty({n}, st), {}, be.empty({N, part}, dt), be.empty({N}, st), be.empty({N}, st)};
  Tensor xn_rows = be.empty({n, E}, dt);
  be.rmsnorm_forward(x.reshape({n, E}), params.at(ParamRole::FinalNorm), cfg.norm_eps, xn_rows,
                     f.rstd);
  const ColumnParallel vocab(tensor);  // the head's rows: this rank's part of the vocabulary
  f.xn = vocab.gather_input(be, xn_rows);
  vocab.forward(be, f.xn, head, f.logits);
  Tensor lse_part = be.empty({N, 1}, st), target_part = be.empty({N, 1}, st);
  be.cross_entropy_part_forward(f.logits, flat_targets, first, cfg.vocab_size,
                                lse_part.reshape({N}), target_part.reshape({N}));
  const std::int64_t T = tensor.size();
  be.cross_entropy_combine(tensor.gather_rows(be, lse_part).reshape({T, N}),
                           tensor.gather_rows(be, target_part).reshape({T, N}), f.lse, f.losses);
  return f;
}

// The vocabulary-parallel head with its backward: dx is this rank's rows [n,E].
HeadResult part_head_loss(Backend& be, const ModelConfig& cfg, const ParamSet& params,
                          const ParamSet& grads, const Tensor& x, const Tensor& flat_targets,
                          double loss_scale, const TensorGroup& tensor) {
  PartHeadForward f = part_head_forward(be, cfg, params, x, flat_targets, tensor);
  const Tensor& head = head_weight(cfg, params);
  const std::int64_t n = x.rows(), E = x.cols(), N = flat_targets.numel();
  be.cross_entropy_part_backward(f.logits, flat_targets, tensor.rank() * head.dim(0),
                                 cfg.vocab_size, f.lse, loss_scale, f.logits);
  Tensor dxn = be.empty({N, E}, x.dtype());  // this part's share of d xn
  const Tensor dxn_rows = ColumnParallel(tensor).backward(
      be, f.xn, {{head, head_weight(cfg, grads)}}, {f.logits}, dxn, /*accumulate=*/false);
  HeadResult r{{f.losses}, be.empty({n, E}, x.dtype())};
  be.rmsnorm_backward(dxn_rows, x.reshape({n, E}), params.at(ParamRole::FinalNorm), f.rstd, r.dx,
                      grads.at(ParamRole::FinalNorm));
  return r;
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
                     double loss_scale, const TensorGroup& tensor) {
  if (tensor.size() > 1) {
    return part_head_loss(be, cfg, params, grads, x, targets.reshape({targets.numel()}), loss_scale,
                          tensor);
  }
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
  const Linear head_linear(head);
  head_linear.input_grad(be, f.logits, dxn);                                // [N,V] x [V,E]
  head_linear.weight_grad(be, f.logits, f.xn, head_weight(cfg, grads));  // d head += dlogits^T xn
  be.rmsnorm_backward(dxn, x.reshape({N, E}), params.at(ParamRole::FinalNorm), f.rstd,
                      r.dx.reshape({N, E}), grads.at(ParamRole::FinalNorm));
  return r;
}

double head_loss_sum(Backend& be, const ModelConfig& cfg, const ParamSet& params, const Tensor& x,
                     const Tensor& targets, const TensorGroup& tensor) {
  if (!cfg.is_llama()) return be.sum_squares(simple_diff(be, x, targets));
  if (tensor.size() > 1) {
    const Tensor flat = targets.reshape({targets.numel()});
    return be.sum(part_head_forward(be, cfg, params, x, flat, tensor).losses);
  }
  return be.sum(llama_head_forward(be, cfg, params, x, targets.reshape({x.rows()})).losses);
}

}  // namespace carousel
