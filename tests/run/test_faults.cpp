// test_faults.cpp — what a run does when things go wrong, with faults injected on purpose
// (host/reliability/fault_injection.h): a stalled rank stops the run with an error on every rank, a
// NaN gradient stops (naming the parameter) or is skipped consistently, SIGTERM saves a checkpoint
// from which the run continues exactly as if never stopped, a device out of memory stops the run
// naming the rank, the tensor and the planner's estimate.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <thread>

#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/io/checkpoint.h"
#include "host/mesh/mesh.h"
#include "host/runtime/optimizer.h"
#include "host/runtime/sharded_params.h"
#include "host/plan/plan_memory.h"
#include "host/reliability/fault_injection.h"
#include "host/reliability/flight_recorder.h"
#include "host/reliability/stop_signals.h"
#include "host/report/logging.h"
#include "host/run/guards/replica_check.h"
#include "host/run/trainer.h"
#include "host/schedule/simulate.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

// The demo's layout (S=2 stages x F=2 FSDP ranks with BSW) on the tiny model, or one device.
Config faulty_run(const std::string& name, std::int64_t steps, bool four_devices = true) {
  init_logging({.rank = 0, .level = "off", .file_dir = {}});
  std::vector<std::string> keys = {"max_target_length=16",
                                   "learning_rate=0.003",
                                   "dataset_type=text",
                                   "dataset_path=" CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt",
                                   "base_output_directory=/tmp/carousel_fault_tests",
                                   "run_name=" + name,
                                   "steps=" + std::to_string(steps),
                                   "num_pipeline_microbatches=4"};
  if (four_devices) {
    for (const char* k :
         {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2", "num_layers_per_pipeline_stage=2",
          "pipeline_fsdp_ag_per_repeat=true", "per_device_batch_size=2"}) {
      keys.push_back(k);
    }
  } else {
    keys.push_back("per_device_batch_size=8");
  }
  Config c = load_config("", keys).config;
  fs::remove_all(c.run_directory());
  return c;
}

std::vector<double> losses(const std::vector<StepMetrics>& steps) {
  std::vector<double> out;
  for (const auto& s : steps) out.push_back(s.loss);
  return out;
}

struct NoFaultsAfter : ::testing::Test {
  void TearDown() override { inject_faults(""); }
};

using Faults = NoFaultsAfter;

TEST_F(Faults, ParseErrorsNameThePart) {
  EXPECT_EQ(parse_faults("stall:rank=1,step=2,action=3,seconds=0.5").at(0).action, 3);
  for (const char* bad :
       {"hang:rank=1", "stall:rank", "stall:rank=x", "nan:action=3", "signal:signal=KILL"}) {
    EXPECT_THROW(parse_faults(bad), Error) << bad;
  }
}

TEST(FlightRecorder, ReportsTheActionInProgressAndTheLastCompleted) {
  FlightRecorder recorder;
  EXPECT_NE(recorder.report().find("nothing completed yet"), std::string::npos);
  for (int i = 0; i < 300; ++i) {  // more than it keeps
    recorder.start(0, i, schedule::parse_action("1F" + std::to_string(i)));
    recorder.complete();
  }
  recorder.start(1, 7, schedule::parse_action("2RECV_F3"));
  const std::string report = recorder.report(2);
  EXPECT_NE(report.find("in step 1 action 7 (2RECV_F3)"), std::string::npos) << report;
  EXPECT_NE(report.find("step 0 action 299 (1F299)"), std::string::npos) << report;
  EXPECT_NE(report.find("step 0 action 298 (1F298)"), std::string::npos) << report;
  EXPECT_EQ(report.find("action 297"), std::string::npos) << report;  // only the last 2
}

// Rank 1 stalls 2 s in step 1; the others' waits time out after 0.3 s. The run must end with
// an error naming a timed-out or abandoned operation, not hang and not crash, within the stall
// plus a margin (the stalled thread must finish before threads can be joined).
TEST_F(Faults, AStalledRankStopsTheRunWithAnError) {
  Config c = faulty_run("stall", 3);
  c.collective_timeout_seconds = 0.3;
  inject_faults("stall:rank=1,step=1,action=3,seconds=2");
  const auto t0 = std::chrono::steady_clock::now();
  try {
    train(c);
    FAIL() << "the stalled run did not fail";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("within 0.3 s") != std::string::npos ||
                what.find("timed out after 0.3 s") != std::string::npos)
        << what;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 2 + 5.0);
}

