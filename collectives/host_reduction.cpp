// host_reduction.cpp — the rank-order host reduction (common.h: reduce_in_rank_order), the one
// loop of the local and MPI communicators, so both give bitwise the same result.
//
// Per element type: float32/float64 combine in their own precision; bfloat16 and float16 load
// into float32, combine, and round the running result back to nearest even after every rank
// (what a ring of half-precision buffers does); integers wrap around modulo 2^bits (computed in
// unsigned arithmetic, so no signed overflow) and avg divides the wrapped sum by the rank count,
// truncated toward zero, as NCCL's integer avg does. Min and max of floating types are fmin and
// fmax, as NCCL's kernels (src/device/reduce_kernel.h: fminf/fmaxf, fmin/fmax, and __hmin/__hmax
// for 16-bit floats): a NaN loses to a number, so the result is NaN only where every rank's
// element is, whatever the rank order.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "collectives/common.h"
#include "compute/bfloat16.h"
#include "compute/dispatch.h"
#include "compute/error.h"
#include "compute/float16.h"

namespace carousel::comm {

namespace {

// How elements of T are combined: Math is the type arithmetic happens in.
template <class T>
struct Element {
  using Math = T;
  static Math load(T x) { return x; }
  static T store(Math x) { return x; }
};
template <>
struct Element<bf16> {
  using Math = float;
  static float load(bf16 x) { return math::to_float(x); }
  static bf16 store(float x) { return math::to_bf16(x); }
};
template <>
struct Element<f16> {
  using Math = float;
  static float load(f16 x) { return math::to_float(x); }
  static f16 store(float x) { return math::to_f16(x); }
};

// Wraparound arithmetic for integers: unsigned, at least as wide as unsigned int (no promotion
// to a signed int that could overflow), converted back modulo 2^bits (defined since C++20).
template <class M>
using Unsigned =
    std::conditional_t<(sizeof(M) < sizeof(unsigned)), unsigned, std::make_unsigned_t<M>>;

template <class M>
M add(M a, M b) {
  if constexpr (std::is_integral_v<M>)
    return M(Unsigned<M>(std::make_unsigned_t<M>(a)) + Unsigned<M>(std::make_unsigned_t<M>(b)));
  else
    return a + b;
}
template <class M>
M multiply(M a, M b) {
  if constexpr (std::is_integral_v<M>)
    return M(Unsigned<M>(std::make_unsigned_t<M>(a)) * Unsigned<M>(std::make_unsigned_t<M>(b)));
  else
    return a * b;
}

// min (kMin) or max: fmin / fmax for floating types (see the header comment), comparisons
// otherwise.
template <bool kMin, class M>
M extremum(M a, M b) {
  if constexpr (std::is_floating_point_v<M>)
    return kMin ? std::fmin(a, b) : std::fmax(a, b);
  else
    return kMin ? std::min(a, b) : std::max(a, b);
}

// o[i] = o[i] op x[i]; one loop per op (the op is not decided per element), so the compiler
// vectorizes the float, double and integer loops.
template <class T, class Op>
void combine_all(T* o, const T* x, std::int64_t n, Op op) {
  using E = Element<T>;
  for (std::int64_t i = 0; i < n; ++i) o[i] = E::store(op(E::load(o[i]), E::load(x[i])));
}

// out[i] = in[i] when `first`, else out[i] op in[i] (avg adds); n elements of dtype.
void accumulate(DType dtype, ReduceOp op, void* out, const void* in, std::int64_t n, bool first) {
  dispatch(ReduceTypes{}, "host reduction", dtype, [&](auto tag) {
    using T = decltype(tag);
    using M = typename Element<T>::Math;
    T* o = static_cast<T*>(out);
    const T* x = static_cast<const T*>(in);
    if (first) {
      std::copy(x, x + n, o);
      return;
    }
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        return combine_all(o, x, n, [](M a, M b) { return add(a, b); });
      case ReduceOp::Prod:
        return combine_all(o, x, n, [](M a, M b) { return multiply(a, b); });
      case ReduceOp::Min:
        return combine_all(o, x, n, [](M a, M b) { return extremum<true>(a, b); });
      case ReduceOp::Max:
        return combine_all(o, x, n, [](M a, M b) { return extremum<false>(a, b); });
    }
    CAROUSEL_ASSERT(false, "reduce op {} has no host implementation", int(op));
  });
}

// The last step of an avg: data[i] /= by. Nothing for the other ops.
void finish_reduction(DType dtype, ReduceOp op, void* data, std::int64_t n, int by) {
  if (op != ReduceOp::Avg) return;
  CAROUSEL_ASSERT(by > 0, "avg over {} ranks", by);
  dispatch(ReduceTypes{}, "avg", dtype, [&](auto tag) {
    using T = decltype(tag);
    using E = Element<T>;
    T* d = static_cast<T*>(data);
    for (std::int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_integral_v<T>) {
        d[i] = T(std::int64_t(d[i]) / by);  // in int64: `by` may not fit in T (int8, 200 ranks)
      } else {
        using M = typename E::Math;
        d[i] = E::store(E::load(d[i]) / M(by));
      }
    }
  });
}

}  // namespace

void reduce_in_rank_order(DType dtype, ReduceOp op, const std::vector<const void*>& inputs,
                          void* out, std::int64_t n) {
  CAROUSEL_ASSERT(!inputs.empty(), "a reduction over no ranks");
  for (std::size_t r = 0; r < inputs.size(); ++r) accumulate(dtype, op, out, inputs[r], n, r == 0);
  finish_reduction(dtype, op, out, n, int(inputs.size()));
}

}  // namespace carousel::comm
