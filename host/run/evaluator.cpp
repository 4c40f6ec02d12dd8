// evaluator.cpp — the held-out loss on its cadence.
#include "host/run/evaluator.h"

#include <vector>

namespace carousel {

std::optional<double> Evaluator::after_step(std::int64_t step, RankExecutor& executor,
                                            Communicator& world, Backend& be,
                                            FlightRecorder& recorder) const {
  if (!data_ || ((step + 1) % cfg_.eval_interval != 0 && step + 1 != cfg_.steps)) {
    return std::nullopt;
  }
  recorder.note(step, "evaluation");
  Tensor sum = be.from_host(std::vector<double>{executor.evaluate(*data_, batches_)}, {1});
  world.all_reduce(sum, sum, ReduceOp::Sum).wait();
  const double loss = be.to_host<double>(sum)[0] / double(batches_);
  recorder.complete();
  return loss;
}

}  // namespace carousel
