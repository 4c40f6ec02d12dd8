// cuda_step_graph.h — a captured step (compute/recording/step_graph.h) as a CUDA graph, for
// CudaBackend's end of a stream capture. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "compute/recording/step_graph.h"

namespace carousel::gpu {

// Instantiates `graph` (taking it over) to be launched on `stream`, the stream it was captured
// from; an instantiation CUDA refuses is an error with CUDA's reason.
std::unique_ptr<StepGraph> make_step_graph(int gpu, cudaStream_t stream, cudaGraph_t graph);

}  // namespace carousel::gpu
