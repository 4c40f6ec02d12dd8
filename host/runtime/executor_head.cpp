// executor_head.cpp — the end of a microbatch's forward on a rank: the fused head + loss, and the
// layers outside the pipeline (pipeline_parallel_layers) that run before it on every stage rank.
#include "host/runtime/rank_executor.h"

namespace carousel {

Tensor RankExecutor::head(int microbatch, const Tensor& y) {
  const bool counts_loss = parallel_.tensor.rank() == 0;  // every tensor rank has the same losses
  if (evaluating_) {                                      // the loss alone: no backward will run
    const double sum = head_loss_sum(be_, cfg_.model, params_.extras_weights(), y,
                                     batch(microbatch).targets, parallel_.tensor);
    if (counts_loss) loss_sum_ += sum;
    return {};
  }
  HeadResult head = head_loss(be_, cfg_.model, params_.extras_weights(), params_.extras_grads(), y,
                              batch(microbatch).targets, loss_scale_, parallel_.tensor);
  if (counts_loss) {  // summed at the step's end: no wait here
    Tensor& kept = loss_buffers_[microbatch];
    if (!kept.defined()) kept = be_.empty(head.losses.values.shape(), head.losses.values.dtype());
    be_.copy(head.losses.values, kept);
    losses_.push_back({kept, head.losses.squared});
  }
  return head.dx;
}

void RankExecutor::outside(int microbatch, const LayerParallel& parallel) {
  const int stage = layout_.stages();  // the outside stage (schedule/ir.h)
  const std::vector<LayerWeights> weights = layers(params_.extras_weights(), router_bias_);
  // The pipeline's output [b_local, T / C, E] (tensor parallelism: this rank's rows of it).
  const Tensor x = take(in_f_, {stage, microbatch});
  StageSaved saved;
  const Tensor y = stage_forward(be_, cfg_.model, weights, rope_of(microbatch), x,
                                 RematPolicy::None, saved, parallel);
  if (!evaluating_ && parallel.tensor.rank() == 0) router_.merge(saved.router);
  const Tensor dy = head(microbatch, y);
  if (evaluating_) return;
  const Tensor dx = stage_backward(be_, cfg_.model, weights, layers(params_.extras_grads(), {}),
                                   rope_of(microbatch), saved, dy, loss_scale_, nullptr, parallel);
  pass_back(stage, microbatch, dx);
}

}  // namespace carousel
