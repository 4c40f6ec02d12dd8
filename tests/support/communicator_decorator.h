// communicator_decorator.h — a Communicator that forwards every operation to another one, for
// tests that watch or alter what the executor asks of its communicators (count the bytes,
// change the Events handed back) without reimplementing the rest.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "collectives/communicator.h"

namespace carousel::testing {

// Forwards everything to `inner`, which it owns; a decorator overrides what it watches.
class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  Event barrier() override { return inner_->barrier(); }
  void group_start() override { inner_->group_start(); }
  Event group_end() override { return inner_->group_end(); }
  // The communicators split from this one are the inner one's, undecorated.
  std::unique_ptr<Communicator> split(int color, int key) override {
    return inner_->split(color, key);
  }

 protected:
  // The checked operations: they go through the inner communicator's front again (the same
  // checks, so the same messages).
  Event do_all_gather(const Tensor& send, const Tensor& recv) override {
    return inner_->all_gather(send, recv);
  }
  Event do_reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    return inner_->reduce_scatter(send, recv, op);
  }
  Event do_all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    return inner_->all_reduce(send, recv, op);
  }
  Event do_broadcast(const Tensor& send, const Tensor& recv, int root) override {
    return inner_->broadcast(send, recv, root);
  }
  Event do_send(const Tensor& data, int peer) override { return inner_->send(data, peer); }
  Event do_recv(const Tensor& data, int peer) override { return inner_->recv(data, peer); }

  Communicator& inner() const { return *inner_; }

 private:
  std::unique_ptr<Communicator> inner_;
};

// Replaces `comm` (e.g. one of RankCommunicators) by a Decorator around it, constructed as
// Decorator(std::move(comm), args...); returns the decorator, which `comm` now owns.
template <class Decorator, class... Args>
Decorator* decorate(std::unique_ptr<Communicator>& comm, Args&&... args) {
  auto decorator = std::make_unique<Decorator>(std::move(comm), std::forward<Args>(args)...);
  Decorator* raw = decorator.get();
  comm = std::move(decorator);
  return raw;
}

}  // namespace carousel::testing
