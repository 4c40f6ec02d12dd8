// float16.h — conversions to and from IEEE 754 binary16 (the f16 storage type of
// compute/dtype.h), for the host reductions of the communicators and the collective benchmarks.
//
// binary16: sign, 5 exponent bits (bias 15), 10 mantissa bits; largest finite 65504, smallest
// normal 2^-14, subnormals down to 2^-24. float -> f16 rounds to nearest, ties to even (as
// __float2half_rn does); past 65504 + half an ulp (65520) it is infinity; NaN stays a quiet NaN.
// f16 -> float is exact. Host code only (no CAROUSEL_HD): no kernel computes in half.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "compute/dtype.h"

namespace carousel::math {

inline f16 to_f16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  const auto sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t magnitude = u & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) {  // infinity, or NaN (kept quiet)
    return f16{std::uint16_t(sign | 0x7C00u | (magnitude > 0x7F800000u ? 0x0200u : 0u))};
  }
  if (magnitude >= 0x477FF000u) return f16{std::uint16_t(sign | 0x7C00u)};  // >= 65520: inf
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half, in units of 2^-24
    // |x| * 2^24 is exact (a power of two); nearbyint rounds it to nearest even. 1024 units is
    // the smallest normal, whose bits (exponent 1, mantissa 0) are 0x0400: the sum is right.
    const float units = std::nearbyint(std::fabs(x) * 0x1p24f);
    return f16{std::uint16_t(sign | std::uint16_t(units))};
  }
  // Normal: rebias the exponent (127 -> 15), then drop 13 mantissa bits rounding to even; a
  // carry out of the mantissa moves to the next exponent, as it should.
  std::uint32_t rebiased = magnitude - (112u << 23);
  rebiased += 0x0FFFu + ((rebiased >> 13) & 1u);
  return f16{std::uint16_t(sign | (rebiased >> 13))};
}

inline float to_float(f16 h) {
  const std::uint32_t sign = std::uint32_t(h.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (h.bits >> 10) & 0x1Fu, mantissa = h.bits & 0x3FFu;
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in float
    const float v = float(mantissa) * 0x1p-24f;
    return sign ? -v : v;
  }
  std::uint32_t u;
  if (exponent == 31)
    u = sign | 0x7F800000u | (mantissa << 13);  // infinity or NaN
  else
    u = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

}  // namespace carousel::math
