// test_float8_gemm.cpp — the tensorwise float8 recipe of the GEMM pieces (models/parallel/
// float8_gemm.h, linear.h) against an independent reference: each operand quantised on the host
// with the scalar casts (compute/float8/float8.h, which tests/compute/float8_casts.py checks bit
// for bit against ml_dtypes) and a scale computed here from the operand's amax, then the GEMMs in
// double divided by the scales. The pieces' outputs, input gradients and weight gradients equal
// it within float32 accumulation (each element within 1e-5 of the sum of its terms' magnitudes),
// which the same pieces without float8 miss (the quantisation is live); the forward quantises
// to E4M3, the output gradients to E5M2 (the hybrid formats), and a zero-bubble schedule's
// deferred weight gradient equals the immediate one bitwise. Also: float8 off is bitwise the
// plain GEMM, and a non-finite operand makes the output NaN (the run's non-finite policy).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/cpu_backend.h"
#include "models/parallel/linear.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::fetch;
using testing::make;

// A [rows, cols] operand quantised as the recipe does: scale = max / amax, values on the grid.
struct Quantised {
  std::vector<double> q;  // decode(encode(float(x) * scale))
  double scale;
};

Quantised quantise(const std::vector<double>& x, Float8Format f) {
  double amax = 0;
  for (const double v : x) amax = std::max(amax, std::abs(double(float(v))));
  const double fmax = f == Float8Format::E4M3 ? 448.0 : 57344.0;
  const float scale = amax == 0 ? 1.0f : float(fmax / amax);
  Quantised out{{}, scale};
  for (const double v : x) out.q.push_back(math::float8_round(float(v) * scale, f));
  return out;
}

// c[m,n] = sum_k a(m,k) b(k,n) / (sa sb) in double, with `bound` the sum of the terms' magnitudes.
struct Product {
  std::vector<double> value, bound;
};
template <class A, class B>
Product product(std::int64_t M, std::int64_t N, std::int64_t K, A a, B b, double inv_scales) {
  Product p{std::vector<double>(std::size_t(M * N)), std::vector<double>(std::size_t(M * N))};
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t n = 0; n < N; ++n) {
      double s = 0, bound = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        s += a(m, k) * b(k, n);
        bound += std::abs(a(m, k) * b(k, n));
      }
      p.value[std::size_t(m * N + n)] = s * inv_scales;
      p.bound[std::size_t(m * N + n)] = bound * inv_scales;
    }
  }
  return p;
}

// |got - expected| <= 1e-5 x the terms' magnitudes (+ a residual's own rounding) elementwise.
void expect_within_accumulation(const std::vector<double>& got, const Product& want,
                                const std::string& what, const std::vector<double>& residual = {}) {
  ASSERT_EQ(got.size(), want.value.size()) << what;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double r = residual.empty() ? 0 : residual[i];
    const double tol = 1e-5 * (want.bound[i] + std::abs(r)) + 1e-30;
    if (!(std::abs(got[i] - (want.value[i] + r)) <= tol)) ++bad;
  }
  EXPECT_EQ(bad, 0u) << what;
}

// The largest |got - expected| relative to the largest |expected|.
double deviation(const std::vector<double>& got, const std::vector<double>& expected) {
  double d = 0, s = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    d = std::max(d, std::abs(got[i] - expected[i]));
    s = std::max(s, std::abs(expected[i]));
  }
  return d / s;
}

constexpr std::int64_t N = 24, IN = 40, OUT = 20;  // tokens, input and output features

struct Operands {
  std::vector<double> x, w, dy;  // x [N, IN], w [OUT, IN], dy [N, OUT]
};
Operands operands() {
  // Magnitudes far from 1, as in training: activations O(3), weights O(0.05), gradients O(1e-4).
  return {testing::randn(std::size_t(N * IN), 11, 3.0),
          testing::randn(std::size_t(OUT * IN), 12, 0.05),
          testing::randn(std::size_t(N * OUT), 13, 1e-4)};
}

