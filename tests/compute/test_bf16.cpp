// test_bf16.cpp — bfloat16 on the CPU backend: cast rounds to nearest even (bit patterns worked
// out from the format, every one of the 65536 bf16 values round-trips), fill rounds, and GEMM
// with bf16 inputs accumulates in float32: checked against a double reference on the same
// (exactly representable) inputs with the float32 summation error bound. Other ops are staged
// through float32 (bitwise equal to the float32 op then a cast) unless a backend declares a
// native bf16 kernel for the op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "compute/bfloat16.h"
#include "compute/cpu_backend.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::fetch;
using testing::make;

float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// bf16 bits of be.cast(float32 value -> bfloat16).
std::uint16_t cast_bits(CpuBackend& be, float value) {
  Tensor f = be.from_host(std::vector<float>{value}, {1});
  Tensor h = be.empty({1}, DType::BF16);
  be.cast(f, h);
  return be.to_host<bf16>(h)[0].bits;
}

TEST(Bf16, CastRoundsToNearestEven) {
  CpuBackend be;
  struct Case {
    std::uint32_t f32;
    std::uint16_t bf16;
    const char* why;
  };
  const Case cases[] = {
      {0x3F800000, 0x3F80, "1.0 is exact"},
      {0xC0200000, 0xC020, "-2.5 is exact"},
      {0x3F808000, 0x3F80, "halfway between 0x3F80 and 0x3F81: to the even one (down)"},
      {0x3F818000, 0x3F82, "halfway between 0x3F81 and 0x3F82: to the even one (up)"},
      {0x3F808001, 0x3F81, "just above halfway: up"},
      {0x3F807FFF, 0x3F80, "just below halfway: down"},
      {0x80000000, 0x8000, "-0 keeps its sign"},
      {0x00000001, 0x0000, "smallest subnormal rounds to 0"},
      {0x00018000, 0x0002, "subnormal tie to even (up)"},
      {0x7F7FFFFF, 0x7F80, "FLT_MAX is past the largest bf16: infinity"},
      {0x7F800000, 0x7F80, "+inf"},
      {0xFF800000, 0xFF80, "-inf"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(cast_bits(be, from_bits(c.f32)), c.bf16) << c.why;
  }
  // NaNs stay NaN, even the one whose rounding would carry into the exponent (signalling, low
  // mantissa bit only), which a plain rounding turns into infinity.
  for (std::uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu}) {
    const std::uint16_t h = cast_bits(be, from_bits(nan));
    EXPECT_EQ(h & 0x7F80, 0x7F80);
    EXPECT_NE(h & 0x007F, 0) << std::hex << nan << " -> " << h;
  }
}

TEST(Bf16, EveryValueRoundTripsThroughFloat32AndFloat64) {
  CpuBackend be;
  std::vector<bf16> all(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) all[i] = bf16{std::uint16_t(i)};
  Tensor h = be.from_host(all, {65536});
  Tensor f = be.empty({65536}, DType::F32), d = be.empty({65536}, DType::F64);
  Tensor back = be.empty({65536}, DType::BF16), back64 = be.empty({65536}, DType::BF16);
  be.cast(h, f);
  be.cast(h, d);
  be.cast(f, back);
  be.cast(d, back64);
  const auto fv = be.to_host<float>(f);
  const auto dv = be.to_host<double>(d);
  const auto b = be.to_host<bf16>(back), b64 = be.to_host<bf16>(back64);
  for (std::uint32_t i = 0; i < 65536; ++i) {
    std::uint32_t u;
    std::memcpy(&u, &fv[i], 4);
    ASSERT_EQ(u, i << 16) << "bf16 -> float32 is exact";
    if (std::isnan(fv[i])) {
      ASSERT_TRUE(std::isnan(dv[i]) && std::isnan(math::to_float(b[i])) &&
                  std::isnan(math::to_float(b64[i])));
    } else {
      ASSERT_EQ(dv[i], double(fv[i]));
      ASSERT_EQ(b[i].bits, i) << "float32 -> bf16 returns the value";
      ASSERT_EQ(b64[i].bits, i) << "float64 -> bf16 returns the value";
    }
  }
}

TEST(Bf16, FillRounds) {
  CpuBackend be;
  Tensor h = be.empty({3}, DType::BF16);
  be.fill(h, 1.0 + 1.0 / 128 + 1.0 / 1024);  // between 1 + 2^-7 and 1 + 2^-6, nearer the first
  for (const bf16 v : be.to_host<bf16>(h)) EXPECT_EQ(v.bits, 0x3F81);
}

// op(a) op(b) in double from the tensors' own (bf16) values, and per element the float32
// error bound of a k-term sum: 2 k eps32 sum_k |a||b| (products of bf16 values are exact in
// float32; only the additions round).
void reference(const std::vector<double>& a, const std::vector<double>& b, bool ta, bool tb, int m,
               int n, int k, std::vector<double>& value, std::vector<double>& bound) {
  value.assign(m * n, 0);
  bound.assign(m * n, 0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p) {
        const double x = ta ? a[p * m + i] : a[i * k + p];
        const double y = tb ? b[j * k + p] : b[p * n + j];
        value[i * n + j] += x * y;
        bound[i * n + j] += std::abs(x * y);
      }
  for (double& e : bound) e *= 2.0 * k * std::ldexp(1.0, -24);
}

