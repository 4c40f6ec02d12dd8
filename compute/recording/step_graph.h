// step_graph.h — a captured step: work recorded once and launched as often as needed (the host
// side of CUDA graphs).
//
// Backend::begin_capture() starts a region whose work is recorded instead of run;
// Backend::end_capture() returns it as a StepGraph, whose launch() runs all of it again on the same
// buffers with the same scalars. A GPU records through CUDA stream capture (cuda_backend.cu);
// every other backend records each op's call with its arguments (RecordedGraph below), so the CPU
// backend is the oracle of CUDA graphs as of everything else: a run whose steps replay a graph
// equals the eager run bitwise (tests/parallel/test_step_graphs.cpp).
//
// What a captured region may not do, checked on every backend so that CPU tests find it first:
//   * move data between the host and the device (upload, download, sum, sum_squares): the host
//     would read values not yet computed, and a replay would reuse what was captured;
//   * free a buffer allocated before the region, or still hold one allocated inside it when it
//     ends (DeviceAllocator::end_capture names them).
// Inputs that change from step to step go into buffers allocated before the region and are
// rewritten before each launch (the executor's token buffers); outputs likewise (its losses).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "compute/memory.h"

namespace carousel {

class StepGraph {
 public:
  virtual ~StepGraph();
  StepGraph() = default;
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Queues the recorded work on the device (host emulation: runs it).
  virtual void launch() = 0;
  // Blocks the region freed that the graph's replays use: freed with the graph.
  void keep(DeviceAllocator& allocator, std::vector<DeviceAllocator::Block> blocks);

 private:
  DeviceAllocator* allocator_ = nullptr;
  std::vector<DeviceAllocator::Block> kept_;
};

// The host emulation: each op's call, in order, with its tensors borrowed (Tensor::borrowed).
class RecordedGraph final : public StepGraph {
 public:
  void record(std::function<void()> op) { ops_.push_back(std::move(op)); }
  void launch() override {
    for (const auto& op : ops_) op();
  }
  std::size_t ops() const { return ops_.size(); }

 private:
  std::vector<std::function<void()>> ops_;
};

}  // namespace carousel
