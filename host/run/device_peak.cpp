// device_peak.cpp — data-sheet peaks of known GPUs, and a GEMM measured on CPUs.
#include "host/run/device_peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "cuda/device_info.h"
#include "host/mesh/mesh.h"

namespace carousel {

namespace {

// Dense tensor-core bf16 and plain float32 FLOP/s from NVIDIA's data sheets (SXM parts).
struct KnownGpu {
  const char* name_part;
  double bf16, f32;
};
constexpr KnownGpu kKnownGpus[] = {
    {"H200", 989e12, 67e12},
    {"H100", 989e12, 67e12},
    {"A100", 312e12, 19.5e12},
};

double measured_cpu_gemm(Backend& be) {
  const std::int64_t n = 512;
  const Tensor a = be.zeros({n, n}), b = be.zeros({n, n}), c = be.empty({n, n});
  double best = 1e30;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    be.gemm(false, false, 1.0, a, b, 0.0, c);
    be.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, s);  // the first warms up
  }
  return 2.0 * double(n * n * n) / best;
}

}  // namespace

double device_peak_flops(const Config& cfg, Backend& be) {
  if (cfg.peak_flops > 0) return cfg.peak_flops;
  if (!runs_on_gpus(cfg)) return measured_cpu_gemm(be);
  const auto gpus = list_cuda_devices().devices;
  if (gpus.empty()) return 0;
  for (const KnownGpu& known : kKnownGpus) {
    if (gpus.front().name.find(known.name_part) != std::string::npos) {
      return cfg.dtype == "bfloat16" ? known.bf16 : known.f32;
    }
  }
  return 0;
}

double run_peak_flops(const Config& cfg, Backend& be, int ranks, bool ranks_are_threads,
                      int threads_per_rank) {
  const int threads = std::max(1, threads_per_rank);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);  // the GEMM computes as one rank does
  const double one = device_peak_flops(cfg, be);
  omp_set_num_threads(saved);
  if (runs_on_gpus(cfg) || !ranks_are_threads || cfg.peak_flops > 0) return one * ranks;
  const int at_once = std::max(1, omp_get_num_procs() / threads);
  return one * std::min(ranks, at_once);
}

}  // namespace carousel
