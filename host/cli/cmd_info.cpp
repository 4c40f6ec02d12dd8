// cmd_info.cpp — `carousel info`: what this build can run on, printed on stdout (its output is
// the report, not a log: --log-level does not silence it).
#include <fmt/format.h>

#include "collectives/rendezvous.h"
#include "compute/cpu_backend.h"
#include "cuda/device_info.h"
#include "host/build_info.h"
#include "host/cli/commands.h"

namespace carousel {

int run_info(const InfoOptions& options) {
#if CAROUSEL_HAVE_MPI
  constexpr bool mpi_built = true;
#else
  constexpr bool mpi_built = false;
#endif
  fmt::print("carousel {} — build: CUDA backend {}, MPI communicator {}\n", build_info::kVersion,
               cuda_built() ? "compiled in" : "not compiled",
               mpi_built ? "compiled in (mpirun -np N carousel train ...)" : "not compiled");
  if (const int launched = mpi_launch_size(); launched > 0) {
    fmt::print("  started by mpirun as one of {} processes\n", launched);
  }
  for (int i = 0; i < options.cpu_devices; ++i) {
    CpuBackend backend(i);
    Tensor probe = backend.zeros({1024, 1024});  // shows the allocator's accounting at work
    const MemoryStats stats = backend.allocator().stats();
    fmt::print("  {}: {} — probe allocation peak {}\n", backend.allocator().name(), backend.name(),
                 format_bytes(stats.peak_bytes));
  }
  const CudaDevices gpus = list_cuda_devices();
  if (gpus.devices.empty()) {
    fmt::print("  CUDA: none — {}\n", gpus.why_none);
  }
  for (const auto& d : gpus.devices) {
    fmt::print("  cuda:{}: {} (sm_{}{}, {})\n", d.index, d.name, d.cc_major, d.cc_minor,
                 format_bytes(d.total_memory));
  }
  return 0;
}

}  // namespace carousel
