// step_report.h — what every training loop reports per step, in one place: the log line every
// log_period steps, the JSON record in <run dir>/metrics.jsonl (appended), and when a
// checkpoint is due.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "host/config.h"
#include "host/trainer.h"

namespace carousel {

// A number for the metrics JSONL: finite values as JSON numbers; NaN, +inf and -inf as the
// strings "NaN", "Infinity", "-Infinity" (JSON has no such numbers; null would lose which).
nlohmann::json json_number(double x);

// Whether a checkpoint is written after 0-based `step`: every checkpoint_period steps and at the
// end, when enable_checkpointing.
bool checkpoint_due(const Config& cfg, std::int64_t step);

// "42s", "3m07s", "2h05m".
std::string format_duration(double seconds);

class StepReporter {
 public:
  explicit StepReporter(const Config& cfg);  // opens the metrics file; throws if it cannot
  ~StepReporter();                           // ends the progress bar's line, if one is drawn
  StepReporter(const StepReporter&) = delete;
  StepReporter& operator=(const StepReporter&) = delete;
  // Completes the metrics of a finished step (lr, throughput) and reports them. Each record is
  // flushed; a failed write (disk full) throws an Error naming the file.
  // `eval_loss`: the held-out loss after this step, when one was computed.
  // `peak_bytes`: the reporting rank's device peak so far (0: not shown).
  StepMetrics report(std::int64_t step, double loss, double grad_norm, double seconds,
                     std::optional<double> eval_loss = std::nullopt, std::size_t peak_bytes = 0);
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
  std::ofstream metrics_;
};

}  // namespace carousel
