// dispatch.h — helpers shared by the CPU kernel files: dtype dispatch and the BLAS wrapper.
#pragma once

#include <cblas.h>

#include <cstdint>

#include "cuda/tensor.h"

namespace carousel::cpu {

// Calls fn(T{}) with T = float or double according to `dtype` (the CPU backend's dtypes; the
// Backend front end has already rejected anything else).
template <class Fn>
void dispatch_float(DType dtype, Fn&& fn) {
  if (dtype == DType::F64) {
    fn(double{});
  } else {
    fn(float{});
  }
}

// Calls fn(T{}) with T = float, double or bf16: the storage types cast converts between.
template <class Fn>
void dispatch_storage(DType dtype, Fn&& fn) {
  if (dtype == DType::BF16) {
    fn(bf16{});
  } else {
    dispatch_float(dtype, fn);
  }
}

// Row-major GEMM on raw pointers with leading dimensions: C = alpha op(A) op(B) + beta C.
inline void blas_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                      const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                      float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
inline void blas_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                      double alpha, const double* a, std::int64_t lda, const double* b,
                      std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

}  // namespace carousel::cpu
