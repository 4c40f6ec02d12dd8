// test_basic_ops.cpp — memory accounting, tensor views, BLAS-1 ops, fixed-order reductions and
// the AdamW step on the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "compute/cpu/omp_wait_policy.h"
#include "compute/cpu_backend.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::fetch;
using testing::make;

TEST(Memory, AccountsCurrentAndPeakBytesExactly) {
  CpuBackend be;
  const auto base = be.allocator().stats();
  EXPECT_EQ(base.current_bytes, 0u);
  {
    Tensor a = be.empty({100, 3});         // 1200 bytes
    Tensor b = be.empty({7}, DType::F64);  // 56 bytes
    EXPECT_EQ(be.allocator().stats().current_bytes, 1256u);
    Tensor view = a.slice(10, 20);  // views allocate nothing
    EXPECT_EQ(be.allocator().stats().current_bytes, 1256u);
  }
  const auto after = be.allocator().stats();
  EXPECT_EQ(after.current_bytes, 0u);
  EXPECT_EQ(after.peak_bytes, 1256u);
  EXPECT_EQ(after.allocations, 2u);
  be.allocator().reset_peak();
  EXPECT_EQ(be.allocator().stats().peak_bytes, 0u);
}

TEST(Memory, ViewKeepsStorageAliveAfterParentIsGone) {
  CpuBackend be;
  Tensor view;
  {
    Tensor parent = make(be, {1, 2, 3, 4, 5, 6}, {3, 2}, DType::F32);
    view = parent.slice(1, 3);
  }
  EXPECT_EQ(be.allocator().stats().current_bytes, 24u);
  EXPECT_EQ(fetch(be, view), (std::vector<double>{3, 4, 5, 6}));
  view = Tensor();
  EXPECT_EQ(be.allocator().stats().current_bytes, 0u);
}

// Empty tensors move nothing: an empty vector's data() is null, which memcpy must not get
// (UndefinedBehaviorSanitizer reports it; scripts/test.sh --sanitize), and both directions keep
// what they hold.
TEST(Memory, EmptyTensorsUploadAndDownloadNothing) {
  CpuBackend be;
  const Tensor empty = be.from_host(std::vector<std::int32_t>{}, {0});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_TRUE(be.to_host<std::int32_t>(empty).empty());
  std::vector<float> host = {7.0f};
  be.download(be.empty({0}), host.data());
  EXPECT_EQ(host, std::vector<float>{7.0f});
}

TEST(Memory, LimitExceededIsAClearError) {
  CpuBackend be(/*device_index=*/3, /*memory_limit_bytes=*/4096);
  Tensor a = be.empty({512});  // 2 KiB, fits
  try {
    Tensor b = be.empty({1024});  // 4 KiB more, does not
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("out of memory on cpu:3"), std::string::npos) << msg;
      EXPECT_NE(msg.find("limit 4.00 KiB"), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(be.allocator().stats().current_bytes, 2048u);  // the failed request left no trace
}

TEST(TensorViews, ViewReshapeSliceShareStorage) {
  CpuBackend be;
  Tensor t = make(be, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4}, DType::F32);
  EXPECT_EQ(fetch(be, t.slice(2, 3)), (std::vector<double>{8, 9, 10, 11}));
  EXPECT_EQ(fetch(be, t.view(5, {2})), (std::vector<double>{5, 6}));
  Tensor r = t.reshape({2, 6});
  be.fill(r.slice(1, 2), -1.0);  // writes through to t
  EXPECT_EQ(fetch(be, t), (std::vector<double>{0, 1, 2, 3, 4, 5, -1, -1, -1, -1, -1, -1}));
  EXPECT_THROW(t.view(10, {3}), Error);
  EXPECT_THROW(t.reshape({5}), Error);
  EXPECT_THROW(t.slice(2, 4), Error);
}

TEST(Blas1, FillCopyScaleAxpyAdd) {
  CpuBackend be;
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = make(be, {1, 2, 3, 4, 5}, {5}, dt), y = make(be, {10, 20, 30, 40, 50}, {5}, dt);
    be.axpy(2.0, x, y);
    EXPECT_EQ(fetch(be, y), (std::vector<double>{12, 24, 36, 48, 60}));
    be.scale(y, 0.5);
    EXPECT_EQ(fetch(be, y), (std::vector<double>{6, 12, 18, 24, 30}));
    Tensor z = be.empty({5}, dt);
    be.add(x, y, z);
    EXPECT_EQ(fetch(be, z), (std::vector<double>{7, 14, 21, 28, 35}));
    be.copy(x, z);
    EXPECT_EQ(fetch(be, z), fetch(be, x));
    be.fill(z, 0.25);
    EXPECT_EQ(fetch(be, z), (std::vector<double>(5, 0.25)));
  }
}

