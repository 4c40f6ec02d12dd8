// memory.cpp — accounting shared by all device allocators, and the host allocator.
#include "compute/memory.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "compute/error.h"

namespace carousel {

namespace {

std::string out_of_memory_message(const std::string& device, std::size_t requested,
                                  const MemoryStats& stats, bool refused,
                                  const std::string& tensor) {
  const std::string what = tensor.empty() ? "" : fmt::format("; allocating {}", tensor);
  if (refused) {
    return fmt::format("out of memory on {}: allocating {} failed with {} in use{}", device,
                       format_bytes(requested), format_bytes(stats.current_bytes), what);
  }
  return fmt::format("out of memory on {}: requested {} with {} in use (peak {}), limit {}{}",
                     device, format_bytes(requested), format_bytes(stats.current_bytes),
                     format_bytes(stats.peak_bytes), format_bytes(stats.limit_bytes), what);
}

}  // namespace

OutOfMemoryError::OutOfMemoryError(std::string device, std::size_t requested, MemoryStats stats,
                                   bool refused, std::string tensor)
    : Error(out_of_memory_message(device, requested, stats, refused, tensor)),
      device_(std::move(device)),
      requested_(requested),
      stats_(stats),
      refused_(refused),
      tensor_(std::move(tensor)) {}

OutOfMemoryError OutOfMemoryError::allocating(std::string tensor) const {
  return OutOfMemoryError(device_, requested_, stats_, refused_, std::move(tensor));
}

DeviceAllocator::DeviceAllocator(DeviceKind kind, int index, std::size_t limit_bytes)
    : kind_(kind), index_(index) {
  stats_.limit_bytes = limit_bytes;
}

std::string DeviceAllocator::name() const {
  return fmt::format("{}:{}", kind_ == DeviceKind::CPU ? "cpu" : "cuda", index_);
}

void* DeviceAllocator::allocate(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (stats_.limit_bytes && stats_.current_bytes + bytes > stats_.limit_bytes) {
    throw OutOfMemoryError(name(), bytes, stats_, /*refused=*/false);
  }
  void* ptr = raw_allocate(bytes == 0 ? 1 : bytes);
  if (!ptr) throw OutOfMemoryError(name(), bytes, stats_, /*refused=*/true);
  stats_.current_bytes += bytes;
  stats_.allocations += 1;
  if (capturing_) captured_live_.emplace(ptr, bytes);
  if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
  return ptr;
}

void DeviceAllocator::deallocate(void* ptr, std::size_t bytes) {
  if (!ptr) return;
  {
    std::lock_guard lock(mutex_);
    if (capturing_) {
      // Inside a captured region: the recorded ops may still use the block at replay.
      if (captured_live_.erase(ptr) == 0) {
        ++freed_from_before_;
        freed_from_before_bytes_ += bytes;
      }
      if (!frees_into_graph()) {
        kept_.push_back({ptr, bytes});
        return;
      }
    }
  }
  raw_free(ptr);
  std::lock_guard lock(mutex_);
  stats_.current_bytes -= bytes;
}

void DeviceAllocator::begin_capture() {
  std::lock_guard lock(mutex_);
  CAROUSEL_ASSERT(!capturing_, "{}: a capture began inside another", name());
  capturing_ = true;
}

std::vector<DeviceAllocator::Block> DeviceAllocator::end_capture() {
  std::vector<Block> kept;
  std::size_t held = 0, held_bytes = 0, freed = 0, freed_bytes = 0;
  {
    std::lock_guard lock(mutex_);
    CAROUSEL_ASSERT(capturing_, "{}: end_capture without begin_capture", name());
    capturing_ = false;
    kept.swap(kept_);
    held = captured_live_.size();
    for (const auto& [ptr, bytes] : captured_live_) held_bytes += bytes;
    captured_live_.clear();
    freed = std::exchange(freed_from_before_, 0);
    freed_bytes = std::exchange(freed_from_before_bytes_, 0);
  }
  if (held == 0 && freed == 0) return kept;
  release_kept(kept);  // the graph will not be launched
  fail(
      "capturing a step on {}: {} buffer(s) ({}) allocated inside the captured region are still "
      "held after it and {} buffer(s) ({}) allocated before it were freed inside it; a replay "
      "would not match the eager step. This is a bug in carousel: step_graphs=off runs eagerly",
      name(), held, format_bytes(held_bytes), freed, format_bytes(freed_bytes));
}

void DeviceAllocator::abort_capture() {
  std::vector<Block> kept;
  {
    std::lock_guard lock(mutex_);
    capturing_ = false;
    kept.swap(kept_);
    captured_live_.clear();
    freed_from_before_ = freed_from_before_bytes_ = 0;
  }
  release_kept(kept);
}

void DeviceAllocator::release_kept(const std::vector<Block>& blocks) {
  for (const Block& b : blocks) {
    raw_free(b.ptr);
    std::lock_guard lock(mutex_);
    stats_.current_bytes -= b.bytes;
  }
}

void DeviceAllocator::copy_to_host(void* host, const void* src, std::size_t bytes) const {
  std::memcpy(host, src, bytes);
}

void DeviceAllocator::copy_from_host(void* dst, const void* host, std::size_t bytes) const {
  std::memcpy(dst, host, bytes);
}

MemoryStats DeviceAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
}

CpuAllocator::~CpuAllocator() = default;

void* CpuAllocator::raw_allocate(std::size_t bytes) {
  constexpr std::size_t kAlign = 64;
  return std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
}

void CpuAllocator::raw_free(void* ptr) { std::free(ptr); }

std::string format_bytes(std::size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, units[unit]);
}

}  // namespace carousel
