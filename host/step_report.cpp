// step_report.cpp — per-step log line, metrics JSONL, checkpoint cadence.
#include "host/step_report.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cuda/error.h"
#include "host/optimizer.h"

namespace carousel {

StepReporter::StepReporter(const Config& cfg)
    : cfg_(cfg),
      tokens_per_step_(double(cfg.global_batch() * cfg.model.max_target_length)),
      flops_per_token_(train_flops_per_token(cfg.model)) {
  std::filesystem::create_directories(cfg.run_directory());
  const std::string path =
      cfg.metrics_file.empty()
          ? (std::filesystem::path(cfg.run_directory()) / "metrics.jsonl").string()
          : cfg.metrics_file;
  metrics_.open(path, std::ios::app);
  CAROUSEL_CHECK(metrics_.good(), "cannot open metrics file '{}'", path);
}

StepMetrics StepReporter::report(std::int64_t step, double loss, double grad_norm, double seconds) {
  StepMetrics s;
  s.step = step;
  s.loss = loss;
  s.grad_norm = grad_norm;
  s.learning_rate = learning_rate_at(cfg_, step);
  s.step_ms = seconds * 1e3;
  s.tokens_per_second = tokens_per_step_ / seconds;
  s.flops_per_second = flops_per_token_ * tokens_per_step_ / seconds;
  metrics_ << nlohmann::json{{"step", step},
                             {"loss", s.loss},
                             {"grad_norm", s.grad_norm},
                             {"lr", s.learning_rate},
                             {"step_ms", s.step_ms},
                             {"tokens_per_s", s.tokens_per_second},
                             {"gflops", s.flops_per_second / 1e9}}
                  .dump()
           << '\n';
  metrics_.flush();
  if (step % cfg_.log_period == 0 || step + 1 == cfg_.steps) {
    spdlog::info(
        "step {:>5}/{} | loss {:.4f} | grad norm {:.3f} | lr {:.2e} | {:.1f} ms | "
        "{:.0f} tok/s | {:.2f} GFLOP/s",
        step + 1, cfg_.steps, s.loss, s.grad_norm, s.learning_rate, s.step_ms, s.tokens_per_second,
        s.flops_per_second / 1e9);
  }
  return s;
}

bool checkpoint_due(const Config& cfg, std::int64_t step) {
  const bool periodic = cfg.checkpoint_period > 0 && (step + 1) % cfg.checkpoint_period == 0;
  return cfg.enable_checkpointing && (periodic || step + 1 == cfg.steps);
}

}  // namespace carousel