TEST(Float8Gemm, ColumnPieceEqualsTheDoubleReference) {
  CpuBackend be;
  const Operands o = operands();
  const TensorGroup one;
  const ColumnParallel column(one, Float8Gemm(true, one, ContextGroup{}));
  const Tensor x = make(be, o.x, {N, IN}, DType::F32), w = make(be, o.w, {OUT, IN}, DType::F32);
  const Tensor y = be.empty({N, OUT}), dy = make(be, o.dy, {N, OUT}, DType::F32);
  const Tensor dx = be.empty({N, IN}), grad = be.zeros({OUT, IN});
  column.forward(be, x, w, y);
  column.backward(be, x, {{w, grad}}, {dy}, dx, /*accumulate=*/false);

  const Quantised qx = quantise(o.x, Float8Format::E4M3), qw = quantise(o.w, Float8Format::E4M3),
                  qdy = quantise(o.dy, Float8Format::E5M2);
  const auto X = [&](std::int64_t n, std::int64_t k) { return qx.q[std::size_t(n * IN + k)]; };
  const auto W = [&](std::int64_t o_, std::int64_t k) { return qw.q[std::size_t(o_ * IN + k)]; };
  const auto DY = [&](std::int64_t n, std::int64_t o_) { return qdy.q[std::size_t(n * OUT + o_)]; };
  const Product y_ref = product(
      N, OUT, IN, X, [&](auto k, auto o_) { return W(o_, k); }, 1 / (qx.scale * qw.scale));
  const Product dx_ref = product(N, IN, OUT, DY, W, 1 / (qdy.scale * qw.scale));
  const Product grad_ref = product(
      OUT, IN, N, [&](auto o_, auto n) { return DY(n, o_); }, X, 1 / (qdy.scale * qx.scale));
  expect_within_accumulation(fetch(be, y), y_ref, "y");
  expect_within_accumulation(fetch(be, dx), dx_ref, "dx");
  expect_within_accumulation(fetch(be, grad), grad_ref, "weight gradient");

  // The same piece without float8 misses the float8 reference: the quantisation is live.
  const ColumnParallel plain(one);
  const Tensor y_plain = be.empty({N, OUT});
  plain.forward(be, x, w, y_plain);
  EXPECT_GT(deviation(fetch(be, y_plain), y_ref.value), 1e-3);
  EXPECT_LT(deviation(fetch(be, y), y_ref.value), 1e-5);
}

TEST(Float8Gemm, RowPieceEqualsTheDoubleReferenceAndDefersItsWeightGradient) {
  CpuBackend be;
  const Operands o = operands();
  const TensorGroup one;
  const RowParallel row(one, Float8Gemm(true, one, ContextGroup{}));
  // The row piece: a [N, IN] (the attention output or the SwiGLU), W [OUT, IN], a residual.
  const auto residual = testing::randn(std::size_t(N * OUT), 14, 1.0);
  const Tensor a = make(be, o.x, {N, IN}, DType::F32), w = make(be, o.w, {OUT, IN}, DType::F32);
  const Tensor res = make(be, residual, {N, OUT}, DType::F32), out = be.empty({N, OUT});
  row.forward(be, a, w, res, out);
  const Tensor dout = make(be, o.dy, {N, OUT}, DType::F32), da = be.empty({N, IN});
  const Tensor grad = be.zeros({OUT, IN}), grad_later = be.zeros({OUT, IN});
  row.backward(be, dout, a, {w, grad}, da);
  std::vector<DeferredWeightGrad> deferred;
  const Tensor da_again = be.empty({N, IN});
  row.backward(be, dout, a, {w, grad_later}, da_again, &deferred);
  ASSERT_EQ(deferred.size(), 1u);
  apply_weight_grads(be, deferred);
  EXPECT_TRUE(testing::bitwise_equal(be, grad, grad_later));

  const Quantised qa = quantise(o.x, Float8Format::E4M3), qw = quantise(o.w, Float8Format::E4M3),
                  qd = quantise(o.dy, Float8Format::E5M2);
  const auto A = [&](std::int64_t n, std::int64_t k) { return qa.q[std::size_t(n * IN + k)]; };
  const auto W = [&](std::int64_t o_, std::int64_t k) { return qw.q[std::size_t(o_ * IN + k)]; };
  const auto D = [&](std::int64_t n, std::int64_t o_) { return qd.q[std::size_t(n * OUT + o_)]; };
  const std::vector<double> residual_f(residual.begin(), residual.end());
  std::vector<double> residual32;
  for (const double v : residual) residual32.push_back(double(float(v)));
  expect_within_accumulation(
      fetch(be, out),
      product(
          N, OUT, IN, A, [&](auto k, auto o_) { return W(o_, k); }, 1 / (qa.scale * qw.scale)),
      "out", residual32);
  expect_within_accumulation(fetch(be, da), product(N, IN, OUT, D, W, 1 / (qd.scale * qw.scale)),
                             "da");
  expect_within_accumulation(
      fetch(be, grad),
      product(
          OUT, IN, N, [&](auto o_, auto n) { return D(n, o_); }, A, 1 / (qd.scale * qa.scale)),
      "weight gradient");
}

