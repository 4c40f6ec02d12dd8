// launch_plan.cpp — the fast kernels' launch decisions (see launch_plan.h).
#include "cuda/plans/launch_plan.h"

#include <fmt/format.h>

#include <algorithm>

namespace carousel::gpu {

namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
}  // namespace

int vector_width(std::int64_t elements_per_row, std::size_t element_bytes,
                 std::initializer_list<const void*> pointers) {
  for (int vec : {8, 4, 2}) {
    const std::size_t bytes = std::size_t(vec) * element_bytes;
    if (bytes > 16 || elements_per_row % vec != 0) continue;
    bool aligned = true;
    for (const void* p : pointers)
      aligned = aligned && reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
    if (aligned) return vec;
  }
  return 1;
}

LaunchPlan plan_elementwise(std::int64_t n, int vec) {
  LaunchPlan p;
  p.vec = vec;
  p.block = kElementwiseThreads;
  p.grid_x = ceil_div(ceil_div(n, vec), p.block);
  return p;
}

LaunchPlan plan_rowwise(std::int64_t rows, std::int64_t cols, int vec,
                        std::size_t shared_bytes_per_warp) {
  LaunchPlan p;
  p.vec = vec;
  const std::int64_t packs = ceil_div(cols, vec);
  p.block = int(std::clamp<std::int64_t>(ceil_div(packs, 32) * 32, 32, kMaxReduceThreads));
  p.grid_x = rows;
  p.shared_bytes = shared_bytes_per_warp * std::size_t(kMaxReduceThreads / 32);
  return p;
}

LaunchPlan plan_column_partials(std::int64_t rows, std::int64_t cols, const GpuLimits& limits) {
  LaunchPlan p;
  p.block = kElementwiseThreads;
  p.grid_x = ceil_div(cols, p.block);
  if (rows == 0 || cols == 0) {
    p.grid_x = 0;
    return p;
  }
  const std::int64_t wanted = ceil_div(2 * limits.multiprocessors, p.grid_x);
  const std::int64_t chunks =
      std::clamp<std::int64_t>(wanted, 1, std::min(rows, limits.max_grid_y));
  p.rows_per_chunk = ceil_div(rows, chunks);
  p.grid_y = ceil_div(rows, p.rows_per_chunk);
  return p;
}

LaunchPlan plan_block_sums(std::int64_t n, int vec, const GpuLimits& limits) {
  LaunchPlan p;
  p.vec = vec;
  p.block = kElementwiseThreads;
  // 8 blocks of 256 threads fill a multiprocessor's 2048 threads: enough loads in flight to
  // stream memory, and few enough partials that the host's sum costs nothing.
  p.grid_x =
      std::min(ceil_div(ceil_div(n, vec), p.block), std::int64_t(8) * limits.multiprocessors);
  p.shared_bytes = sizeof(double) * 32;  // the kernel's warp partials: one per possible warp
  return p;
}

std::string launch_violation(const LaunchPlan& p, const GpuLimits& limits) {
  if (p.grid_x == 0) return "";
  if (p.block <= 0 || p.block > limits.max_threads_per_block || p.block % limits.warp_size != 0)
    return fmt::format("{} threads per block (must be a multiple of {} up to {})", p.block,
                       limits.warp_size, limits.max_threads_per_block);
  if (p.grid_x < 0 || p.grid_x > limits.max_grid_x)
    return fmt::format("grid.x {} (at most {})", p.grid_x, limits.max_grid_x);
  if (p.grid_y < 1 || p.grid_y > limits.max_grid_y)
    return fmt::format("grid.y {} (at most {})", p.grid_y, limits.max_grid_y);
  if (p.shared_bytes > limits.max_static_shared_bytes)
    return fmt::format("{} bytes of static shared memory (at most {})", p.shared_bytes,
                       limits.max_static_shared_bytes);
  if (p.vec != 1 && p.vec != 2 && p.vec != 4 && p.vec != 8)
    return fmt::format("vector width {} (1, 2, 4 or 8)", p.vec);
  return "";
}

}  // namespace carousel::gpu
