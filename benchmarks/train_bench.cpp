// train_bench.cpp — one training step (forward + backward of every microbatch, AdamW) on the
// CPU backend: step time, tokens/s and achieved model GFLOP/s.
//
//   build/bin/train_bench
//
// Model FLOPs per token = 6 x matmul parameters + 6 N T E (attention, causal half), so a remat
// step's recomputed forward is not counted: the figure is what a user can compare across
// trainers (MFU-style), not the arithmetic the CPU actually did (about 4/3 of it with remat).
#include <benchmark/benchmark.h>

#include "compute/cpu_backend.h"
#include "host/config/config.h"
#include "host/data/data.h"
#include "host/runtime/optimizer.h"
#include "models/model.h"

namespace {

using namespace carousel;

void run(benchmark::State& state, const std::vector<std::string>& overrides) {
  const Config cfg = load_config("", overrides).config;
  CpuBackend be;
  const auto specs = param_table(cfg.model);
  ParamSet params = ParamSet::allocate(be, specs, DType::F32);
  ParamSet grads = ParamSet::allocate(be, specs, DType::F32);
  init_params(be, params, 0);
  AdamW opt = AdamW::create(be, specs);
  const auto data = make_data_loader(cfg);
  const auto rope = make_rope_tables(be, cfg.model.max_target_length, cfg.model.head_dim(),
                                     cfg.model.rope_max_timescale);
  const std::int64_t B = cfg.global_batch(), T = cfg.model.max_target_length;
  const TokenBatch tb = data->batch(0, B, 0, B);
  const Microbatch mb{be.from_host(tb.inputs, {B, T}), be.from_host(tb.targets, {B, T})};
  const RematPolicy remat = parse_remat_policy(cfg.remat_policy);
  std::int64_t step = 0;
  for (auto _ : state) {
    be.fill(grads.flat, 0.0);
    model_forward_backward(be, cfg.model, params, grads, rope, mb, 1.0 / double(B * T), remat);
    opt.update(be, cfg, params, grads, step++, 1e-4, 1.0);
  }
  const double tokens = double(B * T);
  state.counters["tok"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOP"] = benchmark::Counter(train_flops_per_token(cfg.model) * tokens,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["params"] = double(parameter_count(cfg.model));
  state.counters["peak_MiB"] = double(be.allocator().stats().peak_bytes) / (1 << 20);
}

// tiny (docs/model.md#named-shapes): V 256, E 64, N 8, H 4, Hkv 2, Fm 172, T 64; batch 8.
BENCHMARK_CAPTURE(run, tiny_remat_full, {"per_device_batch_size=8"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(run, tiny_remat_none, {"per_device_batch_size=8", "remat_policy=none"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// A larger CPU config: 30M parameters, E 512, N 8, H 8, Hkv 4, Fm 1376, T 256, V 2048; batch 4.
BENCHMARK_CAPTURE(run, small_remat_full,
                  {"vocab_size=2048", "base_emb_dim=512", "base_num_decoder_layers=8",
                   "base_num_query_heads=8", "base_num_kv_heads=4", "base_mlp_dim=1376",
                   "max_target_length=256", "per_device_batch_size=4"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(3.0);

}  // namespace

BENCHMARK_MAIN();
