// test_gemm.cpp — GEMM and strided-batched GEMM on the CPU backend.
//
// Inputs are small integers, so every product and partial sum is exactly representable in
// float32 and the result must equal the naive reference bit for bit, for every transpose
// combination, alpha/beta (accumulate) setting and odd (prime) shape.
#include <gtest/gtest.h>
#include <omp.h>

#include <tuple>

#include "compute/cpu_backend.h"
#include "tests/support/reference.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::fetch;
using testing::make;

std::vector<double> small_ints(std::size_t n, std::uint64_t seed) {
  auto r = testing::randint(n, 9, seed);  // 0..8
  return {r.begin(), r.end()};
}

struct GemmCase {
  int m, n, k;
  bool ta, tb;
  double alpha, beta;
  DType dtype;
};

void PrintTo(const GemmCase& c, std::ostream* os) {
  *os << c.m << "x" << c.n << "x" << c.k << (c.ta ? " T" : " N") << (c.tb ? "T" : "N") << " alpha "
      << c.alpha << " beta " << c.beta << " " << dtype_name(c.dtype);
}

class GemmExact : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmExact, MatchesNaiveReferenceBitForBit) {
  const GemmCase c = GetParam();
  CpuBackend be;
  auto a = small_ints(c.m * c.k, 1), b = small_ints(c.k * c.n, 2), init = small_ints(c.m * c.n, 3);
  for (auto& x : a) x -= 4;  // -4..4
  Tensor ta = make(be, a, c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, c.dtype);
  Tensor tb = make(be, b, c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, c.dtype);
  Tensor tc = make(be, init, {c.m, c.n}, c.dtype);
  be.gemm(c.ta, c.tb, c.alpha, ta, tb, c.beta, tc);
  const auto expected = reference::gemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a, b, c.beta, init);
  EXPECT_EQ(fetch(be, tc), expected);
}

std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> cases;
  const std::tuple<int, int, int> shapes[] = {
      {1, 1, 1}, {7, 13, 5}, {17, 3, 31}, {64, 48, 33}, {130, 67, 9}};
  const std::pair<double, double> scalars[] = {{1, 0}, {2, 1}, {-1, 0.5}};
  for (auto [m, n, k] : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [alpha, beta] : scalars)
          for (DType dt : {DType::F32, DType::F64})
            cases.push_back({m, n, k, ta, tb, alpha, beta, dt});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, GemmExact, ::testing::ValuesIn(gemm_cases()),
                         [](const auto& info) {
                           const GemmCase& c = info.param;
                           return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
                                  std::to_string(c.k) + (c.ta ? "_T" : "_N") + (c.tb ? "T" : "N") +
                                  "_case" + std::to_string(info.index);
                         });

TEST(Gemm, AccumulatesWeightGradientsWithBetaOne) {
  // dW[out,in] += dy^T[out,N] x[N,in], twice: the result is twice one product.
  CpuBackend be;
  const int n = 11, in = 7, out = 5;
  auto dy = small_ints(n * out, 4), x = small_ints(n * in, 5);
  Tensor tdy = make(be, dy, {n, out}, DType::F32), tx = make(be, x, {n, in}, DType::F32);
  Tensor dw = be.zeros({out, in});
  be.gemm(true, false, 1.0, tdy, tx, 1.0, dw);
  be.gemm(true, false, 1.0, tdy, tx, 1.0, dw);
  auto once =
      reference::gemm(true, false, out, in, n, 1.0, dy, x, 0.0, std::vector<double>(out * in, 0.0));
  for (auto& v : once) v *= 2;
  EXPECT_EQ(fetch(be, dw), once);
}

TEST(Gemm, TreatsLeadingDimensionsAsRows) {
  // x [2,3,4] times W^T with W [5,4] gives [2,3,5] = the [6,4] x [4,5] product.
  CpuBackend be;
  auto x = small_ints(24, 6), w = small_ints(20, 7);
  Tensor tx = make(be, x, {2, 3, 4}, DType::F32), tw = make(be, w, {5, 4}, DType::F32);
  Tensor y = be.empty({2, 3, 5});
  be.gemm(false, true, 1.0, tx, tw, 0.0, y);
  EXPECT_EQ(fetch(be, y),
            reference::gemm(false, true, 6, 5, 4, 1.0, x, w, 0.0, std::vector<double>(30, 0.0)));
}

