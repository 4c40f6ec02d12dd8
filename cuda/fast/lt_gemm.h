// lt_gemm.h — GEMMs through cuBLASLt for the fast tier: float32 or bfloat16 operands (bf16 in
// with float32 or bf16 out, float32 accumulation; float32 stays exact float32, no TF32), the
// transposes expressed in the layouts (no copies), one plan per shape (descriptors + the
// heuristic's algorithms, cached: cuda/plans/gemm_plan.h) and one workspace from the backend's
// pool. Float64, empty inner dimensions and shapes cuBLASLt cannot run stay on the classic cuBLAS
// path (cuda_backend.cu do_gemm).
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "compute/backend.h"
#include "cuda/plans/gemm_plan.h"

namespace carousel::gpu {

class LtGemm {
 public:
  LtGemm(Backend& backend, int gpu, cudaStream_t stream, int compute_capability_major);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // c[batch][m,n] = alpha * op(a) op(b) + beta * c, row-major, strides m*k, k*n, m*n. Returns
  // false, leaving c untouched, for a key cuBLASLt cannot run (no algorithm, or each refused; a
  // warning names it once per process): the caller runs it on classic cuBLAS.
  [[nodiscard]] bool run(bool trans_a, bool trans_b, std::int64_t batch, std::int64_t m,
                         std::int64_t n, std::int64_t k, double alpha, const Tensor& a,
                         const Tensor& b, double beta, const Tensor& c);

  std::int64_t plans_built() const;
  std::int64_t plans_reused() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace carousel::gpu
