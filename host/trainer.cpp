// trainer.cpp — the single-device training loop.
#include "host/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "cuda/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_info.h"
#include "host/checkpoint.h"
#include "host/data.h"
#include "host/optimizer.h"
#include "host/pipeline_trainer.h"
#include "host/step_report.h"
#include "models/model.h"

namespace carousel {

namespace {

// Uploads sequences [first, first+count) of the step's global batch as one microbatch.
Microbatch load_microbatch(Backend& be, const DataLoader& data, std::int64_t step,
                           std::int64_t global_batch, std::int64_t first, std::int64_t count) {
  TokenBatch tb = data.batch(step, global_batch, first, count);
  return {be.from_host(tb.inputs, {tb.sequences, tb.seq_len}),
          be.from_host(tb.targets, {tb.sequences, tb.seq_len})};
}

}  // namespace

std::unique_ptr<Backend> make_device_backend(const Config& cfg, int device) {
  const CudaDevices gpus = list_cuda_devices();
  if (cfg.device == "cuda" || (cfg.device == "auto" && !gpus.devices.empty())) {
    const int visible = std::max<int>(1, int(gpus.devices.size()));
    return make_cuda_backend(device % visible, device);
  }
  return std::make_unique<CpuBackend>(device);
}

TrainResult train(const Config& cfg, Communicator* process_world) {
  CAROUSEL_CHECK(cfg.model.is_llama(),
                 "carousel train runs decoder_block=llama; the simple block is for pipeline "
                 "equivalence tests");
  if (cfg.num_devices() > 1 || process_world) return train_pipeline(cfg, process_world);
  std::unique_ptr<Backend> backend = make_device_backend(cfg, 0);
  Backend& be = *backend;
  spdlog::info("device: {}", be.name());
  const auto specs = param_table(cfg.model);
  ParamSet params = ParamSet::allocate(be, specs, DType::F32);
  ParamSet grads = ParamSet::allocate(be, specs, DType::F32);
  AdamW opt = AdamW::create(be, specs);

  TrainResult result;
  const auto resume_from = cfg.enable_checkpointing ? latest_checkpoint(cfg) : std::nullopt;
  if (resume_from) {
    result.start_step = load_checkpoint(be, *resume_from, {&params, &opt.m, &opt.v}).step;
    spdlog::info("resuming from {} at step {}", *resume_from, result.start_step);
  } else if (!cfg.load_parameters_path.empty()) {
    load_checkpoint(be, cfg.load_parameters_path, {&params, nullptr, nullptr});
    spdlog::info("parameters loaded from {}", cfg.load_parameters_path);
  } else {
    init_params(be, params, std::uint64_t(cfg.init_weights_seed));
  }
  CAROUSEL_CHECK(result.start_step <= cfg.steps,
                 "the run directory's checkpoint is at step {} but steps={}; raise steps to "
                 "continue training",
                 result.start_step, cfg.steps);

  // Mixed precision (dtype=bfloat16): the forward and backward read a bfloat16 copy of the
  // float32 master weights, refreshed after every optimizer step; gradients accumulate in
  // float32 (bf16 x bf16 GEMMs into float32), and AdamW updates the float32 masters.
  const bool bf16 = cfg.dtype == "bfloat16";
  ParamSet compute = bf16 ? ParamSet::allocate(be, specs, DType::BF16) : params;
  if (bf16) be.cast(params.flat, compute.flat);

  const auto data = make_data_loader(cfg);
  const auto rope = make_rope_tables(be, cfg.model.max_target_length, cfg.model.head_dim(),
                                     cfg.model.rope_max_timescale);
  const RematPolicy remat = parse_remat_policy(cfg.remat_policy);
  const std::int64_t B = cfg.global_batch(), M = cfg.microbatches(), b = B / M;
  const std::int64_t tokens_per_step = B * cfg.model.max_target_length;
  spdlog::info("model: {} parameters; data: {}; batch {} x {} tokens in {} microbatch(es)",
               parameter_count(cfg.model), data->describe(), B, cfg.model.max_target_length, M);

  StepReporter reporter(cfg);
  for (std::int64_t step = result.start_step; step < cfg.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    be.fill(grads.flat, 0.0);
    double loss_sum = 0;
    for (std::int64_t m = 0; m < M; ++m) {
      const Microbatch mb = load_microbatch(be, *data, step, B, m * b, b);
      loss_sum += model_forward_backward(be, cfg.model, compute, grads, rope, mb,
                                         1.0 / double(tokens_per_step), remat);
    }
    const double grad_norm = global_l2_norm(be, {grads.flat});
    opt.update(be, cfg, params, grads, step, learning_rate_at(cfg, step),
               clip_scale(grad_norm, cfg.gradient_clipping_threshold));
    if (bf16) be.cast(params.flat, compute.flat);
    be.synchronize();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.steps.push_back(
        reporter.report(step, loss_sum / double(tokens_per_step), grad_norm, seconds));
    if (checkpoint_due(cfg, step)) {
      const std::string dir = save_checkpoint(be, cfg, {&params, &opt.m, &opt.v}, {step + 1});
      spdlog::info("checkpoint saved: {}", dir);
    }
  }
  result.peak_device_bytes = be.allocator().stats().peak_bytes;
  spdlog::info("peak memory on {}: {}", be.allocator().name(),
               format_bytes(result.peak_device_bytes));
  return result;
}

}  // namespace carousel
