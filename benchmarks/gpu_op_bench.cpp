// gpu_op_bench.cpp — the GPU ops' achieved FLOP/s and bytes/s on GPU 0, per kernel tier (fast:
// cuBLASLt, cuDNN attention, fused kernels; reference: classic cuBLAS and the simple kernels), for
// the proof's part 4 (docs/gpu.md). Google Benchmark; each figure is the mean over iterations of
// work queued and then synchronised, so launch overheads count as they do in a step.
//
//   build/bin/gpu_op_bench                                   # all (errors without a GPU)
//   build/bin/gpu_op_bench --benchmark_filter=Gemm/fast      # cuBLASLt GEMMs only
//
// GEMM FLOPs = 2 m n k. Attention FLOPs count the causal half (MaxText's convention, the one
// docs/gpu.md's MFU uses): forward 4 B H T^2 D / 2, backward 2.5x the forward. Row kernels report
// bytes read + written per second (the roofline of memory-bound ops: 3.35 TB/s on an H100 SXM).
#include <benchmark/benchmark.h>

#include <memory>

#include "compute/error.h"
#include "cuda/cuda_backend.h"

namespace {

using carousel::Backend;
using carousel::DType;
using carousel::GpuKernels;
using carousel::Tensor;

const char* tier_name(GpuKernels k) { return k == GpuKernels::Fast ? "fast" : "reference"; }

// GPU 0 in the tier, or null after telling Google Benchmark why not.
std::unique_ptr<Backend> gpu_or_skip(benchmark::State& state, GpuKernels kernels) {
  try {
    return carousel::make_cuda_backend(0, 0, kernels);
  } catch (const carousel::Error& e) {
    state.SkipWithError(e.what());
    return nullptr;
  }
}

// Times `step` (queued work) with a synchronisation per iteration, after one warm-up call that
// builds plans and graphs.
template <class Step>
void time_on_gpu(benchmark::State& state, Backend& be, Step&& step) {
  step();
  be.synchronize();
  for (auto _ : state) {
    step();
    be.synchronize();
  }
}

void set_rate(benchmark::State& state, const char* name, double per_iteration) {
  state.counters[name] =
      benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

// c[m,n] = a[m,k] b[n,k]^T (a linear layer's forward; the backward's shapes are other args).
void BM_Gemm(benchmark::State& state, GpuKernels kernels, DType dtype, bool trans_a) {
  auto be = gpu_or_skip(state, kernels);
  if (!be) return;
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Tensor a = be->empty(trans_a ? carousel::Shape{k, m} : carousel::Shape{m, k}, dtype);
  Tensor b = be->empty({n, k}, dtype), c = be->empty({m, n}, dtype);
  be->fill(a, 0.5);
  be->fill(b, 0.25);
  time_on_gpu(state, *be, [&] { be->gemm(trans_a, true, 1.0, a, b, 0.0, c); });
  set_rate(state, "FLOP", 2.0 * double(m) * double(n) * double(k));
  state.SetLabel(tier_name(kernels));
}
// 8192^3, then the ~1B llama's (E 2048, F 5632, 8192 tokens a microbatch) forward GEMMs: q/o
// projections, gate/up, down, and the LM head (vocab 32000).
void gemm_shapes(benchmark::internal::Benchmark* b) {
  b->Args({8192, 8192, 8192})
      ->Args({8192, 2048, 2048})
      ->Args({8192, 5632, 2048})
      ->Args({8192, 2048, 5632})
      ->Args({8192, 32000, 2048})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}
BENCHMARK_CAPTURE(BM_Gemm, fast_bf16, GpuKernels::Fast, DType::BF16, false)->Apply(gemm_shapes);
BENCHMARK_CAPTURE(BM_Gemm, reference_bf16, GpuKernels::Reference, DType::BF16, false)
    ->Apply(gemm_shapes);
// Weight gradients: dW[n,k] = dy[m,n]^T x[m,k] is a^T b^T here with the token dimension inner.
BENCHMARK_CAPTURE(BM_Gemm, fast_bf16_weight_grad, GpuKernels::Fast, DType::BF16, true)
    ->Args({2048, 2048, 8192})
    ->Args({5632, 2048, 8192})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Gemm, fast_f32, GpuKernels::Fast, DType::F32, false)
    ->Args({8192, 8192, 8192})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Causal GQA attention, args (batch, seq, heads, kv_heads, head_dim), bfloat16.
void BM_Attention(benchmark::State& state, GpuKernels kernels, bool backward) {
  auto be = gpu_or_skip(state, kernels);
  if (!be) return;
  const std::int64_t B = state.range(0), T = state.range(1), H = state.range(2),
                     Hkv = state.range(3), D = state.range(4);
  const DType bf = DType::BF16;
  Tensor q = be->empty({B, T, H, D}, bf), k = be->empty({B, T, Hkv, D}, bf),
         v = be->empty({B, T, Hkv, D}, bf), out = be->empty({B, T, H, D}, bf),
         lse = be->empty({B, H, T}, DType::F32), dout = be->empty({B, T, H, D}, bf),
         dq = be->empty(q.shape(), bf), dk = be->empty(k.shape(), bf),
         dv = be->empty(v.shape(), bf);
  for (const Tensor* t : {&q, &k, &v, &dout}) be->fill(*t, 0.125);
  be->attention_forward(q, k, v, out, lse);
  time_on_gpu(state, *be, [&] {
    if (backward)
      be->attention_backward(dout, q, k, v, out, lse, dq, dk, dv);
    else
      be->attention_forward(q, k, v, out, lse);
  });
  const double forward = 2.0 * double(B) * double(H) * double(T) * double(T) * double(D);
  set_rate(state, "FLOP", backward ? 2.5 * forward : forward);
  state.SetLabel(tier_name(kernels));
}
void attention_shapes(benchmark::internal::Benchmark* b) {
  b->Args({4, 2048, 16, 16, 128})
      ->Args({2, 4096, 16, 16, 128})
      ->Args({4, 2048, 32, 8, 64})
      ->Args({2, 4096, 32, 8, 64})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}
BENCHMARK_CAPTURE(BM_Attention, fast_forward, GpuKernels::Fast, false)->Apply(attention_shapes);
BENCHMARK_CAPTURE(BM_Attention, fast_backward, GpuKernels::Fast, true)->Apply(attention_shapes);
// The reference kernel (one thread per query) at the smallest shape only: it is slow.
BENCHMARK_CAPTURE(BM_Attention, reference_forward, GpuKernels::Reference, false)
    ->Args({1, 2048, 16, 16, 128})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);

