// gemm_plan.cpp — cuBLASLt plan keys, layouts and workspace (see gemm_plan.h).
#include "cuda/plans/gemm_plan.h"

#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <set>

namespace carousel::gpu {

std::string describe(const GemmKey& k) {
  const std::string batch = k.batch > 1 ? fmt::format("{} x ", k.batch) : "";
  return fmt::format("{}{}{} [{}x{}] = [{}x{}]{} x [{}x{}]{}", batch, dtype_name(k.ab),
                     k.c != k.ab ? fmt::format(" -> {}", dtype_name(k.c)) : "", k.m, k.n,
                     k.trans_a ? k.k : k.m, k.trans_a ? k.m : k.k, k.trans_a ? "^T" : "",
                     k.trans_b ? k.n : k.k, k.trans_b ? k.k : k.n, k.trans_b ? "^T" : "");
}

int common_alignment(std::initializer_list<std::uintptr_t> values) {
  int align = 16;
  for (std::uintptr_t v : values) {
    while (align > 1 && v % std::uintptr_t(align) != 0) align /= 2;
  }
  return align;
}

LtProblem lt_problem(const GemmKey& k) {
  // Row-major a is [m,k] ([k,m] when trans_a): column-major, that is [k,m] with ld k (or [m,k]
  // with ld m) — the transpose cuBLASLt wants for its second operand comes for free.
  LtProblem p;
  p.first = k.trans_b ? LtLayout{k.k, k.n, k.k, k.n * k.k, true}
                      : LtLayout{k.n, k.k, k.n, k.k * k.n, false};
  p.second = k.trans_a ? LtLayout{k.m, k.k, k.m, k.m * k.k, true}
                       : LtLayout{k.k, k.m, k.k, k.m * k.k, false};
  p.out = LtLayout{k.n, k.m, k.n, k.m * k.n, false};
  return p;
}

std::size_t lt_workspace_bytes(int compute_capability_major) {
  return std::size_t(compute_capability_major >= 9 ? 32 : 4) << 20;
}

std::string classic_fallback_message(const GemmKey& key, const std::string& why) {
  return fmt::format(
      "cuBLASLt cannot run the GEMM {} (operands aligned to {} bytes): {}; classic cuBLAS "
      "runs this shape instead (the reference tier's path: correct, maybe slower)",
      describe(key), key.alignment, why);
}

bool first_classic_fallback(const GemmKey& key) {
  static std::mutex mutex;  // backends on several threads (logical devices) share the record
  static std::set<GemmKey> said;
  const std::lock_guard<std::mutex> lock(mutex);
  return said.insert(key).second;
}

namespace {
std::atomic<bool> grouped_mixed{false};
}  // namespace

bool grouped_gemm_mixed_types() { return grouped_mixed.load(); }
void set_grouped_gemm_mixed_types(bool on) { grouped_mixed.store(on); }

}  // namespace carousel::gpu
