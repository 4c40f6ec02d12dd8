// optimizer.cpp — learning-rate schedule, clipping, AdamW over a ParamSet.
#include "host/runtime/optimizer.h"

#include <cmath>
#include <numbers>

namespace carousel {

double learning_rate_at(const Config& cfg, std::int64_t step) {
  const double peak = cfg.learning_rate;
  const std::int64_t total = cfg.schedule_steps();
  const std::int64_t warmup = std::llround(cfg.warmup_steps_fraction * double(total));
  if (step >= total) return 0.0;
  if (step < warmup) return peak * double(step) / double(warmup);
  const double final_lr = peak * cfg.learning_rate_final_fraction;
  // From peak (progress 0) towards final_lr (progress 1) in the decay's shape.
  auto decay = [&](double progress, bool cosine) {
    const double a = cosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) : 1.0 - progress;
    return final_lr + (peak - final_lr) * a;
  };
  if (cfg.lr_schedule_type == "wsd") {
    // MaxText: D = int(wsd_decay_steps_fraction * S) decay steps end the schedule; the steps
    // between warmup and decay hold the peak (validate() keeps W + D <= S).
    const auto decay_steps = std::int64_t(cfg.wsd_decay_steps_fraction * double(total));
    const std::int64_t decay_start = total - decay_steps;
    if (step < decay_start) return peak;
    return decay(double(step - decay_start) / double(decay_steps), cfg.wsd_decay_style == "cosine");
  }
  return decay(double(step - warmup) / double(total - warmup), true);
}

double clip_scale(double grad_norm, double threshold) {
  if (threshold <= 0 || grad_norm <= threshold) return 1.0;
  return threshold / grad_norm;
}

AdamW AdamW::create(Backend& be, const std::vector<ParamSpec>& specs) {
  AdamW opt{ParamSet::allocate(be, specs, DType::F32), ParamSet::allocate(be, specs, DType::F32)};
  be.fill(opt.m.flat, 0.0);
  be.fill(opt.v.flat, 0.0);
  return opt;
}

AdamWParams adamw_params(const Config& cfg, std::int64_t step, double lr, double grad_scale,
                         bool weight_decay) {
  AdamWParams h;
  h.lr = lr;
  h.beta1 = cfg.adam_b1;
  h.beta2 = cfg.adam_b2;
  h.eps = cfg.adam_eps;
  h.weight_decay = weight_decay ? cfg.adam_weight_decay : 0.0;
  h.grad_scale = grad_scale;
  h.step = step + 1;
  return h;
}

void AdamW::update(Backend& be, const Config& cfg, const ParamSet& params, const ParamSet& grads,
                   std::int64_t step, double lr, double grad_scale) const {
  for (std::size_t i = 0; i < params.specs.size(); ++i) {
    be.adamw_update(params.tensors[i], grads.tensors[i], m.tensors[i], v.tensors[i],
                    adamw_params(cfg, step, lr, grad_scale, params.specs[i].weight_decay));
  }
}

}  // namespace carousel
