// nccl_communicator.cpp — NCCL collectives and grouped send/recv on a per-communicator stream,
// with host-side Events and a watchdog that turns hangs and async errors into errors.
#include "collectives/nccl_communicator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/common.h"
#include "collectives/wait_timer.h"
#include "compute/cpu_backend.h"
#include "compute/dispatch.h"
#include "compute/error.h"

namespace carousel {

namespace {

ncclDataType_t nccl_type(DType t) {
  return per_dtype(t, ncclFloat32, ncclFloat64, ncclBfloat16, ncclInt32, ncclFloat16, ncclInt8,
                   ncclUint8, ncclInt64);
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Prod:
      return ncclProd;
    case ReduceOp::Min:
      return ncclMin;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Avg:
      return ncclAvg;
  }
  return ncclSum;
}

// CUDA events whose last owner let go inside a stream's host function (no CUDA calls allowed
// there), per GPU, until a thread with that GPU current destroys them.
std::mutex retired_mutex;
std::map<int, std::vector<cudaEvent_t>> retired_events;

void retire_event(int gpu, cudaEvent_t event) {
  std::lock_guard lock(retired_mutex);
  retired_events[gpu].push_back(event);
}

void destroy_retired_events(int gpu) {  // the caller has made `gpu` current
  std::vector<cudaEvent_t> events;
  {
    std::lock_guard lock(retired_mutex);
    events.swap(retired_events[gpu]);
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);  // released once complete, if still pending
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int gpu, std::string name, double timeout)
      : comm_(comm), gpu_(gpu), name_(std::move(name)), timeout_(timeout) {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&producer_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaMalloc(&barrier_buffer_, sizeof(float)));
    NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    NCCL_CHECK(ncclCommCount(comm_, &size_));
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclCommunicator() override {
    stop_ = true;
    watchdog_.join();
    cudaSetDevice(gpu_);
    finish_or_abort();
    cudaStreamSynchronize(stream_);
    destroy_retired_events(gpu_);
    cudaFree(barrier_buffer_);
    cudaEventDestroy(producer_done_);
    cudaStreamDestroy(stream_);
    if (!aborted_) ncclCommDestroy(comm_);  // ncclCommAbort already freed it
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  Event do_all_gather(const Tensor& send, const Tensor& recv) override {
    return enqueue("all_gather", {&send, &recv}, [&] {
      NCCL_CHECK(ncclAllGather(send.raw(), recv.raw(), send.numel(), nccl_type(send.dtype()), comm_,
                               stream_));
    });
  }
  Event do_reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    return enqueue("reduce_scatter", {&send, &recv}, [&] {
      NCCL_CHECK(ncclReduceScatter(send.raw(), recv.raw(), recv.numel(), nccl_type(send.dtype()),
                                   nccl_op(op), comm_, stream_));
    });
  }
  Event do_all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    return enqueue("all_reduce", {&send, &recv}, [&] {
      NCCL_CHECK(ncclAllReduce(send.raw(), recv.raw(), send.numel(), nccl_type(send.dtype()),
                               nccl_op(op), comm_, stream_));
    });
  }
  Event do_broadcast(const Tensor& send, const Tensor& recv, int root) override {
    return enqueue("broadcast", {&send, &recv}, [&] {
      NCCL_CHECK(ncclBroadcast(send.raw(), recv.raw(), send.numel(), nccl_type(send.dtype()), root,
                               comm_, stream_));
    });
  }
  Event barrier() override {
    return enqueue("barrier", {}, [&] {
      NCCL_CHECK(
          ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclFloat32, ncclSum, comm_, stream_));
    });
  }

  void group_start() override {
    check_not_aborted("group_start");
    CAROUSEL_ASSERT(!in_group_, "group_start on communicator '{}' rank {}: already in a group",
                    name_, rank_);
    in_group_ = true;
    group_events_.clear();
    CUDA_CHECK(cudaSetDevice(gpu_));
    NCCL_CHECK(ncclGroupStart());
  }
  Event group_end() override {
    CAROUSEL_ASSERT(in_group_, "group_end on communicator '{}' rank {} without group_start", name_,
                    rank_);
    in_group_ = false;
    NCCL_CHECK(ncclGroupEnd());
    for (const Event& e : group_events_) completion("send/recv", e);  // complete with the group
    group_events_.clear();
    return completion("send/recv group");
  }
  Event do_send(const Tensor& data, int peer) override { return p2p(true, data, peer); }
  Event do_recv(const Tensor& data, int peer) override { return p2p(false, data, peer); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    check_not_aborted("split");
    CUDA_CHECK(cudaSetDevice(gpu_));
    ncclComm_t child = nullptr;
    NCCL_CHECK(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr));
    if (!child) return nullptr;
    return std::make_unique<NcclCommunicator>(child, gpu_,
                                              fmt::format("{}/split({})", name_, color), timeout_);
  }

 private:
  struct Pending {
    Event event;
    std::string what;
    std::chrono::steady_clock::time_point issued;
    std::shared_ptr<std::atomic<bool>> done;
  };

  Event p2p(bool is_send, const Tensor& data, int peer) {
    check_not_aborted(is_send ? "send" : "recv");
    const bool single = !in_group_;
    if (single) group_start();
    after_producers({&data});
    if (is_send) {
      NCCL_CHECK(ncclSend(data.raw(), data.numel(), nccl_type(data.dtype()), peer, comm_, stream_));
    } else {
      NCCL_CHECK(ncclRecv(data.raw(), data.numel(), nccl_type(data.dtype()), peer, comm_, stream_));
    }
    if (single) return group_end();
    group_events_.emplace_back();
    return group_events_.back();
  }

  template <class Fn>
  Event enqueue(const char* op, std::initializer_list<const Tensor*> tensors, Fn&& issue) {
    CAROUSEL_ASSERT(!in_group_, "{} on communicator '{}' inside a send/recv group", op, name_);
    check_not_aborted(op);
    CUDA_CHECK(cudaSetDevice(gpu_));
    after_producers(tensors);
    issue();
    return completion(op);
  }

  // This communicator's stream waits for everything queued so far on the streams of the
  // tensors' devices (the rank's compute stream): the kernels that wrote what is sent or reduced,
  // and those still reading a buffer about to be overwritten (a weight slot being refilled).
  // Without it NCCL would read activations and gradients the compute stream has not finished.
  // The host never blocks here; the Event returned to the executor covers the other direction.
  void after_producers(std::initializer_list<const Tensor*> tensors) {
    std::vector<cudaStream_t> waited;
    for (const Tensor* t : tensors) {
      auto* producer = static_cast<cudaStream_t>(t->device().work_queue());
      CAROUSEL_ASSERT(producer != nullptr,
                      "NCCL communicator '{}' rank {}: a tensor on {} is not in GPU memory", name_,
                      rank_, t->device().name());
      cudaPointerAttributes where{};
      CUDA_CHECK(cudaPointerGetAttributes(&where, t->raw()));
      CAROUSEL_ASSERT(where.device == gpu_,
                      "NCCL communicator '{}' rank {} runs on GPU {} but is given a tensor in GPU "
                      "{}'s memory ({})",
                      name_, rank_, gpu_, where.device, t->device().name());
      if (producer == stream_ ||
          std::find(waited.begin(), waited.end(), producer) != waited.end()) {
        continue;
      }
      CUDA_CHECK(cudaEventRecord(producer_done_, producer));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, producer_done_, 0));
      waited.push_back(producer);
    }
  }

  // An Event completed by the stream itself when it reaches this point, carrying a CUDA event
  // recorded there too: a consumer's stream waits for that (Event::order_before) instead of
  // its host, so a RECV's consumer or an AG_WAIT never blocks the host inside a step.
  Event completion(const std::string& op, Event event = Event()) {
    destroy_retired_events(gpu_);
    cudaEvent_t reached = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&reached, cudaEventDisableTiming));
    // The last Event copy may die in the host function below, where CUDA calls are not allowed:
    // the handle is retired there and destroyed by the next completion on this GPU.
    const std::shared_ptr<CUevent_st> owned(reached,
                                            [gpu = gpu_](cudaEvent_t e) { retire_event(gpu, e); });
    CUDA_CHECK(cudaEventRecord(reached, stream_));
    event.set_device_order([owned](void* queue) {
      CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(queue), owned.get(), 0));
    });
    Pending p{event, fmt::format("{} #{}", op, seq_++), std::chrono::steady_clock::now(),
              std::make_shared<std::atomic<bool>>(false)};
    auto* payload = new Pending(p);
    CUDA_CHECK(cudaLaunchHostFunc(
        stream_,
        [](void* arg) {
          auto* done = static_cast<Pending*>(arg);
          done->done->store(true);
          done->event.complete();
          delete done;
        },
        payload));
    std::lock_guard lock(mutex_);
    pending_.push_back(p);
    return p.event;
  }

  // After an abort comm_ is gone: an operation issued then is an error naming the abort's reason
  // (not a call into freed memory, nor an Event no watchdog would ever complete).
  void check_not_aborted(const char* op) {
    std::lock_guard lock(mutex_);
    CAROUSEL_CHECK(!aborted_, "rank {}: {} on NCCL communicator '{}', which was aborted: {}", rank_,
                   op, name_, abort_reason_);
  }

  // Polls async errors and timeouts; aborts the communicator and fails what is pending.
  void watch() {
    // This thread's CUDA calls (destroying events of completed operations) must not create a
    // context on GPU 0 (every rank but GPU 0's would pay ~0.5 GB for it).
    cudaSetDevice(gpu_);
    WaitTimer wakes;  // a pause of the whole job is no operation's age (wait_timer.h)
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const auto paused = wakes.pause_before();
      std::lock_guard lock(mutex_);
      for (Pending& p : pending_) p.issued += paused;
      pending_.remove_if([](const Pending& p) { return p.done->load(); });
      if (pending_.empty() || aborted_) continue;
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      const auto age =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - pending_.front().issued)
              .count();
      if (async == ncclSuccess && age < timeout_) continue;
      abort_pending(async != ncclSuccess ? fmt::format("NCCL reported {} ({})", int(async),
                                                       ncclGetErrorString(async))
                                         : fmt::format("timed out after {} s", timeout_));
    }
  }

  // Aborts the communicator and fails every pending operation with `why`. mutex_ is held.
  void abort_pending(const std::string& why) {
    ncclCommAbort(comm_);
    aborted_ = true;
    abort_reason_ = why;
    for (auto& p : pending_) {
      p.event.complete(std::make_exception_ptr(Error(
          fmt::format("rank {}: {} on NCCL communicator '{}' failed: {}; the communicator was "
                      "aborted",
                      rank_, p.what, name_, why))));
    }
    pending_.clear();
  }

  // The destructor's wait for the stream, with the watchdog's rule (the watchdog is joined): a
  // rank unwinding from a failure may leave an operation whose peer never comes, and waiting for
  // it would hang the process, so an asynchronous NCCL error, or the collective timeout counted
  // from the oldest pending operation, aborts the communicator instead. A normal end finds the
  // stream done (every operation was waited for) and returns at once.
  void finish_or_abort() {
    std::lock_guard lock(mutex_);
    if (aborted_) return;
    pending_.remove_if([](const Pending& p) { return p.done->load(); });
    const auto since =
        pending_.empty() ? std::chrono::steady_clock::now() : pending_.front().issued;
    cudaError_t query;
    while ((query = cudaStreamQuery(stream_)) == cudaErrorNotReady) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      const double age =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
      if (async != ncclSuccess || age >= timeout_) {
        abort_pending(fmt::format(
            "still pending when the communicator was destroyed ({})",
            async != ncclSuccess ? ncclGetErrorString(async) : "collective timeout reached"));
        cudaGetLastError();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (query != cudaSuccess) {  // the stream failed (a sticky error): do not wait on NCCL
      abort_pending(fmt::format("the stream failed before the communicator was destroyed: {}",
                                cudaGetErrorString(query)));
    }
    cudaGetLastError();  // the query's error is reported above, not to the next CUDA call
  }

  ncclComm_t comm_;
  int gpu_;
  std::string name_;
  double timeout_;
  int rank_ = 0, size_ = 1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t producer_done_ = nullptr;  // recorded on a producer stream, waited on by stream_
  void* barrier_buffer_ = nullptr;
  bool in_group_ = false;
  std::vector<Event> group_events_;
  std::int64_t seq_ = 0;
  std::mutex mutex_;
  std::list<Pending> pending_;
  bool aborted_ = false;  // guarded by mutex_, like abort_reason_
  std::string abort_reason_;
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

}  // namespace

