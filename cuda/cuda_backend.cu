// cuda_backend.cu — CudaBackend: the Backend ops on one GPU, in two tiers (cuda_backend.h). Each
// do_<op> first offers the op to the fast tier (fast_ops.h, lt_gemm.h, cudnn_attention.h) when
// this backend runs it and the dtype is one it takes; otherwise the reference tier runs it:
// classic cuBLAS for GEMMs and reference_kernels.cuh for the rest. Memory and the stream are
// CudaAllocator's (cuda_allocator.h).
//
// Every CUDA and cuBLAS call is checked (statement, file:line, device). Row-major tensors meet
// column-major cuBLAS through the identity C^T = B^T A^T: a row-major [m,n] product is cuBLAS'
// column-major [n,m] one with the operands swapped.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "compute/dispatch.h"
#include "compute/error.h"
#include "cuda/cuda_allocator.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_step_graph.h"
#include "cuda/device_info.h"
#include "cuda/event_stopwatch.h"
#include "cuda/fast/cudnn_attention.h"
#include "cuda/fast/fast_ops.h"
#include "cuda/fast/grouped_gemm.h"
#include "cuda/fast/lt_gemm.h"
#include "cuda/float8_ops.h"
#include "cuda/plans/fast_tier_ops.h"
#include "cuda/reference_kernels.cuh"
#include "cuda/vocab_parts.h"

namespace carousel {

namespace {

using gpu::blocks_for;
using gpu::kThreads;

cudaDataType_t cublas_type(DType t) {
  return per_dtype(t, CUDA_R_32F, CUDA_R_64F, CUDA_R_16BF, CUDA_R_32I, CUDA_R_16F, CUDA_R_8I,
                   CUDA_R_8U, CUDA_R_64I);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int gpu, int logical, GpuKernels kernels, int cc_major)
      : Backend(std::make_unique<CudaAllocator>(gpu, logical)),
        gpu_(gpu),
        stream_(static_cast<CudaAllocator&>(allocator()).stream()),
        fast_(kernels == GpuKernels::Fast) {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUBLAS_CHECK(cublasCreate(&blas_));
    CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    if (!fast_) return;
    lt_ = std::make_unique<gpu::LtGemm>(*this, gpu_, stream_, cc_major);
    attention_ = gpu::CudnnAttention::open(*this, gpu_, stream_);  // null: it logged why
  }
  ~CudaBackend() override {
    cudaSetDevice(gpu_);
    attention_.reset();
    lt_.reset();
    cublasDestroy(blas_);
  }

  bool has_native_bf16(Op op) const override {
    return fast_ && gpu::fast_tier_native_bf16(op, attention_ != nullptr);
  }

  std::string name() const override {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, gpu_);
    return fmt::format("cuda:{} ({}, {} kernels{})", gpu_, prop.name, fast_ ? "fast" : "reference",
                       attention_ ? ", " + attention_->version() + " attention" : "");
  }
  void synchronize() override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  std::string graph_blocker() const override {
    if (!fast_) return "gpu_kernels=reference, the oracle, runs eagerly";
    if (!static_cast<CudaAllocator&>(allocator()).pooled())
      return "this GPU has no stream-ordered memory pools, and cudaMalloc cannot be captured";
    return "";
  }

