// step_report.h — what a run reports per step, in one place: the log line every log_period
// steps, the progress bar, the JSON record in <run dir>/metrics.jsonl (appended) and the same
// values as TensorBoard scalars (<run dir>/tensorboard/, enable_tensorboard).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "host/config/config.h"
#include "host/io/files.h"
#include "host/runtime/sharded_params.h"
#include "host/report/tensorboard.h"

namespace carousel {

// What a finished step reports (the log line, metrics.jsonl, TrainResult::steps).
struct StepMetrics {
  std::int64_t step = 0;  // 0-based
  double loss = 0, grad_norm = 0, learning_rate = 0, step_ms = 0, tokens_per_second = 0;
  double flops_per_second = 0;  // model FLOPs (6 x params x tokens + attention) per second
  double eval_loss = -1;        // held-out loss after this step (eval_interval), -1 when none
  double moe_lb_loss = 0;       // mixture of experts: the balancing loss (not in `loss`)
  std::int64_t expert_load_min = 0, expert_load_max = 0;  // and its tokens per expert
};

// A mixture-of-experts step's routing in a few numbers: the balancing loss and the tokens per
// expert over every MoE layer's experts (the mean is k x tokens / X, the same in each layer).
struct ExpertLoadSummary {
  double aux_loss = 0;
  std::int64_t min = 0, max = 0;
  double mean = 0;
};
// nullopt for a dense model.
std::optional<ExpertLoadSummary> summarize_expert_load(const ModelConfig& model,
                                                       const StepOutcome& outcome);

// A number for the metrics JSONL: finite values as JSON numbers; NaN, +inf and -inf as the
// strings "NaN", "Infinity", "-Infinity" (JSON has no such numbers; null would lose which).
nlohmann::json json_number(double x);

class StepReporter {
 public:
  // Opens the metrics file (and the TensorBoard event file of a run starting at `start_step`);
  // throws if it cannot.
  explicit StepReporter(const Config& cfg, std::int64_t start_step = 0);
  ~StepReporter();  // ends the progress bar's line, if one is drawn
  StepReporter(const StepReporter&) = delete;
  StepReporter& operator=(const StepReporter&) = delete;
  // Completes the metrics of a finished step (lr, throughput) and reports them. Each record is
  // flushed; a failed write (disk full) throws an Error naming the file.
  // `eval_loss`: the held-out loss after this step, when one was computed.
  // `peak_bytes`: the reporting rank's device peak so far (0: not shown).
  // `learning_rate`: the rate applied at this step (0 for a skipped update).
  // `moe`: a mixture-of-experts model's routing, shown and recorded beside the loss.
  StepMetrics report(std::int64_t step, double loss, double grad_norm, double learning_rate,
                     double seconds, std::optional<double> eval_loss = std::nullopt,
                     std::size_t peak_bytes = 0,
                     const std::optional<ExpertLoadSummary>& moe = std::nullopt);
  // A training step's outcome reported as above, with a warning when its update was skipped
  // (`skipped`: the steps skipped so far, this one included).
  StepMetrics report(std::int64_t step, const StepOutcome& outcome, double seconds,
                     std::optional<double> eval_loss, std::size_t peak_bytes, std::int64_t skipped);
  // Empty while the metrics file and the TensorBoard event file being written are still at their
  // paths; otherwise what happened to the first one lost (removed, with its run directory
  // perhaps, or replaced): later records would go nowhere.
  std::string lost_output() const;
  // The peak FLOP/s of all devices together, for the MFU (0: not shown).
  void set_peak_flops(double flops) { peak_flops_ = flops; }

 private:
  double mean_step_seconds(double seconds);

  const Config& cfg_;
  double tokens_per_step_, flops_per_token_;
  double peak_flops_ = 0;
  std::int64_t reported_ = 0, timed_steps_ = 0;
  double timed_ = 0;
  std::string path_;
  std::optional<OutputFile> metrics_;
  std::optional<TensorBoardWriter> tensorboard_;
};

}  // namespace carousel
