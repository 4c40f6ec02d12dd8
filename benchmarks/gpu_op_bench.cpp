// gpu_op_bench.cpp — the GPU ops' achieved FLOP/s and bytes/s on GPU 0, per kernel tier (fast:
// cuBLASLt, cuDNN attention, fused kernels; reference: classic cuBLAS and the simple kernels), for
// the proof's benchmark part (docs/gpu.md). Google Benchmark; each iteration queues a few ms of
// calls back to back and then synchronises, so launch overheads count as they do in a step.
//
// What a GPU's few minutes need from it:
//   * one backend per tier per process (built at its first benchmark, released at exit): the
//     cuBLASLt plans, cuDNN graphs and workspaces are built once, not per Google Benchmark run;
//   * random bfloat16 inputs (a fixed seed), uploaded once per backend and copied on the device
//     into each benchmark's tensors, which are kept while Google Benchmark reruns that benchmark:
//     tensor cores draw more power, and so clock lower, on random data than on constants;
//   * the 1B llama's shapes as the proof runs it (E 2048, F 5504, 16 heads of 128, vocab 32000,
//     T 2048, B 4: M = 8192 tokens);
//   * names that --benchmark_filter picks out (a regular expression over the names):
//       bf16 GEMM 8192^3, fast:   'BM_Gemm/fast_bf16/8192/8192/8192/'
//       the llama's GEMMs, fast (forward, input and weight gradients; n is 2048, 5504 or 32000):
//                                 'BM_Gemm/fast_bf16[^/]*/[0-9]+/(2048|5504|32000)/'
//       attention forward and backward, fast, T 2048 and 4096, D 128:
//                                 'BM_Attention/fast_(forward|backward)/(4/2048|2/4096)/16/16/128/'
//
//   build/bin/gpu_op_bench                                   # all (fails at once without a GPU)
//   build/bin/gpu_op_bench --benchmark_list_tests            # the names (works without a GPU)
//
// GEMM FLOPs = 2 m n k. Attention FLOPs count the causal half (MaxText's convention, the one
// docs/gpu.md's MFU uses): forward 4 B H T^2 D / 2, backward 2.5x the forward. Row kernels report
// bytes read + written per second (the roofline of memory-bound ops: 4.8 TB/s on an H200).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compute/bfloat16.h"
#include "compute/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_info.h"

