// event_stopwatch.h — the CUDA backend's op timing (Backend::make_op_stopwatch): a pair of CUDA
// events around each op on the backend's stream, read when timing stops.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "compute/backend.h"

namespace carousel {

std::unique_ptr<OpStopwatch> make_event_stopwatch(int gpu, cudaStream_t stream);

}  // namespace carousel
