// grouped_gemm.h — the fast tier's grouped GEMMs (Backend::grouped_gemm, grouped_weight_gemm):
// an MoE layer's experts, each on its own rows, in one cublasGemmGroupedBatchedEx call instead of
// one GEMM per expert.
// Float32 (exact float32: the handle's default math, no TF32) or bfloat16 operands with float32
// accumulation. The per-group pointers go to the device in one small upload per call.
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <vector>

#include "compute/backend.h"

namespace carousel::gpu::fast {

// The same contract as Backend::grouped_gemm. Returns false, doing nothing, where cuBLAS' grouped
// GEMM does not apply (float64; a float32 c beside bfloat16 a and b, which its type table does
// not list; a dimension beyond 32-bit ints): the caller runs one GEMM per group.
bool grouped_gemm(Backend& backend, cublasHandle_t blas, bool trans_b, double alpha,
                  const Tensor& a, const Tensor& b, const std::vector<std::int64_t>& first,
                  double beta, const Tensor& c);
// Backend::grouped_weight_gemm likewise (false also with an empty group and beta != 1).
bool grouped_weight_gemm(Backend& backend, cublasHandle_t blas, double alpha, const Tensor& a,
                         const Tensor& b, const std::vector<std::int64_t>& first, double beta,
                         const Tensor& c);

}  // namespace carousel::gpu::fast