// A device too small for the run: CAROUSEL_CPU_DEVICE_MEMORY makes every CPU device refuse
// allocations past a limit, as a GPU of that size would. The limit holds each rank's weights,
// gradients and AdamW moments (the planner's exact state_memory, the largest over the stage
// ranks) with 16 KiB to spare, below every rank's estimate: a rank fails once its step needs
// more. The run ends on every rank, without a hang, with one error naming the rank and its
// place, its device, the tensor being allocated and the planner's estimate for that stage rank
// (recomputed here from plan::device_memory), which exceeds the device.
TEST_F(Faults, OutOfMemoryNamesTheRankTheTensorAndThePlannersEstimate) {
  const Config c = faulty_run("oom", 2);
  const schedule::Program program = lowered_program(c);
  const schedule::SimResult sim = schedule::simulate(program, schedule_costs(c));
  std::int64_t state = 0;
  std::vector<plan::MemoryBreakdown> estimate;
  for (int s = 0; s < program.layout.ranks; ++s) {
    state = std::max(state, plan::state_memory(c, program.layout, s).exact());
    estimate.push_back(plan::device_memory(c, program, s, sim.peak_activations.at(s)));
  }
  const std::size_t limit = std::size_t(state) + 16 * 1024;
  for (const auto& e : estimate) ASSERT_GT(std::size_t(e.total()), limit);
  setenv("CAROUSEL_CPU_DEVICE_MEMORY", std::to_string(limit).c_str(), 1);
  std::string what;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    train(c);
    ADD_FAILURE() << "a run on devices of " << limit << " bytes did not fail";
  } catch (const Error& e) {
    what = e.what();
  }
  unsetenv("CAROUSEL_CPU_DEVICE_MEMORY");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      what, m,
      std::regex(R"(^rank (\d) \(stage rank (\d), FSDP rank (\d), data rank 0\) is out of )"
                 R"(device memory: out of memory on cpu:(\d): requested \S+ \S+ with \S+ \S+ in )"
                 R"(use \(peak \S+ \S+\), limit ([^;]+); allocating a )"
                 R"((float32|bfloat16|int32)\[[0-9,]*\] tensor\. The planner estimates stage )"
                 R"(rank (\d)'s devices at <= ([^(]+) for this config \(weights [^)]+\), more )"
                 R"(than this device's ([^.]+\.\d\d [KMG]iB)\. To need less per device: more )"
                 R"(ranks sharing the model \(ici_fsdp_parallelism, .*`carousel plan )"
                 R"(--device-memory SIZE` lists meshes that fit$)")))
      << what;
  const int rank = std::stoi(m[1]);
  const RankPlace place = RankPlace::of(rank, MeshShape::of(c));
  EXPECT_EQ(std::stoi(m[2]), place.stage_rank) << what;
  EXPECT_EQ(std::stoi(m[3]), place.fsdp_rank) << what;
  EXPECT_EQ(std::stoi(m[4]), rank) << what;  // rank r's CPU device is cpu:r
  EXPECT_EQ(m[5], format_bytes(limit)) << what;
  EXPECT_EQ(std::stoi(m[7]), place.stage_rank) << what;
  EXPECT_EQ(m[8], format_bytes(std::size_t(estimate.at(place.stage_rank).total()))) << what;
  EXPECT_EQ(m[9], format_bytes(limit)) << what;
  // One message: the first failure, not the other ranks' abandoned waits ("rank 2 failed: ...").
  EXPECT_EQ(what.find("out of memory on", what.find("out of memory on") + 1), std::string::npos)
      << what;
}

