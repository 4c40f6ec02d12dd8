// test_cuda_plans.cpp — what the CUDA fast tier decides without a GPU, checked on the CPU:
//   * every fast kernel's launch plan fits the H100's limits for the shapes the 1B and 8B llamas
//     and the tests use, and for extremes (one row, 2^31 elements, vocab 128256);
//   * pack widths are only chosen when the sizes divide and every pointer is aligned;
//   * the RMSNorm weight-gradient chunks cover every row exactly once;
//   * the cuBLASLt layouts of a row-major GEMM, fed to an independent column-major GEMM written
//     here from BLAS's definition, give the row-major product for all four transposes, batched;
//   * plans are cached by key (shape, dtype, transposes, alignment), built once each;
//   * cuDNN attention's shape rules, and its [b,h,s,d] strides address carousel's [B,T,H,D].
// Label cpu: runs everywhere. The kernels themselves are checked on a GPU (test_cuda_backend).
#include <gtest/gtest.h>

#include <vector>

#include "cuda/plans/attention_plan.h"
#include "cuda/plans/gemm_plan.h"
#include "cuda/plans/launch_plan.h"
#include "tests/support/test_util.h"

namespace carousel::gpu {
namespace {

// [rows, cols] the fast row kernels meet: llama 1B (E 2048, F 8192, V 128256), 8B (E 4096,
// F 14336), small test shapes and odd ones.
const std::vector<std::pair<std::int64_t, std::int64_t>> kRowShapes = {
    {1, 1},        {13, 67},     {16384, 2048},  {16384, 4096}, {16384, 128256},
    {8192, 50257}, {1, 1 << 20}, {70000, 14336}, {3, 31}};

TEST(LaunchPlans, RowKernelsFitTheH100ForEveryShapeAndWidth) {
  for (auto [rows, cols] : kRowShapes) {
    for (int vec : {1, 2, 4, 8}) {
      if (cols % vec) continue;
      for (std::size_t per_warp : {std::size_t(0), sizeof(float), 2 * sizeof(float)}) {
        const LaunchPlan p = plan_rowwise(rows, cols, vec, per_warp);
        EXPECT_EQ(launch_violation(p), "") << rows << "x" << cols << " vec " << vec;
        EXPECT_EQ(p.grid_x, rows);
        // Threads cover the row's packs in whole warps, without idle warps beyond one.
        const std::int64_t packs = cols / vec;
        EXPECT_EQ(p.block % 32, 0);
        EXPECT_TRUE(p.block == 1024 || p.block < packs + 32) << p.block << " for " << packs;
      }
    }
  }
}

TEST(LaunchPlans, ElementwiseCoversEveryPackOnce) {
  for (std::int64_t n : {std::int64_t(0), std::int64_t(1), std::int64_t(255), std::int64_t(4096),
                         std::int64_t(1) << 31, std::int64_t(8) << 30}) {
    for (int vec : {1, 2, 4, 8}) {
      const LaunchPlan p = plan_elementwise(n - n % vec, vec);
      EXPECT_EQ(launch_violation(p), "") << n;
      const std::int64_t packs = (n - n % vec) / vec;
      EXPECT_GE(p.grid_x * p.block, packs);
      EXPECT_LT(p.grid_x * p.block - packs, p.block);  // no block without work
    }
  }
}

TEST(LaunchPlans, ColumnPartialsCoverEveryRowOnceAndFillTheGpu) {
  for (auto [rows, cols] : kRowShapes) {
    const LaunchPlan p = plan_column_partials(rows, cols);
    EXPECT_EQ(launch_violation(p), "");
    std::vector<int> seen(rows, 0);
    for (std::int64_t chunk = 0; chunk < p.grid_y; ++chunk) {
      const std::int64_t first = chunk * p.rows_per_chunk;
      ASSERT_LT(first, rows) << "an empty chunk";
      for (std::int64_t r = first; r < std::min(rows, first + p.rows_per_chunk); ++r) ++seen[r];
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), rows) << rows << "x" << cols;
    if (rows >= 2 * kH100.multiprocessors) {
      EXPECT_GE(p.grid_x * p.grid_y, kH100.multiprocessors) << rows << "x" << cols;
    }
  }
}

TEST(LaunchPlans, AViolationIsNamed) {
  LaunchPlan p = plan_rowwise(4, 64, 1, sizeof(float));
  p.block = 2048;
  EXPECT_NE(launch_violation(p).find("2048 threads per block"), std::string::npos);
  p = plan_rowwise(4, 64, 1, 64 * sizeof(float));  // 32 warps x 64 floats = 8 KiB: fits
  EXPECT_EQ(launch_violation(p), "");
  p = plan_rowwise(4, 64, 1, 2048);  // 64 KiB of scratch
  EXPECT_NE(launch_violation(p).find("shared memory"), std::string::npos);
}

TEST(VectorWidth, OnlyWhenSizesDivideAndPointersAlign) {
  alignas(64) static char buffer[256];
  const void* base = buffer;
  EXPECT_EQ(vector_width(2048, 2, {base}), 8);  // bf16: 16 bytes
  EXPECT_EQ(vector_width(2048, 4, {base}), 4);  // float: 16 bytes
  EXPECT_EQ(vector_width(2050, 2, {base}), 2);  // 2050 = 2 x 1025
  EXPECT_EQ(vector_width(2051, 2, {base}), 1);
  EXPECT_EQ(vector_width(2048, 2, {base, buffer + 4}), 2);  // a view 4 bytes in
  EXPECT_EQ(vector_width(2048, 2, {base, buffer + 2}), 1);
  EXPECT_EQ(vector_width(2048, 8, {base}), 2);           // double: 16 bytes
  EXPECT_EQ(vector_width(2048, 2, {base, nullptr}), 8);  // an absent optional pointer
}

// C[m,n] (column-major, ld) = op(A) op(B) from BLAS's definition, for one batch entry.
void column_major_gemm(const LtLayout& a, const std::vector<double>& A, const LtLayout& b,
                       const std::vector<double>& B, const LtLayout& c, std::vector<double>& C,
                       std::int64_t batch_index) {
  const std::int64_t m = c.rows, n = c.cols, k = a.transposed ? a.rows : a.cols;
  auto at = [&](std::int64_t i, std::int64_t p) {  // op(A)[i,p]
    const std::int64_t off = batch_index * a.batch_stride;
    return a.transposed ? A[off + p + i * a.ld] : A[off + i + p * a.ld];
  };
  auto bt = [&](std::int64_t p, std::int64_t j) {
    const std::int64_t off = batch_index * b.batch_stride;
    return b.transposed ? B[off + j + p * b.ld] : B[off + p + j * b.ld];
  };
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < k; ++p) s += at(i, p) * bt(p, j);
      C[batch_index * c.batch_stride + i + j * c.ld] = s;
    }
}

