// op_check.h — the argument checks of the Backend front end (backend.cpp), shared by its ops.
//
// Every failure is a carousel::Error (CAROUSEL_CHECK: a caller's mistake) whose message starts
// with the op name and names the argument and the shapes involved. Internal to cuda/.
#pragma once

#include <string>
#include <string_view>

#include "compute/backend.h"

namespace carousel::detail {

// Collects the checks of one op call; every failure message starts with the op name.
class OpCheck {
 public:
  OpCheck(Backend::Op op, const Backend& backend)
      : op_(op_name(op)), backend_(backend), native_bf16_(backend.has_native_bf16(op)) {}

  // Defined, on this backend's device, float32 or float64 (every op computes in these), or
  // bfloat16 where the backend has a native bf16 kernel for this op.
  const OpCheck& floating(const char* name, const Tensor& t) const {
    on_device(name, t);
    CAROUSEL_CHECK(
        t.dtype() == DType::F32 || t.dtype() == DType::F64 ||
            (native_bf16_ && t.dtype() == DType::BF16),
        "{}: argument '{}' is {}, but {} runs in float32 or float64{}", op_, name,
        dtype_name(t.dtype()), op_,
        t.dtype() == DType::BF16 ? " (bfloat16 here: parameters and moments stay float32)" : "");
    return *this;
  }
  // Like floating(), bfloat16 allowed too (ops that load bf16 and compute in float32).
  const OpCheck& floating_or_bf16(const char* name, const Tensor& t) const {
    on_device(name, t);
    CAROUSEL_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64 || t.dtype() == DType::BF16,
                   "{}: argument '{}' is {}, not a floating dtype {} takes (float32, float64, "
                   "bfloat16)",
                   op_, name, dtype_name(t.dtype()), op_);
    return *this;
  }
  const OpCheck& tokens(const char* name, const Tensor& t) const {
    on_device(name, t);
    CAROUSEL_CHECK(t.dtype() == DType::I32, "{}: argument '{}' must be int32 token ids, got {}",
                   op_, name, t.describe());
    return *this;
  }
  void on_device(const char* name, const Tensor& t) const {
    CAROUSEL_CHECK(t.defined(), "{}: argument '{}' is an undefined tensor", op_, name);
    CAROUSEL_CHECK(&t.device() == &backend_.allocator(),
                   "{}: argument '{}' lives on {} but this backend runs on {}", op_, name,
                   t.device().name(), backend_.allocator().name());
  }
  // `t` has the same dtype as `ref` (which was checked already).
  const OpCheck& same_dtype(const char* name, const Tensor& t, const char* ref_name,
                            const Tensor& ref) const {
    on_device(name, t);
    CAROUSEL_CHECK(t.dtype() == ref.dtype(), "{}: argument '{}' is {} but must be {} like '{}'",
                   op_, name, dtype_name(t.dtype()), dtype_name(ref.dtype()), ref_name);
    return *this;
  }
  // `t` holds statistics of `ref` (rstd, lse, losses, RoPE tables): stats_dtype(ref's dtype), so
  // float32 beside bfloat16 activations and the activations' dtype otherwise.
  const OpCheck& stats(const char* name, const Tensor& t, const char* ref_name,
                       const Tensor& ref) const {
    on_device(name, t);
    CAROUSEL_CHECK(t.dtype() == stats_dtype(ref.dtype()),
                   "{}: argument '{}' is {} but must be {} for {} '{}' (statistics of bfloat16 "
                   "activations are float32)",
                   op_, name, dtype_name(t.dtype()), dtype_name(stats_dtype(ref.dtype())),
                   dtype_name(ref.dtype()), ref_name);
    return *this;
  }
  // `t` accumulates a parameter's gradient from `ref`'s values (rmsnorm_backward's dweight,
  // embedding_backward's dtable): `ref`'s dtype, or float32 beside a bfloat16 `ref` (bfloat16
  // runs keep every parameter gradient in float32; the kernels add in float32 either way).
  const OpCheck& accumulator(const char* name, const Tensor& t, const char* ref_name,
                             const Tensor& ref) const {
    on_device(name, t);
    CAROUSEL_CHECK(
        t.dtype() == ref.dtype() || (ref.dtype() == DType::BF16 && t.dtype() == DType::F32),
        "{}: argument '{}' is {} but must be {} like '{}'{}", op_, name, dtype_name(t.dtype()),
        dtype_name(ref.dtype()), ref_name, ref.dtype() == DType::BF16 ? " or float32" : "");
    return *this;
  }
  // `t` has the same shape and dtype as `ref`.
  const OpCheck& like(const char* name, const Tensor& t, const char* ref_name,
                      const Tensor& ref) const {
    same_dtype(name, t, ref_name, ref);
    CAROUSEL_CHECK(t.shape() == ref.shape(),
                   "{}: argument '{}' has shape {} but must match '{}' {}", op_, name,
                   shape_str(t.shape()), ref_name, shape_str(ref.shape()));
    return *this;
  }
  // `t` has exactly `expected`; `why` says where the expectation comes from.
  const OpCheck& shape(const char* name, const Tensor& t, const Shape& expected,
                       const std::string& why) const {
    CAROUSEL_CHECK(t.shape() == expected, "{}: argument '{}' has shape {} but must be {} ({})", op_,
                   name, shape_str(t.shape()), shape_str(expected), why);
    return *this;
  }
  const OpCheck& rank(const char* name, const Tensor& t, int rank, const char* layout) const {
    CAROUSEL_CHECK(t.rank() == rank, "{}: argument '{}' has shape {} but must have rank {} ({})",
                   op_, name, shape_str(t.shape()), rank, layout);
    return *this;
  }
  const OpCheck& that(bool ok, const std::string& message) const {
    CAROUSEL_CHECK(ok, "{}: {}", op_, message);
    return *this;
  }

