// cuda_backend.cu — CudaBackend: the Backend ops on one GPU (cuBLAS for GEMMs, kernels.cuh for
// the rest), with a cudaMalloc-based allocator that keeps the same exact accounting as the CPU.
//
// Every CUDA and cuBLAS call is checked (statement, file:line, device). Row-major tensors meet
// column-major cuBLAS through the identity C^T = B^T A^T: a row-major [m,n] product is cuBLAS'
// column-major [n,m] one with the operands swapped.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "compute/dispatch.h"
#include "compute/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_info.h"
#include "cuda/kernels.cuh"

namespace carousel {

namespace {

using gpu::blocks_for;
using gpu::kThreads;

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
    pooled_ = pools != 0;  // else cudaMalloc (host/parallel/mesh.cpp warns)
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
    if (pooled_) {
      cudaFreeAsync(p, stream_);  // no throw on the destructors' path
    } else {
      cudaFree(p);
    }
  }

 private:
  int gpu_;
  cudaStream_t stream_ = nullptr;
  bool pooled_ = true;  // cudaMallocAsync (else cudaMalloc)
};

cudaDataType_t cublas_type(DType t) {
  return per_dtype(t, CUDA_R_32F, CUDA_R_64F, CUDA_R_16BF, CUDA_R_32I, CUDA_R_16F, CUDA_R_8I,
                   CUDA_R_8U, CUDA_R_64I);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int gpu, int logical)
      : Backend(std::make_unique<CudaAllocator>(gpu, logical)),
        gpu_(gpu),
        stream_(static_cast<CudaAllocator&>(allocator()).stream()) {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUBLAS_CHECK(cublasCreate(&blas_));
    CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  }
  ~CudaBackend() override {
    cudaSetDevice(gpu_);
    cublasDestroy(blas_);
  }

  std::string name() const override {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, gpu_);
    return fmt::format("cuda:{} ({})", gpu_, prop.name);
  }
  void synchronize() override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 protected:
  void do_upload(const void* host, const Tensor& dst) override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaMemcpyAsync(dst.raw(), host, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
    synchronize();
  }
  void do_download(const Tensor& src, void* host) override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaMemcpyAsync(host, src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }
  void do_fill(const Tensor& x, double value) override {
    if (x.dtype() == DType::BF16) {
      launch(gpu::fill_kernel<bf16>, x.numel(), x.data<bf16>(), x.numel(),
             math::to_bf16(float(value)));
      return;
    }
    dispatch(FloatTypes{}, "fill", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::fill_kernel<T>, x.numel(), x.data<T>(), x.numel(), T(value));
    });
  }
  void do_copy(const Tensor& src, const Tensor& dst) override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(
        cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
  }
  void do_cast(const Tensor& src, const Tensor& dst) override {
    dispatch(StorageTypes{}, "cast", src.dtype(), [&](auto from) {
      dispatch(StorageTypes{}, "cast", dst.dtype(), [&](auto to) {
        using From = decltype(from);
        using To = decltype(to);
        launch(gpu::cast_kernel<From, To>, src.numel(), src.data<From>(), dst.data<To>(),
               src.numel());
      });
    });
  }
  void do_scale(const Tensor& x, double alpha) override {
    dispatch(FloatTypes{}, "scale", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::scale_kernel<T>, x.numel(), x.data<T>(), x.numel(), T(alpha));
    });
  }
  void do_axpy(double alpha, const Tensor& x, const Tensor& y) override {
    dispatch(FloatTypes{}, "axpy", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::axpy_kernel<T>, x.numel(), x.data<T>(), y.data<T>(), x.numel(), T(alpha));
    });
  }
  void do_add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    dispatch(FloatTypes{}, "add", a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::add_kernel<T>, a.numel(), a.data<T>(), b.data<T>(), out.data<T>(), a.numel());
    });
  }
  double do_sum(const Tensor& x, bool squares) override {
    const std::int64_t n = x.numel(), blocks = (n + 4095) / 4096;
    if (blocks == 0) return 0.0;
    Tensor partial = empty({blocks}, DType::F64);
    dispatch(FloatTypes{}, "sum", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::block_sum_kernel<T>, blocks, x.data<T>(), n, squares, partial.data<double>(),
             blocks);
    });
    double total = 0;
    for (double v : to_host<double>(partial)) total += v;  // in order, on the host
    return total;
  }
  void do_gemm(bool ta, bool tb, const GemmDims& d, double alpha, const Tensor& a, const Tensor& b,
               double beta, const Tensor& c) override {
    if (d.m == 0 || d.n == 0) return;
    CUDA_CHECK(cudaSetDevice(gpu_));
    // Row-major C[m,n] = op(A) op(B)  <=>  column-major C^T[n,m] = op(B)^T op(A)^T.
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int lda = int(std::max<std::int64_t>(1, ta ? d.m : d.k));
    const int ldb = int(std::max<std::int64_t>(1, tb ? d.k : d.n));
    const int ldc = int(std::max<std::int64_t>(1, d.n));
    const long long sa = d.m * d.k, sb = d.k * d.n, sc = d.m * d.n;
    if (a.dtype() == DType::BF16) {  // bf16 inputs, float32 products and sums (tensor cores)
      const float al = float(alpha), be = float(beta);
      CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          blas_, opb, opa, int(d.n), int(d.m), int(d.k), &al, b.raw(), CUDA_R_16BF, ldb, sb,
          a.raw(), CUDA_R_16BF, lda, sa, &be, c.raw(), cublas_type(c.dtype()), ldc, sc,
          int(d.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else if (a.dtype() == DType::F64) {
      const double al = alpha, be = beta;
      CUBLAS_CHECK(cublasDgemmStridedBatched(blas_, opb, opa, int(d.n), int(d.m), int(d.k), &al,
                                             b.data<double>(), ldb, sb, a.data<double>(), lda, sa,
                                             &be, c.data<double>(), ldc, sc, int(d.batch)));
    } else {
      const float al = float(alpha), be = float(beta);
      CUBLAS_CHECK(cublasSgemmStridedBatched(blas_, opb, opa, int(d.n), int(d.m), int(d.k), &al,
                                             b.data<float>(), ldb, sb, a.data<float>(), lda, sa,
                                             &be, c.data<float>(), ldc, sc, int(d.batch)));
    }
  }
  void do_embedding_forward(const Tensor& table, const Tensor& tokens, const Tensor& out) override {
    dispatch(FloatTypes{}, "embedding_forward", table.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t n = tokens.numel(), e = table.dim(1);
      launch(gpu::embedding_forward_kernel<T>, n * e, table.data<T>(), tokens.data<std::int32_t>(),
             out.data<T>(), n, e);
    });
  }
  void do_embedding_backward(const Tensor& dout, const Tensor& tokens,
                             const Tensor& dtable) override {
    dispatch(FloatTypes{}, "embedding_backward", dtable.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t n = tokens.numel(), e = dtable.dim(1);
      launch(gpu::embedding_backward_kernel<T>, e, dout.data<T>(), tokens.data<std::int32_t>(),
             dtable.data<T>(), n, e);
    });
  }
  void do_rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& out,
                          const Tensor& rstd) override {
    dispatch(FloatTypes{}, "rmsnorm_forward", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::rmsnorm_forward_kernel<T>, x.rows(), x.data<T>(), w.data<T>(), out.data<T>(),
             rstd.data<T>(), x.rows(), x.cols(), eps);
    });
  }
  void do_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& dx, const Tensor& dw) override {
    dispatch(FloatTypes{}, "rmsnorm_backward", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::rmsnorm_backward_dx_kernel<T>, x.rows(), dy.data<T>(), x.data<T>(), w.data<T>(),
             rstd.data<T>(), dx.data<T>(), x.rows(), x.cols());
      launch(gpu::rmsnorm_backward_dg_kernel<T>, x.cols(), dy.data<T>(), x.data<T>(),
             rstd.data<T>(), dw.data<T>(), x.rows(), x.cols());
    });
  }
  void do_rope(const Tensor& x, const Tensor& c, const Tensor& s, const Tensor& out,
               bool backward) override {
    dispatch(FloatTypes{}, "rope", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::rope_kernel<T>, x.numel() / 2, x.data<T>(), c.data<T>(), s.data<T>(),
             out.data<T>(), x.dim(0), x.dim(1), x.dim(2), x.dim(3), backward);
    });
  }
  void do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse) override {
    dispatch(FloatTypes{}, "attention_forward", q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::attention_forward_kernel<T>, q.dim(0) * q.dim(2) * q.dim(1), q.data<T>(),
             k.data<T>(), v.data<T>(), out.data<T>(), lse.data<T>(), q.dim(0), q.dim(1), q.dim(2),
             k.dim(2), q.dim(3));
    });
  }
  void do_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv) override {
    dispatch(FloatTypes{}, "attention_backward", q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t B = q.dim(0), Tn = q.dim(1), H = q.dim(2), Hkv = k.dim(2), D = q.dim(3);
      launch(gpu::attention_dq_kernel<T>, B * H * Tn, q.data<T>(), k.data<T>(), v.data<T>(),
             out.data<T>(), dout.data<T>(), lse.data<T>(), dq.data<T>(), B, Tn, H, Hkv, D);
      launch(gpu::attention_dkv_kernel<T>, B * Hkv * Tn, q.data<T>(), k.data<T>(), v.data<T>(),
             out.data<T>(), dout.data<T>(), lse.data<T>(), dk.data<T>(), dv.data<T>(), B, Tn, H,
             Hkv, D);
    });
  }
  void do_swiglu_forward(const Tensor& g, const Tensor& u, const Tensor& out) override {
    dispatch(FloatTypes{}, "swiglu_forward", g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::swiglu_forward_kernel<T>, g.numel(), g.data<T>(), u.data<T>(), out.data<T>(),
             g.numel());
    });
  }
  void do_swiglu_backward(const Tensor& dy, const Tensor& g, const Tensor& u, const Tensor& dg,
                          const Tensor& du) override {
    dispatch(FloatTypes{}, "swiglu_backward", g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::swiglu_backward_kernel<T>, g.numel(), dy.data<T>(), g.data<T>(), u.data<T>(),
             dg.data<T>(), du.data<T>(), g.numel());
    });
  }
  void do_gelu_forward(const Tensor& x, const Tensor& out) override {
    dispatch(FloatTypes{}, "gelu_forward", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::gelu_forward_kernel<T>, x.numel(), x.data<T>(), out.data<T>(), x.numel());
    });
  }
  void do_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx) override {
    dispatch(FloatTypes{}, "gelu_backward", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::gelu_backward_kernel<T>, x.numel(), dy.data<T>(), x.data<T>(), dx.data<T>(),
             x.numel());
    });
  }
  void do_cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                const Tensor& losses) override {
    dispatch(FloatTypes{}, "cross_entropy_forward", logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::cross_entropy_kernel<T>, logits.dim(0), logits.data<T>(),
             targets.data<std::int32_t>(), losses.data<T>(), static_cast<T*>(nullptr), 0.0,
             logits.dim(0), logits.dim(1));
    });
  }
  void do_cross_entropy_backward(const Tensor& logits, const Tensor& targets, double dloss,
                                 const Tensor& dlogits) override {
    dispatch(FloatTypes{}, "cross_entropy_backward", logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::cross_entropy_kernel<T>, logits.dim(0), logits.data<T>(),
             targets.data<std::int32_t>(), static_cast<T*>(nullptr), dlogits.data<T>(), dloss,
             logits.dim(0), logits.dim(1));
    });
  }
  void do_adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                       const AdamWScalars& h) override {
    dispatch(FloatTypes{}, "adamw_update", p.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::adamw_kernel<T>, p.numel(), p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(),
             p.numel(), h);
    });
  }

 private:
  template <class Kernel, class... Args>
  void launch(Kernel kernel, std::int64_t threads, Args... args) {
    if (threads <= 0) return;
    CUDA_CHECK(cudaSetDevice(gpu_));
    kernel<<<blocks_for(threads), kThreads, 0, stream_>>>(args...);
    CUDA_CHECK(cudaGetLastError());
  }
  int gpu_;
  cudaStream_t stream_;  // owned by the allocator: allocations are ordered with the work
  cublasHandle_t blas_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int gpu, int logical_index) {
  const CudaDevices devices = list_cuda_devices();
  CAROUSEL_CHECK(!devices.devices.empty(), "device=cuda: {}", devices.why_none);
  CAROUSEL_CHECK(gpu >= 0 && gpu < int(devices.devices.size()),
                 "device=cuda: GPU {} does not exist; {} visible", gpu, devices.devices.size());
  return std::make_unique<CudaBackend>(gpu, logical_index);
}

}  // namespace carousel