struct NcclWorld::Impl {
  int size;
  double timeout;
  ncclUniqueId id;
};

NcclWorld::NcclWorld(int size, double timeout_seconds) : impl_(std::make_unique<Impl>()) {
  CAROUSEL_CHECK(size >= 1, "an NCCL world needs at least one rank, got {}", size);
  int gpus = 0;
  const cudaError_t err = cudaGetDeviceCount(&gpus);
  CAROUSEL_CHECK(err == cudaSuccess && gpus > 0, "NCCL communicator: no usable CUDA device ({})",
                 err == cudaSuccess ? "none visible" : cudaGetErrorString(err));
  CAROUSEL_CHECK(size <= gpus,
                 "NCCL communicator: {} ranks need {} GPUs but {} are visible (NCCL runs one "
                 "rank per GPU; use the local communicator to simulate more)",
                 size, size, gpus);
  impl_->size = size;
  impl_->timeout = timeout_seconds;
  NCCL_CHECK(ncclGetUniqueId(&impl_->id));
}

NcclWorld::~NcclWorld() = default;

int NcclWorld::size() const { return impl_->size; }

std::unique_ptr<Communicator> NcclWorld::communicator(int rank) const {
  CAROUSEL_CHECK(rank >= 0 && rank < impl_->size, "rank {} is outside the NCCL world of {}", rank,
                 impl_->size);
  CUDA_CHECK(cudaSetDevice(rank));
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, impl_->size, impl_->id, rank));
  return std::make_unique<NcclCommunicator>(comm, rank, "world", impl_->timeout);
}

