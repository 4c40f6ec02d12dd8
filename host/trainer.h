// trainer.h — `carousel train` on one device: the training loop.
//
// Per step: zero the gradients; for each microbatch run the model forward and backward
// (gradients accumulate; the loss is the mean over every token of the global batch); clip the
// global gradient norm; AdamW with the scheduled learning rate; log a line and a JSON record;
// checkpoint every checkpoint_period steps and at the end. A run whose run directory holds a
// checkpoint resumes from the newest one and continues bitwise as if never interrupted.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "cuda/backend.h"
#include "host/config.h"

namespace carousel {

struct StepMetrics {
  std::int64_t step = 0;  // 0-based
  double loss = 0, grad_norm = 0, learning_rate = 0, step_ms = 0, tokens_per_second = 0;
  double flops_per_second = 0;  // model FLOPs (6 x params x tokens + attention) per second
};

struct TrainResult {
  std::vector<StepMetrics> steps;  // the steps this call ran
  std::int64_t start_step = 0;     // > 0 when resumed from a checkpoint
  std::size_t peak_device_bytes = 0;
  std::vector<std::int64_t> all_gathers_per_device;  // pipeline with FSDP: weight gathers done
};

// More than one device (D x S x F > 1) goes to the pipeline executor (pipeline_trainer.h), as
// threads of this process, or as the processes of `process_world` when mpirun started them.
TrainResult train(const Config& cfg, Communicator* process_world = nullptr);

// Device `device` of a run: a CPU device (device=cpu, the default), or logical device `device`
// on GPU device % visible GPUs (device=cuda, or auto when a GPU is visible).
std::unique_ptr<Backend> make_device_backend(const Config& cfg, int device);

}  // namespace carousel
