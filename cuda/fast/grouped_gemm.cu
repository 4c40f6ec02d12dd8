// grouped_gemm.cu — an MoE layer's experts in one cuBLAS grouped GEMM (grouped_gemm.h).
//
// Row-major c[rows of g] = a[rows of g] op(b[g]) is column-major c^T = op(b[g])^T a^T, as in the
// backend's do_gemm: cuBLAS' A is our b[g] (n x k, transposed when trans_b), its B our rows of a.
// Every cuBLAS status is checked.
#include "cuda/fast/grouped_gemm.h"

#include <limits>

#include "compute/error.h"

namespace carousel::gpu::fast {

namespace {

cudaDataType_t cuda_type(DType t) { return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

bool fits_int(std::int64_t v) { return v <= std::numeric_limits<int>::max(); }

}  // namespace

bool grouped_gemm(Backend& backend, cublasHandle_t blas, bool trans_b, double alpha,
                  const Tensor& a, const Tensor& b, const std::vector<std::int64_t>& first,
                  double beta, const Tensor& c) {
  if (a.dtype() == DType::F64) return false;
  const std::int64_t n = c.cols(), k = a.cols();
  if (!fits_int(n) || !fits_int(k) || !fits_int(a.rows())) return false;
  const std::size_t in_size = dtype_size(a.dtype()), out_size = dtype_size(c.dtype());
  std::vector<cublasOperation_t> op_b_cols, op_a_rows;
  std::vector<int> m_of, n_of, k_of, ld_b, ld_a, ld_c, one;
  std::vector<float> alphas, betas;
  std::vector<std::uint64_t> pointers;  // the groups' b, then a, then c (device addresses)
  std::vector<std::uint64_t> a_at, c_at;
  for (std::size_t g = 0; g + 1 < first.size(); ++g) {
    const std::int64_t rows = first[g + 1] - first[g];
    if (rows == 0) continue;
    op_b_cols.push_back(trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    op_a_rows.push_back(CUBLAS_OP_N);
    m_of.push_back(int(n));
    n_of.push_back(int(rows));
    k_of.push_back(int(k));
    ld_b.push_back(int(trans_b ? k : n));
    ld_a.push_back(int(k));
    ld_c.push_back(int(n));
    one.push_back(1);
    alphas.push_back(float(alpha));
    betas.push_back(float(beta));
    pointers.push_back(std::uint64_t(b.raw()) + std::uint64_t(g) * std::uint64_t(n * k) * in_size);
    a_at.push_back(std::uint64_t(a.raw()) + std::uint64_t(first[g] * k) * in_size);
    c_at.push_back(std::uint64_t(c.raw()) + std::uint64_t(first[g] * n) * out_size);
  }
  const int groups = int(one.size());
  if (groups == 0) return true;
  pointers.insert(pointers.end(), a_at.begin(), a_at.end());
  pointers.insert(pointers.end(), c_at.begin(), c_at.end());
  static_assert(sizeof(void*) == sizeof(std::uint64_t), "device pointers are 64-bit");
  const Tensor on_device = backend.empty({std::int64_t(pointers.size())}, DType::I64);
  backend.upload(pointers.data(), on_device);  // ordered before the GEMM on the backend's stream
  const auto* table = static_cast<void* const*>(on_device.raw());
  CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
      blas, op_b_cols.data(), op_a_rows.data(), m_of.data(), n_of.data(), k_of.data(),
      alphas.data(), table, cuda_type(b.dtype()), ld_b.data(), table + groups,
      cuda_type(a.dtype()), ld_a.data(), betas.data(), table + 2 * groups,
      cuda_type(c.dtype()), ld_c.data(), groups, one.data(), CUBLAS_COMPUTE_32F));
  return true;
}

}  // namespace carousel::gpu::fast
