// pipeline_trainer.h — training with pipeline parallelism on simulated devices.
//
// Each pipeline rank is a thread with its own CPU device (CpuBackend(rank), own memory
// accounting) and its own LocalCommunicator. Every rank builds the same lowered program
// (host/schedule) and walks its instruction list: compute actions run the rank's stages
// (models/stage.h), p2p actions move activations and gradients in groups, OPTIMIZER reduces
// the loss and the gradient norm over the ranks and steps AdamW on the rank's own parameters.
// Parameters are initialised by name, so a pipeline run starts from exactly the weights of the
// single-device run and computes the same math (tested against it).
#pragma once

#include "host/config.h"
#include "host/trainer.h"

namespace carousel {

// Requires ici_pipeline_parallelism > 1; schedules circular, gpipe, 1f1b, interleaved_1f1b.
TrainResult train_pipeline(const Config& cfg);

}  // namespace carousel
