// gemm_plan.h — what the cuBLASLt GEMM path decides without a GPU: the key a matmul plan is cached
// under, the row-major → column-major operand layouts, and the workspace size. Plain C++ so CPU
// tests check them; cuda/lt_gemm.cu turns a key into cuBLASLt descriptors once and reuses them.
//
// A plan (descriptors + the heuristic's algorithm) depends on the transposes, the sizes, the
// batch, the dtypes and the operands' alignment (cuBLASLt picks kernels by the alignment it is
// promised): those are the key. alpha and beta are arguments of each call, not of the plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "compute/dtype.h"

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