// Memory-bound row ops on [tokens, width] bfloat16: bytes moved per second.
enum class RowOp { RmsnormForward, RmsnormBackward, CrossEntropyBackward, SwigluForward };
void BM_RowOp(benchmark::State& state, GpuKernels kernels, RowOp op) {
  auto be = gpu_or_skip(state, kernels);
  if (!be) return;
  const std::int64_t N = state.range(0), E = state.range(1);
  const DType bf = DType::BF16;
  Tensor x = be->empty({N, E}, bf), y = be->empty({N, E}, bf), dy = be->empty({N, E}, bf),
         w = be->empty({E}, bf), dw = be->zeros({E}, bf), rstd = be->empty({N}, DType::F32);
  be->fill(x, 0.5);
  be->fill(dy, 0.25);
  be->fill(w, 1.0);
  Tensor targets = be->zeros({N}, DType::I32);
  be->rmsnorm_forward(x, w, 1e-5, y, rstd);
  double bytes = 0;
  time_on_gpu(state, *be, [&] {
    switch (op) {
      case RowOp::RmsnormForward:
        be->rmsnorm_forward(x, w, 1e-5, y, rstd);
        bytes = 2.0 * double(N * E) * 2;
        break;
      case RowOp::RmsnormBackward:
        be->rmsnorm_backward(dy, x, w, rstd, y, dw);
        bytes = 3.0 * double(N * E) * 2 + double(N * E) * 2;  // dx pass, dweight pass
        break;
      case RowOp::CrossEntropyBackward:  // E = vocab; dlogits over the logits in place
        be->cross_entropy_backward(x, targets, 1.0 / double(N), x);
        bytes = 2.0 * double(N * E) * 2;
        break;
      case RowOp::SwigluForward:
        be->swiglu_forward(x, dy, y);
        bytes = 3.0 * double(N * E) * 2;
        break;
    }
  });
  set_rate(state, "bytes", bytes);
  state.SetLabel(tier_name(kernels));
}
void row_benchmarks(GpuKernels kernels, const char* tier) {
  struct Row {
    const char* name;
    RowOp op;
    std::int64_t n, width;
  };
  for (const Row& r : {Row{"rmsnorm_forward", RowOp::RmsnormForward, 8192, 2048},
                       Row{"rmsnorm_backward", RowOp::RmsnormBackward, 8192, 2048},
                       Row{"cross_entropy_backward", RowOp::CrossEntropyBackward, 8192, 32000},
                       Row{"swiglu_forward", RowOp::SwigluForward, 8192, 5632}}) {
    benchmark::RegisterBenchmark((std::string("BM_RowOp/") + r.name + "/" + tier).c_str(), BM_RowOp,
                                 kernels, r.op)
        ->Args({r.n, r.width})
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  row_benchmarks(GpuKernels::Fast, "fast");
  row_benchmarks(GpuKernels::Reference, "reference");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
