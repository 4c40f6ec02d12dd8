// pipeline_trainer.h — training on several simulated devices: data replicas x pipeline stages x
// FSDP ranks.
//
// Each rank (replica d, pipeline stage s, FSDP index f) is a thread with its own CPU device
// (own memory accounting) and its communicators, split from one world: the ring of its stage
// ranks, the FSDP group of its stage and the data group of its (s, f) position. Every rank builds
// the same lowered program (host/schedule) and walks its instruction list: compute actions run the
// rank's stages (models/stage.h), p2p actions move activations and gradients in groups, OPTIMIZER
// reduces the loss and the gradient norm over the ranks and steps AdamW on the rank's own
// parameters. Parameters are initialised by name, so a pipeline run starts from exactly the weights
// of the single-device run and computes the same math (tested against it).
#pragma once

#include "collectives/communicator.h"
#include "host/config.h"
#include "host/trainer.h"

namespace carousel {

// D = ici_data_parallelism x S = ici_pipeline_parallelism x F = ici_fsdp_parallelism > 1 ranks;
// schedules circular, gpipe, 1f1b, interleaved_1f1b; weight slots from
// pipeline_fsdp_ag_per_repeat (2, the Buffer Sliding Window) / pipeline_fsdp_ag_once / default.
// process_world: nullptr runs the D x S x F ranks as threads of this process; otherwise this
// process is rank process_world->rank() of a job of exactly D x S x F processes (mpirun).
TrainResult train_pipeline(const Config& cfg, Communicator* process_world = nullptr);

}  // namespace carousel
