// grouped_gemm.cu — an MoE layer's experts in one cuBLAS grouped GEMM (grouped_gemm.h).
//
// Row-major products become column-major ones with the operands swapped, as in the backend's
// do_gemm (C^T = B^T A^T); each function says which of its tensors is cuBLAS' A and B. Every
// cuBLAS status is checked.
#include <limits>

#include "compute/error.h"
#include "cuda/fast/grouped_gemm.h"
#include "cuda/plans/gemm_plan.h"

namespace carousel::gpu::fast {

namespace {

cudaDataType_t cuda_type(DType t) { return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

bool fits_int(std::int64_t v) { return v <= std::numeric_limits<int>::max(); }

// One cuBLAS grouped call, a group per entry (column-major operands as cuBLAS takes them).
struct Groups {
  std::vector<cublasOperation_t> op_a, op_b;
  std::vector<int> m, n, k, lda, ldb, ldc, one;
  std::vector<float> alpha, beta;
  std::vector<std::uint64_t> a, b, c;  // device addresses
  void add(cublasOperation_t opa, cublasOperation_t opb, std::int64_t rows_m, std::int64_t cols_n,
           std::int64_t inner, std::int64_t ld_a, std::int64_t ld_b, std::int64_t ld_c,
           const void* pa, const void* pb, const void* pc, double al, double be) {
    op_a.push_back(opa), op_b.push_back(opb);
    m.push_back(int(rows_m)), n.push_back(int(cols_n)), k.push_back(int(inner));
    lda.push_back(int(ld_a)), ldb.push_back(int(ld_b)), ldc.push_back(int(ld_c)), one.push_back(1);
    alpha.push_back(float(al)), beta.push_back(float(be));
    a.push_back(std::uint64_t(pa)), b.push_back(std::uint64_t(pb)), c.push_back(std::uint64_t(pc));
  }
  void run(Backend& backend, cublasHandle_t blas, DType ab, DType out) {
    const int groups = int(one.size());
    if (groups == 0) return;
    std::vector<std::uint64_t> pointers = a;
    pointers.insert(pointers.end(), b.begin(), b.end());
    pointers.insert(pointers.end(), c.begin(), c.end());
    static_assert(sizeof(void*) == sizeof(std::uint64_t), "device pointers are 64-bit");
    const Tensor table = backend.empty({std::int64_t(pointers.size())}, DType::I64);
    backend.upload(pointers.data(), table);  // ordered before the GEMM on the backend's stream
    const auto* at = static_cast<void* const*>(table.raw());
    CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
        blas, op_a.data(), op_b.data(), m.data(), n.data(), k.data(), alpha.data(), at,
        cuda_type(ab), lda.data(), at + groups, cuda_type(ab), ldb.data(), beta.data(),
        at + 2 * groups, cuda_type(out), ldc.data(), groups, one.data(), CUBLAS_COMPUTE_32F));
  }
};

// Whether cuBLAS' grouped GEMM is known to take these dtypes. cublasGemmGroupedBatchedEx's type
// table, as we read cuBLAS' documentation, pairs bfloat16 A and B with a bfloat16 C only (unlike
// cublasGemmEx, which also lists a float32 C), while the experts' weight gradients are float32
// beside bfloat16 activations (bfloat16 runs keep every gradient in float32). Until a GPU run of
// CudaGroupedGemm.Bf16IntoFloat32InOneCall (which turns grouped_gemm_mixed_types() on) shows the
// mix works, it runs one GEMM per group (cuBLASLt takes the mix).
bool grouped_takes(const Tensor& a, const Tensor& c) {
  return a.dtype() != DType::F64 && (c.dtype() == a.dtype() || grouped_gemm_mixed_types());
}

char* at(const Tensor& t, std::int64_t elements) {
  return static_cast<char*>(t.raw()) + elements * std::int64_t(dtype_size(t.dtype()));
}

}  // namespace

bool grouped_gemm(Backend& backend, cublasHandle_t blas, bool trans_b, double alpha,
                  const Tensor& a, const Tensor& b, const std::vector<std::int64_t>& first,
                  double beta, const Tensor& c) {
  if (!grouped_takes(a, c)) return false;
  const std::int64_t n = c.cols(), k = a.cols();
  if (!fits_int(n) || !fits_int(k) || !fits_int(a.rows())) return false;
  // Row-major c[rows] = a[rows] op(b[g]): cuBLAS' A is b[g] (op as trans_b), its B the rows of a.
  Groups groups;
  for (std::size_t g = 0; g + 1 < first.size(); ++g) {
    const std::int64_t rows = first[g + 1] - first[g];
    if (rows == 0) continue;
    groups.add(trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, rows, k, trans_b ? k : n, k, n,
               at(b, std::int64_t(g) * n * k), at(a, first[g] * k), at(c, first[g] * n), alpha,
               beta);
  }
  groups.run(backend, blas, a.dtype(), c.dtype());
  return true;
}

bool grouped_weight_gemm(Backend& backend, cublasHandle_t blas, double alpha, const Tensor& a,
                         const Tensor& b, const std::vector<std::int64_t>& first, double beta,
                         const Tensor& c) {
  if (!grouped_takes(a, c)) return false;
  const std::int64_t m = a.cols(), n = b.cols();
  if (!fits_int(m) || !fits_int(n) || !fits_int(a.rows())) return false;
  // Row-major c[g] = a[rows]^T b[rows]: column-major c^T = b[rows]^T a[rows], so cuBLAS' A is
  // the rows of b (column-major n x rows as they are), its B the rows of a (transposed).
  Groups groups;
  for (std::size_t g = 0; g + 1 < first.size(); ++g) {
    const std::int64_t rows = first[g + 1] - first[g];
    if (rows == 0) {
      if (beta != 1.0) return false;  // c[g] = beta c[g]: one GEMM per group does that
      continue;
    }
    groups.add(CUBLAS_OP_N, CUBLAS_OP_T, n, m, rows, n, m, n, at(b, first[g] * n),
               at(a, first[g] * m), at(c, std::int64_t(g) * m * n), alpha, beta);
  }
  groups.run(backend, blas, a.dtype(), c.dtype());
  return true;
}

}  // namespace carousel::gpu::fast
