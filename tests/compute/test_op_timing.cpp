// test_op_timing.cpp — time by op kind (compute/recording/op_timing.h): each outermost op counted
// once under its own name (a bf16 op staged through float32 casts is one rmsnorm_forward, not
// casts), nothing recorded while timing is off, and the report line's shares worked out by hand.
#include <gtest/gtest.h>

#include "compute/cpu_backend.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

TEST(OpTiming, CountsOutermostOpsByKind) {
  CpuBackend be;
  Tensor x = testing::make(be, testing::randn(64 * 32, 1), {64, 32}, DType::BF16);
  Tensor w = testing::make(be, testing::randn(32, 2), {32}, DType::BF16);
  Tensor y = be.empty({64, 32}, DType::BF16), r = be.empty({64}, DType::F32);
  be.rmsnorm_forward(x, w, 1e-5, y, r);  // before timing: not counted
  be.start_op_timing();
  be.rmsnorm_forward(x, w, 1e-5, y, r);  // staged: casts inside, counted as one op
  be.rmsnorm_forward(x, w, 1e-5, y, r);
  Tensor a = be.zeros({8, 8}), c = be.zeros({8, 8});
  be.gemm(false, false, 1.0, a, a, 0.0, c);
  const OpTimes times = be.stop_op_timing();
  ASSERT_EQ(times.size(), 3u) << describe_op_times(times, 1.0);  // rmsnorm, zeros' fill, gemm
  EXPECT_EQ(times.at("rmsnorm_forward").calls, 2);
  EXPECT_EQ(times.at("gemm").calls, 1);
  EXPECT_EQ(times.at("fill").calls, 2);
  EXPECT_EQ(times.count("cast"), 0u);
  for (const auto& [name, t] : times) EXPECT_GE(t.seconds, 0.0) << name;
  be.gemm(false, false, 1.0, a, a, 0.0, c);  // after: timing is off
  EXPECT_TRUE(be.stop_op_timing().empty());
}

TEST(OpTiming, ReportLineGivesSharesLargestFirst) {
  OpTimes t;
  t["gemm"] = {10, 0.6};
  t["attention_backward"] = {2, 0.2};
  t["fill"] = {5, 0.05};
  EXPECT_EQ(describe_op_times(t, 1.0, 2),
            "gemm 60.0 % (10 calls), attention_backward 20.0 % (2 calls), 1 more kinds — ops "
            "85.0 % of 1.000 s");
  OpTimes more;
  more["gemm"] = {1, 0.1};
  accumulate(t, more);
  EXPECT_EQ(t["gemm"].calls, 11);
  EXPECT_DOUBLE_EQ(t["gemm"].seconds, 0.7);
}

}  // namespace
}  // namespace carousel