int process_gpu(int rank) {
  int gpus = 0;
  const cudaError_t err = cudaGetDeviceCount(&gpus);
  CAROUSEL_CHECK(err == cudaSuccess && gpus > 0,
                 "NCCL communicator on rank {}: no usable CUDA "
                 "device ({})",
                 rank, err == cudaSuccess ? "none visible" : cudaGetErrorString(err));
  const char* local = std::getenv("LOCAL_RANK");
  const int gpu = local ? std::atoi(local) : rank % gpus;
  CAROUSEL_CHECK(gpu >= 0 && gpu < gpus, "LOCAL_RANK={} is not a visible GPU (0..{})", gpu,
                 gpus - 1);
  return gpu;
}

namespace {

// One process's NCCL rank on its GPU (process_gpu): gets rank 0's NCCL id through `share`
// (which returns rank 0's bytes on every rank) and joins.
std::unique_ptr<Communicator> join_nccl(
    int rank, int size, double timeout,
    const std::function<std::vector<char>(std::vector<char>)>& share) {
  const int gpu = process_gpu(rank);
  ncclUniqueId id{};
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  const auto* raw = reinterpret_cast<const char*>(&id);
  const std::vector<char> bytes = share(std::vector<char>(raw, raw + sizeof(id)));
  CAROUSEL_ASSERT(bytes.size() == sizeof(id),
                  "rank {} received {} bytes for the NCCL id, "
                  "expected {}",
                  rank, bytes.size(), sizeof(id));
  std::memcpy(&id, bytes.data(), sizeof(id));
  CUDA_CHECK(cudaSetDevice(gpu));
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  return std::make_unique<NcclCommunicator>(comm, gpu, "world", timeout);
}

}  // namespace

std::unique_ptr<Communicator> NcclWorld::connect(const RendezvousConfig& cfg) {
  return join_nccl(cfg.rank, cfg.world_size, cfg.timeout_seconds,
                   [&](std::vector<char> id) { return rendezvous_broadcast(cfg, std::move(id)); });
}

std::unique_ptr<Communicator> NcclWorld::connect(Communicator& processes, double timeout_seconds) {
  return join_nccl(processes.rank(), processes.size(), timeout_seconds, [&](std::vector<char> id) {
    static_assert(sizeof(ncclUniqueId) % 4 == 0, "the NCCL id travels as int32 words");
    CpuBackend host(processes.rank());
    Tensor words = host.zeros({std::int64_t(sizeof(ncclUniqueId) / 4)}, DType::I32);
    host.upload(id.data(), words);
    processes.broadcast(words, words, 0).wait();
    host.download(words, id.data());
    return id;
  });
}

}  // namespace carousel