TEST(Gemm, StridedBatchedMatchesPerBatchReference) {
  CpuBackend be;
  const int batch = 3, m = 5, n = 7, k = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      auto a = small_ints(batch * m * k, 8), b = small_ints(batch * k * n, 9);
      Tensor a_t = make(be, a, ta ? Shape{batch, k, m} : Shape{batch, m, k}, DType::F32);
      Tensor b_t = make(be, b, tb ? Shape{batch, n, k} : Shape{batch, k, n}, DType::F32);
      Tensor tc = be.zeros({batch, m, n});
      be.gemm_strided_batched(ta, tb, 1.0, a_t, b_t, 0.0, tc);
      std::vector<double> expected;
      for (int i = 0; i < batch; ++i) {
        std::vector<double> ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
        std::vector<double> bi(b.begin() + i * k * n, b.begin() + (i + 1) * k * n);
        auto ci = reference::gemm(ta, tb, m, n, k, 1.0, ai, bi, 0.0, std::vector<double>(m * n));
        expected.insert(expected.end(), ci.begin(), ci.end());
      }
      EXPECT_EQ(fetch(be, tc), expected) << "ta=" << ta << " tb=" << tb;
    }
  }
}

// An MoE layer's experts: groups of rows of a and c, each times its own matrix of b (an empty
// group among them), against the naive product of each group's rows; small integers, so exact.
TEST(Gemm, GroupedMatchesEachGroupsReference) {  // and the grouped weight GEMM
  CpuBackend be;
  const int rows = 7, n = 4, k = 3, groups = 3;
  const std::vector<std::int64_t> first = {0, 2, 2, 7};  // group 1 has no rows
  for (bool tb : {false, true}) {
    const auto a = small_ints(rows * k, 21), b = small_ints(groups * n * k, 22),
               c0 = small_ints(rows * n, 23);
    const Tensor ta = make(be, a, {rows, k}, DType::F32);
    const Tensor tb_ = make(be, b, tb ? Shape{groups, n, k} : Shape{groups, k, n}, DType::F32);
    const Tensor tc = make(be, c0, {rows, n}, DType::F32);
    be.grouped_gemm(tb, 2.0, ta, tb_, first, 1.0, tc);
    std::vector<double> expected;
    for (int g = 0; g < groups; ++g) {
      const int r0 = int(first[g]), count = int(first[g + 1] - first[g]);
      const std::vector<double> ag(a.begin() + r0 * k, a.begin() + (r0 + count) * k);
      const std::vector<double> bg(b.begin() + g * n * k, b.begin() + (g + 1) * n * k);
      const std::vector<double> cg(c0.begin() + r0 * n, c0.begin() + (r0 + count) * n);
      const auto out = reference::gemm(false, tb, count, n, k, 2.0, ag, bg, 1.0, cg);
      expected.insert(expected.end(), out.begin(), out.end());
    }
    EXPECT_EQ(fetch(be, tc), expected) << "tb=" << tb;
  }
  // The weight gradients: c[g] = a[rows]^T b[rows] + c[g] for each group (the empty one kept).
  const int m = 3;
  const auto wa = small_ints(rows * m, 24), wb = small_ints(rows * n, 25),
             wc = small_ints(groups * m * n, 26);
  const Tensor tw = make(be, wc, {groups, m, n}, DType::F32);
  be.grouped_weight_gemm(1.0, make(be, wa, {rows, m}, DType::F32),
                         make(be, wb, {rows, n}, DType::F32), first, 1.0, tw);
  std::vector<double> expected_w;
  for (int g = 0; g < groups; ++g) {
    const int r0 = int(first[g]), count = int(first[g + 1] - first[g]);
    const std::vector<double> ag(wa.begin() + r0 * m, wa.begin() + (r0 + count) * m);
    const std::vector<double> bg(wb.begin() + r0 * n, wb.begin() + (r0 + count) * n);
    const std::vector<double> cg(wc.begin() + g * m * n, wc.begin() + (g + 1) * m * n);
    const auto out = reference::gemm(true, false, m, n, count, 1.0, ag, bg, 1.0, cg);
    expected_w.insert(expected_w.end(), out.begin(), out.end());
  }
  EXPECT_EQ(fetch(be, tw), expected_w);
  // Offsets that do not cover a's rows are one error naming them.
  const Tensor a = be.zeros({7, k}), b = be.zeros({groups, k, n}), c = be.zeros({7, n});
  EXPECT_NE(testing::error_of([&] { be.grouped_gemm(false, 1.0, a, b, {0, 2, 5, 6}, 0.0, c); })
                .find("the group offsets must rise from 0 to a's 7 rows"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { be.grouped_gemm(false, 1.0, a, b, {0, 7}, 0.0, c); })
                .find("'first' has 2 offsets for 3 groups"),
            std::string::npos);
}

