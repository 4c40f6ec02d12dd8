// communicator.cpp — Event and small helpers shared by communicator implementations.
#include "collectives/communicator.h"

namespace carousel {

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "avg"; }

Event::Event() : state_(std::make_shared<State>()) {}

void Event::wait() const {
  std::unique_lock lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Event::ready() const {
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

void Event::complete(std::exception_ptr error) const {
  {
    std::lock_guard lock(state_->mutex);
    state_->done = true;
    state_->error = error;
  }
  state_->cv.notify_all();
}

}  // namespace carousel
