// cuda_check.h — check every CUDA runtime call: on failure, throw carousel::Error naming the
// statement, file:line, the device and CUDA's own error string.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace carousel::detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* stmt, const char* file, int line);
}

#define CUDA_CHECK(stmt)                                                              \
  do {                                                                                \
    cudaError_t carousel_err_ = (stmt);                                               \
    if (carousel_err_ != cudaSuccess)                                                 \
      ::carousel::detail::throw_cuda_error(carousel_err_, #stmt, __FILE__, __LINE__); \
  } while (0)

#include <cublas_v2.h>

namespace carousel::detail {
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* stmt, const char* file,
                                     int line);
}

#define CUBLAS_CHECK(stmt)                                                                \
  do {                                                                                    \
    cublasStatus_t carousel_status_ = (stmt);                                             \
    if (carousel_status_ != CUBLAS_STATUS_SUCCESS)                                        \
      ::carousel::detail::throw_cublas_error(carousel_status_, #stmt, __FILE__, __LINE__); \
  } while (0)