TEST(Gemm, RepeatedCallsAreBitwiseIdentical) {
  CpuBackend be;
  auto a = testing::randn(257 * 129, 10), b = testing::randn(129 * 131, 11);
  Tensor ta = make(be, a, {257, 129}, DType::F32), tb = make(be, b, {129, 131}, DType::F32);
  Tensor c1 = be.empty({257, 131}), c2 = be.empty({257, 131});
  be.gemm(false, false, 1.0, ta, tb, 0.0, c1);
  be.gemm(false, false, 1.0, ta, tb, 0.0, c2);
  EXPECT_TRUE(testing::bitwise_equal(be, c1, c2));
}

// Bitwise the same for 1, 2 and 3 OpenMP threads, for shapes of one tile and of several, tiled
// by rows and by columns, batched, every transpose, beta 0 and 1. (OpenBLAS's own threading
// breaks this on its Haswell and Zen kernels: ctest also runs this suite with those forced.)
TEST(Gemm, ResultsDoNotDependOnTheThreadCount) {
  CpuBackend be;
  const int saved = omp_get_max_threads();
  struct Case {
    std::int64_t batch, m, n, k;
  };
  for (const Case c : {Case{1, 64, 64, 256}, Case{1, 300, 64, 96}, Case{1, 48, 300, 80},
                       Case{3, 130, 40, 33}, Case{1, 1, 257, 64}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (double beta : {0.0, 1.0}) {
          const auto a = testing::randn(c.batch * c.m * c.k, 20);
          const auto b = testing::randn(c.batch * c.k * c.n, 21);
          const auto c0 = testing::randn(c.batch * c.m * c.n, 22);
          const Tensor ta_t =
              make(be, a, ta ? Shape{c.batch, c.k, c.m} : Shape{c.batch, c.m, c.k}, DType::F32);
          const Tensor tb_t =
              make(be, b, tb ? Shape{c.batch, c.n, c.k} : Shape{c.batch, c.k, c.n}, DType::F32);
          std::vector<Tensor> results;
          for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            results.push_back(make(be, c0, {c.batch, c.m, c.n}, DType::F32));
            be.gemm_strided_batched(ta, tb, 0.5, ta_t, tb_t, beta, results.back());
          }
          for (int i : {1, 2}) {
            EXPECT_TRUE(testing::bitwise_equal(be, results[0], results[i]))
                << c.batch << "x" << c.m << "x" << c.n << "x" << c.k << " ta=" << ta << " tb=" << tb
                << " beta=" << beta << ": 1 vs " << i + 1 << " threads";
          }
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  CpuBackend be;
  Tensor a = be.empty({3, 0}), b = be.empty({0, 2});
  Tensor c = make(be, {1, 2, 3, 4, 5, 6}, {3, 2}, DType::F32);
  be.gemm(false, false, 1.0, a, b, 2.0, c);
  EXPECT_EQ(fetch(be, c), (std::vector<double>{2, 4, 6, 8, 10, 12}));
}

}  // namespace
}  // namespace carousel
