// test_cuda_graph.cpp — a captured step on the GPU's fast tier (a CUDA graph) against the same
// ops run eagerly, bitwise, and the same on the CPU's emulation of capture. Label gpu (the GPU
// case skips without one, saying why).
#include <gtest/gtest.h>

#include "compute/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::fetch;
using testing::make;

// A captured region on the fast tier (cuBLASLt GEMMs, cuDNN attention forward and backward,
// fused kernels, scratch from the stream-ordered pool; compute/recording/step_graph.h) launched on
// new inputs gives the bits of the same ops run eagerly, launch after launch.
void expect_launches_equal_eager_ops(Backend& be) {
  const std::int64_t B = 2, T = 128, H = 4, D = 64, E = H * D;
  const DType dt = DType::BF16;
  Tensor q = make(be, testing::randn(B * T * E, 1), {B, T, H, D}, dt);
  Tensor k = make(be, testing::randn(B * T * E, 2), {B, T, H, D}, dt);
  Tensor v = make(be, testing::randn(B * T * E, 3), {B, T, H, D}, dt);
  Tensor w = make(be, testing::randn(E * E, 4, 0.05), {E, E}, dt);
  Tensor g = make(be, testing::randn(E, 5), {E}, dt);
  Tensor y = be.zeros({B * T, E}, dt), dq = be.zeros({B, T, H, D}, dt);
  Tensor dk = be.zeros({B, T, H, D}, dt), dv = be.zeros({B, T, H, D}, dt);
  const auto region = [&] {
    Tensor out = be.empty({B, T, H, D}, dt), lse = be.empty({B, H, T});
    be.attention_forward(q, k, v, out, lse);
    Tensor proj = be.empty({B * T, E}, dt), rstd = be.empty({B * T}),
           act = be.empty({B * T, E}, dt);
    be.gemm(false, false, 1.0, out.reshape({B * T, E}), w, 0.0, proj);
    be.rmsnorm_forward(proj, g, 1e-5, y, rstd);
    be.swiglu_forward(proj, y, act);
    be.attention_backward(act.reshape({B, T, H, D}), q, k, v, out, lse, dq, dk, dv);
  };
  region();  // eager first: plans and cuDNN graphs are built outside the capture
  be.begin_capture();
  region();
  std::unique_ptr<StepGraph> graph = be.end_capture();
  const auto results = [&] {
    return std::vector<std::vector<double>>{fetch(be, y), fetch(be, dq), fetch(be, dv)};
  };
  for (std::uint64_t seed : {10, 11}) {
    be.copy(make(be, testing::randn(B * T * E, seed), {B, T, H, D}, dt), q);
    graph->launch();
    const auto launched = results();
    region();
    EXPECT_EQ(launched, results()) << "seed " << seed << " on " << be.name();
  }
}

TEST(CudaGraph, LaunchesEqualTheEagerOpsBitwise) {
  std::unique_ptr<Backend> gpu;
  try {
    gpu = make_cuda_backend(0);
  } catch (const Error& e) {
    GTEST_SKIP() << "no GPU to test on: " << e.what();
  }
  if (!gpu->graph_blocker().empty()) GTEST_SKIP() << gpu->graph_blocker();
  expect_launches_equal_eager_ops(*gpu);
}

// The same on the CPU's emulation (runs everywhere: a GPU's minutes are not spent on a broken
// case).
TEST(CudaGraph, LaunchesEqualTheEagerOpsBitwiseOnTheCpu) {
  CpuBackend cpu;
  expect_launches_equal_eager_ops(cpu);
}

}  // namespace
}  // namespace carousel
