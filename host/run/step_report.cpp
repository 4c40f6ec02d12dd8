// step_report.cpp — per-step log line, progress bar, metrics JSONL (non-finite numbers as
// strings).
#include "host/run/step_report.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "compute/error.h"
#include "host/runtime/optimizer.h"
#include "host/report/progress_bar.h"

namespace carousel {

StepReporter::StepReporter(const Config& cfg, std::int64_t start_step)
    : cfg_(cfg),
      tokens_per_step_(double(cfg.global_batch() * cfg.model.max_target_length)),
      flops_per_token_(train_flops_per_token(cfg.model)),
      path_(metrics_file_path(cfg)) {
  check_local_path("metrics_file", cfg.metrics_file);
  std::error_code ec;
  std::filesystem::create_directories(cfg.run_directory(), ec);
  CAROUSEL_CHECK(!ec, "cannot create the run directory '{}': {}", cfg.run_directory(),
                 ec.message());
  // The default metrics.jsonl is opened below the run directory (host/io/files.h); a
  // metrics_file the user chose elsewhere is not followed through a symlink at its last name.
  metrics_.emplace(path_, "metrics file", OutputMode::Append, cfg.run_directory());
  if (cfg.enable_tensorboard)
    tensorboard_.emplace(cfg.run_directory() + "/tensorboard", start_step);
}

std::string StepReporter::lost_output() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    return fmt::format(
        "metrics file '{}' was removed during the run ({}; with the run directory "
        "'{}'?): the records written since went nowhere",
        path_, std::strerror(errno), cfg_.run_directory());
  }
  if (std::pair{std::uint64_t(st.st_dev), std::uint64_t(st.st_ino)} != metrics_->id()) {
    return fmt::format(
        "metrics file '{}' was replaced by another file during the run: the "
        "records written since went to the old one",
        path_);
  }
  // The event files are watched alike: TensorBoard's view of the run stops where they are lost.
  return tensorboard_ ? tensorboard_->lost() : "";
}

nlohmann::json json_number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  return x;
}

std::optional<ExpertLoadSummary> summarize_expert_load(const ModelConfig& model,
                                                       const StepOutcome& outcome) {
  if (!model.is_moe() || outcome.expert_load.empty()) return std::nullopt;
  const std::int64_t X = model.num_experts;
  ExpertLoadSummary s{
      .aux_loss = outcome.moe_aux_loss, .min = std::numeric_limits<std::int64_t>::max(), .max = 0};
  std::int64_t total = 0, layers = 0;
  for (std::int64_t l = model.first_num_dense_layers; l < model.num_layers; ++l, ++layers) {
    for (std::int64_t e = 0; e < X; ++e) {
      const std::int64_t n = outcome.expert_load[std::size_t(l * X + e)];
      s.min = std::min(s.min, n);
      s.max = std::max(s.max, n);
      total += n;
    }
  }
  if (layers == 0) return std::nullopt;  // every layer dense
  s.mean = double(total) / double(layers * X);
  return s;
}

