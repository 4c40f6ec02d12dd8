// embed_head.h — what runs before the first layer (token embedding) and after the last
// (final norm, lm_head, cross-entropy; or the simple model's squared error). In a pipeline they
// live on the first and the last stage.
//
// Vocabulary parallelism (a tensor group of T > 1 ranks; docs/parallelism.md): rank t holds rows
// [t V/T, (t + 1) V/T) of the embedding and of lm_head, and the activations on either side are
// its own rows [n, E] (sequence parallelism). The embedding looks up the ids of its part (zeros
// for the others) and reduce-scatters: each token's row comes from the one rank holding it. The
// head normalises its rows, all-gathers them, computes the logits of its vocabulary part only
// (no [tokens, V] tensor anywhere), and the ranks combine each part's log-sum-exp and target
// logit into the loss (an all-gather of two numbers per token); the input gradient, a partial
// sum over the parts, is reduce-scattered to rows before the norm's backward. The final norm's
// gain gets each rank's partial gradient (summed over the group by the optimizer).
#pragma once

#include "compute/backend.h"
#include "models/model_config.h"
#include "models/parallel/tensor_parallel.h"
#include "models/params.h"

namespace carousel {

// x [b,T,E] = embed[tokens]; tokens int32 [b,T]. Vocabulary-parallel: this rank's rows [n,E].
Tensor embed_forward(Backend& be, const ParamSet& params, const Tensor& tokens,
                     const TensorGroup& tensor = {});
// d embed += scatter of dx (vocabulary-parallel: dx is this rank's rows [n,E]).
void embed_backward(Backend& be, const ParamSet& grads, const Tensor& tokens, const Tensor& dx,
                    const TensorGroup& tensor = {});

// A microbatch's losses, left on the device until their sum is needed: reading a sum makes the
// host wait for the device, which a step does once at its end rather than after every
// microbatch (and which a CUDA graph capture forbids).
struct DeviceLosses {
  Tensor values;         // per-token losses (llama), or the differences x - t (simple)
  bool squared = false;  // the losses are values^2 (simple)
  double sum(Backend& be) const { return squared ? be.sum_squares(values) : be.sum(values); }
};

struct HeadResult {
  DeviceLosses losses;  // their sum: the microbatch's loss sum
  Tensor dx;  // [b,T,E] (vocabulary-parallel: rows [n,E]) d(loss)/d(last layer output), loss =
              // sum * loss_scale
};

// The loss of one microbatch and its gradient in one pass (the logits are not kept):
//   llama:  loss_i = cross_entropy(lm_head(rms(x, g_final)), targets) per token, targets int32 [b,T]
//   simple: loss_i = (x - targets)^2 per element, targets [b,T,E]
// loss_scale turns the sum into the global mean (1 / tokens or elements of the global batch).
// Gradients of the final norm and lm_head (or tied embedding) accumulate into `grads`.
// Vocabulary-parallel: x is this rank's rows [n,E], the losses every token's (the same on each
// rank of the group).
HeadResult head_loss(Backend& be, const ModelConfig& cfg, const ParamSet& params,
                     const ParamSet& grads, const Tensor& x, const Tensor& targets,
                     double loss_scale, const TensorGroup& tensor = {});

// The same loss sum without the gradient (evaluation): head_loss's forward half.
double head_loss_sum(Backend& be, const ModelConfig& cfg, const ParamSet& params, const Tensor& x,
                     const Tensor& targets, const TensorGroup& tensor = {});

}  // namespace carousel