// A NaN in one gradient at step 2 (index 1) stops the run on every rank before the update,
// naming the step and the parameter (rank 0 holds stage 0's first shard: layer 0's first
// parameter); no checkpoint is written.
TEST_F(Faults, ANonFiniteGradientStopsNamingTheParameter) {
  Config c = faulty_run("nan_stop", 3);
  inject_faults("nan:rank=0,step=1");
  try {
    train(c);
    FAIL() << "a NaN gradient did not stop the run";
  } catch (const NonFiniteError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("step 2:"), std::string::npos) << what;
    EXPECT_NE(what.find("gradient norm is nan"), std::string::npos) << what;
    EXPECT_NE(what.find("'model.layers.0.input_layernorm.weight'"), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(fs::path(c.run_directory()) / "checkpoints"));
}

// A NaN that appears after the gradient reductions on data replica 1 only (D = 2, rank 1): the
// global norm counts replica 0's copy, so the check must also see what each replica applies.
// Without ZeRO-1 replica 1 applies the whole gradient: the run stops on every rank naming the
// parameter (before, replica 1 applied it and diverged for good). With ZeRO-1 replica 1 applies
// only its own piece, which the injected element (the shard's first) is not in: nothing non-finite
// is applied anywhere, and the run equals a clean one.
TEST_F(Faults, ANonFiniteValueOnADataReplicaIsCaughtWhereverItIsApplied) {
  auto replicas = [](const std::string& name, bool zero1) {
    Config c = faulty_run(name, 3, /*four_devices=*/false);
    c.ici_data_parallelism = 2;
    c.per_device_batch_size = 4;
    c.shard_optimizer_over_data = zero1;
    c.enable_checkpointing = false;
    return c;
  };
  inject_faults("nan:rank=1,step=1");
  try {
    train(replicas("nan_replica", false));
    FAIL() << "a NaN applied on replica 1 did not stop the run";
  } catch (const NonFiniteError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("step 2:"), std::string::npos) << what;
    EXPECT_NE(what.find("'model.layers.0.input_layernorm.weight'"), std::string::npos) << what;
  }
  const auto with_fault = losses(train(replicas("nan_replica_zero1", true)).steps);
  inject_faults("");
  EXPECT_EQ(with_fault, losses(train(replicas("clean_zero1", true)).steps));
}

// One bit flipped in replica 1's weights after step 1 (silent data corruption: the lowest
// mantissa bit of one weight, which no loss shows): the replica check after step 2 stops every
// rank naming the replica, its rank and the parameter, before that step's checkpoint — with and
// without ZeRO-1, the check due by its interval or by the save at step 2. Without the fault the
// same runs pass their checks (no false alarm). Context ranks hold the same weights as data
// replicas and are checked the same way (C = 2, D = 1: rank 1 is context rank 1, replica 1).
TEST_F(Faults, AFlippedBitOnOneReplicaStopsTheRunNamingIt) {
  for (const char* mode : {"data", "data_zero1", "context"}) {
    const bool zero1 = std::string(mode) == "data_zero1";
    const bool context = std::string(mode) == "context";
    Config c = faulty_run(std::string("flip_") + mode, 4, /*four_devices=*/false);
    (context ? c.ici_context_parallelism : c.ici_data_parallelism) = 2;
    c.per_device_batch_size = 4;
    c.shard_optimizer_over_data = zero1;
    c.replica_check_interval = zero1 ? 2 : 100;  // due at step 2: by the interval, or the save
    c.checkpoint_period = zero1 ? 4 : 2;
    inject_faults("flip:rank=1,step=1");
    try {
      train(c);
      FAIL() << "a flipped bit on replica 1 went unnoticed (" << mode << ")";
    } catch (const ReplicaMismatchError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("replica check after step 2: replica 1 (rank 1) holds weights "
                          "that differ from replica 0's, first in "
                          "'model.layers.0.input_layernorm.weight'"),
                std::string::npos)
          << what;
    }
    EXPECT_FALSE(fs::exists(fs::path(c.run_directory()) / "checkpoints/2")) << "saved after it";
    inject_faults("");
    fs::remove_all(c.run_directory());
    EXPECT_EQ(train(c).steps.size(), 4u);  // the clean run passes checks at steps 2 and 4
  }
}

