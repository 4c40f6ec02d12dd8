// optimizer.h — AdamW over a parameter table, global-norm clipping and MaxText's learning-rate
// schedules (linear warmup, then cosine decay or warmup-stable-decay, then zero).
#pragma once

#include <cstdint>

#include "compute/backend.h"
#include "host/config/config.h"
#include "models/params.h"

namespace carousel {

// lr(step) for 0-based `step`, S = learning_rate_schedule_steps (default steps),
// final = learning_rate * learning_rate_final_fraction: warmup from 0 to learning_rate over
// W = round(warmup_steps_fraction * S) steps, then
//   cosine: cosine from learning_rate down to final over the remaining S - W steps;
//   wsd:    learning_rate until the last D = floor(wsd_decay_steps_fraction * S) steps, which
//           decay to final, linearly or as a half cosine (wsd_decay_style);
// then 0 from step S on.
double learning_rate_at(const Config& cfg, std::int64_t step);

// Multiplier that clips the global gradient norm to the threshold (1 when off or below it).
double clip_scale(double grad_norm, double threshold);

// The AdamW scalars of 0-based `step` from the config (weight decay: pass whether the parameter
// decays); shared by the single-device update and the executor's per-shard updates.
AdamWParams adamw_params(const Config& cfg, std::int64_t step, double lr, double grad_scale,
                         bool weight_decay);

// AdamW state (fp32 moments, one per parameter) and the update.
struct AdamW {
  ParamSet m, v;
  static AdamW create(Backend& be, const std::vector<ParamSpec>& specs);
  // One step (0-based `step`): decoupled weight decay on parameters flagged for it, Adam with
  // bias correction; gradients are multiplied by grad_scale first.
  void update(Backend& be, const Config& cfg, const ParamSet& params, const ParamSet& grads,
              std::int64_t step, double lr, double grad_scale) const;
};

}  // namespace carousel
