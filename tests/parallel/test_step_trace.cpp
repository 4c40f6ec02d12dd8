// test_step_trace.cpp — the measured trace (profiler_steps): valid Chrome trace JSON with one
// process per rank and its rows, every action of the profiled steps, a flow arrow from every
// SEND to its RECV, the predicted schedule beside it, and each rank's time by op kind.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"
#include "models/params.h"

namespace carousel {
namespace {

TEST(StepTrace, ProfiledStepsBecomeAChromeTraceWithFlowsAndThePrediction) {
  init_logging({.rank = 0, .level = "warn", .file_dir = {}});
  Config c = load_config("", {"max_target_length=16", "dataset_type=text",
                              "dataset_path=" CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt",
                              "base_output_directory=/tmp/carousel_trace_tests", "run_name=trace",
                              "steps=4", "enable_checkpointing=false", "ici_pipeline_parallelism=2",
                              "ici_fsdp_parallelism=2", "num_layers_per_pipeline_stage=2",
                              "pipeline_fsdp_ag_per_repeat=true", "per_device_batch_size=2",
                              "num_pipeline_microbatches=4", "profiler_steps=2",
                              "skip_first_n_steps_for_profiler=1"})
                 .config;
  std::filesystem::remove_all(c.run_directory());
  const TrainResult r = train(c);
  ASSERT_FALSE(r.trace_path.empty());
  const auto trace = nlohmann::json::parse(std::ifstream(r.trace_path))["traceEvents"];

  // What the two profiled steps must contain, from the program every rank walked.
  const schedule::Program program = lowered_program(c);
  std::map<int, int> timed_per_stage_rank, sends;  // compute + AG_WAIT + OPTIMIZER; SENDs
  for (int s = 0; s < program.layout.ranks; ++s) {
    for (const auto& a : program.ranks[s]) {
      const bool timed = a.is_compute() || a.kind == schedule::Kind::AG_WAIT ||
                         a.kind == schedule::Kind::OPTIMIZER;
      timed_per_stage_rank[s] += timed;
      sends[s] += a.kind == schedule::Kind::SEND_F || a.kind == schedule::Kind::SEND_B;
    }
  }
  // An FSDP collective moves its stage's whole buffer: 2 layers, padded to F = 2, float32.
  std::int64_t layer_elements = 0;
  for (const auto& spec : param_table(c.model))
    layer_elements += spec.layer == 0 ? numel(spec.shape) : 0;
  const std::int64_t stage_bytes = (2 * layer_elements + 1) / 2 * 2 * 4;
  std::set<int> processes;
  std::map<int, int> compute_slices;  // pid -> slices on the compute row
  std::multiset<std::uint64_t> flow_starts, flow_ends;
  int predicted = 0;
  for (const auto& e : trace) {
    const int pid = e["pid"];
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(pid);
    if (e["ph"] == "X" && pid < 1000 && e["tid"] == 0) ++compute_slices[pid];
    if (e["ph"] == "X" && pid >= 1000) ++predicted;
    if (e["ph"] == "s") flow_starts.insert(e["id"].get<std::uint64_t>());
    if (e["ph"] == "f") flow_ends.insert(e["id"].get<std::uint64_t>());
  }
  EXPECT_EQ(processes, (std::set<int>{0, 1, 2, 3, 1000, 1001}));
  int expected_sends = 0;
  for (int rank = 0; rank < 4; ++rank) {
    const int stage_rank = rank / 2 % 2;  // F = 2: ranks 0, 1 on stage rank 0
    EXPECT_EQ(compute_slices[rank], 2 * timed_per_stage_rank[stage_rank]) << "rank " << rank;
    expected_sends += 2 * sends[stage_rank];
  }
  EXPECT_EQ(int(flow_starts.size()), expected_sends);
  EXPECT_EQ(flow_starts, flow_ends) << "every SEND's arrow must end at its RECV";
  EXPECT_GT(predicted, 0);

  // Viewers drop complete slices that overlap on one row: the measured rows never overlap
  // (transfers in flight at once are on lanes), every slice says its step, every arrow's id is
  // exact in JavaScript and each end lies on a slice of its own row.
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> rows;
  for (const auto& e : trace) {
    if (e["ph"] != "X" || e["pid"].get<int>() >= 1000) continue;
    rows[{e["pid"], e["tid"]}].emplace_back(e["ts"],
                                            e["ts"].get<double>() + e["dur"].get<double>());
    EXPECT_GE(e["args"]["step"].get<int>(), 2) << e.dump();
    if (e["cat"] == "pipe") {  // one activation per send or receive: 1 sequence x 16 x 64 float32
      const std::string name = e["name"];
      const auto actions = 1 + std::count(name.begin(), name.end(), ' ');
      EXPECT_EQ(e["args"]["bytes"].get<std::int64_t>(), actions * 1 * 16 * 64 * 4) << e.dump();
    }
    if (e["cat"] == "fsdp")
      EXPECT_EQ(e["args"]["bytes"].get<std::int64_t>(), stage_bytes) << e.dump();
  }
  int lanes_used = 0;
  for (auto& [row, spans] : rows) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) {
      EXPECT_LE(spans[i - 1].second, spans[i].first)
          << "overlap on pid " << row.first << " tid " << row.second;
    }
    lanes_used += row.second >= 100;
  }
  EXPECT_GT(lanes_used, 0) << "this layout has transfers in flight at once: a lane each";
  for (const auto& e : trace) {
    if (e["ph"] != "s" && e["ph"] != "f") continue;
    EXPECT_LT(e["id"].get<std::uint64_t>(), std::uint64_t(1) << 53);
    const double ts = e["ts"];
    bool on_slice = false;
    for (const auto& [a, b] : rows[{e["pid"], e["tid"]}]) on_slice |= a <= ts && ts <= b;
    EXPECT_TRUE(on_slice) << e.dump();
  }
  EXPECT_GT(nlohmann::json::parse(std::ifstream(r.trace_path))["otherData"]["origin_unix_us"]
                .get<double>(),
            1.6e15);  // microseconds since 1970, after 2020

  EXPECT_GT(r.measured_bubble, 0);
  EXPECT_LT(r.measured_bubble, 1);
  EXPECT_GE(r.predicted_bubble, 0);
  EXPECT_LT(r.predicted_bubble, 1);

  // Time by op kind, per rank: the model's ops were timed, within the steps' wall time.
  const auto ops = nlohmann::json::parse(
      std::ifstream(std::filesystem::path(c.run_directory()) / "op_times.json"));
  ASSERT_EQ(ops.size(), 4u);
  for (const auto& rank : ops) {
    EXPECT_EQ(rank["steps"], 2);
    double total = 0;
    for (const auto& [name, t] : rank["ops"].items()) total += t["seconds"].get<double>();
    EXPECT_GT(total, 0) << rank.dump();
    EXPECT_LE(total, rank["elapsed_seconds"].get<double>()) << rank.dump();
    for (const char* op : {"gemm", "attention_forward", "attention_backward", "adamw_update"}) {
      EXPECT_GT(rank["ops"][op]["calls"].get<int>(), 0) << op << " in " << rank.dump();
    }
  }
}

}  // namespace
}  // namespace carousel