 protected:
  void do_begin_capture() override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    // Thread-local: ranks on other threads and NCCL's watchdog go on with their own CUDA calls.
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  }
  void do_abort_capture() noexcept override {
    cudaSetDevice(gpu_);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_, &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
      cudaGraph_t graph = nullptr;
      if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    }
    cudaGetLastError();  // the failed capture's errors, reported by the caller already
  }
  std::unique_ptr<StepGraph> do_end_capture() override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    return gpu::make_step_graph(gpu_, stream_, graph);
  }
  std::unique_ptr<OpStopwatch> make_op_stopwatch() override {
    return make_event_stopwatch(gpu_, stream_);
  }
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
    if (fast_ && src.dtype() != DType::F64 && dst.dtype() != DType::F64)
      return gpu::fast::cast(launch_, src, dst);
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
    if (fast_for(x)) return gpu::fast::scale(launch_, x, alpha);
    dispatch(FloatTypes{}, "scale", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::scale_kernel<T>, x.numel(), x.data<T>(), x.numel(), T(alpha));
    });
  }
  void do_axpy(double alpha, const Tensor& x, const Tensor& y) override {
    if (fast_for(x)) return gpu::fast::axpy(launch_, alpha, x, y);
    dispatch(FloatTypes{}, "axpy", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::axpy_kernel<T>, x.numel(), x.data<T>(), y.data<T>(), x.numel(), T(alpha));
    });
  }
  void do_add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    if (fast_for(a)) return gpu::fast::add(launch_, a, b, out);
    dispatch(FloatTypes{}, "add", a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::add_kernel<T>, a.numel(), a.data<T>(), b.data<T>(), out.data<T>(), a.numel());
    });
  }
  double do_sum(const Tensor& x, bool squares) override {
    if (fast_for(x)) return gpu::fast::sum(launch_, x, squares);
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
    // The fast tier: cuBLASLt, unless it cannot run this key (then it warned once, and the
    // classic path below runs it: one odd shape must not stop a run).
    if (lt_ && a.dtype() != DType::F64 && d.k > 0 && d.m > 0 && d.n > 0 &&
        lt_->run(ta, tb, d.batch, d.m, d.n, d.k, alpha, a, b, beta, c))
      return;
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
    if (fast_for(table)) return gpu::fast::embedding_forward(launch_, table, tokens, out);
    dispatch(FloatTypes{}, "embedding_forward", table.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t n = tokens.numel(), e = table.dim(1);
      launch(gpu::embedding_forward_kernel<T>, n * e, table.data<T>(), tokens.data<std::int32_t>(),
             out.data<T>(), n, e);
    });
  }
  void do_embedding_backward(const Tensor& dout, const Tensor& tokens,
                             const Tensor& dtable) override {
    if (fast_for(dtable)) return gpu::fast::embedding_backward(launch_, dout, tokens, dtable);
    dispatch(FloatTypes{}, "embedding_backward", dtable.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t n = tokens.numel(), e = dtable.dim(1);
      launch(gpu::embedding_backward_kernel<T>, e, dout.data<T>(), tokens.data<std::int32_t>(),
             dtable.data<T>(), n, e);
    });
  }
  void do_rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& out,
                          const Tensor& rstd) override {
    if (fast_for(x)) return gpu::fast::rmsnorm_forward(launch_, x, w, eps, out, rstd);
    dispatch(FloatTypes{}, "rmsnorm_forward", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::rmsnorm_forward_kernel<T>, x.rows(), x.data<T>(), w.data<T>(), out.data<T>(),
             rstd.data<T>(), x.rows(), x.cols(), eps);
    });
  }
  void do_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& dx, const Tensor& dw) override {
    if (fast_for(x)) return gpu::fast::rmsnorm_backward(launch_, dy, x, w, rstd, dx, dw);
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
    if (fast_for(x)) return gpu::fast::rope(launch_, x, c, s, out, backward);
    dispatch(FloatTypes{}, "rope", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::rope_kernel<T>, x.numel() / 2, x.data<T>(), c.data<T>(), s.data<T>(),
             out.data<T>(), x.dim(0), x.dim(1), x.dim(2), x.dim(3), c.dim(0), backward);
    });
  }
  // Packed documents (doc_start) run the reference kernels: the cuDNN graphs here are built for
  // the causal mask only (a padding/ragged mask per document is not built yet; said once per
  // process). A shape whose graph cuDNN refused runs them too (forward() said so, once per shape).
  void do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, const Tensor& doc_start) override {
    if (cudnn_may_attend(q, doc_start) && attention_->forward(q, k, v, out, lse)) return;
    note_reference_attention(q, doc_start);
    if (q.dtype() != DType::BF16) return reference_attention_forward(q, k, v, out, lse, doc_start);
    // bfloat16 that cuDNN refused or was not offered: float32 copies, rounded once. The kernels
    // are called directly, not through attention_forward, which would log this as a float32 run.
    Tensor o = empty(out.shape(), DType::F32);
    reference_attention_forward(widened(q), widened(k), widened(v), o, lse, doc_start);
    cast(o, out);
  }
  void do_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv, const Tensor& doc_start) override {
    // The lse may come from either forward (cuDNN's statistics or the reference kernel's: one
    // convention, cudnn_attention.h), so each backward is right whichever forward ran.
    if (cudnn_may_attend(q, doc_start) && attention_->backward(dout, q, k, v, out, lse, dq, dk, dv))
      return;
    if (q.dtype() != DType::BF16)
      return reference_attention_backward(dout, q, k, v, out, lse, dq, dk, dv, doc_start);
    Tensor gq = empty(dq.shape(), DType::F32), gk = empty(dk.shape(), DType::F32),
           gv = empty(dv.shape(), DType::F32);  // as in the forward
    reference_attention_backward(widened(dout), widened(q), widened(k), widened(v), widened(out),
                                 lse, gq, gk, gv, doc_start);
    cast(gq, dq);
    cast(gk, dk);
    cast(gv, dv);
  }
  void do_swiglu_forward(const Tensor& g, const Tensor& u, const Tensor& out) override {
    if (fast_for(g)) return gpu::fast::swiglu_forward(launch_, g, u, out);
    dispatch(FloatTypes{}, "swiglu_forward", g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::swiglu_forward_kernel<T>, g.numel(), g.data<T>(), u.data<T>(), out.data<T>(),
             g.numel());
    });
  }
  void do_swiglu_backward(const Tensor& dy, const Tensor& g, const Tensor& u, const Tensor& dg,
                          const Tensor& du) override {
    if (fast_for(g)) return gpu::fast::swiglu_backward(launch_, dy, g, u, dg, du);
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
  void do_scale_rows(const Tensor& x, const Tensor& s, const Tensor& out) override {
    dispatch(FloatTypes{}, "scale_rows", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::scale_rows_kernel<T>, x.numel(), x.data<T>(), s.data<T>(), out.data<T>(),
             x.cols(), x.numel());
    });
  }
  // The fast tier: the experts in one cuBLAS grouped GEMM where cuBLAS takes the dtypes (not yet
  // a float32 c beside bfloat16 a and b: grouped_gemm.h); else one GEMM per expert (cuBLASLt).
  void do_grouped_gemm(bool tb, double alpha, const Tensor& a, const Tensor& b,
                       const std::vector<std::int64_t>& first, double beta,
                       const Tensor& c) override {
    if (fast_for(a)) {
      CUDA_CHECK(cudaSetDevice(gpu_));
      if (gpu::fast::grouped_gemm(*this, blas_, tb, alpha, a, b, first, beta, c)) return;
    }
    Backend::do_grouped_gemm(tb, alpha, a, b, first, beta, c);
  }
  void do_grouped_weight_gemm(double alpha, const Tensor& a, const Tensor& b,
                              const std::vector<std::int64_t>& first, double beta,
                              const Tensor& c) override {
    if (fast_for(a)) {
      CUDA_CHECK(cudaSetDevice(gpu_));
      if (gpu::fast::grouped_weight_gemm(*this, blas_, alpha, a, b, first, beta, c)) return;
    }
    Backend::do_grouped_weight_gemm(alpha, a, b, first, beta, c);
  }
  void do_row_dots(const Tensor& a, const Tensor& b, const Tensor& out) override {
    dispatch(FloatTypes{}, "row_dots", a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::row_dots_kernel<T>, a.rows(), a.data<T>(), b.data<T>(), out.data<T>(), a.rows(),
             a.cols());
    });
  }
  void do_cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                const Tensor& losses) override {
    if (fast_for(logits))
      return gpu::fast::cross_entropy(launch_, logits, targets, losses, 0.0, Tensor{});
    dispatch(FloatTypes{}, "cross_entropy_forward", logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::cross_entropy_kernel<T>, logits.dim(0), logits.data<T>(),
             targets.data<std::int32_t>(), losses.data<T>(), static_cast<T*>(nullptr), 0.0,
             logits.dim(0), logits.dim(1));
    });
  }
  void do_cross_entropy_backward(const Tensor& logits, const Tensor& targets, double dloss,
                                 const Tensor& dlogits) override {
    if (fast_for(logits))
      return gpu::fast::cross_entropy(launch_, logits, targets, Tensor{}, dloss, dlogits);
    dispatch(FloatTypes{}, "cross_entropy_backward", logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::cross_entropy_kernel<T>, logits.dim(0), logits.data<T>(),
             targets.data<std::int32_t>(), static_cast<T*>(nullptr), dlogits.data<T>(), dloss,
             logits.dim(0), logits.dim(1));
    });
  }
  // Vocabulary parts: one set of kernels for every tier (vocab_parts.h).
  void do_embedding_part(const Tensor& table, const Tensor& tokens, std::int64_t first,
                         const Tensor& rows, bool backward) override {
    gpu::vocab_parts::embedding(launch_, table, tokens, first, rows, backward);
  }
  void do_cross_entropy_part_forward(const Tensor& logits, const Tensor& targets,
                                     std::int64_t first, const Tensor& lse,
                                     const Tensor& target_logits) override {
    gpu::vocab_parts::cross_entropy_forward(launch_, logits, targets, first, lse, target_logits);
  }
  void do_cross_entropy_combine(const Tensor& lse_parts, const Tensor& target_logit_parts,
                                const Tensor& lse, const Tensor& losses) override {
    gpu::vocab_parts::cross_entropy_combine(launch_, lse_parts, target_logit_parts, lse, losses);
  }
  void do_cross_entropy_part_backward(const Tensor& logits, const Tensor& targets,
                                      std::int64_t first, const Tensor& lse, double dloss,
                                      const Tensor& dlogits) override {
    gpu::vocab_parts::cross_entropy_backward(launch_, logits, targets, first, lse, dloss, dlogits);
  }
  // float8: one set of kernels for every tier (float8_ops.h).
  void do_amax(const Tensor& x, const Tensor& out) override { gpu::float8::amax(launch_, x, out); }
  void do_quantize_float8(const Tensor& x, Float8Format format, float scale,
                          const Tensor& out) override {
    gpu::float8::quantize(launch_, x, format, scale, out);
  }
  void do_adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                       const AdamWScalars& h) override {
    if (fast_for(p)) return gpu::fast::adamw(launch_, p, g, m, v, h);
    dispatch(FloatTypes{}, "adamw_update", p.dtype(), [&](auto tag) {
      using T = decltype(tag);
      launch(gpu::adamw_kernel<T>, p.numel(), p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(),
             p.numel(), h);
    });
  }

 private:
  Tensor widened(const Tensor& t) {  // a float32 copy
    Tensor f = empty(t.shape(), DType::F32);
    cast(t, f);
    return f;
  }
  // Whether the fast tier runs an op on `t`'s dtype (float32 and bfloat16; float64 is reference).
  bool fast_for(const Tensor& t) const { return fast_ && t.dtype() != DType::F64; }
  // Whether to offer attention to cuDNN: its fused attention takes bfloat16, causal without
  // packed documents (a context-parallel chunk against a longer key prefix included); it may
  // still refuse the shape, and then the reference kernel runs.
  bool cudnn_may_attend(const Tensor& q, const Tensor& doc_start) const {
    return attention_ && q.dtype() == DType::BF16 && !doc_start.defined();
  }
  // The reference attention kernels on one floating dtype (lse in that dtype too; bfloat16 is
  // widened by the callers).
  void reference_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& lse, const Tensor& doc_start) {
    dispatch(FloatTypes{}, "attention_forward", q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const gpu::AttnShape a{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3)};
      launch(gpu::attention_forward_kernel<T>, a.B * a.H * a.Tq, q.data<T>(), k.data<T>(),
             v.data<T>(), out.data<T>(), lse.data<T>(), a, doc_starts(doc_start));
    });
  }
  void reference_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const Tensor& doc_start) {
    dispatch(FloatTypes{}, "attention_backward", q.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const gpu::AttnShape a{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3)};
      launch(gpu::attention_dq_kernel<T>, a.B * a.H * a.Tq, q.data<T>(), k.data<T>(), v.data<T>(),
             out.data<T>(), dout.data<T>(), lse.data<T>(), dq.data<T>(), a, doc_starts(doc_start));
      launch(gpu::attention_dkv_kernel<T>, a.B * a.Hkv * a.Tk, q.data<T>(), k.data<T>(),
             v.data<T>(), out.data<T>(), dout.data<T>(), lse.data<T>(), dk.data<T>(), dv.data<T>(),
             a, doc_starts(doc_start));
    });
  }
  static const std::int32_t* doc_starts(const Tensor& doc_start) {
    return doc_start.defined() ? doc_start.data<std::int32_t>() : nullptr;
  }
  // The fast tier without cuDNN attention for this call: said once per process, not per call.
  void note_reference_attention(const Tensor& q, const Tensor& doc_start) {
    if (fast_) gpu::note_reference_attention(q.dtype(), attention_ != nullptr, doc_start.defined());
  }
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
  bool fast_;
  gpu::fast::Launch launch_{*this, gpu_, stream_};
  std::unique_ptr<gpu::LtGemm> lt_;                 // fast tier: GEMMs
  std::unique_ptr<gpu::CudnnAttention> attention_;  // fast tier: bf16 attention (null: reference)
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int gpu, int logical_index, GpuKernels kernels) {
  const CudaDevices devices = list_cuda_devices();
  CAROUSEL_CHECK(!devices.devices.empty(), "device=cuda: {}", devices.why_none);
  CAROUSEL_CHECK(gpu >= 0 && gpu < int(devices.devices.size()),
                 "device=cuda: GPU {} does not exist; {} visible", gpu, devices.devices.size());
  return std::make_unique<CudaBackend>(gpu, logical_index, kernels, devices.devices[gpu].cc_major);
}

}  // namespace carousel
