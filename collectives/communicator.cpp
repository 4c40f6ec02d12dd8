// communicator.cpp — Event, the checked front of every operation, and the worker thread shared
// by the host communicator implementations (common.h).
#include "collectives/communicator.h"

#include <fmt/format.h>

#include "collectives/common.h"
#include "compute/error.h"

namespace carousel {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Prod:
      return "prod";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Avg:
      return "avg";
  }
  return "?";
}

Event::Event() : state_(std::make_shared<State>()) {}

void Event::wait() const {
  std::unique_lock lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

void Event::order_before(void* work_queue) const {
  std::function<void(void*)> device_order;
  {
    std::lock_guard lock(state_->mutex);
    if (state_->error) std::rethrow_exception(state_->error);
    if (state_->done) return;  // everything the operation wrote is there already
    device_order = state_->device_order;
  }
  if (work_queue != nullptr && device_order) {
    device_order(work_queue);
  } else {
    wait();
  }
}

void Event::set_device_order(std::function<void(void* work_queue)> enqueue_wait) const {
  std::lock_guard lock(state_->mutex);
  state_->device_order = std::move(enqueue_wait);
}

bool Event::ready() const {
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

std::chrono::steady_clock::time_point Event::completed_at() const {
  std::lock_guard lock(state_->mutex);
  return state_->completed_at;
}

void Event::complete(std::exception_ptr error) const {
  {
    std::lock_guard lock(state_->mutex);
    // The first completion is the outcome: NCCL's watchdog fails an operation and aborts the
    // communicator, after which the stream still reaches the operation's own (successful)
    // completion; that must not erase the error a later wait() (step end) has to report.
    if (state_->done) return;
    state_->done = true;
    state_->error = error;
    state_->completed_at = std::chrono::steady_clock::now();
  }
  state_->cv.notify_all();
}

namespace {

void check_pair(const Communicator& c, const char* op, const Tensor& send, const Tensor& recv,
                std::int64_t expected, const char* rule) {
  CAROUSEL_CHECK(send.defined() && recv.defined(), "{} on communicator '{}': undefined tensor", op,
                 c.name());
  CAROUSEL_CHECK(send.dtype() == recv.dtype(),
                 "{} on communicator '{}' rank {}: send is {} but recv is {}", op, c.name(),
                 c.rank(), send.describe(), recv.describe());
  CAROUSEL_CHECK(recv.numel() == expected,
                 "{} on communicator '{}' rank {}: recv has {} elements but must have {} ({} "
                 "with {} ranks; send {})",
                 op, c.name(), c.rank(), recv.numel(), expected, rule, c.size(), send.describe());
}

void check_peer(const Communicator& c, const char* op, const Tensor& data, int peer) {
  CAROUSEL_CHECK(peer >= 0 && peer < c.size() && peer != c.rank(),
                 "{} on communicator '{}' rank {}: peer {} is not another rank in [0, {})", op,
                 c.name(), c.rank(), peer, c.size());
  CAROUSEL_CHECK(data.defined(), "{} on communicator '{}': undefined tensor", op, c.name());
}

}  // namespace

Event Communicator::all_gather(const Tensor& send, const Tensor& recv) {
  check_pair(*this, "all_gather", send, recv, send.numel() * size(), "size x send count");
  return do_all_gather(send, recv);
}

Event Communicator::reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) {
  CAROUSEL_CHECK(send.numel() % size() == 0,
                 "reduce_scatter on communicator '{}': send count {} is not divisible by {} "
                 "ranks; pad the tensor to a multiple of the rank count",
                 name(), send.numel(), size());
  check_pair(*this, "reduce_scatter", send, recv, send.numel() / size(), "send count / size");
  return do_reduce_scatter(send, recv, op);
}

Event Communicator::all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op) {
  check_pair(*this, "all_reduce", send, recv, send.numel(), "send count");
  return do_all_reduce(send, recv, op);
}

Event Communicator::broadcast(const Tensor& send, const Tensor& recv, int root) {
  CAROUSEL_CHECK(root >= 0 && root < size(),
                 "broadcast on communicator '{}': root {} is not a rank in [0, {})", name(), root,
                 size());
  check_pair(*this, "broadcast", send, recv, send.numel(), "send count");
  return do_broadcast(send, recv, root);
}

Event Communicator::send(const Tensor& data, int peer) {
  check_peer(*this, "send", data, peer);
  return do_send(data, peer);
}

Event Communicator::recv(const Tensor& data, int peer) {
  check_peer(*this, "recv", data, peer);
  return do_recv(data, peer);
}

namespace comm {

std::string Signature::str() const {
  std::string s = fmt::format("{}(count={}, {}", op, count, dtype_name(dtype));
  if (root >= 0) s += fmt::format(", root={}", root);
  if (!reduce.empty()) s += ", " + reduce;
  return s + ")";
}

Worker::Worker() : thread_([this] { loop(); }) {}

Worker::~Worker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Worker::enqueue(std::function<void()> body, std::vector<Event> done) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push({std::move(body), std::move(done)});
  }
  cv_.notify_all();
}

void Worker::loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop();
    }
    std::exception_ptr error;
    try {
      task.body();
    } catch (...) {
      error = std::current_exception();
    }
    task.body = nullptr;
    for (const Event& e : task.done) e.complete(error);
  }
}

}  // namespace comm
}  // namespace carousel
