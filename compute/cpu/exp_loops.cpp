// exp_loops.cpp — the exp-bound loops of the CPU backend (attention's softmax, SwiGLU), with
// their AVX2 + FMA copies (see exp_loops.h).
//
// Written by hand because no library we use gives a vector exp that is both fast and the same
// to the bit on every ISA (libmvec's variants differ from each other and from libm). Built with
// -ffp-contract=off (compute/CMakeLists.txt): the only fused multiply-adds are the explicit
// std::fma calls, exactly rounded whether an instruction or libm computes them.
#include "compute/cpu/exp_loops.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "compute/error.h"

namespace carousel::cpu {

namespace {

// float exp in double after a reduction by ln 2 (degree-10 Taylor on |r| <= ln2/2, error
// ~1e-12), rounded once, as glibc's expf does (an earlier float polynomial with ~1 ulp errors
// moved a bf16 pipeline test over its 1e-4 tolerance). Branch-free, so the row loops vectorise;
// every step one std::fma (half the operations of a multiply and an add).
[[gnu::always_inline]] inline float exp_float(float xf) {
  // Clamp below at -87 on the bits: for x <= 0 (and +0) the unsigned order of the bits is the
  // order of -x, up to -inf's. Above those are the NaNs with the sign bit set, what x86 makes of
  // inf - inf or 0 * inf: they stay NaN instead of becoming exp(-87) (a NaN score must not turn
  // into a finite probability). Integer operations: a float compare would not vectorise (GCC
  // keeps it a branch); these do.
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(xf);
  const std::uint32_t negative_nan = 0u - std::uint32_t(bits > 0xff800000u);  // all ones if so
  xf = std::bit_cast<float>((std::min(bits, std::bit_cast<std::uint32_t>(-87.0f)) & ~negative_nan) |
                            (bits & negative_nan));
  const double x = xf;
  const double magic = 6755399441055744.0;  // 1.5 * 2^52: t's low bits hold round(x / ln 2)
  const double t = std::fma(x, 1.4426950408889634, magic);
  const double n = t - magic;
  const double r = std::fma(n, -0.6931471805599453, x);
  // Horner, written out: a loop over the coefficients is not always unrolled (then nothing
  // vectorises).
  double p = 1.0 / 3628800;
  p = std::fma(p, r, 1.0 / 362880);
  p = std::fma(p, r, 1.0 / 40320);
  p = std::fma(p, r, 1.0 / 5040);
  p = std::fma(p, r, 1.0 / 720);
  p = std::fma(p, r, 1.0 / 120);
  p = std::fma(p, r, 1.0 / 24);
  p = std::fma(p, r, 1.0 / 6);
  p = std::fma(p, r, 0.5);
  p = std::fma(p, r, 1.0);
  p = std::fma(p, r, 1.0);
  const std::int64_t ni = std::bit_cast<std::int64_t>(t) - std::bit_cast<std::int64_t>(magic);
  return float(p * std::bit_cast<double>((ni + 1023) << 52));
}
[[gnu::always_inline]] inline double exp_any(double x) { return std::exp(x); }
[[gnu::always_inline]] inline float exp_any(float x) { return exp_float(x); }

template <class T>
[[gnu::always_inline]] inline double exp_row_body(T* row, std::int64_t n, std::int64_t len,
                                                  T shift) {
  T acc[8] = {};
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {  // exp and sum in one pass over the row
    for (int u = 0; u < 8; ++u) {
      const T e = exp_any(row[j + u] - shift);
      row[j + u] = e;
      acc[u] += e;
    }
  }
  for (; j < n; ++j) {
    row[j] = exp_any(row[j] - shift);
    acc[0] += row[j];
  }
  for (j = n; j < len; ++j) row[j] = T(0);
  double sum = 0.0;
  for (int u = 0; u < 8; ++u) sum += double(acc[u]);
  return sum;
}

template <class T>
[[gnu::always_inline]] inline void recompute_p_body(T* s, std::int64_t rows, std::int64_t cols,
                                                    std::int64_t ld, bool diagonal, const T* lse) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = s + r * ld;
    const std::int64_t n = diagonal ? std::min(r + 1, cols) : cols;
    const T shift = lse[r];  // a local, so the loop does not reload it through row's alias
    for (std::int64_t c = 0; c < n; ++c) row[c] = exp_any(row[c] - shift);
    for (std::int64_t c = n; c < cols; ++c) row[c] = T(0);
  }
}

// sigmoid(x) from e = exp(-|x|) in (0, 1]: 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0, and 0
// below -87, where exp_float's clamp would leave e at exp(-87) ~ 1.6e-38 whatever x: silu(x) =
// x sigmoid(x) would then be 1.6e-38 x, growing with |x| (-5.6 at -FLT_MAX) instead of falling
// to 0. The choices go through the bits (integer operations vectorise where a float compare may
// stay a branch); -|x| < -87 is a signed compare of the bits, as both are negative floats.
[[gnu::always_inline]] inline float sigmoid_float(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t minus_abs = bits | 0x80000000u;
  const float e = exp_float(std::bit_cast<float>(minus_abs));  // exp(-|x|)
  const std::uint32_t negative = 0u - (bits >> 31);            // all ones when x < 0
  const bool beyond_clamp =                                    // |x| > 87 (or NaN)
      std::bit_cast<std::int32_t>(minus_abs) > std::bit_cast<std::int32_t>(-87.0f);
  const std::uint32_t clamped = 0u - std::uint32_t(beyond_clamp);  // all ones when beyond
  const float numerator =
      std::bit_cast<float>((std::bit_cast<std::uint32_t>(e) & negative & ~clamped) |
                           (std::bit_cast<std::uint32_t>(1.0f) & ~negative));
  return numerator / (1.0f + e);
}

