// exp_loops.h — the CPU backend's exp-bound loops: exp(score - shift) over rows of an attention
// score tile (compute/cpu/attention.cpp, forward and the backward's recomputation) and SwiGLU's
// sigmoid (compute/cpu/layers.cpp).
//
// They are most of the time outside the GEMMs, so float32 has a copy compiled for AVX2 + FMA
// (four doubles per instruction; the build targets baseline x86-64), chosen once at run time.
// Both copies run the same exactly rounded operations lane by lane, so they give the same bits
// (tests/compute/test_exp_loops.cpp checks it where the CPU has AVX2): results never depend on the
// CPU (a NaN's sign and payload aside, where two NaNs meet). (An AVX-512 copy measured no faster on
// the development VM's AMD EPYC, a Zen 4, which runs 512-bit instructions as two 256-bit halves.)
#pragma once

#include <cstdint>

namespace carousel::cpu {

enum class ExpIsa { portable, avx2 };

ExpIsa fastest_exp_isa();           // the fastest copy this CPU runs
bool runs_on_this_cpu(ExpIsa isa);  // portable always; the others when the CPU has them

// exp(x) for x <= 0 (a little above is fine). float: equals std::exp to the bit for all but a
// few in 10^4 inputs; below -87 (-inf included) it gives 1.6e-38; NaN gives NaN. double:
// std::exp.
float exp_nonpositive(float x);
double exp_nonpositive(double x);

// row[j] = exp(row[j] - shift) for j < n, 0 for n <= j < len; returns the sum of the n
// exponentials, accumulated in eight fixed partial sums (the same order on every thread count).
double exp_row(float* row, std::int64_t n, std::int64_t len, float shift,
               ExpIsa isa = fastest_exp_isa());
double exp_row(double* row, std::int64_t n, std::int64_t len, double shift,
               ExpIsa isa = fastest_exp_isa());

// P = exp(S - lse[r]) in place on rows r < rows of a tile with leading dimension ld: columns
// c < n_r become exp(s[r][c] - lse[r]) and n_r <= c < cols become 0, where n_r = min(r + 1, cols)
// on a diagonal tile (the causal mask) and cols otherwise.
void recompute_p(float* s, std::int64_t rows, std::int64_t cols, std::int64_t ld, bool diagonal,
                 const float* lse, ExpIsa isa = fastest_exp_isa());
void recompute_p(double* s, std::int64_t rows, std::int64_t cols, std::int64_t ld, bool diagonal,
                 const double* lse, ExpIsa isa = fastest_exp_isa());

// SwiGLU over n float elements, out = silu(gate) * up, and its gradients (dgate, dup for the
// incoming dout), with silu(x) = x * sigmoid(x) and sigmoid from e = exp(-|x|) (so the exp's
// argument is never positive): 1 / (1 + e) for x >= 0, e / (1 + e) below. Within a float ulp or
// two of std::exp's sigmoid, except below -87 where it is 0 (the exact one is under exp(-87) ~
// 1.6e-38; silu's error under 87 exp(-87) ~ 1.4e-36, as with glibc's expf, which gives 0 below
// -88.7); NaN gates give NaN, and -inf gates NaN (-inf * 0), as with glibc's expf.
void swiglu_forward(const float* gate, const float* up, float* out, std::int64_t n,
                    ExpIsa isa = fastest_exp_isa());
void swiglu_backward(const float* dout, const float* gate, const float* up, float* dgate,
                     float* dup, std::int64_t n, ExpIsa isa = fastest_exp_isa());

}  // namespace carousel::cpu
