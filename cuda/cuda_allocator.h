// cuda_allocator.h — CudaAllocator: one logical device's stream and its device memory, for
// CudaBackend (cuda_backend.cu). Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "compute/error.h"
#include "compute/memory.h"

namespace carousel {

// Device memory from the GPU's stream-ordered pool: cudaMallocAsync / cudaFreeAsync on the
// logical device's stream, with the pool keeping freed blocks (release threshold = unlimited)
// so a training step reuses memory without cudaMalloc's device-wide synchronisation. A free is
// ordered after the work queued on the stream so far; a tensor that another stream uses (NCCL)
// must stay alive until that work's Event has completed (the executor keeps such buffers).
// A GPU (or a virtualised one) without memory pools gets plain cudaMalloc / cudaFree, which
// synchronise, and a warning. Out of memory is DeviceAllocator's error (the rank's device, the
// size, what is in use); any other CUDA failure to allocate is an error naming CUDA's reason.
// Accounting (current / peak bytes) is DeviceAllocator's, as on the CPU.
class CudaAllocator final : public DeviceAllocator {
 public:
  CudaAllocator(int gpu, int logical) : DeviceAllocator(DeviceKind::CUDA, logical, 0), gpu_(gpu) {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    int pools = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, gpu_));
    pooled_ = pools != 0;  // else cudaMalloc (host/mesh/mesh.cpp warns)
    if (!pooled_) return;
    cudaMemPool_t pool = nullptr;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, gpu_));
    std::uint64_t keep_everything = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
  }
  ~CudaAllocator() override {
    cudaSetDevice(gpu_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  // The logical device's stream: its kernels, cuBLAS calls, copies and allocations.
  cudaStream_t stream() const { return stream_; }
  bool pooled() const { return pooled_; }  // stream-ordered (capturable) allocation
  void release_cached(bool pool, bool graphs) override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (pool && pooled_) {
      cudaMemPool_t default_pool = nullptr;
      CUDA_CHECK(cudaDeviceGetDefaultMemPool(&default_pool, gpu_));
      CUDA_CHECK(cudaMemPoolTrimTo(default_pool, 0));
    }
    if (graphs) CUDA_CHECK(cudaDeviceGraphMemTrim(gpu_));
  }

  bool host_accessible() const override { return false; }
  void* work_queue() const override { return stream_; }
  void copy_to_host(void* host, const void* src, std::size_t bytes) const override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy_from_host(void* dst, const void* host, std::size_t bytes) const override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 protected:
  // A free while the stream is captured becomes the graph's free node (step_graph.h).
  bool frees_into_graph() const override { return pooled_; }
  void* raw_allocate(std::size_t bytes) override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    void* p = nullptr;
    const cudaError_t rc = pooled_ ? cudaMallocAsync(&p, bytes, stream_) : cudaMalloc(&p, bytes);
    if (rc == cudaSuccess) return p;
    cudaGetLastError();  // clear the sticky-free error state this call left
    CAROUSEL_CHECK(rc == cudaErrorMemoryAllocation, "allocating {} on GPU {} failed: {} ({})",
                   format_bytes(bytes), gpu_, cudaGetErrorString(rc), cudaGetErrorName(rc));
    return nullptr;  // out of memory: DeviceAllocator's error says how much was in use
  }
  void raw_free(void* p) override {
    cudaSetDevice(gpu_);
    // No throw on the destructors' path; a failure (a block of a capture that was abandoned)
    // must not stay as the error the next kernel launch reports.
    if ((pooled_ ? cudaFreeAsync(p, stream_) : cudaFree(p)) != cudaSuccess) cudaGetLastError();
  }

 private:
  int gpu_;
  cudaStream_t stream_ = nullptr;
  bool pooled_ = true;  // cudaMallocAsync (else cudaMalloc)
};

}  // namespace carousel
