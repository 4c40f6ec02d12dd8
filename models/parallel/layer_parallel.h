// layer_parallel.h — the groups a decoder layer is computed with: its tensor group (heads and
// MLP columns split, tensor_parallel.h), its context group (the sequence split,
// context_parallel.h) and its expert group (routed experts split, expert_parallel.h).
// Default-constructed: one rank each, the single-device layer.
#pragma once

#include "models/parallel/context_parallel.h"
#include "models/parallel/expert_parallel.h"
#include "models/parallel/tensor_parallel.h"

namespace carousel {

struct LayerParallel {
  TensorGroup tensor;
  ContextGroup context;
  ExpertGroup expert;
};

}  // namespace carousel