StepMetrics StepReporter::report(std::int64_t step, double loss, double grad_norm,
                                 double learning_rate, double seconds,
                                 std::optional<double> eval_loss, std::size_t peak_bytes,
                                 const std::optional<ExpertLoadSummary>& moe) {
  StepMetrics s;
  s.step = step;
  s.loss = loss;
  s.grad_norm = grad_norm;
  s.learning_rate = learning_rate;
  s.step_ms = seconds * 1e3;
  s.tokens_per_second = tokens_per_step_ / seconds;
  s.flops_per_second = flops_per_token_ * tokens_per_step_ / seconds;
  nlohmann::json record = {{"step", step},
                           {"loss", json_number(s.loss)},
                           {"grad_norm", json_number(s.grad_norm)},
                           {"lr", json_number(s.learning_rate)},
                           {"step_ms", json_number(s.step_ms)},
                           {"tokens_per_s", json_number(s.tokens_per_second)},
                           {"gflops", json_number(s.flops_per_second / 1e9)}};
  if (eval_loss) {
    s.eval_loss = *eval_loss;
    record["eval_loss"] = json_number(*eval_loss);
  }
  const double mfu = peak_flops_ > 0 ? s.flops_per_second / peak_flops_ : 0;
  if (mfu > 0) record["mfu"] = json_number(mfu);
  if (peak_bytes > 0) record["peak_mem_bytes"] = peak_bytes;
  if (moe) {
    s.moe_lb_loss = moe->aux_loss;
    s.expert_load_min = moe->min;
    s.expert_load_max = moe->max;
    record["moe_lb_loss"] = json_number(moe->aux_loss);
    record["expert_load"] = {{"min", moe->min}, {"mean", moe->mean}, {"max", moe->max}};
  }
  // Wall-clock time of the record (Unix seconds, as TensorBoard and W&B take it), so runs and
  // resumes line up on one time axis.
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  record["time"] = now;
  // One write per record (unbuffered): it reaches the file, or the run stops here.
  metrics_->write(record.dump() + '\n', fmt::format(" at step {}", step));
  if (tensorboard_) {  // after the record: MaxText's tags where it has the value
    std::vector<std::pair<std::string, double>> scalars = {
        {"learning/loss", s.loss},
        {"learning/grad_norm", s.grad_norm},
        {"learning/current_learning_rate", s.learning_rate},
        {"perf/step_time_seconds", seconds},
        {"perf/tokens_per_second", s.tokens_per_second},
        {"perf/gflops_per_second", s.flops_per_second / 1e9}};
    if (eval_loss) scalars.emplace_back("eval/avg_loss", *eval_loss);
    if (mfu > 0) scalars.emplace_back("perf/mfu", mfu);
    if (peak_bytes > 0) scalars.emplace_back("perf/peak_memory_bytes", double(peak_bytes));
    if (moe) {
      scalars.emplace_back("learning/moe_lb_loss", moe->aux_loss);
      scalars.emplace_back("moe/expert_load_max_over_mean", double(moe->max) / moe->mean);
    }
    tensorboard_->scalars(step, now, scalars);
  }
  const double mean = mean_step_seconds(seconds);
  const double eta = mean * double(cfg_.steps - step - 1);
  if (eval_loss) spdlog::info("step {:>5}/{} | eval loss {:.4f}", step + 1, cfg_.steps, *eval_loss);
  ProgressSink* bar = progress_sink();
  if (bar) {
    bar->show({.done = step + 1,
               .total = cfg_.steps,
               .steps_per_second = 1 / mean,
               .tokens_per_second = tokens_per_step_ / mean,
               .loss = loss,
               .eta_seconds = eta});
  }
  if (step % cfg_.log_period == 0 || step + 1 == cfg_.steps) {
    // Under a progress bar the step lines go to the log file only (debug), except the last.
    spdlog::log(bar && step + 1 != cfg_.steps ? spdlog::level::debug : spdlog::level::info,
                "step {:>5}/{} | loss {:.4f}{} | grad norm {:.3f} | lr {:.2e} | {:.1f} ms | "
                "{:.0f} tok/s | {:.2f} GFLOP/s{}{} | ETA {}",
                step + 1, cfg_.steps, s.loss,
                moe ? fmt::format("{} | tokens/expert min {} mean {:.1f} max {}",
                                  cfg_.model.load_balance_loss_weight != 0
                                      ? fmt::format(" | moe lb loss {:.4f}", moe->aux_loss)
                                      : "",  // no balancing loss (the loss-free bias, or none)
                                  moe->min, moe->mean, moe->max)
                    : "",
                s.grad_norm, s.learning_rate, s.step_ms, s.tokens_per_second,
                s.flops_per_second / 1e9, mfu > 0 ? fmt::format(" | MFU {:.1f}%", 100 * mfu) : "",
                peak_bytes > 0 ? " | mem " + format_bytes(peak_bytes) : "", format_duration(eta));
  }
  return s;
}

StepMetrics StepReporter::report(std::int64_t step, const StepOutcome& outcome, double seconds,
                                 std::optional<double> eval_loss, std::size_t peak_bytes,
                                 std::int64_t skipped) {
  StepMetrics metrics =
      report(step, outcome.loss, outcome.grad_norm, outcome.learning_rate, seconds, eval_loss,
             peak_bytes, summarize_expert_load(cfg_.model, outcome));
  if (outcome.skipped) {
    spdlog::warn(
        "step {}: loss {} / gradient norm {} is not finite; update skipped "
        "(skip_step_on_nonfinite; {} skipped in this run so far)",
        step + 1, outcome.loss, outcome.grad_norm, skipped);
  }
  return metrics;
}

// The mean time of the steps reported so far after the first (which carries warm-up: first
// allocations, thread pools); the first step's own time before that. The ETA and the bar's rate.
double StepReporter::mean_step_seconds(double seconds) {
  ++reported_;
  if (reported_ > 1) timed_ += seconds, ++timed_steps_;
  return timed_steps_ > 0 ? timed_ / double(timed_steps_) : seconds;
}

StepReporter::~StepReporter() {
  if (ProgressSink* bar = progress_sink()) bar->finish();
}

}  // namespace carousel