TEST(GemmPlans, LtLayoutsOfARowMajorProductGiveTheRowMajorProduct) {
  const std::int64_t batch = 2, m = 5, n = 3, k = 4;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const GemmKey key{ta, tb, batch, m, n, k, DType::BF16, DType::F32, 16};
      const LtProblem p = lt_problem(key);
      const auto a = testing::randn(batch * m * k, 1), b = testing::randn(batch * k * n, 2);
      std::vector<double> c(batch * m * n, 0.0);
      for (std::int64_t i = 0; i < batch; ++i)
        column_major_gemm(p.first, b, p.second, a, p.out, c, i);
      for (std::int64_t e = 0; e < batch; ++e)
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < n; ++j) {
            double want = 0;  // row-major op(a)[i,:] . op(b)[:,j]
            for (std::int64_t p2 = 0; p2 < k; ++p2) {
              const double av = ta ? a[e * m * k + p2 * m + i] : a[e * m * k + i * k + p2];
              const double bv = tb ? b[e * k * n + j * k + p2] : b[e * k * n + p2 * n + j];
              want += av * bv;
            }
            EXPECT_NEAR(c[e * m * n + i * n + j], want, 1e-12)
                << "ta " << ta << " tb " << tb << " at " << e << "," << i << "," << j;
          }
      // cuBLASLt needs ld >= rows of each stored matrix.
      for (const LtLayout& l : {p.first, p.second, p.out}) EXPECT_GE(l.ld, l.rows);
    }
}

