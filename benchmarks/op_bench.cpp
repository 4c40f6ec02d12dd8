// op_bench.cpp — achieved FLOP/s of GEMM and attention on the CPU backend (Google Benchmark). The
// GPU's ops, per kernel tier, are gpu_op_bench.cpp's.
//
//   build/bin/op_bench                                  # all
//   build/bin/op_bench --benchmark_filter=Gemm          # GEMMs only
//
// GEMM FLOPs = 2 m n k. Attention FLOPs count the causal half of the two [T,T] products, the
// model FLOPs a trainer reports: forward 2 * 2 B H T^2 D / 2, backward 2.5x the forward
// (four products, the recomputed scores included, minus nothing for the mask).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <random>

#include "compute/cpu_backend.h"

namespace {

using carousel::CpuBackend;
using carousel::Tensor;

Tensor random_tensor(CpuBackend& be, carousel::Shape shape, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(carousel::numel(shape));
  for (auto& x : v) x = dist(gen);
  return be.from_host(v, std::move(shape));
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  // Shown as e.g. "FLOP=142.9G/s": FLOPs per iteration times iterations per second.
  state.counters["FLOP"] =
      benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

// y[m,n] = x[m,k] W^T, W [n,k]: the linear-layer forward GEMM.
void BM_GemmLinear(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  CpuBackend be;
  Tensor x = random_tensor(be, {m, k}, 1), w = random_tensor(be, {n, k}, 2), y = be.empty({m, n});
  for (auto _ : state) be.gemm(false, true, 1.0, x, w, 0.0, y);
  set_flops(state, 2.0 * m * n * k);
}
BENCHMARK(BM_GemmLinear)
    ->Args({256, 256, 256})
    ->Args({512, 512, 512})
    ->Args({1024, 1024, 1024})
    ->Args({2048, 2048, 2048})
    ->Args({4096, 172, 64})  // tiny llama MLP up-projection: 64 sequences x 64 tokens
    ->Args({1024, 4096, 1024})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// dW[m,n] += dy[k,m]^T x[k,n]: a linear layer's weight gradient (k = tokens, the long sum).
void BM_GemmWeightGrad(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  CpuBackend be;
  Tensor dy = random_tensor(be, {k, m}, 1), x = random_tensor(be, {k, n}, 2),
         dw = random_tensor(be, {m, n}, 3);
  for (auto _ : state) be.gemm(true, false, 1.0, dy, x, 1.0, dw);
  set_flops(state, 2.0 * m * n * k);
}
BENCHMARK(BM_GemmWeightGrad)
    ->Args({688, 256, 2048})  // issue 14's config: MLP gate / up weights, 8 x 256 tokens
    ->Args({256, 688, 2048})  // and the down projection
    ->Args({256, 256, 2048})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The same GEMM as one cblas_sgemm with OpenBLAS's own threading: the rate the backend's
// shape-tiled GEMM (deterministic for any thread count, docs/reliability.md#determinism) is
// compared with. Run both in one invocation and compare their FLOP rates.
void BM_GemmOpenBlasThreaded(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  CpuBackend be;
  Tensor x = random_tensor(be, {m, k}, 1), w = random_tensor(be, {n, k}, 2), y = be.empty({m, n});
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k), 1.f,
                x.data<float>(), int(k), w.data<float>(), int(k), 0.f, y.data<float>(), int(n));
  }
  set_flops(state, 2.0 * m * n * k);
}
BENCHMARK(BM_GemmOpenBlasThreaded)
    ->Args({256, 256, 256})
    ->Args({512, 512, 512})
    ->Args({1024, 1024, 1024})
    ->Args({2048, 2048, 2048})
    ->Args({4096, 172, 64})
    ->Args({1024, 4096, 1024})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Attention with args (batch, seq, heads, kv_heads, head_dim).
void BM_Attention(benchmark::State& state, bool backward) {
  const std::int64_t B = state.range(0), T = state.range(1), H = state.range(2),
                     Hkv = state.range(3), D = state.range(4);
  CpuBackend be;
  Tensor q = random_tensor(be, {B, T, H, D}, 1), k = random_tensor(be, {B, T, Hkv, D}, 2),
         v = random_tensor(be, {B, T, Hkv, D}, 3), out = be.empty({B, T, H, D}),
         lse = be.empty({B, H, T}), dout = random_tensor(be, {B, T, H, D}, 4),
         dq = be.empty(q.shape()), dk = be.empty(k.shape()), dv = be.empty(v.shape());
  be.attention_forward(q, k, v, out, lse);
  for (auto _ : state) {
    if (backward) {
      be.attention_backward(dout, q, k, v, out, lse, dq, dk, dv);
    } else {
      be.attention_forward(q, k, v, out, lse);
    }
  }
  const double forward_flops = 2.0 * B * H * T * T * D;  // 2 products x 2 T^2 D / 2 (causal)
  set_flops(state, backward ? 2.5 * forward_flops : forward_flops);
}
BENCHMARK_CAPTURE(BM_Attention, forward, false)
    ->Args({8, 64, 4, 2, 16})   // tiny
    ->Args({8, 256, 8, 4, 32})  // issue 14's one-device training config
    ->Args({4, 512, 8, 8, 64})
    ->Args({1, 2048, 8, 2, 128})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, backward, true)
    ->Args({8, 64, 4, 2, 16})
    ->Args({8, 256, 8, 4, 32})
    ->Args({4, 512, 8, 8, 64})
    ->Args({1, 2048, 8, 2, 128})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