// The formulas of compute/elementwise.h (math::swiglu, math::swiglu_grad) with this sigmoid.
[[gnu::always_inline]] inline void swiglu_forward_body(const float* gate, const float* up,
                                                       float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g * sigmoid_float(g) * up[i];
  }
}

[[gnu::always_inline]] inline void swiglu_backward_body(const float* dout, const float* gate,
                                                        const float* up, float* dgate, float* dup,
                                                        std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = gate[i], s = sigmoid_float(g), dy = dout[i];
    dgate[i] = dy * up[i] * (s + g * s * (1.0f - s));
    dup[i] = dy * (g * s);
  }
}

// The copies: the bodies above compiled for each ISA (portable: baseline x86-64 or whatever
// the build targets, where std::fma may be a library call and little vectorises).
#define CAROUSEL_EXP_COPY(attributes, suffix)                                                     \
  attributes double exp_row_##suffix(float* row, std::int64_t n, std::int64_t len, float shift) { \
    return exp_row_body(row, n, len, shift);                                                      \
  }                                                                                               \
  attributes void recompute_p_##suffix(float* s, std::int64_t rows, std::int64_t cols,            \
                                       std::int64_t ld, bool diagonal, const float* lse) {        \
    recompute_p_body(s, rows, cols, ld, diagonal, lse);                                           \
  }                                                                                               \
  attributes void swiglu_forward_##suffix(const float* gate, const float* up, float* out,         \
                                          std::int64_t n) {                                       \
    swiglu_forward_body(gate, up, out, n);                                                        \
  }                                                                                               \
  attributes void swiglu_backward_##suffix(const float* dout, const float* gate, const float* up, \
                                           float* dgate, float* dup, std::int64_t n) {            \
    swiglu_backward_body(dout, gate, up, dgate, dup, n);                                          \
  }
CAROUSEL_EXP_COPY(, portable)
#if defined(__x86_64__) && defined(__GNUC__)
#define CAROUSEL_HAVE_EXP_COPIES 1
CAROUSEL_EXP_COPY([[gnu::target("avx2,fma")]], avx2)
// A loop's copies in ExpIsa order, for copy_for.
#define CAROUSEL_COPIES(loop) loop##_portable, loop##_avx2
#else
#define CAROUSEL_COPIES(loop) loop##_portable, loop##_portable
#endif
#undef CAROUSEL_EXP_COPY

// The copy of a loop for `isa`, which must run on this CPU.
template <class Loop>
Loop* copy_for(ExpIsa isa, Loop* portable, Loop* avx2) {
  CAROUSEL_ASSERT(isa == fastest_exp_isa() || runs_on_this_cpu(isa),
                  "exp copy {} does not run on this CPU", int(isa));
  return isa == ExpIsa::avx2 ? avx2 : portable;
}

}  // namespace

bool runs_on_this_cpu(ExpIsa isa) {
  switch (isa) {
    case ExpIsa::portable:
      return true;
#ifdef CAROUSEL_HAVE_EXP_COPIES
    case ExpIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    default:
      return false;
#endif
  }
  return false;
}

ExpIsa fastest_exp_isa() {
  static const ExpIsa isa = runs_on_this_cpu(ExpIsa::avx2) ? ExpIsa::avx2 : ExpIsa::portable;
  return isa;
}

float exp_nonpositive(float x) { return exp_any(x); }
double exp_nonpositive(double x) { return exp_any(x); }

double exp_row(float* row, std::int64_t n, std::int64_t len, float shift, ExpIsa isa) {
  return copy_for(isa, CAROUSEL_COPIES(exp_row))(row, n, len, shift);
}
double exp_row(double* row, std::int64_t n, std::int64_t len, double shift, ExpIsa) {
  return exp_row_body(row, n, len, shift);
}

void recompute_p(float* s, std::int64_t rows, std::int64_t cols, std::int64_t ld, bool diagonal,
                 const float* lse, ExpIsa isa) {
  copy_for(isa, CAROUSEL_COPIES(recompute_p))(s, rows, cols, ld, diagonal, lse);
}
void recompute_p(double* s, std::int64_t rows, std::int64_t cols, std::int64_t ld, bool diagonal,
                 const double* lse, ExpIsa) {
  recompute_p_body(s, rows, cols, ld, diagonal, lse);
}

void swiglu_forward(const float* gate, const float* up, float* out, std::int64_t n, ExpIsa isa) {
  copy_for(isa, CAROUSEL_COPIES(swiglu_forward))(gate, up, out, n);
}

void swiglu_backward(const float* dout, const float* gate, const float* up, float* dgate,
                     float* dup, std::int64_t n, ExpIsa isa) {
  copy_for(isa, CAROUSEL_COPIES(swiglu_backward))(dout, gate, up, dgate, dup, n);
}

}  // namespace carousel::cpu