TEST(GemmPlans, CachedByKeyAndBuiltOnce) {
  PlanCache<int> cache;
  int builds = 0;
  auto build = [&] { return ++builds; };
  const GemmKey a{false, true, 1, 2048, 5632, 2048, DType::BF16, DType::BF16, 16};
  GemmKey b = a;
  b.alignment = 8;  // another alignment: another plan (cuBLASLt promises differ)
  GemmKey c = a;
  c.c = DType::F32;
  EXPECT_EQ(cache.get(a, build), 1);
  EXPECT_EQ(cache.get(a, build), 1);
  EXPECT_EQ(cache.get(b, build), 2);
  EXPECT_EQ(cache.get(c, build), 3);
  EXPECT_EQ(cache.get(a, build), 1);
  EXPECT_EQ(cache.builds(), 3);
  EXPECT_EQ(cache.hits(), 2);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(describe(a), "bfloat16 [2048x5632] = [2048x2048] x [5632x2048]^T");
}

TEST(GemmPlans, AlignmentAndWorkspace) {
  EXPECT_EQ(common_alignment({0x1000, 4096, 64}), 16);
  EXPECT_EQ(common_alignment({0x1000, 4096, 6}), 2);
  EXPECT_EQ(common_alignment({0x1004, 4096}), 4);
  EXPECT_EQ(common_alignment({0x1001}), 1);
  EXPECT_EQ(lt_workspace_bytes(9), std::size_t(32) << 20);  // Hopper
  EXPECT_EQ(lt_workspace_bytes(8), std::size_t(4) << 20);
}

TEST(AttentionPlans, CudnnShapeRules) {
  AttentionKey k{2, 2048, 32, 8, 64, DType::BF16, false};
  EXPECT_EQ(cudnn_attention_unsupported(k), "");  // llama 1B
  k.head_dim = 128;
  EXPECT_EQ(cudnn_attention_unsupported(k), "");  // llama 8B
  k.head_dim = 96;
  EXPECT_EQ(cudnn_attention_unsupported(k), "");
  k.head_dim = 100;
  EXPECT_NE(cudnn_attention_unsupported(k).find("head_dim 100"), std::string::npos);
  k.head_dim = 256;
  EXPECT_NE(cudnn_attention_unsupported(k).find("up to 128"), std::string::npos);
  k.head_dim = 64;
  k.dtype = DType::F32;
  EXPECT_NE(cudnn_attention_unsupported(k).find("bfloat16"), std::string::npos);
  k.dtype = DType::BF16;
  k.kv_heads = 5;
  EXPECT_NE(cudnn_attention_unsupported(k).find("not a multiple"), std::string::npos);
  k.kv_heads = 8;
  k.kv_seq = 4096;  // a context-parallel chunk against its key prefix
  EXPECT_EQ(cudnn_attention_unsupported(k), "");
  EXPECT_EQ(k.keys(), 4096);
  k.kv_seq = 1024;
  EXPECT_NE(cudnn_attention_unsupported(k).find("1024 keys for 2048 queries"), std::string::npos);
  AttentionKey whole{2, 2048, 32, 8, 64, DType::BF16, false}, prefix = whole;
  prefix.kv_seq = 4096;
  EXPECT_TRUE(whole < prefix || prefix < whole);  // cached apart
}

TEST(AttentionPlans, StridesAddressTheRowMajorTensors) {
  const std::int64_t B = 2, T = 5, H = 3, D = 4;
  const DimsStrides ds = bthd_as_bhsd(B, T, H, D);
  EXPECT_EQ(ds.dims, (std::array<std::int64_t, 4>{B, H, T, D}));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t d = 0; d < D; ++d) {
          const std::int64_t row_major = ((b * T + t) * H + h) * D + d;
          const std::int64_t strided =
              b * ds.strides[0] + h * ds.strides[1] + t * ds.strides[2] + d * ds.strides[3];
          ASSERT_EQ(strided, row_major);
        }
  const DimsStrides st = stats_as_bhs1(B, H, T);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t t = 0; t < T; ++t)
        ASSERT_EQ(b * st.strides[0] + h * st.strides[1] + t * st.strides[2], (b * H + h) * T + t);
}

}  // namespace
}  // namespace carousel::gpu
