// float8.h — the two float8 formats of float8 training (docs/float8.md) and their casts from and
// to float32, one definition for the CPU backend and the CUDA kernels (CAROUSEL_HD), so a value
// quantises to the same bits on both.
//
//   E4M3 ("fn": finite, no infinities): bias 7, 3 mantissa bits, largest finite 448 (0x7e),
//        NaN 0x7f / 0xff; Transformer Engine's format for activations and weights.
//   E5M2 (IEEE-like): bias 15, 2 mantissa bits, largest finite 57344 (0x7b), infinity 0x7c,
//        NaN 0x7e / 0xfe; the format for gradients.
//
// float32 -> float8 rounds to nearest, ties to even, and SATURATES: a magnitude above the largest
// finite value, infinity included, becomes the largest finite value with its sign (PTX's
// cvt.satfinite, and what clamping to +-max before an ml_dtypes cast gives); NaN stays NaN (the
// sign kept, the payload not: 0x7f | sign for E4M3, 0x7e | sign for E5M2, as ml_dtypes); a
// magnitude below half the smallest subnormal becomes a zero of the same sign. float8 -> float32
// is exact.
//
// Why written by hand: no library carousel may use does this for C++ host code. CUDA's
// cuda_fp8.h converts on the device (and its host fallbacks are not the CPU oracle's business),
// ml_dtypes is Python (it is the independent reference of tests/compute/float8_casts.py), and
// Eigen, OpenBLAS and the Debian packages carousel builds on have no float8. The encoding is
// plain integer arithmetic on float32's bits, so it gives the same bits on any host and device.
#pragma once

#include <cstdint>

#include "compute/bfloat16.h"     // math::float_bits, float_from_bits
#include "compute/elementwise.h"  // CAROUSEL_HD

