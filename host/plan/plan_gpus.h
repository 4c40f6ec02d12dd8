// plan_gpus.h — `carousel plan --gpu NAME`: what a node of each common GPU brings to the
// planner (memory, dense peak, NVLink and network per GPU), one row per GPU.
#pragma once

#include <string>
#include <vector>

namespace carousel::plan {

struct GpuPreset {
  const char* name;
  const char* memory;          // per GPU, as --device-memory takes it
  double bf16_tflops;          // dense peak, tensor cores
  double fp32_tflops;          // dense peak without TF32 (carousel's float32 GEMMs)
  const char* nvlink;          // per GPU and direction, as --intra-node-bandwidth takes it
  const char* network;         // per GPU and direction (one NIC per GPU), --inter-node-bandwidth
};

const std::vector<GpuPreset>& gpu_presets();
// The row named `name`; throws carousel::Error listing the names when there is none.
const GpuPreset& gpu_preset(const std::string& name);
std::vector<std::string> gpu_preset_names();

}  // namespace carousel::plan
