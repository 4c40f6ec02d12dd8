// step_report.h — what every training loop reports per step, in one place: the log line every
// log_period steps, the JSON record in <run dir>/metrics.jsonl (appended), and when a
// checkpoint is due.
#pragma once

#include <cstdint>
#include <fstream>

#include "host/config.h"
#include "host/trainer.h"

namespace carousel {

class StepReporter {
 public:
  explicit StepReporter(const Config& cfg);  // opens the metrics file; throws if it cannot
  // Completes the metrics of a finished step (lr, throughput) and reports them.
  StepMetrics report(std::int64_t step, double loss, double grad_norm, double seconds);
  bool checkpoint_due(std::int64_t step) const;  // after 0-based `step`

 private:
  const Config& cfg_;
  double tokens_per_step_, flops_per_token_;
  std::ofstream metrics_;
};

}  // namespace carousel
