// lt_gemm.cu — cuBLASLt GEMMs with cached plans (see lt_gemm.h). A plan is built the first time
// a (shape, dtype, transposes, alignment) key is met: the matmul descriptor, three layouts and
// the heuristic's best algorithms (up to kLtCandidates) for the backend's workspace; later calls
// only run cublasLtMatmul with the chosen one. A candidate cublasLtMatmul refuses gives way to the
// next; a key with none left runs classic cuBLAS (run() returns false), warned once per process.
// cuBLASLt results are bitwise reproducible on one GPU model and library version, which is the
// determinism the fast tier promises.
#include <cublasLt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <vector>

#include "compute/error.h"
#include "cuda/fast/lt_gemm.h"

#define CUBLASLT_CHECK(stmt) CUBLAS_CHECK(stmt)  // cuBLASLt returns cublasStatus_t too
// A status `call` already returned (inspected first: some statuses are not errors here).
#define CUBLASLT_CHECK_STATUS(call, status)                                                     \
  CAROUSEL_LIBRARY_CHECK_("cuBLAS", call, status, CUBLAS_STATUS_SUCCESS, cublasGetStatusString, \
                          nullptr, CAROUSEL_CUDA_DEVICE_)

namespace carousel::gpu {

namespace {

cudaDataType_t lt_type(DType t) { return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// cuBLASLt's name for a status, for the warning that a key runs on classic cuBLAS.
std::string status_name(cublasStatus_t rc) {
  return fmt::format("{} ({})", cublasGetStatusName(rc), cublasGetStatusString(rc));
}

// Owns one plan's descriptors; `algos` are the heuristic's candidates, `choice` which one runs.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;
  LtChoice choice{0};
  Plan() = default;
  Plan(Plan&& o) noexcept { *this = std::move(o); }
  Plan& operator=(Plan&& o) noexcept {
    std::swap(op, o.op);
    std::swap(first, o.first);
    std::swap(second, o.second);
    std::swap(out, o.out);
    std::swap(algos, o.algos);
    std::swap(choice, o.choice);
    return *this;
  }
  ~Plan() {
    if (op) cublasLtMatmulDescDestroy(op);
    for (auto* l : {first, second, out})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
};

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, const LtLayout& l, std::int64_t batch) {
  cublasLtMatrixLayout_t layout = nullptr;
  CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&layout, type, std::uint64_t(l.rows),
                                            std::uint64_t(l.cols), std::int64_t(l.ld)));
  if (batch > 1) {
    const std::int32_t count = std::int32_t(batch);
    const std::int64_t stride = l.batch_stride;
    CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                    &count, sizeof(count)));
    CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return layout;
}

}  // namespace

struct LtGemm::State {
  Backend& backend;
  int gpu;
  cudaStream_t stream;
  cublasLtHandle_t handle = nullptr;
  Tensor workspace;
  PlanCache<Plan> plans;

  Plan build(const GemmKey& key) {
    const LtProblem p = lt_problem(key);
    Plan plan;
    CUBLASLT_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = p.first.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = p.second.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    plan.first = make_layout(lt_type(key.ab), p.first, key.batch);
    plan.second = make_layout(lt_type(key.ab), p.second, key.batch);
    plan.out = make_layout(lt_type(key.c), p.out, key.batch);

    cublasLtMatmulPreference_t pref = nullptr;
    CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t ws = workspace.nbytes();
    const std::uint32_t align = std::uint32_t(key.alignment);
    cublasStatus_t rc = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      if (rc == CUBLAS_STATUS_SUCCESS)
        rc = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
    }
    cublasLtMatmulHeuristicResult_t found_algos[kLtCandidates] = {};
    int found = 0;
    if (rc == CUBLAS_STATUS_SUCCESS)
      rc = cublasLtMatmulAlgoGetHeuristic(handle, plan.op, plan.first, plan.second, plan.out,
                                          plan.out, pref, kLtCandidates, found_algos, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    // NOT_SUPPORTED: no algorithm for this key (the key then runs classic cuBLAS); any other
    // failure is a wrong descriptor or attribute, a bug here.
    if (rc != CUBLAS_STATUS_NOT_SUPPORTED)
      CUBLASLT_CHECK_STATUS("cublasLtMatmulPreferenceSetAttribute/cublasLtMatmulAlgoGetHeuristic",
                            rc);
    for (int i = 0; rc == CUBLAS_STATUS_SUCCESS && i < found; ++i) {
      if (found_algos[i].state == CUBLAS_STATUS_SUCCESS && found_algos[i].workspaceSize <= ws)
        plan.algos.push_back(found_algos[i].algo);
    }
    plan.choice = LtChoice(
        int(plan.algos.size()),
        rc == CUBLAS_STATUS_SUCCESS
            ? fmt::format("the heuristic offered no algorithm within {} bytes of workspace", ws)
            : "the heuristic returned " + status_name(rc));
    return plan;
  }
};

