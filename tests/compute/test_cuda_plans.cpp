// test_cuda_plans.cpp — what the CUDA fast tier decides without a GPU, checked on the CPU:
//   * every fast kernel's launch plan fits the H100's limits for the shapes the 1B and 8B llamas
//     and the tests use, and for extremes (one row, 2^31 elements, vocab 128256);
//   * pack widths are only chosen when the sizes divide and every pointer is aligned;
//   * no plan gives a block larger than its kernels declare in __launch_bounds__ (a larger block
//     would fail to launch on the GPU, and only training shapes reach the largest blocks);
//   * the RMSNorm weight-gradient chunks cover every row exactly once, and so do the sums' blocks;
//   * the cuBLASLt layouts of a row-major GEMM, fed to an independent column-major GEMM written
//     here from BLAS's definition, give the row-major product for all four transposes, batched;
//   * plans are cached by key (shape, dtype, transposes, alignment), built once each; a key whose
//     cuBLASLt candidates are all refused goes to classic cuBLAS, warned once per process;
//   * cuDNN attention's shape rules, and its [b,h,s,d] strides address carousel's [B,T,H,D];
//   * cuDNN attention graphs are built once per key and GPU, however many backends ask from
//     however many threads; a refused key is remembered with cuDNN's words (a throwing build
//     too) and never rebuilt; forward and backward are refused apart; 16-byte operand alignment.
// Label cpu: runs everywhere. The kernels themselves are checked on a GPU (test_cuda_backend).
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <thread>
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

// The kernels promise the compiler their largest block (fast_kernels.cuh: __launch_bounds__ of
// kMaxReduceThreads on the row kernels, kElementwiseThreads on the others); the plans must keep
// it, for every shape: the 1B llama's cross-entropy over 32000 logits at pack width 1 is a
// 1024-thread block, vocab 128256 and a 2^20-wide row ask for more and must be clamped.
TEST(LaunchPlans, NoPlanExceedsTheBlockItsKernelsDeclare) {
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes = kRowShapes;
  shapes.insert(shapes.end(), {{8192, 32000}, {8192, 32768}, {8192, 32769}, {4, 1023}, {4, 33}});
  for (auto [rows, cols] : shapes) {
    for (int vec : {1, 2, 4, 8}) {
      if (cols % vec) continue;
      for (std::size_t per_warp : {std::size_t(0), sizeof(float), 2 * sizeof(float)})
        EXPECT_LE(plan_rowwise(rows, cols, vec, per_warp).block, kMaxReduceThreads)
            << rows << "x" << cols << " vec " << vec;
      EXPECT_LE(plan_elementwise(rows * cols, vec).block, kElementwiseThreads);
      EXPECT_LE(plan_block_sums(rows * cols, vec).block, kElementwiseThreads);
    }
    EXPECT_LE(plan_column_partials(rows, cols).block, kElementwiseThreads);
  }
  EXPECT_EQ(plan_rowwise(8192, 32000, 1, 2 * sizeof(float)).block, kMaxReduceThreads);
  EXPECT_LE(kMaxReduceThreads, kH100.max_threads_per_block);
}

