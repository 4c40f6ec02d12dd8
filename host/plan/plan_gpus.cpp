// plan_gpus.cpp — the GPU presets. Sources: the vendors' datasheets for the SXM parts in their
// 8-GPU HGX/DGX nodes (dense, i.e. without structured sparsity); memory as the driver reports it
// (a little under the marketed size); NVLink as half the marketed bidirectional figure; one
// NIC per GPU (ConnectX-7 400 Gbit/s on H100/H200/B200 nodes, HDR 200 Gbit/s on A100 nodes).
#include "host/plan/plan_gpus.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compute/error.h"

namespace carousel::plan {

const std::vector<GpuPreset>& gpu_presets() {
  static const std::vector<GpuPreset> rows = {
      {"h100", "79.6GiB", 989, 67, "450GB/s", "400Gbit/s"},
      {"h200", "140GiB", 989, 67, "450GB/s", "400Gbit/s"},
      {"a100", "80GiB", 312, 19.5, "300GB/s", "200Gbit/s"},
      {"b200", "179GiB", 2250, 80, "900GB/s", "400Gbit/s"},
  };
  return rows;
}

std::vector<std::string> gpu_preset_names() {
  std::vector<std::string> names;
  for (const GpuPreset& g : gpu_presets()) names.emplace_back(g.name);
  return names;
}

const GpuPreset& gpu_preset(const std::string& name) {
  for (const GpuPreset& g : gpu_presets()) {
    if (name == g.name) return g;
  }
  fail("--gpu={} is not a preset; use one of {} (or give --device-memory, --peak-tflops and the "
       "bandwidths yourself)",
       name, fmt::join(gpu_preset_names(), ", "));
}

}  // namespace carousel::plan
