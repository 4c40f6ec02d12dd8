// launch_plan.h — how each fast CUDA kernel is launched (grid, block, shared memory, vector width),
// decided by plain C++ from shapes and pointers only, so CPU tests can check every decision
// against the H100's limits without a GPU, and a launch never depends on timing or on the GPU it
// lands on (a fixed block size fixes each reduction's order: results are bitwise reproducible).
//
// Kernel families (cuda/fast/fast_kernels.cuh):
//   elementwise   n elements, each thread one pack of `vec` elements (16-byte loads when aligned)
//   rowwise       one block per row of a [rows, cols] matrix (RMSNorm, cross-entropy, embedding):
//                 the block's threads stride over the row's packs and meet in a block reduction
//   column_partials  a column reduction over rows in fixed chunks (RMSNorm's weight gradient):
//                 grid (column blocks, row chunks) writes [chunks, cols] float32 partial sums that
//                 a second pass adds up chunk by chunk in order
//   block_sums    a sum over n elements returned to the host (sum, sum_squares): a grid fixed by
//                 n writes one double partial per block, which the host adds in block order
// Each family's kernels declare its largest block with __launch_bounds__ (kElementwiseThreads,
// kMaxReduceThreads), so a plan must never exceed it: test_cuda_plans checks that it does not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace carousel::gpu {

// What a launch must respect. kH100 is the device the fast tier is written for (sm_90:
// 1024 threads per block, 48 KiB static shared memory, grid.x < 2^31, grid.y < 2^16).
struct GpuLimits {
  int max_threads_per_block = 1024;
  int warp_size = 32;
  std::size_t max_static_shared_bytes = 48 * 1024;
  std::int64_t max_grid_x = 2147483647;
  std::int64_t max_grid_y = 65535;
  int multiprocessors = 132;
};
inline constexpr GpuLimits kH100{};

struct LaunchPlan {
  std::int64_t grid_x = 0;  // 0 blocks: nothing to do, the launch is skipped
  std::int64_t grid_y = 1;
  int block = 0;                    // threads per block (a multiple of the warp size)
  std::size_t shared_bytes = 0;     // static shared memory the kernel declares
  int vec = 1;                      // elements per thread per load (1, 2, 4 or 8)
  std::int64_t rows_per_chunk = 0;  // column_partials: rows each grid_y index sums
};

// The widest pack (8, 4, 2 or 1 elements, at most 16 bytes) that divides `elements_per_row`
// and to whose size in bytes every pointer is aligned: the loads a kernel may vectorise.
int vector_width(std::int64_t elements_per_row, std::size_t element_bytes,
                 std::initializer_list<const void*> pointers);

// Threads per block: elementwise, column_partials and block_sums launch exactly
// kElementwiseThreads; rowwise launches up to kMaxReduceThreads (its kernels declare 32 warps of
// reduction scratch). The kernels promise the compiler these maxima (__launch_bounds__): a
// larger block would fail to launch.
inline constexpr int kElementwiseThreads = 256;
inline constexpr int kMaxReduceThreads = 1024;

LaunchPlan plan_elementwise(std::int64_t n, int vec);
// One block per row; threads = the row's packs rounded up to a warp, between 32 and 1024.
// `shared_bytes_per_warp`: the block reduction's scratch per warp (a float, or a (max, sum) pair).
LaunchPlan plan_rowwise(std::int64_t rows, std::int64_t cols, int vec,
                        std::size_t shared_bytes_per_warp);
// Column sums over rows in chunks: enough chunks that the grid fills the GPU about twice over,
// chosen from the shape alone.
LaunchPlan plan_column_partials(std::int64_t rows, std::int64_t cols,
                                const GpuLimits& limits = kH100);

// A sum over n elements in packs of `vec`: kElementwiseThreads per block, enough blocks to cover
// the packs once, at most 8 per multiprocessor of `limits` (the H100's, whatever the GPU: the
// grid, and so the order of the additions, must depend on n and vec alone).
LaunchPlan plan_block_sums(std::int64_t n, int vec, const GpuLimits& limits = kH100);

// Empty when `plan` fits `limits`; otherwise what is exceeded (for the error a launch raises).
std::string launch_violation(const LaunchPlan& plan, const GpuLimits& limits = kH100);

}  // namespace carousel::gpu
