// test_step_graph.cpp — captured work on the CPU backend (compute/recording/step_graph.h), the
// oracle of CUDA graphs: ops issued while capturing do not run; each launch runs them on the
// buffers' contents of that moment, equal bitwise to the same ops run eagerly (on a second
// backend); the buffers the region allocated and freed stay the graph's until it goes; and what a
// replay could not repeat (a host transfer, a buffer freed from before or kept from inside) is an
// error naming it.
#include <gtest/gtest.h>

#include <vector>

#include "compute/cpu_backend.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::error_of;

// A small two-layer computation with temporaries, in float32 or bfloat16 (bf16 on the CPU goes
// through staging: casts and float32 copies, all inside the region): y = swiglu(x w1, x w2) w3.
void compute(Backend& be, const Tensor& x, const Tensor& w1, const Tensor& w2, const Tensor& w3,
             const Tensor& y) {
  const std::int64_t n = x.dim(0), f = w1.dim(1);
  Tensor gate = be.empty({n, f}, x.dtype()), up = be.empty({n, f}, x.dtype());
  be.gemm(false, false, 1.0, x, w1, 0.0, gate);
  be.gemm(false, false, 1.0, x, w2, 0.0, up);
  Tensor act = be.empty({n, f}, x.dtype());
  be.swiglu_forward(gate, up, act);
  be.gemm(false, false, 1.0, act, w3, 0.0, y);
  be.axpy(0.5, x, y);  // a residual
}

class StepGraphs : public ::testing::TestWithParam<DType> {};

TEST_P(StepGraphs, LaunchesRunTheCapturedOpsOnTheCurrentInputsBitwiseLikeEagerOps) {
  const DType dtype = GetParam();
  CpuBackend be(0), eager(1);
  const std::int64_t n = 6, e = 8, f = 12;
  const auto w1v = testing::randn(e * f, 1), w2v = testing::randn(e * f, 2),
             w3v = testing::randn(f * e, 3);
  const auto weights = [&](Backend& b) {
    return std::vector<Tensor>{testing::make(b, w1v, {e, f}, dtype),
                               testing::make(b, w2v, {e, f}, dtype),
                               testing::make(b, w3v, {f, e}, dtype)};
  };
  const std::vector<Tensor> w = weights(be), w_eager = weights(eager);
  Tensor x = testing::make(be, testing::randn(n * e, 10), {n, e}, dtype);
  Tensor y = be.zeros({n, e}, dtype);
  const std::size_t before = be.allocator().stats().current_bytes;

  be.begin_capture();
  compute(be, x, w[0], w[1], w[2], y);
  std::unique_ptr<StepGraph> graph = be.end_capture();
  EXPECT_FALSE(be.capturing());
  EXPECT_EQ(testing::fetch(be, y), std::vector<double>(n * e, 0.0)) << "ran while capturing";
  // The temporaries the region freed are the graph's now.
  EXPECT_GT(be.allocator().stats().current_bytes, before);

  for (std::uint64_t seed : {10, 11, 12}) {  // new inputs in the same buffer each time
    const auto xv = testing::randn(n * e, seed);
    Tensor fresh = testing::make(be, xv, {n, e}, dtype);
    be.copy(fresh, x);
    graph->launch();
    Tensor x_eager = testing::make(eager, xv, {n, e}, dtype), y_eager = eager.zeros({n, e}, dtype);
    compute(eager, x_eager, w_eager[0], w_eager[1], w_eager[2], y_eager);
    EXPECT_EQ(testing::fetch(be, y), testing::fetch(eager, y_eager)) << "seed " << seed;
  }
  graph.reset();
  EXPECT_EQ(be.allocator().stats().current_bytes, before);  // the graph's blocks went with it
}

INSTANTIATE_TEST_SUITE_P(Dtypes, StepGraphs, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(StepGraph, HostTransfersInsideACaptureAreErrors) {
  CpuBackend be;
  Tensor x = be.zeros({4});
  std::vector<float> host(4);
  const auto inside = [&](const std::function<void()>& fn) {
    be.begin_capture();
    const std::string error = error_of(fn);
    be.end_capture();
    return error;
  };
  for (const auto& [op, fn] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"download", [&] { be.download(x, host.data()); }},
           {"upload", [&] { be.upload(host.data(), x); }},
           {"sum", [&] { be.sum(x); }},
           {"sum_squares", [&] { be.sum_squares(x); }}}) {
    const std::string error = inside(fn);
    EXPECT_NE(error.find(op + " inside a captured step on cpu:0"), std::string::npos) << error;
    EXPECT_NE(error.find("step_graphs=off"), std::string::npos) << error;
  }
}

TEST(StepGraph, ARegionThatKeepsOrFreesBuffersAcrossItsEdgesIsAnError) {
  CpuBackend be;
  const std::size_t start = be.allocator().stats().current_bytes;
  Tensor from_before = be.zeros({256});
  Tensor kept;
  be.begin_capture();
  kept = be.zeros({64});   // allocated inside, still held after
  from_before = Tensor();  // allocated before, freed inside
  const std::string error = error_of([&] { be.end_capture(); });
  EXPECT_NE(error.find("1 buffer(s) (256 B) allocated inside the captured region are still held"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("1 buffer(s) (1.00 KiB) allocated before it were freed inside it"),
            std::string::npos)
      << error;
  EXPECT_FALSE(be.capturing());
  kept = Tensor();
  EXPECT_EQ(be.allocator().stats().current_bytes, start);  // nothing leaked on the error path

  be.begin_capture();  // a region that keeps to itself is fine afterwards
  { Tensor t = be.zeros({64}); }
  EXPECT_NO_THROW(be.end_capture());
}

}  // namespace
}  // namespace carousel
