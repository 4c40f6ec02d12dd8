// device_peak.h — one device's peak FLOP/s, the denominator of the MFU in step lines.
#pragma once

#include "compute/backend.h"
#include "host/config/config.h"

namespace carousel {

// cfg.peak_flops when set; on GPUs the dense data-sheet figure of a known model (H100, H200,
// A100; bfloat16 with dtype=bfloat16, else float32) or 0 when unknown; on CPUs a float32 GEMM
// (512^3, best of 5) measured on `be` with this thread's OpenMP threads: the roof the CPU step
// is compared with.
double device_peak_flops(const Config& cfg, Backend& be);

// The peak of all `ranks` devices of a run together (the MFU's denominator), each computing
// with `threads_per_rank` OpenMP threads (the CPU GEMM is measured with that many, and this
// thread's count is restored after). Simulated CPU devices that are threads of one process share
// its cores: at most cores / threads_per_rank of them compute at once, so only those count.
// Measure it before the ranks start (train() does): a GEMM timed while other ranks compute on
// the same cores would not be the device's peak.
double run_peak_flops(const Config& cfg, Backend& be, int ranks, bool ranks_are_threads,
                      int threads_per_rank);

}  // namespace carousel
