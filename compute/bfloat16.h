// bfloat16.h — conversions to and from the bfloat16 storage type (compute/dtype.h), one
// definition for the CPU backend and the CUDA kernels, so a value rounds to the same bits on
// both.
//
// bfloat16 keeps float32's sign and 8 exponent bits and the top 7 mantissa bits. float -> bf16
// rounds to nearest, ties to even (as __float2bfloat16_rn and PyTorch do); NaN stays a (quiet)
// NaN; values past the largest bf16 become infinity. bf16 -> float is exact. Arithmetic is
// never done in bf16: kernels load bf16, compute in float, store bf16.
#pragma once

#include <cstdint>
#include <cstring>

#include "compute/dtype.h"        // struct bf16
#include "compute/elementwise.h"  // CAROUSEL_HD

namespace carousel {

namespace math {

CAROUSEL_HD std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
#endif
}

CAROUSEL_HD float float_from_bits(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
#endif
}

CAROUSEL_HD bf16 to_bf16(float x) {
  const std::uint32_t u = float_bits(x);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) {  // NaN: keep it quiet
    return bf16{std::uint16_t((u >> 16) | 0x0040u)};
  }
  const std::uint32_t tie_to_even = 0x7FFFu + ((u >> 16) & 1u);
  return bf16{std::uint16_t((u + tie_to_even) >> 16)};
}

CAROUSEL_HD float to_float(bf16 h) { return float_from_bits(std::uint32_t(h.bits) << 16); }

// Element conversions used by cast and the bf16 GEMM paths: To(x) for float types, through
// float for bfloat16 (a double rounds to float first).
template <class To>
struct Convert {
  template <class From>
  CAROUSEL_HD static To from(From x) {
    return To(x);
  }
  CAROUSEL_HD static To from(bf16 x) { return To(to_float(x)); }
};
template <>
struct Convert<bf16> {
  template <class From>
  CAROUSEL_HD static bf16 from(From x) {
    return to_bf16(float(x));
  }
  CAROUSEL_HD static bf16 from(bf16 x) { return x; }
};

}  // namespace math

}  // namespace carousel
