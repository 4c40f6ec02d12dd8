// test_pipeline_gpu.cpp — the pipeline executor on logical devices of GPU 0 (label gpu): the
// demo layout (circular, 2 stages x 2 FSDP ranks, Buffer Sliding Window) trained with
// device=cuda against the same run on CPU devices, float32 and bfloat16. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cuda/device_info.h"
#include "host/config/config.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"

namespace carousel {
namespace {

// The test data folder: CAROUSEL_TEST_DATA_DIR from the environment (a GPU machine runs the
// binary built elsewhere, scripts/gpu_checks.sh sets it), else the one of this source tree.
std::string data_dir() {
  const char* env = std::getenv("CAROUSEL_TEST_DATA_DIR");
  return env ? env : CAROUSEL_TEST_DATA_DIR;
}

std::vector<double> losses(const std::string& device, const std::string& dtype,
                           const std::vector<std::string>& more = {}) {
  init_logging({.rank = 0, .level = "warn", .file_dir = {}});
  std::vector<std::string> keys = {"max_target_length=32",
                                   "steps=4",
                                   "enable_checkpointing=false",
                                   "learning_rate=0.003",
                                   "dataset_type=text",
                                   "dataset_path=" + data_dir() + "/tiny_corpus.txt",
                                   "ici_pipeline_parallelism=2",
                                   "ici_fsdp_parallelism=2",
                                   "num_pipeline_microbatches=4",
                                   "per_device_batch_size=2",
                                   "pipeline_fsdp_ag_per_repeat=true",
                                   "device=" + device,
                                   "dtype=" + dtype,
                                   "base_output_directory=/tmp/carousel_pipeline_gpu",
                                   "run_name=gpu"};
  keys.insert(keys.end(), more.begin(), more.end());
  const Config c = load_config("", keys).config;
  std::vector<double> out;
  for (const auto& s : train(c).steps) out.push_back(s.loss);
  return out;
}

// float32: cuBLAS and OpenBLAS sum in other orders, 1e-4 relative over 4 steps; bfloat16: a
// flipped bf16 rounding here and there, 2e-3.
TEST(PipelineGpu, LogicalGpuDevicesTrainLikeCpuDevices) {
  const CudaDevices gpus = list_cuda_devices();
  if (gpus.devices.empty()) GTEST_SKIP() << "no GPU to test on: " << gpus.why_none;
  for (const auto& [dtype, rtol] : {std::pair{"float32", 1e-4}, std::pair{"bfloat16", 2e-3}}) {
    const auto gpu = losses("cuda", dtype), cpu = losses("cpu", dtype);
    ASSERT_EQ(gpu.size(), cpu.size());
    for (std::size_t i = 0; i < gpu.size(); ++i) {
      EXPECT_NEAR(gpu[i], cpu[i], rtol * cpu[i]) << dtype << " step " << i;
    }
  }
}

// Uneven stages ([1, 3, 3, 1] over S = 2, R = 2 with FSDP and BSW: a 1-layer and a 3-layer
// stage share each rank's weight slots) on GPUs train like on CPUs, float32 1e-4.
TEST(PipelineGpu, UnevenStagesTrainLikeCpuDevices) {
  const CudaDevices gpus = list_cuda_devices();
  if (gpus.devices.empty()) GTEST_SKIP() << "no GPU to test on: " << gpus.why_none;
  const std::vector<std::string> uneven = {"pipeline_stage_layers=[1,3,3,1]"};
  const auto gpu = losses("cuda", "float32", uneven), cpu = losses("cpu", "float32", uneven);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * cpu[i]) << "step " << i;
  }
}

// Tensor parallelism (T = 2 with S = 2: vocabulary-parallel head, row gathers and scatters) and
// context parallelism (C = 2 with S = 2: key/value exchange, attention against a key prefix) on
// logical devices of one GPU (their groups exchange through the host: one GPU cannot hold two
// NCCL ranks) train like CPU devices: float32 1e-4, bfloat16 2e-2 (the tensor ranks' partial
// sums are rounded to bfloat16 before they are added, in other orders on each backend).
TEST(PipelineGpu, TensorAndContextGroupsTrainLikeCpuDevices) {
  const CudaDevices gpus = list_cuda_devices();
  if (gpus.devices.empty()) GTEST_SKIP() << "no GPU to test on: " << gpus.why_none;
  for (const char* axis : {"ici_tensor_parallelism=2", "ici_context_parallelism=2"}) {
    for (const auto& [dtype, rtol] : {std::pair{"float32", 1e-4}, std::pair{"bfloat16", 2e-2}}) {
      const std::vector<std::string> keys = {"ici_fsdp_parallelism=1", axis};
      const auto gpu = losses("cuda", dtype, keys), cpu = losses("cpu", dtype, keys);
      ASSERT_EQ(gpu.size(), cpu.size());
      for (std::size_t i = 0; i < gpu.size(); ++i) {
        EXPECT_NEAR(gpu[i], cpu[i], rtol * cpu[i]) << axis << " " << dtype << " step " << i;
      }
    }
  }
}

// Mixture-of-experts layers (host-side routing, per-expert cuBLAS GEMMs, the row gathers, scale
// and dot ops) with and without expert parallelism (the rows' exchange between logical devices'
// ranks) train like CPU devices. A routing choice could flip on a near-tie between backends:
// float32 1e-4, bfloat16 2e-2 as above.
TEST(PipelineGpu, MixtureOfExpertsTrainLikeCpuDevices) {
  const CudaDevices gpus = list_cuda_devices();
  if (gpus.devices.empty()) GTEST_SKIP() << "no GPU to test on: " << gpus.why_none;
  const std::vector<std::string> moe = {"num_experts=4", "num_experts_per_tok=2",
                                        "base_moe_mlp_dim=32", "shared_experts=1",
                                        "first_num_dense_layers=1",
                                        "load_balance_loss_weight=0.01"};
  // Without and with expert parallelism, and on dualpipev, whose F&B pairs take turns at their
  // exchanges on two host threads driving the same GPU.
  const std::vector<std::vector<std::string>> meshes = {
      {"ici_expert_parallelism=1", "num_pipeline_microbatches=2"},
      {"ici_expert_parallelism=2", "num_pipeline_microbatches=2"},
      {"ici_expert_parallelism=2", "pipeline_schedule=dualpipev", "num_pipeline_repeats=2",
       "num_layers_per_pipeline_stage=2", "num_pipeline_microbatches=4"}};
  for (const auto& mesh : meshes) {
    for (const auto& [dtype, rtol] : {std::pair{"float32", 1e-4}, std::pair{"bfloat16", 2e-2}}) {
      std::vector<std::string> keys = moe;
      keys.push_back("ici_fsdp_parallelism=1");
      keys.insert(keys.end(), mesh.begin(), mesh.end());
      const auto gpu = losses("cuda", dtype, keys), cpu = losses("cpu", dtype, keys);
      ASSERT_EQ(gpu.size(), cpu.size());
      for (std::size_t i = 0; i < gpu.size(); ++i) {
        EXPECT_NEAR(gpu[i], cpu[i], rtol * cpu[i])
            << mesh.front() << " " << mesh[1] << " " << dtype << " step " << i;
      }
    }
  }
}

}  // namespace
}  // namespace carousel
