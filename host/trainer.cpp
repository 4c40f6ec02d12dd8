// trainer.cpp — the single-device training loop.
#include "host/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cuda/cpu_backend.h"
#include "host/checkpoint.h"
#include "host/data.h"
#include "host/optimizer.h"
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

std::string metrics_path(const Config& cfg) {
  return cfg.metrics_file.empty()
             ? (std::filesystem::path(cfg.run_directory()) / "metrics.jsonl").string()
             : cfg.metrics_file;
}

}  // namespace

TrainResult train(const Config& cfg) {
  CAROUSEL_CHECK(cfg.model.is_llama(),
                 "carousel train runs decoder_block=llama; the simple block is for pipeline "
                 "equivalence tests");
  CAROUSEL_CHECK(cfg.ici_pipeline_parallelism == 1 && cfg.ici_fsdp_parallelism == 1,
                 "carousel train runs on one device for now: ici_pipeline_parallelism={} and "
                 "ici_fsdp_parallelism={} need the pipeline executor, which is not built yet "
                 "(`carousel schedule` shows the plan such a run would follow)",
                 cfg.ici_pipeline_parallelism, cfg.ici_fsdp_parallelism);
  CpuBackend be(0);
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

  const auto data = make_data_loader(cfg);
  const auto rope = make_rope_tables(be, cfg.model.max_target_length, cfg.model.head_dim(),
                                     cfg.model.rope_max_timescale);
  const RematPolicy remat = parse_remat_policy(cfg.remat_policy);
  const std::int64_t B = cfg.global_batch(), M = cfg.microbatches(), b = B / M;
  const std::int64_t tokens_per_step = B * cfg.model.max_target_length;
  const double flops_per_step = train_flops_per_token(cfg.model) * double(tokens_per_step);
  spdlog::info("model: {} parameters; data: {}; batch {} x {} tokens in {} microbatch(es)",
               parameter_count(cfg.model), data->describe(), B, cfg.model.max_target_length, M);

  std::filesystem::create_directories(cfg.run_directory());
  std::ofstream metrics(metrics_path(cfg), std::ios::app);
  CAROUSEL_CHECK(metrics.good(), "cannot open metrics file '{}'", metrics_path(cfg));

  for (std::int64_t step = result.start_step; step < cfg.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    be.fill(grads.flat, 0.0);
    double loss_sum = 0;
    for (std::int64_t m = 0; m < M; ++m) {
      const Microbatch mb = load_microbatch(be, *data, step, B, m * b, b);
      loss_sum += model_forward_backward(be, cfg.model, params, grads, rope, mb,
                                         1.0 / double(tokens_per_step), remat);
    }
    StepMetrics s;
    s.step = step;
    s.loss = loss_sum / double(tokens_per_step);
    s.grad_norm = global_l2_norm(be, {grads.flat});
    s.learning_rate = learning_rate_at(cfg, step);
    opt.update(be, cfg, params, grads, step, s.learning_rate,
               clip_scale(s.grad_norm, cfg.gradient_clipping_threshold));
    be.synchronize();
    s.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    s.tokens_per_second = double(tokens_per_step) / (s.step_ms / 1e3);
    s.flops_per_second = flops_per_step / (s.step_ms / 1e3);
    result.steps.push_back(s);

    metrics << nlohmann::json{{"step", step},           {"loss", s.loss},
                              {"grad_norm", s.grad_norm}, {"lr", s.learning_rate},
                              {"step_ms", s.step_ms},     {"tokens_per_s", s.tokens_per_second},
                              {"gflops", s.flops_per_second / 1e9}}
                   .dump()
            << '\n';
    if (step % cfg.log_period == 0 || step + 1 == cfg.steps) {
      spdlog::info("step {:>5}/{} | loss {:.4f} | grad norm {:.3f} | lr {:.2e} | {:.1f} ms | "
                   "{:.0f} tok/s | {:.2f} GFLOP/s",
                   step + 1, cfg.steps, s.loss, s.grad_norm, s.learning_rate, s.step_ms,
                   s.tokens_per_second, s.flops_per_second / 1e9);
    }
    const bool last = step + 1 == cfg.steps;
    const bool periodic = cfg.checkpoint_period > 0 && (step + 1) % cfg.checkpoint_period == 0;
    if (cfg.enable_checkpointing && (last || periodic)) {
      metrics.flush();
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