TEST(LaunchPlans, BlockSumsCoverEveryPackOnceInAGridFixedByTheSize) {
  for (std::int64_t n : {std::int64_t(1), std::int64_t(255), std::int64_t(256 * 8 + 1),
                         std::int64_t(1031), std::int64_t(1) << 20, std::int64_t(3) << 30}) {
    for (int vec : {1, 2, 4, 8}) {
      const std::int64_t packs = (n - n % vec) / vec;
      if (packs == 0) continue;
      const LaunchPlan p = plan_block_sums(packs * vec, vec);
      EXPECT_EQ(launch_violation(p), "") << n;
      EXPECT_LE(p.grid_x, 8 * kH100.multiprocessors);
      EXPECT_GE(p.shared_bytes, sizeof(double) * kElementwiseThreads / 32);  // the scratch
      // The kernel's grid-stride loop: thread t of block b takes b*block + t + j*grid*block.
      const std::int64_t stride = p.grid_x * p.block;
      if (packs <= (1 << 20)) {
        std::vector<int> seen(packs, 0);
        for (std::int64_t thread = 0; thread < stride; ++thread)
          for (std::int64_t i = thread; i < packs; i += stride) ++seen[i];
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), packs) << n << " vec " << vec;
      }
      EXPECT_GE(stride * ((packs + stride - 1) / stride), packs);
      EXPECT_LT((p.grid_x - 1) * p.block, packs) << "a block without work";
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

// cuBLASLt's candidates are tried in the heuristic's order; the first it accepts stays; with every
// one refused, or none offered, the key runs classic cuBLAS and the warning says why.
TEST(GemmPlans, RefusedCandidatesGiveWayThenClassicCublas) {
  LtChoice choice(3);
  EXPECT_FALSE(choice.classic());
  EXPECT_EQ(choice.current(), 0);
  EXPECT_EQ(choice.current(), 0);  // accepted: stays
  EXPECT_TRUE(choice.refuse("CUBLAS_STATUS_NOT_SUPPORTED"));
  EXPECT_EQ(choice.current(), 1);
  EXPECT_TRUE(choice.refuse("CUBLAS_STATUS_NOT_SUPPORTED"));
  EXPECT_EQ(choice.current(), 2);
  EXPECT_FALSE(choice.refuse("CUBLAS_STATUS_NOT_SUPPORTED (the last)"));
  EXPECT_TRUE(choice.classic());
  EXPECT_EQ(choice.why(), "CUBLAS_STATUS_NOT_SUPPORTED (the last)");
  EXPECT_NE(testing::error_of([&] { choice.current(); }).find("internal error"), std::string::npos);

  const LtChoice none(0, "the heuristic returned CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_TRUE(none.classic());
  const GemmKey key{true, false, 1, 5504, 2048, 8192, DType::BF16, DType::F32, 2};
  const std::string msg = classic_fallback_message(key, none.why());
  for (const char* part : {"bfloat16 -> float32 [5504x2048] = [8192x5504]^T x [8192x2048]",
                           "aligned to 2 bytes", "CUBLAS_STATUS_NOT_SUPPORTED", "classic cuBLAS"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  EXPECT_EQ(kLtCandidates, 8);
}

TEST(GemmPlans, ClassicFallbackIsSaidOncePerKey) {
  // Keys no other test uses: the record is process-wide.
  const GemmKey a{false, false, 3, 7, 11, 13, DType::F32, DType::F32, 4};
  GemmKey b = a;
  b.m = 8;
  EXPECT_TRUE(first_classic_fallback(a));
  EXPECT_FALSE(first_classic_fallback(a));
  EXPECT_TRUE(first_classic_fallback(b));
  EXPECT_FALSE(first_classic_fallback(b));
  EXPECT_FALSE(first_classic_fallback(a));
}

// Off until a GPU shows cuBLAS' grouped GEMM takes bfloat16 into float32 (grouped_gemm.cu).
TEST(GemmPlans, GroupedGemmMixedTypesAreOffByDefault) { EXPECT_FALSE(grouped_gemm_mixed_types()); }

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

TEST(AttentionPlans, KeysAreNamedForTheLogs) {
  AttentionKey k{4, 2048, 16, 16, 128, DType::BF16, false};
  EXPECT_EQ(describe(k), "forward B=4 T=2048 H=16 Hkv=16 D=128");
  k.backward = true;
  k.kv_seq = 4096;
  k.kv_heads = 4;
  EXPECT_EQ(describe(k), "backward B=4 T=2048 Tk=4096 H=16 Hkv=4 D=128");
}

TEST(AttentionPlans, OperandsMustBeSixteenByteAligned) {
  EXPECT_EQ(kSdpaAlignment, 16u);  // the frontend's Tensor_attributes::default_alignment
  EXPECT_TRUE(sdpa_aligned({}));
  EXPECT_TRUE(sdpa_aligned({0x7f0000001000, 0x7f0000002010}));
  // A bfloat16 [B,T,H,D] view one batch row in (T*H*D*2 bytes) stays aligned when D is a
  // multiple of 8; a view one element in does not.
  const std::uintptr_t base = 0x7f0000000100;
  EXPECT_TRUE(sdpa_aligned({base, base + 19 * 3 * 8 * 2}));
  EXPECT_FALSE(sdpa_aligned({base, base + 2}));
  EXPECT_FALSE(sdpa_aligned({base + 8}));
}

// A stand-in for a cuDNN graph: which build made it.
struct FakeGraph {
  int serial = 0;
};

TEST(AttentionPlans, GraphsAreBuiltOncePerKey) {
  AttentionGraphMemo<FakeGraph> memo;
  int builds = 0;
  auto build = [&] {
    return AttentionBuild<FakeGraph>{std::make_shared<FakeGraph>(FakeGraph{++builds}), ""};
  };
  const AttentionKey fwd{4, 2048, 16, 16, 128, DType::BF16, false};
  AttentionKey bwd = fwd, prefix = fwd;
  bwd.backward = true;
  prefix.kv_seq = 4096;

  const auto first = memo.find(fwd, build);
  ASSERT_TRUE(first.first);
  ASSERT_NE(first.entry->graph, nullptr);
  EXPECT_EQ(first.entry->graph->serial, 1);
  EXPECT_TRUE(first.entry->refusal.empty());
  EXPECT_GE(first.entry->build_seconds, 0.0);
  for (int call = 0; call < 5; ++call) {  // every later step: the same graph, no build
    const auto again = memo.find(fwd, build);
    EXPECT_FALSE(again.first);
    EXPECT_EQ(again.entry, first.entry);
  }
  EXPECT_EQ(memo.find(bwd, build).entry->graph->serial, 2);
  EXPECT_EQ(memo.find(prefix, build).entry->graph->serial, 3);
  EXPECT_EQ(memo.find(fwd, build).entry->graph->serial, 1);
  EXPECT_EQ(builds, 3);
  EXPECT_EQ(memo.builds(), 3);
  EXPECT_EQ(memo.refusals(), 0);
  EXPECT_EQ(memo.hits(), 6);
  EXPECT_EQ(memo.size(), 3u);
}

TEST(AttentionPlans, BuildWallTimeIsMeasured) {
  AttentionGraphMemo<FakeGraph> memo;
  const auto found = memo.find(AttentionKey{1, 8, 1, 1, 8, DType::BF16, false}, [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return AttentionBuild<FakeGraph>{std::make_shared<FakeGraph>(), ""};
  });
  EXPECT_GE(found.entry->build_seconds, 0.019);
  EXPECT_LT(found.entry->build_seconds, 60.0);
}

// The forward refused (cuDNN's words kept, said once, never rebuilt) while the backward of the
// same shape builds: each direction degrades on its own, since either backward takes either
// forward's statistics.
TEST(AttentionPlans, ARefusedKeyIsRememberedWithCudnnsWords) {
  AttentionGraphMemo<FakeGraph> memo;
  const std::string words = "build_plans: [cudnn_frontend] Error: No valid execution plans built.";
  int attempts = 0;
  auto refuse = [&] {
    ++attempts;
    return AttentionBuild<FakeGraph>{nullptr, words};
  };
  const AttentionKey fwd{2, 19, 4, 2, 8, DType::BF16, false};
  AttentionKey bwd = fwd;
  bwd.backward = true;

  const auto refused = memo.find(fwd, refuse);
  EXPECT_TRUE(refused.first);  // the caller says it now ...
  EXPECT_EQ(refused.entry->graph, nullptr);
  EXPECT_EQ(refused.entry->refusal, words);
  for (int call = 0; call < 3; ++call) {
    const auto again = memo.find(fwd, refuse);
    EXPECT_FALSE(again.first);  // ... and never again
    EXPECT_EQ(again.entry->graph, nullptr);
    EXPECT_EQ(again.entry->refusal, words);
  }
  EXPECT_EQ(attempts, 1);

  const auto backward = memo.find(bwd, [] {
    return AttentionBuild<FakeGraph>{std::make_shared<FakeGraph>(FakeGraph{7}), ""};
  });
  ASSERT_NE(backward.entry->graph, nullptr);
  EXPECT_EQ(backward.entry->graph->serial, 7);
  EXPECT_EQ(memo.refusals(), 1);
  EXPECT_EQ(memo.builds(), 1);
}

// The frontend's loader throws (a missing symbol or library) instead of returning an error: that
// is a refusal too, in the exception's words, and the run goes on.
TEST(AttentionPlans, AThrowingBuildIsARefusal) {
  AttentionGraphMemo<FakeGraph> memo;
  AttentionKey k{2, 19, 4, 2, 8, DType::BF16, false};
  int attempts = 0;
  auto throwing = [&]() -> AttentionBuild<FakeGraph> {
    ++attempts;
    throw std::runtime_error("Unable to find symbol cudnnBackendExecute");
  };
  EXPECT_NO_THROW(memo.find(k, throwing));
  const auto again = memo.find(k, throwing);
  EXPECT_EQ(again.entry->graph, nullptr);
  EXPECT_EQ(again.entry->refusal, "Unable to find symbol cudnnBackendExecute");
  EXPECT_EQ(attempts, 1);
  k.seq = 20;  // neither a graph nor a reason: still a refusal, with words of its own
  const auto empty = memo.find(k, [] { return AttentionBuild<FakeGraph>{}; });
  EXPECT_EQ(empty.entry->graph, nullptr);
  EXPECT_FALSE(empty.entry->refusal.empty());
  EXPECT_EQ(memo.refusals(), 2);
}

// Several backends (logical devices, each on its own thread) on two GPUs ask for the same shapes
// at once: each GPU builds each key once, and every asker on a GPU gets that GPU's graph.
TEST(AttentionPlans, GraphsAreSharedByEveryBackendOnAGpu) {
  struct Shared {
    std::mutex mutex;
    AttentionGraphMemo<FakeGraph> memo;
  };
  PerGpu<Shared> gpus;
  const AttentionKey fwd{4, 64, 4, 2, 64, DType::BF16, false};
  AttentionKey bwd = fwd;
  bwd.backward = true;
  constexpr int kBackendsPerGpu = 4;
  std::vector<const FakeGraph*> seen(2 * kBackendsPerGpu * 2, nullptr);
  std::vector<Shared*> homes(2 * kBackendsPerGpu, nullptr);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2 * kBackendsPerGpu; ++i) {
    threads.emplace_back([&, i] {
      const int gpu = i % 2;
      Shared& shared = gpus.at(gpu);
      homes[i] = &shared;
      for (int d = 0; d < 2; ++d) {
        std::lock_guard<std::mutex> lock(shared.mutex);
        const auto found = shared.memo.find(d ? bwd : fwd, [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let the others pile up
          return AttentionBuild<FakeGraph>{std::make_shared<FakeGraph>(FakeGraph{gpu}), ""};
        });
        seen[2 * i + d] = found.entry->graph.get();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(gpus.size(), 2u);
  for (int gpu = 0; gpu < 2; ++gpu) {
    Shared& shared = gpus.at(gpu);
    EXPECT_EQ(shared.memo.builds(), 2) << "GPU " << gpu;  // forward and backward, once each
    EXPECT_EQ(shared.memo.hits(), 2 * (kBackendsPerGpu - 1)) << "GPU " << gpu;
  }
  EXPECT_NE(&gpus.at(0), &gpus.at(1));
  for (int i = 0; i < 2 * kBackendsPerGpu; ++i) {
    EXPECT_EQ(homes[i], &gpus.at(i % 2));
    for (int d = 0; d < 2; ++d) {
      ASSERT_NE(seen[2 * i + d], nullptr);
      EXPECT_EQ(seen[2 * i + d]->serial, i % 2);
      EXPECT_EQ(seen[2 * i + d], seen[2 * (i % 2) + d]);  // the same graph object as GPU's first
    }
  }
}

}  // namespace
}  // namespace carousel::gpu
