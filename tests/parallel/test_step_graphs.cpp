// test_step_graphs.cpp — training with captured steps (step_graphs=on; host/runtime/
// step_capture.h) on the CPU backend, whose graphs replay the recorded ops: every run equals the
// same run stepped eagerly, bitwise (losses, gradient norms, held-out losses), with the steps
// after the second replayed from the graph; a layout whose forward and backward communicate
// runs eagerly and says why; a capture the device refuses is said once and the run goes on
// eagerly, equal to the eager run (refused at its start, partway through, or at its end).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "compute/cpu_backend.h"
#include "host/config/schedule_config.h"
#include "host/data/data.h"
#include "host/mesh/mesh.h"
#include "host/runtime/rank_executor.h"
#include "host/run/trainer.h"
#include "tests/support/log_capture.h"
#include "tests/support/pipeline_equivalence.h"

namespace carousel {
namespace {

using testing::run_config;

struct GraphCase {
  std::string name;
  std::vector<std::string> keys;
  std::int64_t replays;  // steps per rank launched from the graph
};

void PrintTo(const GraphCase& c, std::ostream* os) { *os << c.name; }

class StepGraphTraining : public ::testing::TestWithParam<GraphCase> {};

TEST_P(StepGraphTraining, EqualsTheEagerRunBitwise) {
  const GraphCase& c = GetParam();
  std::vector<std::string> keys = c.keys;
  keys.insert(keys.end(), {"steps=5", "base_output_directory=/tmp/carousel_step_graph_tests"});
  const auto with = [&](const char* setting) {
    std::vector<std::string> k = keys;
    k.push_back(std::string("step_graphs=") + setting);
    return train(run_config(k));
  };
  const TrainResult eager = with("off"), graphs = with("on");
  ASSERT_EQ(graphs.steps.size(), 5u);
  ASSERT_EQ(eager.steps.size(), 5u);
  for (std::size_t s = 0; s < 5; ++s) {
    EXPECT_EQ(graphs.steps[s].loss, eager.steps[s].loss) << "step " << s;
    EXPECT_EQ(graphs.steps[s].grad_norm, eager.steps[s].grad_norm) << "step " << s;
    EXPECT_EQ(graphs.steps[s].eval_loss, eager.steps[s].eval_loss) << "step " << s;
  }
  EXPECT_LT(graphs.steps[4].loss, graphs.steps[0].loss);  // it learns
  for (std::int64_t replays : graphs.graph_replays_per_device) EXPECT_EQ(replays, c.replays);
  for (std::int64_t replays : eager.graph_replays_per_device) EXPECT_EQ(replays, 0);
}

const std::string M2 = "num_pipeline_microbatches=2", M4 = "num_pipeline_microbatches=4";
const std::string eval_keys[] = {"eval_interval=2", "eval_steps=2",
                                 "eval_dataset_path=" CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt"};

// Step 0 runs eagerly, step 1 is captured, steps 2-4 replay.
INSTANTIATE_TEST_SUITE_P(
    Layouts, StepGraphTraining,
    ::testing::Values(
        GraphCase{"one_device", {M2}, 3}, GraphCase{"remat_none", {M4, "remat_policy=none"}, 3},
        GraphCase{"bf16", {M2, "dtype=bfloat16"}, 3},
        GraphCase{"tied", {M2, "logits_via_embedding=true"}, 3},
        GraphCase{"four_microbatches", {M4}, 3},
        GraphCase{
            "data_D2_zero1", {M2, "ici_data_parallelism=2", "shard_optimizer_over_data=true"}, 3},
        GraphCase{"evaluation_between_replays", {M2, eval_keys[0], eval_keys[1], eval_keys[2]}, 3},
        // Steps 1 and 2 are profiled (eager), 3 is captured, 4 replays.
        GraphCase{"profiled_steps_eager", {M2, "profiler_steps=2"}, 1},
        // Blocked: the forward and backward communicate, every step runs eagerly.
        GraphCase{"blocked_pipeline_S2", {M4, "ici_pipeline_parallelism=2"}, 0},
        GraphCase{"blocked_fsdp_F2", {M2, "ici_fsdp_parallelism=2"}, 0},
        GraphCase{"blocked_tensor_T2", {M2, "ici_tensor_parallelism=2"}, 0}),
    [](const auto& info) { return info.param.name; });

TEST(StepGraphLog, ABlockedLayoutSaysWhyAndRunsEagerly) {
  const Config cfg = run_config({"ici_pipeline_parallelism=2", M4, "step_graphs=on",
                                 "base_output_directory=/tmp/carousel_step_graph_tests"});
  testing::LogCapture log;
  train(cfg);
  EXPECT_NE(log.text.str().find("step graphs: off, every step runs eagerly: stage rank 0's "
                                "forward and backward communicate (pipeline sends and receives)"),
            std::string::npos)
      << log.text.str();
}

enum class Refusal { AtBegin, Midway, AtEnd };

// Host memory that fails its 20th allocation once armed: an error partway through a capture.
class ArmedAllocator final : public DeviceAllocator {
 public:
  ArmedAllocator() : DeviceAllocator(DeviceKind::CPU, 0, 0) {}
  int armed = -1;  // allocations left before the failing one; -1: never

 protected:
  void* raw_allocate(std::size_t bytes) override {
    if (armed >= 0 && armed-- == 0) fail("simulated: the device cannot record an allocation");
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  }
  void raw_free(void* p) override { std::free(p); }
};

// A CPU backend whose first capture fails at its start, partway through, or at its end, as a
// GPU's may on an op CUDA cannot record.
class RefusingBackend final : public CpuBackend {
 public:
  explicit RefusingBackend(Refusal when)
      : CpuBackend(std::make_unique<ArmedAllocator>()), when_(when) {}

 protected:
  void do_begin_capture() override {
    if (when_ == Refusal::AtBegin) fail("simulated: the device cannot start a capture");
    if (when_ == Refusal::Midway) static_cast<ArmedAllocator&>(allocator()).armed = 20;
    CpuBackend::do_begin_capture();
  }
  std::unique_ptr<StepGraph> do_end_capture() override {
    auto graph = CpuBackend::do_end_capture();
    if (when_ == Refusal::AtEnd) fail("simulated: the device refused the captured work");
    return graph;
  }

 private:
  Refusal when_;
};

// Four steps of one rank by hand, on `be`: their losses.
std::vector<double> four_steps(const Config& cfg, Backend& be) {
  const schedule::Program program = lowered_program(cfg);
  const auto data = make_data_loader(cfg);
  const RankPlace place = RankPlace::of(0, MeshShape::of(cfg));
  std::vector<double> losses;
  launch_ranks(
      cfg, 1, Transport::Local, nullptr, [&](int, Backend&, Communicator& world, Communicator&) {
        RankCommunicators comms = split_communicators(world, place, program.layout, cfg.model);
        ShardedParams params(cfg, program.layout, place, be, comms);
        FlightRecorder recorder;
        RankExecutor executor(cfg, program, place, be, comms, params, *data, recorder);
        for (std::int64_t s = 0; s < 4; ++s) losses.push_back(executor.step(s, s).loss);
        EXPECT_EQ(executor.graph_replays(), 0);
      });
  return losses;
}

TEST(StepGraphFailure, ARefusedCaptureIsSaidAndTheStepRunsEagerly) {
  for (const Refusal when : {Refusal::AtBegin, Refusal::Midway, Refusal::AtEnd}) {
    SCOPED_TRACE(int(when));
    const Config graphs = run_config({M2, "step_graphs=on"});
    const Config eager = run_config({M2, "step_graphs=off"});
    CpuBackend plain;
    const std::vector<double> expected = four_steps(eager, plain);
    RefusingBackend refusing(when);
    testing::LogCapture log;
    EXPECT_EQ(four_steps(graphs, refusing), expected);
    const std::string text = log.text.str();
    EXPECT_NE(text.find("step graphs: capturing step 1 on rank 0 failed, so it and every later "
                        "step run eagerly: simulated: the device"),
              std::string::npos)
        << text;
    EXPECT_FALSE(refusing.capturing());
    EXPECT_EQ(refusing.allocator().stats().current_bytes,
              plain.allocator().stats().current_bytes);  // nothing kept by the failed capture
  }
}

}  // namespace
}  // namespace carousel