 private:
  const char* op_;
  const Backend& backend_;
  bool native_bf16_;
};

// Ids index tables: every id must be in [0, vocab) before any backend reads with it. Checked
// on the host (a copy of the ids), once for all backends.
// Only where device memory is host memory (the CPU backend): on a GPU the check would copy the
// ids to the host and wait for the stream at every embedding and loss op, stalling the pipeline
// and ruling out CUDA graph capture. Token ids reaching a GPU were checked on the host where they
// were read (host/data/token_files.cpp: every id of a shard against the vocabulary); so were those of a
// captured step (compute/recording/step_graph.h), whose replays run no check.
inline void check_token_range(Backend& be, const char* op, const char* arg, const Tensor& tokens,
                              std::int64_t vocab) {
  if (!be.allocator().host_accessible() || be.capturing()) return;
  const auto ids = be.to_host<std::int32_t>(tokens);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    CAROUSEL_CHECK(ids[i] >= 0 && ids[i] < vocab,
                   "{}: {} {} at position {} of '{}' {} is outside the vocabulary [0, {})", op,
                   std::string_view(arg) == "targets" ? "target" : "token", ids[i], i, arg,
                   shape_str(tokens.shape()), vocab);
  }
}

// a, b, c alike (float32 or float64), or a, b bfloat16 with c float32 or bfloat16.
inline void check_gemm_dtypes(const OpCheck& check, const Tensor& a, const Tensor& b,
                              const Tensor& c) {
  check.floating_or_bf16("a", a).same_dtype("b", b, "a", a);
  if (a.dtype() == DType::BF16) {
    check.floating_or_bf16("c", c).that(
        c.dtype() == DType::BF16 || c.dtype() == DType::F32,
        fmt::format("bfloat16 inputs accumulate into float32 or bfloat16, not {} ('c' {})",
                    dtype_name(c.dtype()), c.describe()));
  } else {
    check.same_dtype("c", c, "a", a);
  }
}

// "the last dimension of x [3,64]"
inline std::string from(const char* what, const char* name, const Tensor& t) {
  return fmt::format("{} of '{}' {}", what, name, shape_str(t.shape()));
}

}  // namespace carousel::detail