TEST(Reductions, SumAndSumSquaresMatchDoubleReference) {
  CpuBackend be;
  const std::size_t n = 100003;  // several reduction blocks plus a ragged tail
  auto v = testing::randn(n, 7);
  Tensor t = make(be, v, {std::int64_t(n)}, DType::F32);
  const auto stored = fetch(be, t);  // the float-rounded values
  double sum = 0, sq = 0;
  for (double x : stored) {
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(be.sum(t), sum, 1e-9 * std::abs(sq));
  EXPECT_NEAR(be.sum_squares(t), sq, 1e-12 * sq);
  // Bitwise reproducible: the same input gives the same bits.
  EXPECT_EQ(be.sum_squares(t), be.sum_squares(t));
}

TEST(Reductions, GlobalL2NormOverSeveralTensors) {
  CpuBackend be;
  Tensor a = make(be, {3, 4}, {2}, DType::F32), b = make(be, {12}, {1, 1}, DType::F32);
  EXPECT_DOUBLE_EQ(global_l2_norm(be, {a, b}), 13.0);  // sqrt(9 + 16 + 144)
}

// AdamW against values worked out by hand from the PyTorch formulas
// (lr 0.1, betas 0.9/0.95, eps 1e-8, weight decay 0.1, p0 = 1):
//   step 1, g = 0.5:   p = 1 - 0.1*0.1*1 = 0.99; m = 0.05; v = 0.0125;
//                      m_hat = 0.5, v_hat = 0.25 => p = 0.99 - 0.1*0.5/(0.5+1e-8) = 0.890000002
//   step 2, g = -0.25: p = 0.890000002*0.99 = 0.88110000198; m = 0.02; v = 0.015;
//                      m_hat = 0.02/0.19, v_hat = 0.015/0.0975
//                      => p = 0.88110000198 - 0.1*0.1052631579/(0.3922322703+1e-8) = 0.8542630579
TEST(AdamW, MatchesHandComputedSteps) {
  CpuBackend be;
  for (DType dt : {DType::F64, DType::F32}) {
    const double rtol = dt == DType::F64 ? 1e-12 : 1e-6;
    Tensor p = make(be, {1.0}, {1}, dt), m = be.zeros({1}, dt), v = be.zeros({1}, dt);
    AdamWParams h{.lr = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    h.step = 1;
    be.adamw_update(p, make(be, {0.5}, {1}, dt), m, v, h);
    EXPECT_NEAR(fetch(be, p)[0], 0.890000002, rtol * 0.89);
    EXPECT_NEAR(fetch(be, m)[0], 0.05, rtol * 0.05);
    EXPECT_NEAR(fetch(be, v)[0], 0.0125, rtol * 0.0125);
    h.step = 2;
    be.adamw_update(p, make(be, {-0.25}, {1}, dt), m, v, h);
    EXPECT_NEAR(fetch(be, p)[0], 0.8542630579, std::max(rtol * 0.85, 1e-10));  // 10 digits given
  }
}

TEST(AdamW, GradScaleIsTheSameAsAScaledGradient) {
  CpuBackend be;
  auto p0 = testing::randn(37, 1), g = testing::randn(37, 2);
  std::vector<double> half_g(g);
  for (auto& x : half_g) x *= 0.5;
  Tensor pa = make(be, p0, {37}, DType::F64), pb = make(be, p0, {37}, DType::F64);
  Tensor ma = be.zeros({37}, DType::F64), va = be.zeros({37}, DType::F64);
  Tensor mb = be.zeros({37}, DType::F64), vb = be.zeros({37}, DType::F64);
  AdamWParams h{.lr = 0.01, .weight_decay = 0.0};
  AdamWParams scaled = h;
  scaled.grad_scale = 0.5;
  be.adamw_update(pa, make(be, g, {37}, DType::F64), ma, va, scaled);
  be.adamw_update(pb, make(be, half_g, {37}, DType::F64), mb, vb, h);
  EXPECT_EQ(fetch(be, pa), fetch(be, pb));
  EXPECT_EQ(fetch(be, va), fetch(be, vb));
}

TEST(AdamW, WeightDecayZeroLeavesDecayOut) {
  // With g = 0 and no decay nothing moves; with decay p shrinks by exactly lr*wd.
  CpuBackend be;
  Tensor p = make(be, {2.0}, {1}, DType::F64), m = be.zeros({1}, DType::F64),
         v = be.zeros({1}, DType::F64), g = be.zeros({1}, DType::F64);
  be.adamw_update(p, g, m, v, AdamWParams{.lr = 0.5, .weight_decay = 0.0});
  EXPECT_EQ(fetch(be, p)[0], 2.0);
  be.adamw_update(p, g, m, v, AdamWParams{.lr = 0.5, .weight_decay = 0.5});
  EXPECT_DOUBLE_EQ(fetch(be, p)[0], 1.5);
}

}  // namespace
}  // namespace carousel

TEST(OmpWaitPolicy, PassiveOnlyWhenTheUserSetNeitherVariable) {
  using carousel::cpu::should_set_omp_wait;
  EXPECT_TRUE(should_set_omp_wait(nullptr, nullptr));
  EXPECT_FALSE(should_set_omp_wait("active", nullptr));  // the user's choice wins
  EXPECT_FALSE(should_set_omp_wait(nullptr, "300000"));
  EXPECT_FALSE(should_set_omp_wait("passive", nullptr));  // a re-executed process
}
