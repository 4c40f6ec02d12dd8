// pipeline_trainer.h — training with pipeline parallelism on simulated devices.
//
// Each rank (pipeline stage s, FSDP index f) is a thread with its own CPU device
// (CpuBackend(s F + f), own memory accounting) and its communicators: the ring of its stage
// ranks and the FSDP group of its stage, split from one world. Every rank builds the same lowered program
// (host/schedule) and walks its instruction list: compute actions run the rank's stages
// (models/stage.h), p2p actions move activations and gradients in groups, OPTIMIZER reduces
// the loss and the gradient norm over the ranks and steps AdamW on the rank's own parameters.
// Parameters are initialised by name, so a pipeline run starts from exactly the weights of the
// single-device run and computes the same math (tested against it).
#pragma once

#include "host/config.h"
#include "host/trainer.h"

namespace carousel {

// S = ici_pipeline_parallelism stages x F = ici_fsdp_parallelism FSDP ranks (S x F > 1);
// schedules circular, gpipe, 1f1b, interleaved_1f1b; weight slots from
// pipeline_fsdp_ag_per_repeat (2, the Buffer Sliding Window) / pipeline_fsdp_ag_once / default.
TrainResult train_pipeline(const Config& cfg);

}  // namespace carousel
