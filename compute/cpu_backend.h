// cpu_backend.h — the CPU implementation of Backend: OpenBLAS for GEMMs, OpenMP loops with
// static scheduling for everything else.
//
// It is the numerical oracle of the project: simple fp32 (and fp64, for gradient checks) code,
// deterministic by construction: every output element is produced by one thread in a fixed
// order, and reductions use fixed blocks summed in order, so results do not depend on the number
// of threads. Several CpuBackends (one per simulated device) can live in one process.
#pragma once

#include <memory>

#include "compute/backend.h"

namespace carousel {

class CpuBackend : public Backend {
 public:
  // `device_index` names the simulated device ("cpu:3"); `memory_limit_bytes` (0 = none) makes
  // it fail like a GPU of that size when exceeded.
  explicit CpuBackend(int device_index = 0, std::size_t memory_limit_bytes = 0);
  // On host memory from another allocator (tests use one that poses as device memory).
  explicit CpuBackend(std::unique_ptr<DeviceAllocator> allocator);

  std::string name() const override;

 private:
  void gemm_bf16(bool trans_a, bool trans_b, const GemmDims& dims, double alpha, const Tensor& a,
                 const Tensor& b, double beta, const Tensor& c);

 protected:
  void do_upload(const void* host, const Tensor& dst) override;
  void do_download(const Tensor& src, void* host) override;
  void do_fill(const Tensor& x, double value) override;
  void do_copy(const Tensor& src, const Tensor& dst) override;
  void do_cast(const Tensor& src, const Tensor& dst) override;
  void do_scale(const Tensor& x, double alpha) override;
  void do_axpy(double alpha, const Tensor& x, const Tensor& y) override;
  void do_add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  double do_sum(const Tensor& x, bool squares) override;
  void do_gemm(bool trans_a, bool trans_b, const GemmDims& dims, double alpha, const Tensor& a,
               const Tensor& b, double beta, const Tensor& c) override;
  void do_embedding_forward(const Tensor& table, const Tensor& tokens, const Tensor& out) override;
  void do_embedding_backward(const Tensor& dout, const Tensor& tokens,
                             const Tensor& dtable) override;
  void do_rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& out,
                          const Tensor& rstd) override;
  void do_rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                           const Tensor& rstd, const Tensor& dx, const Tensor& dweight) override;
  void do_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
               bool backward) override;
  void do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, const Tensor& doc_start) override;
  void do_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv, const Tensor& doc_start) override;
  void do_swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void do_swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                          const Tensor& dgate, const Tensor& dup) override;
  void do_gelu_forward(const Tensor& x, const Tensor& out) override;
  void do_gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx) override;
  void do_cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                const Tensor& losses) override;
  void do_cross_entropy_backward(const Tensor& logits, const Tensor& targets, double dloss,
                                 const Tensor& dlogits) override;
  void do_adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const AdamWScalars& scalars) override;
  void do_embedding_part(const Tensor& table_or_dtable, const Tensor& tokens, std::int64_t first,
                         const Tensor& out_or_dout, bool backward) override;
  void do_cross_entropy_part_forward(const Tensor& logits, const Tensor& targets,
                                     std::int64_t first, const Tensor& lse,
                                     const Tensor& target_logits) override;
  void do_cross_entropy_combine(const Tensor& lse_parts, const Tensor& target_logit_parts,
                                const Tensor& lse, const Tensor& losses) override;
  void do_scale_rows(const Tensor& x, const Tensor& scale, const Tensor& out) override;
  void do_row_dots(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void do_cross_entropy_part_backward(const Tensor& logits, const Tensor& targets,
                                      std::int64_t first, const Tensor& lse, double dloss,
                                      const Tensor& dlogits) override;
  void do_amax(const Tensor& x, const Tensor& out) override;  // cpu/float8.cpp
  void do_quantize_float8(const Tensor& x, Float8Format format, float scale,
                          const Tensor& out) override;
};

}  // namespace carousel
