// test_expert_overlap.cpp — DualPipeV's overlapped F&B pairs hiding the expert exchanges, as
// measured: a profiled MoE run with expert parallelism over a simulated link
// (cpu_link_gigabytes_per_second), whose trace must show each turn-taking pair's exchanges in
// flight while the other half computes, and as many exchanges per compute action as the cost
// model counts (schedule_costs: its exchanges_f / exchanges_b), OUTSIDE actions included.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/mesh/mesh.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"

namespace carousel {
namespace {

namespace sch = schedule;

struct Slice {
  double start, end;
};

// The profiled step's slices of one rank by (row, name without the part number).
using Rows = std::map<std::pair<std::string, std::string>, std::vector<Slice>>;

Rows rows_of(const nlohmann::json& trace, int pid) {
  Rows rows;
  for (const auto& e : trace) {
    if (e["ph"] != "X" || e["pid"] != pid) continue;
    std::string name = e["name"];
    name = name.substr(0, name.find(' '));  // "0F3& (2)" -> "0F3&"
    const double ts = e["ts"], dur = e["dur"];
    rows[{e["cat"], name}].push_back({ts, ts + dur});
  }
  return rows;
}

bool overlap(const std::vector<Slice>& a, const std::vector<Slice>& b) {
  for (const Slice& x : a)
    for (const Slice& y : b)
      if (x.start < y.end && y.start < x.end) return true;
  return false;
}

// A 4-layer MoE model (4 experts, top-2) on `mesh`, 2 steps, the second profiled; its run
// directory emptied first.
Config profiled_moe_run(const std::string& name, const std::vector<std::string>& mesh) {
  init_logging({.rank = 0, .level = "warn", .file_dir = {}});
  std::vector<std::string> keys = {"max_target_length=16",
                                   "dataset_type=text",
                                   "dataset_path=" CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt",
                                   "base_output_directory=/tmp/carousel_overlap_tests",
                                   "run_name=" + name,
                                   "steps=2",
                                   "enable_checkpointing=false",
                                   "base_emb_dim=32",
                                   "base_num_query_heads=2",
                                   "base_num_kv_heads=2",
                                   "base_mlp_dim=64",
                                   "base_num_decoder_layers=4",
                                   "num_experts=4",
                                   "num_experts_per_tok=2",
                                   "profiler_steps=1",
                                   "skip_first_n_steps_for_profiler=1"};
  keys.insert(keys.end(), mesh.begin(), mesh.end());
  Config c = load_config("", keys).config;
  std::filesystem::remove_all(c.run_directory());
  return c;
}

TEST(ExpertOverlap, PairsExchangeWhileTheirOtherHalfComputes) {
  // S = 1 with dualpipev's two chunks on one rank, E = 2: two ranks. Each exchange moves a few KB,
  // so at 1 MB/s it is in flight for milliseconds: far longer than the hand-over to the other
  // half, whatever the machine's load.
  const Config c =
      profiled_moe_run("overlap", {"ici_expert_parallelism=2", "pipeline_schedule=dualpipev",
                                   "num_pipeline_repeats=2", "num_layers_per_pipeline_stage=2",
                                   "per_device_batch_size=4", "num_pipeline_microbatches=4",
                                   "cpu_link_gigabytes_per_second=0.001"});
  const TrainResult r = train(c);
  ASSERT_FALSE(r.trace_path.empty());
  const auto trace = nlohmann::json::parse(std::ifstream(r.trace_path))["traceEvents"];
  const sch::Program program = lowered_program(c);
  const sch::Costs costs = schedule_costs(c);
  ASSERT_EQ(program.ranks.size(), 1u);
  const auto& list = program.ranks[0];
  for (const int rank : {0, 1}) {  // the two expert ranks run the same program
    const Rows rows = rows_of(trace, rank);
    const auto slices = [&](const std::string& row, const sch::Action& a) {
      const auto it = rows.find({row, sch::to_string(a)});
      return it == rows.end() ? std::vector<Slice>{} : it->second;
    };
    int pairs = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const sch::Action& a = list[i];
      if (!a.is_compute() || i == 0 || !list[i - 1].is_exchange()) continue;
      // As many exchanges as the cost model counts (2 per MoE layer forward, 4 backward with
      // remat=full), each between two parts of the action.
      const std::vector<Slice> exchanges = slices("expert", list[i - 1]);
      EXPECT_EQ(int(exchanges.size()), costs.exchanges(a)) << sch::to_string(a);
      EXPECT_EQ(slices("compute", a).size(), exchanges.size() + 1) << sch::to_string(a);
      if (!sch::takes_turns(list, i)) continue;
      ++pairs;
      const std::size_t j = sch::overlap_partner(list, i);
      // The F's exchanges are in flight during the B's parts, and the B's during the F's.
      EXPECT_TRUE(overlap(exchanges, slices("compute", list[j])))
          << "rank " << rank << ": " << sch::to_string(a) << "'s exchanges never overlap "
          << sch::to_string(list[j]);
      EXPECT_TRUE(overlap(slices("expert", list[j - 1]), slices("compute", a)))
          << "rank " << rank << ": " << sch::to_string(list[j]) << "'s exchanges never overlap "
          << sch::to_string(a);
    }
    EXPECT_GT(pairs, 0) << "dualpipev S=1 M=4 has overlapped pairs";
  }
}

// The layers after the pipeline (pipeline_parallel_layers) with their experts split over 2
// ranks: every OUTSIDE action runs its MoE layers' exchanges, forward and backward (4 per layer:
// nothing recomputed), as many as the cost model counts, each between two parts.
TEST(ExpertOverlap, OutsideActionsRunTheExchangesTheCostModelCounts) {
  const Config c =
      profiled_moe_run("outside", {"ici_expert_parallelism=2", "ici_pipeline_parallelism=2",
                                   "pipeline_schedule=gpipe", "pipeline_parallel_layers=2",
                                   "per_device_batch_size=2", "num_pipeline_microbatches=2"});
  const TrainResult r = train(c);
  ASSERT_FALSE(r.trace_path.empty());
  const auto trace = nlohmann::json::parse(std::ifstream(r.trace_path))["traceEvents"];
  const sch::Program program = lowered_program(c);
  const sch::Costs costs = schedule_costs(c);
  const MeshShape mesh = MeshShape::of(c);
  int outside = 0;
  for (int rank = 0; rank < mesh.ranks(); ++rank) {
    const Rows rows = rows_of(trace, rank);
    const auto& list = program.ranks[std::size_t(RankPlace::of(rank, mesh).stage_rank)];
    for (std::size_t i = 1; i < list.size(); ++i) {
      if (list[i].kind != sch::Kind::OUTSIDE) continue;
      ASSERT_TRUE(list[i - 1].is_exchange()) << sch::to_string(list[i]);
      const auto exchanges = rows.find({"expert", sch::to_string(list[i - 1])});
      const auto parts = rows.find({"compute", sch::to_string(list[i])});
      ASSERT_TRUE(exchanges != rows.end() && parts != rows.end()) << sch::to_string(list[i]);
      EXPECT_EQ(costs.exchanges(list[i]), 8);  // 2 MoE layers outside, 4 exchanges each
      EXPECT_EQ(int(exchanges->second.size()), costs.exchanges(list[i]));
      EXPECT_EQ(parts->second.size(), exchanges->second.size() + 1);
      ++outside;
    }
  }
  EXPECT_EQ(outside, 4);  // 2 microbatches x 2 expert ranks
}

}  // namespace
}  // namespace carousel