TEST(Bf16, GemmAccumulatesInFloat32) {
  CpuBackend be;
  const int m = 13, n = 11, k = 37;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (DType out : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(::testing::Message()
                     << "ta " << ta << " tb " << tb << " c " << dtype_name(out));
        Tensor a = make(be, testing::randn(m * k, 1), ta ? Shape{k, m} : Shape{m, k}, DType::BF16);
        Tensor b = make(be, testing::randn(k * n, 2), tb ? Shape{n, k} : Shape{k, n}, DType::BF16);
        Tensor c = make(be, testing::randn(m * n, 3), {m, n}, out);
        const auto c0 = fetch(be, c);
        be.gemm(ta, tb, 0.5, a, b, 1.0, c);
        std::vector<double> ab, bound;
        reference(fetch(be, a), fetch(be, b), ta, tb, m, n, k, ab, bound);
        const auto got = fetch(be, c);
        for (int i = 0; i < m * n; ++i) {
          const double expected = 0.5 * ab[i] + c0[i];
          double tol = 0.5 * bound[i] + 1e-7 * std::abs(expected);  // + the final a*0.5 + c
          if (out == DType::BF16) tol += std::ldexp(std::abs(expected), -8);  // half a bf16 ulp
          ASSERT_NEAR(got[i], expected, tol) << "element " << i;
        }
      }
}

TEST(Bf16, BatchedGemmEqualsOneGemmPerBatch) {
  CpuBackend be;
  Tensor a = make(be, testing::randn(3 * 7 * 11, 4), {3, 7, 11}, DType::BF16);
  Tensor b = make(be, testing::randn(3 * 13 * 11, 5), {3, 13, 11}, DType::BF16);
  Tensor c = be.zeros({3, 7, 13}, DType::F32);
  be.gemm_strided_batched(false, true, 1.0, a, b, 0.0, c);
  for (int i = 0; i < 3; ++i) {
    Tensor one = be.zeros({7, 13});
    be.gemm(false, true, 1.0, a.slice(i, i + 1).reshape({7, 11}),
            b.slice(i, i + 1).reshape({13, 11}), 0.0, one);
    EXPECT_TRUE(testing::bitwise_equal(be, one, c.slice(i, i + 1).reshape({7, 13})));
  }
}

// Ops without a bf16 kernel run in float32 on the exact widened values and round each output
// once: bitwise the float32 op on widened inputs, then a cast. In place works (one stand-in).
TEST(Bf16, OpsRunInFloat32AndRoundTheirOutputsOnce) {
  CpuBackend be;
  const std::int64_t rows = 5, cols = 67;
  Tensor x = make(be, testing::randn(rows * cols, 7), {rows, cols}, DType::BF16);
  Tensor w = make(be, testing::randn(cols, 8), {cols}, DType::BF16);
  Tensor out = be.empty({rows, cols}, DType::BF16), rstd = be.empty({rows}, DType::F32);
  be.rmsnorm_forward(x, w, 1e-5, out, rstd);  // bf16 in and out, float32 statistics

  Tensor xf = be.empty({rows, cols}), wf = be.empty({cols});
  be.cast(x, xf);
  be.cast(w, wf);
  Tensor out_f = be.empty({rows, cols}), rstd_f = be.empty({rows});
  be.rmsnorm_forward(xf, wf, 1e-5, out_f, rstd_f);
  Tensor out_rounded = be.empty({rows, cols}, DType::BF16);
  be.cast(out_f, out_rounded);
  EXPECT_TRUE(testing::bitwise_equal(be, out, out_rounded));
  EXPECT_TRUE(testing::bitwise_equal(be, rstd, rstd_f));

  // In place: y = x + y with y bf16.
  Tensor y = make(be, testing::randn(rows * cols, 9), {rows, cols}, DType::BF16);
  const auto before = fetch(be, y), xs = fetch(be, x);
  be.add(x, y, y);
  const auto after = fetch(be, y);
  for (std::size_t i = 0; i < after.size(); ++i) {
    const float sum = float(xs[i]) + float(before[i]);
    ASSERT_EQ(after[i], double(math::to_float(math::to_bf16(sum)))) << i;
  }
}

// A backend with a native bf16 kernel for add only: add's do_add receives the bf16 tensors
// (validated like float32 ones), every other op is still staged.
class NativeBf16Add : public CpuBackend {
 public:
  bool has_native_bf16(Op op) const override { return op == Op::add; }
  int native_calls = 0;

 protected:
  void do_add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    if (a.dtype() != DType::BF16) return CpuBackend::do_add(a, b, out);
    ++native_calls;
    const bf16 *x = a.data<bf16>(), *y = b.data<bf16>();
    bf16* o = out.data<bf16>();
    for (std::int64_t i = 0; i < a.numel(); ++i) {
      o[i] = math::to_bf16(math::to_float(x[i]) + math::to_float(y[i]));
    }
  }
};

TEST(Bf16, NativeKernelReplacesStagingForItsOpOnly) {
  NativeBf16Add native;
  CpuBackend staged;
  const std::int64_t n = 101;
  const auto xs = testing::randn(n, 11), ys = testing::randn(n, 12);
  auto run = [&](Backend& be) {
    Tensor x = make(be, xs, {n}, DType::BF16), y = make(be, ys, {n}, DType::BF16);
    Tensor out = be.empty({n}, DType::BF16);
    be.add(x, y, out);
    be.scale(out, 0.3);  // no native kernel: staged on both
    return fetch(be, out);
  };
  EXPECT_EQ(run(native), run(staged));  // same bits: the native kernel matches its oracle
  EXPECT_EQ(native.native_calls, 1);

  // Native means validated as is: mixed dtypes are not widened into agreement.
  Tensor x = make(native, xs, {n}, DType::BF16), yf = make(native, ys, {n}, DType::F32);
  const std::string error = testing::error_of([&] { native.add(x, yf, x); });
  EXPECT_NE(error.find("add: argument 'b' is float32 but must be bfloat16"), std::string::npos)
      << error;
}

}  // namespace
}  // namespace carousel
