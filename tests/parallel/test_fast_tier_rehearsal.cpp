// test_fast_tier_rehearsal.cpp — the GPU fast tier's bfloat16 rules rehearsed on CPUs
// (rehearse_gpu_kernels, cuda/plans/rehearsal_backend.h), so a bfloat16 run the GPU would stop
// stops here first, in CI.
//
// Training: each layout the first GPU run will meet trains in bfloat16 on CPU devices that
// declare the fast tier's native ops (the table the CUDA backend reads) and gives the same bits
// as the plain CPU run, which stages every op through float32 — one device, a pipeline with
// FSDP and the Buffer Sliding Window, tensor and context parallelism, mixture of experts with
// expert parallelism (also on dualpipev's F&B pairs), layers after the pipeline, packed
// documents, no recomputation (the proof's llama), and a captured step (the CPU's emulation of
// a CUDA graph). Before the accumulator rule (compute/op_check.h), every one stopped at its
// first backward: the norms' and the embedding's float32 gradients beside bfloat16 activations.
//
// Ops: the rehearsal accepts exactly the documented mixes and rejects, with the GPU's message,
// a mix the CPU's staging would quietly widen into agreement.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "cuda/plans/rehearsal_backend.h"
#include "tests/support/pipeline_equivalence.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::fetch;
using testing::make;
using testing::moe_top2_shared;

struct RehearsalCase {
  std::string name;
  std::vector<std::string> keys;
};

std::vector<double> bf16_losses(std::vector<std::string> keys, bool rehearse) {
  keys.push_back("dtype=bfloat16");
  keys.push_back(rehearse ? "rehearse_gpu_kernels=true" : "rehearse_gpu_kernels=false");
  keys.push_back(rehearse ? "run_name=rehearsal" : "run_name=plain");
  std::vector<double> out;
  for (const auto& s : train(testing::run_config(keys)).steps) out.push_back(s.loss);
  return out;
}

void PrintTo(const RehearsalCase& c, std::ostream* os) { *os << c.name; }

class FastTierRehearsal : public ::testing::TestWithParam<RehearsalCase> {};

TEST_P(FastTierRehearsal, TrainsInBfloat16LikeThePlainCpu) {
  const auto plain = bf16_losses(GetParam().keys, false);
  const auto rehearsed = bf16_losses(GetParam().keys, true);
  ASSERT_EQ(rehearsed.size(), plain.size());
  ASSERT_FALSE(plain.empty());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(std::isfinite(plain[i])) << "step " << i;
    EXPECT_EQ(rehearsed[i], plain[i]) << "step " << i;  // each op computes as staging does
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, FastTierRehearsal,
    ::testing::Values(
        RehearsalCase{"one_device", {}},
        RehearsalCase{"one_device_step_graphs", {"step_graphs=on", "steps=4"}},
        RehearsalCase{"one_device_remat_none", {"remat_policy=none"}},  // the proof's llama
        RehearsalCase{"circular_S2_F2_bsw",
                      {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                       "num_layers_per_pipeline_stage=2", "num_pipeline_microbatches=4",
                       "pipeline_fsdp_ag_per_repeat=true"}},
        RehearsalCase{"tensor_context_T2_C2",
                      {"ici_tensor_parallelism=2", "ici_context_parallelism=2",
                       "num_pipeline_microbatches=2"}},
        RehearsalCase{"tensor_S2_T2",
                      {"ici_pipeline_parallelism=2", "ici_tensor_parallelism=2",
                       "num_layers_per_pipeline_stage=2", "num_pipeline_microbatches=4"}},
        RehearsalCase{"moe_E2",
                      moe_top2_shared({"ici_expert_parallelism=2", "num_pipeline_microbatches=2"})},
        RehearsalCase{
            "moe_dualpipev_S2_E2",
            moe_top2_shared({"ici_pipeline_parallelism=2", "ici_expert_parallelism=2",
                             "pipeline_schedule=dualpipev", "num_pipeline_repeats=2",
                             "num_layers_per_pipeline_stage=2", "num_pipeline_microbatches=4"})},
        RehearsalCase{"outside_gpipe_S2_P4",
                      {"ici_pipeline_parallelism=2", "pipeline_schedule=gpipe",
                       "pipeline_parallel_layers=4", "num_pipeline_microbatches=4"}},
        RehearsalCase{"packed_S2",
                      {"packing=true", "eos_id=10", "ici_pipeline_parallelism=2",
                       "num_layers_per_pipeline_stage=2", "num_pipeline_microbatches=4"}}),
    [](const auto& info) { return info.param.name; });

