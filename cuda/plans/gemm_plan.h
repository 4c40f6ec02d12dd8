// gemm_plan.h — what the cuBLASLt GEMM path decides without a GPU: the key a matmul plan is cached
// under, the row-major → column-major operand layouts, and the workspace size. Plain C++ so CPU
// tests check them; cuda/fast/lt_gemm.cu turns a key into cuBLASLt descriptors once and reuses them.
//
// A plan (descriptors + the heuristic's algorithms) depends on the transposes, the sizes, the
// batch, the dtypes and the operands' alignment (cuBLASLt picks kernels by the alignment it is
// promised): those are the key. alpha and beta are arguments of each call, not of the plan.
// A key cuBLASLt cannot run (no algorithm, or every one refused) goes to classic cuBLAS for good
// (LtChoice), said once per process and key: one odd GEMM shape must not stop a training run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "compute/dtype.h"
#include "compute/error.h"

namespace carousel::gpu {

struct GemmKey {
  bool trans_a = false, trans_b = false;
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  DType ab = DType::F32, c = DType::F32;
  int alignment = 16;  // bytes every operand's base and batch stride are aligned to (16, 8, 4, 2)
  // (nvcc compiles this header as C++17: no operator<=>.)
  bool operator<(const GemmKey& o) const {
    return std::tie(trans_a, trans_b, batch, m, n, k, ab, c, alignment) <
           std::tie(o.trans_a, o.trans_b, o.batch, o.m, o.n, o.k, o.ab, o.c, o.alignment);
  }
};
std::string describe(const GemmKey& key);  // "bf16 [2048x5632] = [2048x2048] x [2048x5632]^T"

// The largest power of two up to 16 dividing every address and the batch strides in bytes.
int common_alignment(std::initializer_list<std::uintptr_t> addresses_and_strides);

// One operand of the column-major problem cuBLASLt solves: row-major C[m,n] = op(A) op(B) is
// column-major C^T[n,m] = op(B)^T op(A)^T, so cuBLASLt's first operand is B and its second A.
struct LtLayout {
  std::int64_t rows, cols, ld, batch_stride;
  bool transposed;
};
struct LtProblem {
  LtLayout first, second, out;  // cuBLASLt's A (= our b), B (= our a), C/D (= our c)
};
LtProblem lt_problem(const GemmKey& key);

// cuBLASLt's workspace: 32 MiB on Hopper (what NVIDIA recommends there for its fastest kernels),
// 4 MiB before. One per backend, from its memory pool, reused by every GEMM on its stream.
std::size_t lt_workspace_bytes(int compute_capability_major);

// How many algorithms cuBLASLt's heuristic is asked for, best first: the candidates a plan tries.
inline constexpr int kLtCandidates = 8;

// Which of a plan's candidate algorithms runs, or that its key runs on classic cuBLAS. The first
// candidate that cublasLtMatmul accepts stays chosen; a refused one (NOT_SUPPORTED) gives way to
// the next; with none left, or none offered by the heuristic, the key is classic from then on.
class LtChoice {
 public:
  // `why`: cuBLASLt's status when the heuristic offered no candidate.
  explicit LtChoice(int candidates, std::string why = {})
      : candidates_(candidates), why_(std::move(why)) {}
  bool classic() const { return current_ >= candidates_; }
  int current() const {
    CAROUSEL_ASSERT(!classic(), "LtChoice: no cuBLASLt candidate is left");
    return current_;
  }
  // The current candidate was refused with cuBLASLt's status `why`: try the next. Returns whether
  // one is left.
  bool refuse(std::string why) {
    why_ = std::move(why);
    ++current_;
    return !classic();
  }
  // The last refusal's status (or why the heuristic offered none).
  const std::string& why() const { return why_; }

 private:
  int candidates_;
  int current_ = 0;
  std::string why_;
};

// The warning for a key that runs on classic cuBLAS, naming the shape and cuBLASLt's status.
std::string classic_fallback_message(const GemmKey& key, const std::string& why);
// True the first time this process asks about `key`: the warning is said once per shape, not
// once per backend or call.
bool first_classic_fallback(const GemmKey& key);

// Whether cuda/fast/grouped_gemm.cu passes a float32 C beside bfloat16 A and B to cuBLAS' grouped
// GEMM. Off: one GEMM per group (cuBLASLt takes the mix), until a GPU shows that
// cublasGemmGroupedBatchedEx does too; test_cuda_backend's probe turns it on to find out.
bool grouped_gemm_mixed_types();
void set_grouped_gemm_mixed_types(bool on);

// Plans built once per key and reused; counts builds and reuses (the proof reports them).
template <class Plan>
class PlanCache {
 public:
  template <class Build>
  Plan& get(const GemmKey& key, Build&& build) {
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      ++hits_;
      return it->second;
    }
    ++builds_;
    return plans_.emplace(key, build()).first->second;
  }
  std::int64_t builds() const { return builds_; }
  std::int64_t hits() const { return hits_; }
  std::size_t size() const { return plans_.size(); }

 private:
  std::map<GemmKey, Plan> plans_;
  std::int64_t builds_ = 0, hits_ = 0;
};

}  // namespace carousel::gpu
