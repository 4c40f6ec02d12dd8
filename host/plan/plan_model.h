// plan_model.h — one candidate mesh of `carousel plan`: the run config it stands for, and its
// predicted step time, bubble, MFU, memory per device and bytes per link.
//
// Time comes from the schedule simulator (host/schedule/simulate.h) with per-layer costs in
// seconds written into the config's schedule_cost_* keys (plan_costs.h: the FLOP model or a
// measured costs file), so `carousel schedule` with the same keys shows the very timeline the
// planner ranked. docs/performance.md#planning-a-mesh states the cost model and its
// assumptions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/config/config.h"
#include "host/plan/plan_costs.h"
#include "host/plan/plan_memory.h"

namespace carousel::plan {

// What is trained: the model (max_target_length is the sequence length), the global batch in
// sequences, the compute dtype and the remat policy.
struct Workload {
  ModelConfig model;
  std::int64_t global_batch = 1;
  std::string dtype = "bfloat16";
  std::string remat_policy = "full";
  // Config keys that select the model (e.g. "model_name=llama2-7b max_target_length=4096"):
  // the start of every candidate's printed keys, so they run as they are.
  std::string model_keys;
};

// One point of the search space.
struct Candidate {
  int stages = 1, fsdp = 1, data = 1;                       // S, F, D
  int microbatches = 1, repeats = 1, layers_per_stage = 1;  // M, R, L (L: even stages only)
  // Uneven stages (pipeline_stage_layers): the layers of each of the S x R virtual stages;
  // empty = every stage L layers.
  std::vector<int> stage_layers{};
  std::string schedule = "1f1b";
  int weight_slots = 0;         // FSDP weight mode: 0 gather per use, 2 BSW, -1 once per step
  bool zero1 = false;           // shard_optimizer_over_data
  int tensor = 1, context = 1;  // T, C
  int expert = 1;  // E: expert ranks per data replica (MoE models; the mesh has D x E data ranks)
  // pipeline_parallel_layers: the stages split the first P layers, the rest run after the
  // pipeline on every stage rank; -1: every layer pipelined.
  int pipeline_layers = -1;
};

// The carousel config that runs `c` (validated: throws carousel::Error naming what is invalid).
Config candidate_config(const Workload& w, const Candidate& c);
// The `key=value` settings of that config that differ from the defaults of a run of the model.
std::string candidate_keys(const Config& cfg);

struct Prediction {
  Candidate candidate;
  double step_seconds = 0;
  double bubble = 0;  // the simulated idle fraction of the pipeline's compute
  double mfu = 0;     // tflops_per_device / the device's peak
  // Model FLOPs per second and device, in TFLOP/s: model_flops_per_token (plan_costs.h,
  // kFlopsConvention: 6 x matmul parameters + causal attention, recomputation not counted)
  // x tokens / step / devices.
  double tflops_per_device = 0;
  double tokens_per_second = 0;
  double pipeline_seconds = 0;  // the simulated schedule (what `carousel schedule` prints)
  double head_layers = 0;  // schedule_cost_head: the head's compute in layers, on the last stage
  double exposed_comm_seconds = 0;  // replica and extras reductions after the last backward
  // step_seconds = pipeline_seconds + exposed_comm_seconds
  MemoryBreakdown memory;  // the device holding the most
  int memory_stage_rank = 0;
  LinkBytes bytes;    // the device sending the most
  bool fits = false;  // memory.total() <= the device memory
  double device_memory_bytes = 0;  // the cluster's, which `fits` compares with
  // Bytes beyond the device's memory (negative: the headroom left).
  double memory_over_bytes() const { return double(memory.total()) - device_memory_bytes; }
  std::string keys;   // candidate_keys of its config, with the planner's costs
};

// The optimizer step's reductions that nothing overlaps (they run after the last backward), in
// seconds, for the bytes a device sends (optimizer_link_bytes): the replicas' gradient
// reduction (a reduce-scatter and an all-gather with ZeRO-1), the embedding and head over FSDP,
// and the gradient sums over stage ranks; each with its latency floor.
struct ExposedReductions {
  double data = 0, extras = 0, stage_sum = 0;
  double total() const { return data + extras + stage_sum; }
};
ExposedReductions exposed_reductions(const LinkBytes& bytes, const Cluster& cluster,
                                     const MeshLinks& links);

// A candidate with what both its step-time bound and its prediction need, built once: its
// config (validated, the planner's schedule_cost_* set) and where its groups sit on nodes.
struct CostedCandidate {
  Candidate candidate;
  Config cfg;
  MeshLinks links;
};
// `cfg` is candidate_config(w, c), which the caller has built already (the search refuses on
// memory before it costs anything).
// `links`: mesh_links of c's mesh, when the caller has them (the search reuses a mesh's).
CostedCandidate cost_candidate(const Cluster& cluster, const Candidate& c, Config cfg,
                               const MeshLinks* links = nullptr);

// A lower bound on the step time without simulating: the largest, over the pipeline ranks, of
// the rank's compute plus the time before it can start (the first microbatch's forward through
// the stages before its first), plus the exposed reductions (the search prunes with it).
double step_time_lower_bound(const CostedCandidate& c, const Cluster& cluster);

// What a device holds whatever the program does (plan_memory.h's state_memory and
// program_free_working_set) plus one weight slot of its largest stage with FSDP: a lower bound
// of device_memory's total, which the search refuses with before simulating. The largest over
// the stage ranks.
std::int64_t memory_lower_bound(const Config& cfg);

// Generates, lowers and simulates the candidate's program and fills every figure.
Prediction predict(const Workload& w, const Cluster& cluster, const CostedCandidate& c);
Prediction predict(const Workload& w, const Cluster& cluster, const Candidate& c);

}  // namespace carousel::plan