// The accepted mixes: float32 accumulators beside bfloat16 activations give the plain CPU's
// bits; a mix the fast tier does not take is refused by the rehearsal with the front end's
// message, where the plain CPU's staging widens it into agreement and runs.
TEST(FastTierRehearsal, AcceptsTheDocumentedMixesAndRefusesOthersAsTheGpuDoes) {
  CpuBackend plain;
  const auto rehearsal = gpu::make_rehearsal_backend(0);
  const std::int64_t rows = 6, cols = 16, vocab = 5;
  const auto xs = testing::randn(rows * cols, 1), ws = testing::randn(cols, 2),
             dys = testing::randn(rows * cols, 3), gs = testing::randn(cols, 4),
             tables = testing::randn(vocab * cols, 5);
  const std::vector<std::int32_t> ids = {0, 3, 3, 1, 4, 3};
  struct Grads {
    std::vector<double> dx, dweight, dtable;
  };
  auto backward = [&](Backend& be, DType dx_dtype) {
    Tensor x = make(be, xs, {rows, cols}, DType::BF16), w = make(be, ws, {cols}, DType::BF16);
    Tensor out = be.empty({rows, cols}, DType::BF16), rstd = be.empty({rows}, DType::F32);
    be.rmsnorm_forward(x, w, 1e-5, out, rstd);
    Tensor dy = make(be, dys, {rows, cols}, DType::BF16), dx = be.empty({rows, cols}, dx_dtype);
    Tensor dweight = make(be, gs, {cols}, DType::F32);  // accumulates from a non-zero start
    be.rmsnorm_backward(dy, x, w, rstd, dx, dweight);
    Tensor dtable = make(be, tables, {vocab, cols}, DType::F32);
    be.embedding_backward(dy, be.from_host(ids, {rows}), dtable);
    return Grads{fetch(be, dx), fetch(be, dweight), fetch(be, dtable)};
  };
  const Grads want = backward(plain, DType::BF16), got = backward(*rehearsal, DType::BF16);
  EXPECT_EQ(got.dx, want.dx);
  EXPECT_EQ(got.dweight, want.dweight);
  EXPECT_EQ(got.dtable, want.dtable);

  // dx in float32 beside bfloat16 x: the fast kernel writes dx in x's dtype.
  EXPECT_EQ(testing::error_of([&] { backward(plain, DType::F32); }), "<no error>");
  const std::string error = testing::error_of([&] { backward(*rehearsal, DType::F32); });
  EXPECT_NE(error.find("rmsnorm_backward: argument 'dx' is float32 but must be bfloat16 like 'x'"),
            std::string::npos)
      << error;

  // A bfloat16 table gradient from float32 rows: an accumulator narrower than what it adds.
  auto narrow_table = [&](Backend& be) {
    Tensor dy = make(be, dys, {rows, cols}, DType::F32);
    Tensor dtable = make(be, tables, {vocab, cols}, DType::BF16);
    be.embedding_backward(dy, be.from_host(ids, {rows}), dtable);
  };
  EXPECT_EQ(testing::error_of([&] { narrow_table(plain); }), "<no error>");
  const std::string narrow = testing::error_of([&] { narrow_table(*rehearsal); });
  EXPECT_NE(narrow.find("embedding_backward: argument 'dtable' is bfloat16 but must be float32 "
                        "like 'dout'"),
            std::string::npos)
      << narrow;
}

// The key has an effect on CPU devices in bfloat16 only; elsewhere it is an error naming why.
TEST(FastTierRehearsal, IsForBfloat16OnCpuDevicesOnly) {
  const std::string on_gpu = testing::error_of([] {
    load_config("", {"rehearse_gpu_kernels=true", "device=cuda", "dtype=bfloat16"});
  });
  EXPECT_NE(on_gpu.find("rehearse_gpu_kernels=true is for device=cpu"), std::string::npos)
      << on_gpu;
  const std::string in_float32 =
      testing::error_of([] { load_config("", {"rehearse_gpu_kernels=true"}); });
  EXPECT_NE(in_float32.find("rehearse_gpu_kernels=true changes nothing with dtype=float32"),
            std::string::npos)
      << in_float32;
}

}  // namespace
}  // namespace carousel
