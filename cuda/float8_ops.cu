// float8_ops.cu — the float8 ops' kernels and launches (float8_ops.h).
#include <algorithm>
#include <cstdint>

#include "compute/dispatch.h"
#include "compute/error.h"
#include "compute/float8/float8.h"
#include "cuda/float8_ops.h"
#include "cuda/reference_kernels.cuh"

namespace carousel::gpu::float8 {

namespace {

constexpr int kMaxBlocks = 1024;

template <class T>
__device__ inline float magnitude(T v) {
  return float(fabs(math::Convert<double>::from(v)));
}

// The amax of every thread's `m` in the block (a tree in shared memory, kThreads wide), returned
// to every thread.
__device__ inline float block_amax(float m, float* shared) {
  shared[threadIdx.x] = m;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half)
      shared[threadIdx.x] = math::amax_combine(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  return shared[0];
}

// The block's amax of its grid-stride elements into partial[blockIdx.x].
template <class T>
__global__ void block_amax_kernel(const T* x, std::int64_t n, float* partial) {
  __shared__ float shared[kThreads];
  float m = 0.0f;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    m = math::amax_combine(m, magnitude(x[i]));
  const float block = block_amax(m, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = block;
}

// One block: out[0] = the amax of the blocks' partials.
__global__ void combine_amax_kernel(const float* partial, int blocks, float* out) {
  __shared__ float shared[kThreads];
  float m = 0.0f;
  for (int i = int(threadIdx.x); i < blocks; i += kThreads) m = math::amax_combine(m, partial[i]);
  const float block = block_amax(m, shared);
  if (threadIdx.x == 0) out[0] = block;
}

template <class From, class To>
__global__ void quantize_kernel(const From* x, To* out, std::int64_t n, float scale,
                                Float8Format format) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = math::Convert<To>::from(
      math::float8_quantize(math::Convert<float>::from(x[i]), scale, format));
}

}  // namespace

void amax(const fast::Launch& l, const Tensor& x, const Tensor& out) {
  const std::int64_t n = x.numel();
  const int blocks = int(std::min<std::int64_t>(kMaxBlocks, std::max(1, blocks_for(n))));
  Tensor partial = l.backend.empty({blocks}, DType::F32);  // the stream-ordered pool
  CUDA_CHECK(cudaSetDevice(l.gpu));
  dispatch(StorageTypes{}, "amax", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    block_amax_kernel<T><<<blocks, kThreads, 0, l.stream>>>(x.data<T>(), n, partial.data<float>());
  });
  CUDA_CHECK(cudaGetLastError());
  combine_amax_kernel<<<1, kThreads, 0, l.stream>>>(partial.data<float>(), blocks,
                                                    out.data<float>());
  CUDA_CHECK(cudaGetLastError());
}

void quantize(const fast::Launch& l, const Tensor& x, Float8Format format, float scale,
              const Tensor& out) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  CUDA_CHECK(cudaSetDevice(l.gpu));
  dispatch(StorageTypes{}, "quantize_float8", x.dtype(), [&](auto from) {
    dispatch(StorageTypes{}, "quantize_float8", out.dtype(), [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      quantize_kernel<From, To><<<blocks_for(n), kThreads, 0, l.stream>>>(
          x.data<From>(), out.data<To>(), n, scale, format);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace carousel::gpu::float8
