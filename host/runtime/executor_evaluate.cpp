// executor_evaluate.cpp — a rank's share of the held-out loss: the forward half of its step's
// program, on evaluation batches, with no gradient, reduction or update.
#include "host/runtime/rank_executor.h"

namespace carousel {

namespace sch = schedule;

// The forward half of the step's program: F and OUTSIDE (the loss only), their sends and
// receives, and the weight residency (kept whole: gathers meant for a backward are harmless, and
// the slots stay consistent). Every wait of this program is a wait of the full one, which the
// replay proved deadlock-free.
double RankExecutor::evaluate(const DataLoader& data, std::int64_t batches) {
  source_ = &data;
  evaluating_ = true;
  capture_.before_eager_work();
  device_queue_ = be_.allocator().work_queue();
  params_.begin_step();  // the compute-dtype copies of the updated weights, once
  double sum = 0;
  for (std::int64_t index = 0; index < batches; ++index) {
    step_ = index;
    loss_sum_ = 0;
    upload_batches();
    for (std::size_t i = 0; i < actions_.size();) {
      const sch::Action& a = actions_[i];
      if (a.is_p2p()) {
        post_p2p_group(i, /*forward_only=*/true);
        continue;
      }
      if (a.kind == sch::Kind::F || a.kind == sch::Kind::OUTSIDE) {
        await_input(a, i);
        compute(a, parallel_);  // the head computes the loss only while evaluating
      }
      if (a.kind == sch::Kind::AG_ISSUE || a.kind == sch::Kind::AG_WAIT ||
          a.kind == sch::Kind::RELEASE) {
        weight_residency(a, StepTrace::Clock::now(), nullptr);
      }
      ++i;  // backward, gradient reductions and the optimizer are not part of evaluation
    }
    drain_p2p();
    params_.finish_gathers();
    saved_.clear();  // what the forwards kept for backwards that will not run
    in_b_.clear();
    sum += loss_sum_ / double(cfg_.global_batch() * cfg_.model.max_target_length);
  }
  source_ = &data_;
  evaluating_ = false;
  return sum;
}

}  // namespace carousel