namespace {

using carousel::Backend;
using carousel::DType;
using carousel::GpuKernels;
using carousel::Shape;
using carousel::Tensor;

const char* tier_name(GpuKernels k) { return k == GpuKernels::Fast ? "fast" : "reference"; }

// Random values every input is drawn from: 2^26 bfloat16 values (128 MiB, an 8192 x 8192
// operand; larger tensors wrap around), uniform in [-1, 1) from splitmix64 of a fixed seed, so
// every run measures the same data.
constexpr std::int64_t kPoolValues = std::int64_t(1) << 26;
const std::vector<carousel::bf16>& random_pool() {
  static const std::vector<carousel::bf16> pool = [] {
    std::vector<carousel::bf16> v(kPoolValues);
    std::uint64_t state = 20251128;
    for (auto& x : v) {
      std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      x = carousel::math::to_bf16(float(double(z >> 11) * 0x1.0p-52 - 1.0));
    }
    return v;
  }();
  return pool;
}

// A tier's backend (opened at its first use) and the random pool on its device.
struct Tier {
  bool tried = false;
  std::unique_ptr<Backend> backend;
  std::string why;  // why there is no backend
  Tensor pool;
};
struct Tiers {
  Tier fast, reference;
};
Tiers& tiers() {
  static Tiers t;
  return t;
}

// The tier's backend, or null after telling Google Benchmark why there is none.
Tier* tier_or_skip(benchmark::State& state, GpuKernels kernels) {
  Tier& t = kernels == GpuKernels::Fast ? tiers().fast : tiers().reference;
  if (!t.tried) {
    t.tried = true;
    try {
      // Logical devices 0 and 1 on GPU 0: both tiers live at once, each with its own stream.
      t.backend = carousel::make_cuda_backend(0, kernels == GpuKernels::Fast ? 0 : 1, kernels);
      t.pool = t.backend->from_host(random_pool(), {kPoolValues});
    } catch (const carousel::Error& e) {
      t.backend.reset();
      t.why = e.what();
    }
  }
  if (!t.backend) {
    state.SkipWithError(t.why.c_str());
    return nullptr;
  }
  return &t;
}

// t = values from the tier's pool (on the device; bfloat16 copied, float32 widened), starting at
// a place chosen by `seed` and wrapping around.
void fill_random(Tier& tier, const Tensor& t, std::uint64_t seed) {
  Backend& be = *tier.backend;
  const std::int64_t n = t.numel();
  std::int64_t start = std::int64_t((seed * 2654435761ull) % std::uint64_t(kPoolValues / 2));
  for (std::int64_t done = 0; done < n;) {
    const std::int64_t len = std::min(n - done, kPoolValues - start);
    const Tensor src = tier.pool.view(start, {len}), dst = t.view(done, {len});
    if (t.dtype() == DType::BF16)
      be.copy(src, dst);
    else
      be.cast(src, dst);
    done += len;
    start = 0;
  }
}

// One benchmark's tensors, kept while Google Benchmark reruns the benchmark (it runs each a few
// times to size its iterations): made and filled once per benchmark, freed before the next.
struct Inputs {
  std::string key;
  std::vector<Tensor> tensors;
};
Inputs& inputs() {
  static Inputs in;
  return in;
}
std::vector<Tensor>& cached(const std::string& key,
                            const std::function<std::vector<Tensor>()>& make) {
  Inputs& in = inputs();
  if (in.key != key) {
    in.tensors.clear();  // the previous benchmark's memory first
    in.key.clear();
    in.tensors = make();
    in.key = key;
  }
  return in.tensors;
}

std::string key_of(const char* what, GpuKernels kernels, const benchmark::State& state,
                   int ranges) {
  std::string key = fmt::format("{}/{}", what, tier_name(kernels));
  for (int i = 0; i < ranges; ++i) key += fmt::format("/{}", state.range(i));
  return key;
}

// Times `step` (queued work): a warm-up call builds plans and graphs, a second one measures how
// many calls fill about 2 ms, and each iteration queues that many back to back before it
// synchronises, so the host's round trip per synchronisation (10-20 us) stays under 1 % of what
// is timed even for a 13 us row kernel — as in a step, whose ops are queued, not waited for one
// by one. Returns the calls per iteration (the rates scale by it).
template <class Step>
int time_on_gpu(benchmark::State& state, Backend& be, Step&& step) {
  step();
  be.synchronize();
  const auto start = std::chrono::steady_clock::now();
  step();
  be.synchronize();
  const double one =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int calls = int(std::clamp(std::ceil(2e-3 / std::max(one, 1e-7)), 1.0, 1000.0));
  for (auto _ : state) {
    for (int c = 0; c < calls; ++c) step();
    be.synchronize();
  }
  state.counters["calls_per_iteration"] = calls;
  return calls;
}

// `name` per second: `per_call` for each of `calls` calls an iteration.
void set_rate(benchmark::State& state, const char* name, double per_call, int calls) {
  state.counters[name] =
      benchmark::Counter(per_call * calls, benchmark::Counter::kIsIterationInvariantRate);
}

// Runs a benchmark's body. An error (cuBLAS or cuDNN refusing, out of memory) skips this benchmark
// with its message: Google Benchmark does not catch exceptions, and std::terminate would lose
// every later benchmark and cut the JSON short.
template <class Body>
void guarded(benchmark::State& state, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// c[m,n] = op(a) op(b) + beta c, as a linear layer's GEMMs call it: the forward a[m,k] b[n,k]^T;
// the input gradient dy[m,k] w[k,n]; the weight gradient dy[k,m]^T x[k,n] into float32 with
// beta 1 (bfloat16 runs accumulate every parameter gradient in float32).
struct GemmKind {
  DType ab, out;
  bool trans_a, trans_b;
  double beta;
};
void gemm_body(benchmark::State& state, GpuKernels kernels, GemmKind g) {
  Tier* tier = tier_or_skip(state, kernels);
  if (!tier) return;
  Backend& be = *tier->backend;
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const std::string key =
      fmt::format("{}/{}/{}/{}{}", key_of("gemm", kernels, state, 3), carousel::dtype_name(g.ab),
                  carousel::dtype_name(g.out), g.trans_a ? "T" : "N", g.trans_b ? "T" : "N");
  auto& t = cached(key, [&] {
    Tensor a = be.empty(g.trans_a ? Shape{k, m} : Shape{m, k}, g.ab);
    Tensor b = be.empty(g.trans_b ? Shape{n, k} : Shape{k, n}, g.ab);
    fill_random(*tier, a, 1);
    fill_random(*tier, b, 2);
    return std::vector<Tensor>{a, b, be.zeros({m, n}, g.out)};
  });
  const int calls =
      time_on_gpu(state, be, [&] { be.gemm(g.trans_a, g.trans_b, 1.0, t[0], t[1], g.beta, t[2]); });
  set_rate(state, "FLOP", 2.0 * double(m) * double(n) * double(k), calls);
  state.SetLabel(tier_name(kernels));
}
constexpr GemmKind kForwardBf16{DType::BF16, DType::BF16, false, true, 0.0};
constexpr GemmKind kInputGradBf16{DType::BF16, DType::BF16, false, false, 0.0};
constexpr GemmKind kWeightGradBf16{DType::BF16, DType::F32, true, false, 1.0};

// 8192^3, then the 1B llama's forward GEMMs over its 8192 tokens: q/k/v/o, gate/up, down and
// the LM head.
void forward_shapes(benchmark::internal::Benchmark* b) {
  b->Args({8192, 8192, 8192})
      ->Args({8192, 2048, 2048})
      ->Args({8192, 5504, 2048})
      ->Args({8192, 2048, 5504})
      ->Args({8192, 32000, 2048})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}
void BM_Gemm(benchmark::State& state, GpuKernels kernels, GemmKind g) {
  guarded(state, [&] { gemm_body(state, kernels, g); });
}
BENCHMARK_CAPTURE(BM_Gemm, fast_bf16, GpuKernels::Fast, kForwardBf16)->Apply(forward_shapes);
BENCHMARK_CAPTURE(BM_Gemm, reference_bf16, GpuKernels::Reference, kForwardBf16)
    ->Apply(forward_shapes);
// The backward's input gradients dx[8192, in] = dy[8192, out] w[out, in].
BENCHMARK_CAPTURE(BM_Gemm, fast_bf16_input_grad, GpuKernels::Fast, kInputGradBf16)
    ->Args({8192, 2048, 2048})
    ->Args({8192, 2048, 5504})
    ->Args({8192, 5504, 2048})
    ->Args({8192, 2048, 32000})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// The weight gradients dw[out, in] += dy[8192, out]^T x[8192, in], token dimension inner.
BENCHMARK_CAPTURE(BM_Gemm, fast_bf16_weight_grad, GpuKernels::Fast, kWeightGradBf16)
    ->Args({2048, 2048, 8192})
    ->Args({5504, 2048, 8192})
    ->Args({2048, 5504, 8192})
    ->Args({32000, 2048, 8192})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Gemm, fast_f32, GpuKernels::Fast,
                  GemmKind{DType::F32, DType::F32, false, true, 0.0})
    ->Args({8192, 8192, 8192})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Causal GQA attention, args (batch, seq, heads, kv_heads, head_dim), bfloat16.
void attention_body(benchmark::State& state, GpuKernels kernels, bool backward) {
  Tier* tier = tier_or_skip(state, kernels);
  if (!tier) return;
  Backend& be = *tier->backend;
  const std::int64_t B = state.range(0), T = state.range(1), H = state.range(2),
                     Hkv = state.range(3), D = state.range(4);
  const DType bf = DType::BF16;
  // q, k, v, dout random; out and lse from a forward (the backward's inputs); dq, dk, dv.
  auto& t = cached(key_of("attention", kernels, state, 5), [&] {
    std::vector<Tensor> v = {
        be.empty({B, T, H, D}, bf), be.empty({B, T, Hkv, D}, bf), be.empty({B, T, Hkv, D}, bf),
        be.empty({B, T, H, D}, bf), be.empty({B, T, H, D}, bf),   be.empty({B, H, T}, DType::F32),
        be.empty({B, T, H, D}, bf), be.empty({B, T, Hkv, D}, bf), be.empty({B, T, Hkv, D}, bf)};
    for (int i = 0; i < 4; ++i) fill_random(*tier, v[i], 10 + i);
    be.attention_forward(v[0], v[1], v[2], v[4], v[5]);
    return v;
  });
  const int calls = time_on_gpu(state, be, [&] {
    if (backward)
      be.attention_backward(t[3], t[0], t[1], t[2], t[4], t[5], t[6], t[7], t[8]);
    else
      be.attention_forward(t[0], t[1], t[2], t[4], t[5]);
  });
  const double forward = 2.0 * double(B) * double(H) * double(T) * double(T) * double(D);
  set_rate(state, "FLOP", backward ? 2.5 * forward : forward, calls);
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
void BM_Attention(benchmark::State& state, GpuKernels kernels, bool backward) {
  guarded(state, [&] { attention_body(state, kernels, backward); });
}
BENCHMARK_CAPTURE(BM_Attention, fast_forward, GpuKernels::Fast, false)->Apply(attention_shapes);
BENCHMARK_CAPTURE(BM_Attention, fast_backward, GpuKernels::Fast, true)->Apply(attention_shapes);
// The reference kernel (one thread per query) at the smallest shape only: it is slow.
BENCHMARK_CAPTURE(BM_Attention, reference_forward, GpuKernels::Reference, false)
    ->Args({1, 2048, 16, 16, 128})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);

// Memory-bound row ops on [tokens, width] bfloat16: bytes moved per second. The RMSNorm weight
// gradient accumulates in float32, as in a bfloat16 run.
enum class RowOp { RmsnormForward, RmsnormBackward, CrossEntropyBackward, SwigluForward };
void rowop_body(benchmark::State& state, GpuKernels kernels, RowOp op) {
  Tier* tier = tier_or_skip(state, kernels);
  if (!tier) return;
  Backend& be = *tier->backend;
  const std::int64_t N = state.range(0), E = state.range(1);
  const DType bf = DType::BF16;
  // x, y, dy, w, dw, rstd, targets.
  auto& t = cached(fmt::format("{}/{}", key_of("row", kernels, state, 2), int(op)), [&] {
    std::vector<Tensor> v = {be.empty({N, E}, bf),      be.empty({N, E}, bf),
                             be.empty({N, E}, bf),      be.empty({E}, bf),
                             be.zeros({E}, DType::F32), be.empty({N}, DType::F32),
                             be.zeros({N}, DType::I32)};
    fill_random(*tier, v[0], 20);
    fill_random(*tier, v[2], 21);
    be.fill(v[3], 1.0);
    be.rmsnorm_forward(v[0], v[3], 1e-5, v[1], v[5]);
    return v;
  });
  const Tensor &x = t[0], &y = t[1], &dy = t[2], &w = t[3], &dw = t[4], &rstd = t[5],
               &targets = t[6];
  double bytes = 0;
  const int calls = time_on_gpu(state, be, [&] {
    switch (op) {
      case RowOp::RmsnormForward:
        be.rmsnorm_forward(x, w, 1e-5, y, rstd);
        bytes = 2.0 * double(N * E) * 2;
        break;
      case RowOp::RmsnormBackward:
        be.rmsnorm_backward(dy, x, w, rstd, y, dw);
        // The dx pass reads dy, x and writes dx; the dweight pass reads dy and x again (64 MiB
        // at this size: they are not in L2 any more).
        bytes = 5.0 * double(N * E) * 2;
        break;
      case RowOp::CrossEntropyBackward:  // E = vocab; dlogits over the logits in place
        be.cross_entropy_backward(x, targets, 1.0 / double(N), x);
        bytes = 2.0 * double(N * E) * 2;
        break;
      case RowOp::SwigluForward:
        be.swiglu_forward(x, dy, y);
        bytes = 3.0 * double(N * E) * 2;
        break;
    }
  });
  set_rate(state, "bytes", bytes, calls);
  state.SetLabel(tier_name(kernels));
}
void BM_RowOp(benchmark::State& state, GpuKernels kernels, RowOp op) {
  guarded(state, [&] { rowop_body(state, kernels, op); });
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
                       Row{"swiglu_forward", RowOp::SwigluForward, 8192, 5504}}) {
    benchmark::RegisterBenchmark((std::string("BM_RowOp/") + r.name + "/" + tier).c_str(), BM_RowOp,
                                 kernels, r.op)
        ->Args({r.n, r.width})
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
}

bool listing_only(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* flag = "--benchmark_list_tests";
    if (std::strncmp(argv[i], flag, std::strlen(flag)) == 0 &&
        std::strcmp(argv[i], "--benchmark_list_tests=false") != 0)
      return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  row_benchmarks(GpuKernels::Fast, "fast");
  row_benchmarks(GpuKernels::Reference, "reference");
  const bool listing = listing_only(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Without a GPU every benchmark could only skip: one clear error instead (listing the names
  // needs no GPU).
  if (!listing) {
    const carousel::CudaDevices devices = carousel::list_cuda_devices();
    if (devices.devices.empty()) {
      std::fprintf(stderr, "gpu_op_bench: no GPU to measure: %s\n", devices.why_none.c_str());
      return 1;
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // Tensors before their backends, backends before CUDA's own teardown at exit.
  inputs().tensors.clear();
  for (Tier* t : {&tiers().fast, &tiers().reference}) {
    t->pool = Tensor{};
    t->backend.reset();
  }
  return 0;
}