// Layers outside the pipeline are held by every stage rank, each copy kept equal by the same
// summed gradient and update: one bit flipped in stage rank 1's copy (rank 2 of S = 2 x F = 2)
// stops the run at the next check naming the stage rank and the first outside parameter, and
// the same run without the fault passes its checks.
TEST_F(Faults, AFlippedBitInALayerOutsideThePipelineStopsTheRun) {
  Config c = faulty_run("flip_outside", 4);
  c.pipeline_parallel_layers = 4;
  c.replica_check_interval = 2;
  c.checkpoint_period = 4;
  inject_faults("flip:rank=2,step=1");
  try {
    train(c);
    FAIL() << "a flipped bit in a stage copy went unnoticed";
  } catch (const ReplicaMismatchError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("replica check after step 2: stage rank 1 (rank 2) holds weights that "
                        "differ from stage rank 0's, first in "
                        "'model.layers.4.input_layernorm.weight'"),
              std::string::npos)
        << what;
  }
  inject_faults("");
  fs::remove_all(c.run_directory());
  EXPECT_EQ(train(c).steps.size(), 4u);
}

// The run directory removed mid-run (an operator's rm -rf, a cleanup job): every rank stops at the
// next step, a checkpoint is saved into the recreated directory, and the run fails naming the
// metrics file — before, every later record went nowhere and the run ended with status 0.
TEST_F(Faults, RemovingTheRunDirectoryStopsTheRunAfterSaving) {
  Config c = faulty_run("vanish", 1000000);
  c.checkpoint_period = 1000000;
  const fs::path run = c.run_directory();
  std::thread remover([&] {
    for (int i = 0; i < 20000; ++i) {  // until 3 records are written (at most 20 s)
      std::ifstream in(run / "metrics.jsonl");
      const auto lines = std::count(std::istreambuf_iterator<char>(in), {}, '\n');
      if (lines >= 3) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    fs::remove_all(run);
  });
  const std::string msg = testing::error_of([&] { train(c); });
  remover.join();
  EXPECT_NE(msg.find("metrics file '" + (run / "metrics.jsonl").string() +
                     "' was removed during the run"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("checkpoint saved: run the same command to resume"), std::string::npos) << msg;
  EXPECT_TRUE(latest_checkpoint(c).has_value()) << "no checkpoint in the recreated directory";
}

// skip_step_on_nonfinite: the step's update is skipped on every rank, the learning-rate
// schedule does not advance and the logged rate is the one applied. Checked three ways: the steps
// before are untouched; one device and four devices skip alike (same losses afterwards); and a run
// resumed from a checkpoint taken after the skip continues bitwise like the straight run (the skip
// count is saved).
TEST_F(Faults, ANonFiniteStepIsSkippedConsistently) {
  Config clean = faulty_run("clean", 5);
  clean.enable_checkpointing = false;
  const auto reference = losses(train(clean).steps);

  Config c = faulty_run("nan_skip", 5);
  c.skip_step_on_nonfinite = true;
  c.checkpoint_period = 3;
  inject_faults("nan:rank=0,step=1");
  const TrainResult straight = train(c);
  EXPECT_EQ(straight.skipped_steps, 1);
  ASSERT_EQ(straight.steps.size(), 5u);
  EXPECT_EQ(straight.steps[0].loss, reference[0]);
  EXPECT_EQ(straight.steps[1].loss, reference[1]);  // the loss is computed, the update is not
  EXPECT_TRUE(std::isnan(straight.steps[1].grad_norm));
  EXPECT_NE(straight.steps[2].loss, reference[2]);
  // The logged rate is the one applied: none at the skipped step, then the schedule resumes
  // where it stopped (step 2 applies update 1's rate).
  EXPECT_EQ(straight.steps[0].learning_rate, learning_rate_at(c, 0));
  EXPECT_EQ(straight.steps[1].learning_rate, 0.0);
  EXPECT_EQ(straight.steps[2].learning_rate, learning_rate_at(c, 1));
  EXPECT_NE(learning_rate_at(c, 1), learning_rate_at(c, 2));  // the check can tell them apart

  Config one = faulty_run("nan_skip_one_device", 5, /*four_devices=*/false);
  one.skip_step_on_nonfinite = true;
  one.enable_checkpointing = false;
  const auto single = losses(train(one).steps);
  for (std::size_t s = 2; s < single.size(); ++s) {
    EXPECT_NEAR(single[s], straight.steps[s].loss, 1e-4 * single[s]) << "step " << s;
  }

  // Resume from checkpoint 3 (after the skip): the rest must be bitwise the straight run's.
  const fs::path run = c.run_directory();
  fs::remove_all(run / "checkpoints/5");
  std::ofstream(run / "metrics.jsonl", std::ios::trunc).close();
  const TrainResult resumed = train(c);
  EXPECT_EQ(resumed.start_step, 3);
  EXPECT_EQ(resumed.skipped_steps, 1);
  ASSERT_EQ(resumed.steps.size(), 2u);
  EXPECT_EQ(resumed.steps[0].loss, straight.steps[3].loss);
  EXPECT_EQ(resumed.steps[1].loss, straight.steps[4].loss);
}

// SIGTERM (raised in-process after step 2, as a scheduler's preemption would) finishes the
// step, saves checkpoint 2 and returns normally; the resumed run equals the uninterrupted one.
TEST_F(Faults, SigtermSavesAndTheResumedRunEqualsTheStraightOne) {
  Config straight = faulty_run("straight", 5);
  straight.enable_checkpointing = false;
  const auto reference = losses(train(straight).steps);

  Config c = faulty_run("preempted", 5);
  inject_faults("signal:step=1,signal=TERM");
  const TrainResult first = train(c);
  EXPECT_TRUE(first.stopped_by_signal);
  ASSERT_EQ(first.steps.size(), 2u);
  EXPECT_TRUE(fs::exists(fs::path(c.run_directory()) / "checkpoints/2/manifest.json"));
  inject_faults("");
  const TrainResult second = train(c);
  EXPECT_EQ(second.start_step, 2);
  EXPECT_FALSE(second.stopped_by_signal);
  std::vector<double> all = losses(first.steps);
  for (double l : losses(second.steps)) all.push_back(l);
  EXPECT_EQ(all, reference);
}

// SIGHUP (a closed terminal or ssh session) stops like SIGTERM: the step finishes, checkpoint 2
// is saved, the run returns normally.
TEST_F(Faults, SighupStopsAndSavesLikeSigterm) {
  Config c = faulty_run("hangup", 5);
  inject_faults("signal:step=1,signal=HUP");
  const TrainResult r = train(c);
  inject_faults("");
  EXPECT_TRUE(r.stopped_by_signal);
  EXPECT_EQ(r.steps.size(), 2u);
  EXPECT_TRUE(fs::exists(fs::path(c.run_directory()) / "checkpoints/2/manifest.json"));
}

// A stop signal repeated within a second is the same request (a wrapper forwarding Ctrl-C
// twice): the process lives on (were it a second request, it would _exit(143) here and the
// test binary would die). SIGPIPE and SIGXFSZ are ignored while the handlers are installed
// (their default actions kill the process). A nested StopSignals keeps the outer one's flag.
TEST(StopSignals, ARepeatWithinASecondCountsOnceAndPipeAndFileSizeSignalsAreIgnored) {
  StopSignals outer;
  EXPECT_EQ(StopSignals::received(), 0);
  std::raise(SIGPIPE);
  std::raise(SIGXFSZ);
  EXPECT_EQ(StopSignals::received(), 0);
  std::raise(SIGTERM);
  std::raise(SIGTERM);
  std::raise(SIGINT);
  EXPECT_EQ(StopSignals::received(), SIGTERM);
  StopSignals inner;  // what train() does under main()'s handlers
  EXPECT_EQ(StopSignals::received(), SIGTERM);
}

// A signal the launcher set to be ignored stays ignored (`nohup` ignores SIGHUP: logging out
// must not stop such a run), and is ignored again after the handlers go.
TEST(StopSignals, ASignalIgnoredByTheLauncherStaysIgnored) {
  struct sigaction ignore {
  }, before{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGHUP, &ignore, &before);
  {
    StopSignals signals;
    std::raise(SIGHUP);
    EXPECT_EQ(StopSignals::received(), 0);
  }
  struct sigaction after {};
  sigaction(SIGHUP, &before, &after);
  EXPECT_EQ(after.sa_handler, SIG_IGN);
}

}  // namespace
}  // namespace carousel