LtGemm::LtGemm(Backend& backend, int gpu, cudaStream_t stream, int compute_capability_major)
    : state_(new State{backend, gpu, stream}) {
  CUDA_CHECK(cudaSetDevice(gpu));
  CUBLASLT_CHECK(cublasLtCreate(&state_->handle));
  state_->workspace =
      backend.empty({std::int64_t(lt_workspace_bytes(compute_capability_major))}, DType::U8);
}

LtGemm::~LtGemm() {
  if (state_->handle) cublasLtDestroy(state_->handle);
}

bool LtGemm::run(bool trans_a, bool trans_b, std::int64_t batch, std::int64_t m, std::int64_t n,
                 std::int64_t k, double alpha, const Tensor& a, const Tensor& b, double beta,
                 const Tensor& c) {
  GemmKey key{trans_a, trans_b, batch, m, n, k, a.dtype(), c.dtype(), 16};
  const std::size_t ab = dtype_size(a.dtype()), cb = dtype_size(c.dtype());
  const std::int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n, ldc = n;
  // Base addresses and leading dimensions in bytes; the batch strides only when there is a batch
  // (an odd m*k of a single GEMM must not lower the alignment cuBLASLt is promised).
  const auto at = [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.raw()); };
  key.alignment = common_alignment({at(a), at(b), at(c), std::uintptr_t(lda * ab),
                                    std::uintptr_t(ldb * ab), std::uintptr_t(ldc * cb)});
  if (batch > 1) {
    key.alignment = std::min(
        key.alignment, common_alignment({std::uintptr_t(m * k * ab), std::uintptr_t(k * n * ab),
                                         std::uintptr_t(m * n * cb)}));
  }
  State& s = *state_;
  CUDA_CHECK(cudaSetDevice(s.gpu));  // this thread may have last used another GPU
  Plan& plan = s.plans.get(key, [&] { return s.build(key); });
  const float al = float(alpha), be = float(beta);
  while (!plan.choice.classic()) {
    // A refusal is found before any work is queued: c is untouched, the next candidate may run.
    const cublasStatus_t rc =
        cublasLtMatmul(s.handle, plan.op, &al, b.raw(), plan.first, a.raw(), plan.second, &be,
                       c.raw(), plan.out, c.raw(), plan.out, &plan.algos[plan.choice.current()],
                       s.workspace.raw(), s.workspace.nbytes(), s.stream);
    if (rc == CUBLAS_STATUS_SUCCESS) return true;
    if (rc != CUBLAS_STATUS_NOT_SUPPORTED) CUBLASLT_CHECK_STATUS("cublasLtMatmul", rc);
    plan.choice.refuse("cublasLtMatmul returned " + status_name(rc) + " for each of the " +
                       std::to_string(plan.algos.size()) + " algorithms the heuristic offered");
  }
  if (first_classic_fallback(key)) spdlog::warn(classic_fallback_message(key, plan.choice.why()));
  return false;
}

std::int64_t LtGemm::plans_built() const { return state_->plans.builds(); }
std::int64_t LtGemm::plans_reused() const { return state_->plans.hits(); }

}  // namespace carousel::gpu
