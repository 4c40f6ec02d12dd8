// bf16_staging.h — stage_bf16(): the one place where a Backend op without a native bfloat16
// kernel runs on float32 stand-ins of its bf16 arguments (backend.cpp), and where the CPU
// rehearsal of the GPU's fast tier makes its stand-ins (cuda/plans/rehearsal_backend.cpp).
//
// An op marks its tensor arguments In{t} (read) or Out{t} (written; also read, for ops that
// accumulate) and passes the others as they are:
//
//   if (stage_bf16(*this, Op::axpy, &Backend::axpy, alpha, In{x}, Out{y})) return;
//
// When an In or Out tensor is bfloat16 and the backend has no native kernel for the op
// (Backend::has_native_bf16), each bf16 argument is widened to a float32 copy (exact: every
// bf16 value is a float32), the op runs again on the copies, and each bf16 Out is rounded once
// from its copy. That is what a bf16 kernel computing in float32 registers does, so the CPU
// backend (the oracle) and the CUDA backend agree, and a native kernel can replace staging op
// by op with staging as its oracle. A tensor passed twice (in place) gets one stand-in.
// Returns false (or an empty optional, for ops with a result) when the op should run as is.
#pragma once

#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "compute/backend.h"

namespace carousel::detail {

struct In {
  const Tensor& t;
};
struct Out {
  const Tensor& t;
};

// The float32 stand-ins of one staged op call.
class Float32Staging {
 public:
  explicit Float32Staging(Backend& be) : be_(be) {}
  Tensor widen(const Tensor& t) {
    if (t.dtype() != DType::BF16) return t;
    for (const auto& [original, wide] : staged_) {
      if (original.raw() == t.raw() && original.numel() == t.numel()) return wide;
    }
    Tensor wide = be_.empty(t.shape(), DType::F32);
    be_.cast(t, wide);
    staged_.push_back({t, wide});
    return wide;
  }
  Tensor widen(const In& a) { return widen(a.t); }
  Tensor widen(const Out& a) { return widen(a.t); }
  template <class T>
  const T& widen(const T& other) {  // a non-tensor argument (or token ids): passed as is
    return other;
  }

  void note_output(const Out& a) { outputs_.push_back(a.t); }
  template <class T>
  void note_output(const T&) {}

  void finish() {  // rounds each bf16 output once, in the order of the arguments
    for (const Tensor& out : outputs_) {
      if (out.dtype() == DType::BF16) be_.cast(widen(out), out);
    }
  }

 private:
  Backend& be_;
  std::vector<Tensor> outputs_;
  std::vector<std::pair<Tensor, Tensor>> staged_;  // (bf16 argument, float32 stand-in)
};

template <class T>
bool is_bf16_argument(const T& arg) {
  if constexpr (std::is_same_v<T, In> || std::is_same_v<T, Out>) {
    return arg.t.defined() && arg.t.dtype() == DType::BF16;
  } else {
    return false;
  }
}

template <class R, class... Params, class... Args>
auto stage_bf16(Backend& be, Backend::Op op, R (Backend::*fn)(Params...), const Args&... args) {
  using Result = std::conditional_t<std::is_void_v<R>, bool, std::optional<R>>;
  if (!(is_bf16_argument(args) || ...) || be.has_native_bf16(op)) return Result{};
  Float32Staging f(be);
  (f.note_output(args), ...);
  if constexpr (std::is_void_v<R>) {
    (be.*fn)(f.widen(args)...);
    f.finish();
    return Result{true};
  } else {
    R result = (be.*fn)(f.widen(args)...);
    f.finish();
    return Result{std::move(result)};
  }
}

}  // namespace carousel::detail
