// communicator.h — the one interface for moving tensors between ranks.
//
// Every group of a run's mesh (host/mesh/mesh.h) is a Communicator: the pipeline ring's
// send/recv, the FSDP group's all-gather/reduce-scatter, the data replicas' reductions, the
// tensor and context groups inside a layer (models/parallel/), the expert group's token exchange
// (grouped send/recv, models/parallel/expert_parallel.cpp) and the tied embedding's pair. Every
// operation is asynchronous, like NCCL on a stream: it is enqueued on the rank's communication
// worker and returns an Event the compute side waits on. Operations on one communicator match
// across ranks in issue order (the k-th collective of every rank is the same collective); sends
// and receives between two ranks match in issue order too.
//
// Implementations: LocalCommunicator (ranks are threads of one process, CPU memory; the test
// and development path), with MPI the MPI communicator (ranks are processes under mpirun, CPU
// memory), and with CUDA the NCCL communicator.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "compute/tensor.h"

namespace carousel {

// How reducing collectives combine the ranks' elements (NCCL's ncclSum, ncclProd, ncclMin,
// ncclMax, ncclAvg). On the host communicators: float32/float64 in their own precision,
// float16/bfloat16 through float32 with the running result rounded back after every rank,
// integers wrap around (two's complement), avg of integers is the wrapped sum divided by the
// rank count, truncated toward zero (as NCCL); min and max of floating types skip NaN (fmin /
// fmax, as NCCL's kernels): NaN only where every rank's element is NaN.
enum class ReduceOp { Sum, Prod, Min, Max, Avg };
const char* reduce_op_name(ReduceOp op);  // "sum", "prod", "min", "max", "avg"

// Completion of an asynchronous operation. wait() blocks and rethrows the operation's error.
class Event {
 public:
  Event();
  void wait() const;
  bool ready() const;
  // Makes the work queued next on `work_queue` (a device's queue, DeviceAllocator::work_queue:
  // a CUDA stream) run after this operation. Where the implementation can order a device queue
  // itself (NCCL: the stream waits for a CUDA event recorded after the operation) the host does
  // not block; otherwise (host communicators, or a null queue) this is wait(). An error already
  // reported is rethrown either way; one reported later surfaces at the next wait() on this
  // Event, which the caller owes before it relies on the result on the host (step end).
  void order_before(void* work_queue) const;
  // When the operation completed (steady clock), for traces; the epoch when not yet complete.
  std::chrono::steady_clock::time_point completed_at() const;
  // For implementations: finish the operation, successfully or with an error. Only the first
  // call counts (a watchdog's error is not overwritten by a completion reached afterwards).
  void complete(std::exception_ptr error = nullptr) const;
  // For implementations with a queue of their own: how order_before makes another queue wait.
  void set_device_order(std::function<void(void* work_queue)> enqueue_wait) const;

 private:
  struct State {
    mutable std::mutex mutex;
    mutable std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    std::chrono::steady_clock::time_point completed_at;
    std::function<void(void*)> device_order;  // empty: order_before waits on the host
  };
  std::shared_ptr<State> state_;
};

// The operations that move tensors are non-virtual: each checks its arguments here, once, with
// one wording for every implementation (naming the communicator, the rank and both shapes), and
// then calls the implementation's do_<op>. An implementation overrides the do_ functions and
// may rely on their arguments having passed the checks.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // e.g. "world", "world/split(1)"

  // recv [size * n] = concatenation over ranks of send [n]. In place when send is the rank's
  // slice of recv (send == recv.view(rank * n, ...)).
  Event all_gather(const Tensor& send, const Tensor& recv);
  // recv [n] = reduction over ranks of send[rank * n, (rank + 1) * n); send [size * n]. The send
  // count must be divisible by the number of ranks (an error otherwise: pad the tensor).
  Event reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op);
  // recv = reduction over ranks of send (same count); may be in place (send == recv).
  Event all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op);
  // recv = root's send on every rank (send is read on the root only); may be in place.
  Event broadcast(const Tensor& send, const Tensor& recv, int root);
  virtual Event barrier() = 0;

  // Point-to-point. Between group_start() and group_end() sends and receives are posted together
  // and complete together (ncclGroupStart/End): the Event of group_end() covers them all, and
  // the Events returned by send/recv inside a group complete with it. Outside a group each
  // send/recv is its own group.
  virtual void group_start() = 0;
  virtual Event group_end() = 0;
  Event send(const Tensor& data, int peer);
  Event recv(const Tensor& data, int peer);

  // Collective over this communicator: ranks passing the same color form a new communicator,
  // ordered by (key, rank). A negative color returns nullptr (the rank joins none).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

 protected:
  // The implementation's part of each checked operation above.
  virtual Event do_all_gather(const Tensor& send, const Tensor& recv) = 0;
  virtual Event do_reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) = 0;
  virtual Event do_all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op) = 0;
  virtual Event do_broadcast(const Tensor& send, const Tensor& recv, int root) = 0;
  virtual Event do_send(const Tensor& data, int peer) = 0;
  virtual Event do_recv(const Tensor& data, int peer) = 0;
};

}  // namespace carousel
