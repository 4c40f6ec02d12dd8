// memory.h — per-device allocators with exact current/peak byte accounting.
//
// Every device buffer (weights, activations, scratch) is obtained from the DeviceAllocator of
// the device it lives on, so peak memory per device is exact and reportable on CPU as on GPU.
// An optional limit makes a simulated CPU device behave like a GPU of a given size: exceeding
// it raises a clear out-of-memory error instead of silently using host RAM.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "compute/error.h"

namespace carousel {

enum class DeviceKind { CPU, CUDA };

struct MemoryStats {
  std::size_t current_bytes = 0;  // bytes live now
  std::size_t peak_bytes = 0;     // high-water mark since creation or reset_peak()
  std::size_t allocations = 0;    // number of allocate() calls
  std::size_t limit_bytes = 0;    // 0 = unlimited
};

// An allocation the device cannot hold: past the limit of a simulated device, or refused by the
// device. A type of its own, carrying the figures, so that Tensor::empty can say which tensor was
// being allocated and a training run which rank, with the planner's estimate
// (host/run/trainer.cpp): "out of memory" alone does not say what to change.
class OutOfMemoryError : public Error {
 public:
  // `refused`: the device itself failed (else the limit would have been passed); `stats`: the
  // device's figures at the request; `tensor`: what was being allocated, "" when not known.
  OutOfMemoryError(std::string device, std::size_t requested, MemoryStats stats, bool refused,
                   std::string tensor = {});
  // The same failure, naming the tensor being allocated ("float32[2048,5504]").
  OutOfMemoryError allocating(std::string tensor) const;

  const std::string& device() const { return device_; }
  std::size_t requested() const { return requested_; }
  const MemoryStats& stats() const { return stats_; }
  const std::string& tensor() const { return tensor_; }

 private:
  std::string device_;
  std::size_t requested_;
  MemoryStats stats_;
  bool refused_;
  std::string tensor_;
};

class DeviceAllocator {
 public:
  DeviceAllocator(DeviceKind kind, int index, std::size_t limit_bytes);
  virtual ~DeviceAllocator() = default;
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // Returns memory for `bytes` bytes (64-byte aligned); throws OutOfMemoryError when the limit
  // would be exceeded or the underlying allocation fails.
  void* allocate(std::size_t bytes);
  void deallocate(void* ptr, std::size_t bytes);

  MemoryStats stats() const;
  void reset_peak();
  DeviceKind kind() const { return kind_; }
  int index() const { return index_; }
  std::string name() const;  // "cpu:0", "cuda:1"

  // Whether the CPU may read and write this memory directly (host memory: yes; a GPU's: no).
  virtual bool host_accessible() const { return true; }
  // Copies between this device's memory and the host, ordered after the work already queued
  // on the device and complete on return (host memory: memcpy). Used by code that moves any
  // device's bytes through the host, like the local communicator.
  virtual void copy_to_host(void* host, const void* src, std::size_t bytes) const;
  virtual void copy_from_host(void* dst, const void* host, std::size_t bytes) const;
  // The queue this device's work runs on in order (a CUDA stream), so that a communicator with a
  // queue of its own can order its operations after the work that wrote (or still reads) their
  // tensors; nullptr for host memory, whose work is done when the call that queued it returns.
  virtual void* work_queue() const { return nullptr; }

  // ---- captured regions (Backend::begin_capture, compute/recording/step_graph.h) ------------
  // While capturing, allocations belong to the region. A block allocated and freed inside it is
  // the graph's: kept for the recorded ops to replay on (host memory) or freed into the graph's
  // own memory (frees_into_graph: a CUDA graph's free node). end_capture() fails, naming the
  // count and bytes, when the region freed a block allocated before it (a replay would free it
  // again) or leaves a block it allocated still held (the host would keep a buffer the graph
  // reuses); otherwise it returns the kept blocks, which release_kept() frees with the graph.
  struct Block {
    void* ptr;
    std::size_t bytes;
  };
  // The bookkeeping assumes the capturing thread is the only one allocating on or freeing into
  // this allocator while it captures (true of a rank whose captured step does not communicate:
  // communicator workers have dropped their tensors before the step's collectives complete).
  void begin_capture();
  std::vector<Block> end_capture();
  // After a failed capture: ends it without checks, freeing what it kept.
  void abort_capture();
  void release_kept(const std::vector<Block>& blocks);
  // Returns memory cached for reuse to the device, so a captured graph and eager steps do not
  // each hold a step's working set: what the stream-ordered pool keeps for eager work (`pool`,
  // before a graph runs) or what graphs keep between launches (`graphs`, before eager work);
  // waits for the queued work first. Host memory: nothing cached.
  virtual void release_cached(bool /*pool*/, bool /*graphs*/) {}

 protected:
  virtual bool frees_into_graph() const { return false; }
  virtual void* raw_allocate(std::size_t bytes) = 0;  // nullptr: out of memory (or throws)
  virtual void raw_free(void* ptr) = 0;

 private:
  DeviceKind kind_;
  int index_;
  mutable std::mutex mutex_;
  MemoryStats stats_;
  bool capturing_ = false;
  std::map<void*, std::size_t> captured_live_;  // allocated inside the region, not yet freed
  std::vector<Block> kept_;                     // freed inside the region, kept for the graph
  std::size_t freed_from_before_ = 0, freed_from_before_bytes_ = 0;  // blocks freed inside it
};

// Host memory, 64-byte aligned.
class CpuAllocator final : public DeviceAllocator {
 public:
  explicit CpuAllocator(int index = 0, std::size_t limit_bytes = 0)
      : DeviceAllocator(DeviceKind::CPU, index, limit_bytes) {}
  ~CpuAllocator() override;

 protected:
  void* raw_allocate(std::size_t bytes) override;
  void raw_free(void* ptr) override;
};

// Human-readable byte count: "1.50 MiB".
std::string format_bytes(std::size_t bytes);

}  // namespace carousel
