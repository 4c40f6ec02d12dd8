// backend_internal.h — what Backend's front-end files (backend.cpp, backend_vocab_parts.cpp)
// share and nothing else sees: the op timer's scope and issue(), which runs an op's do_* or
// records it while an emulated capture is on (compute/recording/step_graph.h).
#pragma once

#include <tuple>

#include "compute/backend.h"

namespace carousel {

// Times the outermost op while timing is on (an op's own calls to other ops are part of it).
class Backend::OpScope {
 public:
  OpScope(Backend& be, Op op) : be_(be.stopwatch_ ? &be : nullptr) {
    if (be_ && be_->op_depth_++ == 0) be_->stopwatch_->begin(op_name(op));
  }
  ~OpScope() {
    if (be_ && --be_->op_depth_ == 0) be_->stopwatch_->end();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  Backend* be_;
};

namespace backend_detail {
// How a recorded op keeps an argument: tensors borrowed (the graph or the caller owns the
// memory), everything else by value.
template <class T>
T kept(const T& value) {
  return value;
}
inline Tensor kept(const Tensor& t) { return t.borrowed(); }
}  // namespace backend_detail

template <class... P, class... A>
void Backend::issue(void (Backend::*fn)(P...), const A&... args) {
  if (!recording_) {
    (this->*fn)(args...);
    return;
  }
  recording_->record([this, fn, saved = std::make_tuple(backend_detail::kept(args)...)] {
    std::apply([&](const auto&... a) { (this->*fn)(a...); }, saved);
  });
}

}  // namespace carousel