namespace carousel {

enum class Float8Format : std::uint8_t { E4M3, E5M2 };

constexpr const char* float8_name(Float8Format f) {
  return f == Float8Format::E4M3 ? "e4m3" : "e5m2";
}

// The largest finite value: 448 (E4M3), 57344 (E5M2).
CAROUSEL_HD float float8_max(Float8Format f) { return f == Float8Format::E4M3 ? 448.0f : 57344.0f; }

namespace math {

// float32 -> float8 bits (rounding and saturation as above).
CAROUSEL_HD std::uint8_t float8_encode(float x, Float8Format f) {
  const bool e4m3 = f == Float8Format::E4M3;
  const int mant = e4m3 ? 3 : 2;   // mantissa bits
  const int bias = e4m3 ? 7 : 15;  // exponent bias
  const std::uint32_t u = float_bits(x);
  const auto sign = std::uint8_t((u >> 24) & 0x80u);
  const std::uint32_t a = u & 0x7fffffffu;  // |x| as bits: monotone in |x|
  if (a > 0x7f800000u) return std::uint8_t(sign | (e4m3 ? 0x7fu : 0x7eu));  // NaN
  const std::uint8_t max_bits = e4m3 ? 0x7eu : 0x7bu;
  if (a >= float_bits(float8_max(f))) return std::uint8_t(sign | max_bits);  // saturate (inf too)
  const int e = int(a >> 23) - 127;  // unbiased exponent; float32 subnormals: -127
  const int emin = 1 - bias;         // the smallest normal exponent of the float8 format
  if (e >= emin) {
    // Normal in float8: round the float32 bits to `mant` mantissa bits, ties to even; a carry
    // moves into the exponent, as it should. |x| < max, so the result stays finite.
    const int shift = 23 - mant;
    const std::uint32_t rounded = (a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u)) >> shift;
    return std::uint8_t(sign | (rounded - (std::uint32_t(127 - bias) << mant)));
  }
  // Subnormal in float8 (or zero): |x| in units of the smallest subnormal 2^(emin - mant) is
  // significand x 2^(e - 23 - emin + mant); float32's own subnormals (e = -127) are far below
  // half of any float8 subnormal and round to zero.
  if (e == -127) return sign;
  const std::uint32_t sig = (a & 0x7fffffu) | 0x800000u;
  const int s = 23 - mant + emin - e;  // > 23 - mant: the right shift to the subnormal units
  if (s > 25) return sign;             // below half the smallest subnormal
  std::uint32_t m = sig >> s;
  const std::uint32_t rem = sig & ((1u << s) - 1u), half = 1u << (s - 1);
  if (rem > half || (rem == half && (m & 1u))) ++m;  // m = 1 << mant: the smallest normal
  return std::uint8_t(sign | m);
}

// float8 bits -> float32 (exact). NaN comes back as float32's quiet NaN with the sign.
CAROUSEL_HD float float8_decode(std::uint8_t v, Float8Format f) {
  const bool e4m3 = f == Float8Format::E4M3;
  const int mant = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const std::uint32_t sign = std::uint32_t(v & 0x80u) << 24;
  const std::uint32_t exp = (v & 0x7fu) >> mant, m = v & ((1u << mant) - 1u);
  const std::uint32_t exp_all = e4m3 ? 0xfu : 0x1fu;
  if (e4m3 && (v & 0x7fu) == 0x7fu) return float_from_bits(sign | 0x7fc00000u);
  if (!e4m3 && exp == exp_all) return float_from_bits(sign | (m == 0 ? 0x7f800000u : 0x7fc00000u));
  if (exp == 0) {  // zero or subnormal: m x 2^(1 - bias - mant), exact in float32
    const float unit = float_from_bits(std::uint32_t(127 + 1 - bias - mant) << 23);
    return float_from_bits(sign | float_bits(float(m) * unit));
  }
  return float_from_bits(sign | ((exp + 127 - bias) << 23) | (m << (23 - mant)));
}

// x rounded to the float8 grid, as float32: decode(encode(x)).
CAROUSEL_HD float float8_round(float x, Float8Format f) {
  return float8_decode(float8_encode(x, f), f);
}

// One element of Backend::quantize_float8: x scaled (one float32 multiply, never fused) and
// rounded to the float8 grid.
CAROUSEL_HD float float8_quantize(float x, float scale, Float8Format f) {
  return float8_round(x * scale, f);
}

// The running amax with the next magnitude: the larger, NaN once either is NaN (a max that
// skipped NaN would hide a non-finite tensor behind a finite scale).
CAROUSEL_HD float amax_combine(float running, float magnitude) {
  if (running != running || magnitude != magnitude) return float_from_bits(0x7fc00000u);
  return magnitude > running ? magnitude : running;
}

}  // namespace math

// The tensorwise (current) scale of a tensor whose largest magnitude is `amax`: the factor that
// maps amax onto the format's largest finite value, s = max / amax, in float32 (what a GPU's
// scale pointers hold). Conventions (docs/float8.md):
//   amax = 0 (an all-zero tensor): s = 1, nothing to scale, zeros quantise to zeros;
//   amax so small that max / amax overflows float32: s = the largest finite float32 (never
//     infinity, whose product with a zero would be NaN);
//   amax infinite or NaN (the tensor holds one): s = NaN, so the quantised tensor is all NaN and
//     the step's loss and gradients carry it to the run's non-finite policy (the optimizer's
//     check stops the run naming the parameter, or skips the step) — never a silent NaN.
inline float float8_scale(Float8Format f, float amax) {
  const std::uint32_t bits = math::float_bits(amax) & 0x7fffffffu;
  if (bits >= 0x7f800000u) return math::float_from_bits(0x7fc00000u);
  if (bits == 0) return 1.0f;
  const double s = double(float8_max(f)) / double(math::float_from_bits(bits));
  return s >= 3.4028234663852886e38 ? 3.4028234663852886e38f : float(s);
}

}  // namespace carousel
