// dispatch.h — the one dtype dispatcher: turns a runtime DType into a C++ element type.
//
//   dispatch(FloatTypes{}, "scale", x.dtype(), [&](auto tag) { using T = decltype(tag); ... });
//
// calls the generic lambda with a value of the C++ type that `dtype` names, among the types of
// the list; any other dtype is an internal error naming the op and the dtype (the Backend and
// Communicator front ends reject bad dtypes with a user-facing message before any kernel runs).
// Used by the CPU loops, the CUDA backend (so it compiles as C++17 under nvcc) and the host
// reductions of the communicators; per_dtype() below maps a dtype to a library's type code.
#pragma once

#include <cstdint>

#include "compute/dtype.h"

namespace carousel {

template <class... Ts>
struct TypeList {};
using FloatTypes = TypeList<float, double>;          // what the ops compute in
using StorageTypes = TypeList<float, double, bf16>;  // what cast converts between
// What host reductions combine: every DType.
using ReduceTypes =
    TypeList<float, double, bf16, std::int32_t, f16, std::int8_t, std::uint8_t, std::int64_t>;

namespace detail {
// Throws "internal error: <op> has no <dtype> implementation (it handles <types>)".
[[noreturn]] void unsupported_dtype(const char* op, DType dtype, const DType* handled, int n);
}  // namespace detail

template <class... Ts, class Fn>
void dispatch(TypeList<Ts...>, const char* op, DType dtype, Fn&& fn) {
  const bool done =
      ((dtype == dtype_of<Ts>() ? (static_cast<void>(fn(Ts{})), true) : false) || ...);
  if (!done) {
    constexpr DType handled[] = {dtype_of<Ts>()...};
    detail::unsupported_dtype(op, dtype, handled, int(sizeof...(Ts)));
  }
}

// The value form, for a library's code of each dtype (MPI_Datatype, ncclDataType_t, ...):
// per_dtype(t, f32, f64, bf16, i32, f16, i8, u8, i64) is the argument standing for `t`, one
// table instead of a switch per library.
template <class V>
V per_dtype(DType dtype, V f32, V f64, V bf16, V i32, V f16, V i8, V u8, V i64) {
  switch (dtype) {
    case DType::F32:
      return f32;
    case DType::F64:
      return f64;
    case DType::BF16:
      return bf16;
    case DType::I32:
      return i32;
    case DType::F16:
      return f16;
    case DType::I8:
      return i8;
    case DType::U8:
      return u8;
    case DType::I64:
      return i64;
  }
  return f32;
}

}  // namespace carousel