// bfloat16 operands: the quantised values are exact in bfloat16, the GEMM accumulates in float32
// and rounds its output once to bfloat16 (2^-8 relative).
TEST(Float8Gemm, Bfloat16OperandsRoundOnlyTheOutput) {
  CpuBackend be;
  const Operands o = operands();
  const TensorGroup one;
  const ColumnParallel column(one, Float8Gemm(true, one, ContextGroup{}));
  const Tensor x = make(be, o.x, {N, IN}, DType::BF16), w = make(be, o.w, {OUT, IN}, DType::BF16);
  const Tensor y = be.empty({N, OUT}, DType::BF16);
  column.forward(be, x, w, y);
  const auto x16 = fetch(be, x), w16 = fetch(be, w);  // the bf16 values the quantisation reads
  const Quantised qx = quantise(x16, Float8Format::E4M3), qw = quantise(w16, Float8Format::E4M3);
  const Product ref = product(
      N, OUT, IN, [&](auto n, auto k) { return qx.q[std::size_t(n * IN + k)]; },
      [&](auto k, auto o_) { return qw.q[std::size_t(o_ * IN + k)]; }, 1 / (qx.scale * qw.scale));
  const auto got = fetch(be, y);
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], ref.value[i], std::abs(ref.value[i]) * 0x1p-8 + 1e-5 * ref.bound[i]) << i;
}

TEST(Float8Gemm, OffIsThePlainGemmBitwise) {
  CpuBackend be;
  const Operands o = operands();
  const TensorGroup one;
  const Tensor x = make(be, o.x, {N, IN}, DType::F32), w = make(be, o.w, {OUT, IN}, DType::F32);
  const Tensor y = be.empty({N, OUT}), y_plain = be.empty({N, OUT});
  ColumnParallel(one, Float8Gemm(false, one, ContextGroup{})).forward(be, x, w, y);
  Linear(w).forward(be, x, y_plain);
  EXPECT_TRUE(testing::bitwise_equal(be, y, y_plain));
}

// A non-finite operand: its scale is NaN (float8_scale), every output it reaches is NaN, and
// the step's loss and gradients carry it to the run's non-finite policy — never a finite guess.
TEST(Float8Gemm, ANonFiniteOperandMakesTheOutputNaN) {
  CpuBackend be;
  Operands o = operands();
  o.x[5] = INFINITY;
  const TensorGroup one;
  const Tensor x = make(be, o.x, {N, IN}, DType::F32), w = make(be, o.w, {OUT, IN}, DType::F32);
  const Tensor y = be.empty({N, OUT});
  ColumnParallel(one, Float8Gemm(true, one, ContextGroup{})).forward(be, x, w, y);
  for (const double v : fetch(be, y)) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace carousel
