// plan_workload.h — the planner tests' workload: the tiny preset at T = 16 in float32 with full
// remat, for a given global batch.
#pragma once

#include <cstdint>

#include "host/config/config.h"
#include "host/plan/plan_model.h"

namespace carousel::testing {

inline plan::Workload tiny_plan_workload(std::int64_t batch) {
  plan::Workload w;
  w.model = model_preset("tiny");
  w.model.max_target_length = 16;
  w.global_batch = batch;
  w.dtype = "float32";
  w.remat_policy = "full";
  return w;
}

}  // namespace carousel::testing
