// step_graph.cpp — what every captured step shares: the region's begin and end on the Backend,
// its memory, and the host emulation of capture (step_graph.h).
#include "compute/recording/step_graph.h"

#include <exception>

#include "compute/backend.h"

namespace carousel {

StepGraph::~StepGraph() {
  if (allocator_) allocator_->release_kept(kept_);
}

void StepGraph::keep(DeviceAllocator& allocator, std::vector<DeviceAllocator::Block> blocks) {
  CAROUSEL_ASSERT(!allocator_ || allocator_ == &allocator, "a step graph spans two devices");
  allocator_ = &allocator;
  kept_.insert(kept_.end(), blocks.begin(), blocks.end());
}

void Backend::begin_capture() {
  CAROUSEL_ASSERT(!capturing_, "{}: begin_capture inside a capture", name());
  const std::string blocker = graph_blocker();
  CAROUSEL_CHECK(blocker.empty(), "{} cannot capture a step: {}", name(), blocker);
  do_begin_capture();  // first: a device that cannot start one leaves nothing half-begun
  allocator_->begin_capture();
  capturing_ = true;
}

void Backend::abort_capture() noexcept {
  if (capturing_) {
    capturing_ = false;
    recording_.reset();
    allocator_->abort_capture();
  }
  do_abort_capture();  // the device: a capture still open ended, its error state cleared
}

std::unique_ptr<StepGraph> Backend::end_capture() {
  CAROUSEL_ASSERT(capturing_, "{}: end_capture without begin_capture", name());
  capturing_ = false;
  std::unique_ptr<StepGraph> graph;
  std::exception_ptr failed;
  try {
    graph = do_end_capture();  // ends the device's capture whatever the region did
  } catch (...) {
    failed = std::current_exception();
  }
  std::vector<DeviceAllocator::Block> kept = allocator_->end_capture();  // throws on misuse
  if (failed) {
    allocator_->release_kept(kept);
    std::rethrow_exception(failed);
  }
  graph->keep(*allocator_, std::move(kept));
  return graph;
}

void Backend::check_not_capturing(Op op) const {
  CAROUSEL_CHECK(!capturing_,
                 "{} inside a captured step on {}: the host cannot read or write device data "
                 "while work is recorded rather than run. This is a bug in carousel: "
                 "step_graphs=off runs eagerly",
                 op_name(op), allocator_->name());
}

void Backend::do_begin_capture() { recording_ = std::make_unique<RecordedGraph>(); }

std::unique_ptr<StepGraph> Backend::do_end_capture() { return std::move(recording_); }

}  // namespace carousel
