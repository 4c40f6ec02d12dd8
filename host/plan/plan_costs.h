// plan_costs.h — what a candidate's schedule actions cost, in seconds per layer (the config's
// schedule_cost_* keys the simulator reads): from the FLOP model (the device's peak x an
// efficiency, and the link bandwidths), or from a schedule_costs.yml a profiled run measured,
// scaled to the candidate.
//
// A costs file holds per-layer times for one model on one device kind, measured at one
// microbatch size and FSDP degree, and says what they were measured on (its measured_* keys,
// written beside the costs by the profiled run). The planner uses it only for a workload with
// the same layer shape, vocabulary, sequence length, dtype and remat policy (anything else is
// one error listing the differences), and scales it to each candidate (docs/performance.md
// "Calibrated costs in the planner"):
//   F, B, W per layer    x rows / measured rows (sequences per microbatch and device: the same T,
//                        so tokens; time is taken as linear in the tokens of a microbatch)
//   p2p hand-off         x rows / measured rows (an activation's bytes), x intra / inter
//                        bandwidth when a hop of the candidate crosses nodes
//   gather, scatter      x ((F-1)/F) / ((F0-1)/F0) (a ring's share), x intra / inter bandwidth
//                        when the candidate's FSDP group crosses nodes (the measuring run's ranks
//                        shared one node)
//   head (in layers)     as measured: a ratio of two times that both scale with the tokens
// What the measuring run could not see comes from the FLOP model: the gathers and scatters when
// it had F = 1, the hand-off when it had one stage, the head when it was not measured. Layer
// counts scale as with any costs: each stage costs its layers times the per-layer numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "host/config/config.h"
#include "host/plan/plan_memory.h"

namespace carousel::plan {

// A schedule_costs.yml and what it was measured on.
struct MeasuredCosts {
  std::string path;
  // Seconds per layer (the file holds microseconds); p2p per hand-off; head in layers.
  double f = 0, b = 0, w = 0, p2p = 0, all_gather = 0, reduce_scatter = 0, head = 0;
  bool head_measured = false;  // false: the file's head is a configured value, not a measure
  // The measuring run: its model, max_target_length, dtype, remat_policy, device, S and F.
  Config on;
  std::int64_t microbatch_sequences = 0;  // per device: B / (M x F x D)
};

// The machines. Bandwidths are per device and per direction.
struct Cluster {
  int devices = 1;
  int devices_per_node = 1;
  double memory_bytes = 0;  // per device
  double peak_flops = 0;    // per device, dense, in the compute dtype
  double intra_node_bytes_per_second = 0;
  double inter_node_bytes_per_second = 0;
  double compute_efficiency = 0.6;  // fraction of the peak a layer's forward/backward reach
  // The latency floor of the FLOP model (0 here: the pure throughput model; `carousel plan`
  // sets 5 us and 10 us): each kernel a layer launches costs at least kernel_seconds (a layer's
  // forward launches kForwardKernels, its backward twice as many, plus a forward's with full
  // remat, W alone its weight-gradient GEMMs), and each p2p message or collective
  // message_seconds on top of its bytes. Tiny models are latency-bound, not FLOP-bound.
  double kernel_seconds = 0;
  double message_seconds = 0;
  // Costs measured on this device kind (replace the FLOP model where they measured something).
  std::optional<MeasuredCosts> measured;
};

// Reads a costs file: the schedule_cost_* keys through the config loader (as `carousel
// schedule` reads them), every one of them and the measured_* keys required. Throws
// carousel::Error naming the file and what is missing or invalid.
MeasuredCosts read_measured_costs(const std::string& path);

// Throws one carousel::Error listing every way the workload (model, max_target_length, dtype,
// remat_policy) differs from what `m` was measured on, and what would be valid.
void check_measured_on(const MeasuredCosts& m, const ModelConfig& model, const std::string& dtype,
                       const std::string& remat_policy);

// The measured_* keys of a profiled run of `cfg` (YAML lines, appended to its
// schedule_costs.yml); `head_measured`: whether the run measured the head (S > 1).
std::string measured_on_yaml(const Config& cfg, bool head_measured);

// Forward FLOPs of one layer for one token: the matmuls and causal attention's QK^T and AV.
double layer_forward_flops_per_token(const ModelConfig& m);

// Model FLOPs of one training step per token, the convention of the planner's MFU and
// tflops_per_device (kFlopsConvention): 6 x the matmul parameters a token passes through (every
// layer's, an MoE layer's k active routed experts, the lm_head, not the embedding lookup) plus
// attention's QK^T and AV, forward and backward, causal: 6 x layers x seq_len x emb_dim (half of
// the 12 L S H hd a full attention costs); recomputation not counted. Equals the trainer's
// train_flops_per_token for the Llama block, and counts GPT's two MLP matrices for kGptBlock.
double model_flops_per_token(const ModelConfig& m);
inline constexpr const char* kFlopsConvention =
    "6 x matmul parameters per token (layers, active experts, lm_head; not the embedding lookup) "
    "+ 6 x layers x seq_len x emb_dim (causal attention: half of 12 L S H hd); recomputation not "
    "counted";

// What a layer's forward waits for its tensor, context and expert groups' collectives (seconds,
// bytes over the group's link plus each collective's latency floor), which the planner adds to
// schedule_cost_f, and backward_factor times to schedule_cost_b (2 when the backward recomputes
// the forward's collectives).
struct LayerWaits {
  double tensor = 0, context = 0, expert = 0;
  double backward_factor = 1;
  double total() const { return tensor + context + expert; }
};
LayerWaits layer_waits(const Config& cfg, const Cluster& cluster, const MeshLinks& links);

// The head's cost in layers, charged to the last stage: the measured one, or the FLOP model's
// (the lm_head's 6 V E FLOPs per token over a layer's forward + backward). The same for every
// candidate of a workload (a ratio of two costs that both scale with the tokens).
double head_layers(const ModelConfig& m, const std::string& remat_policy, const Cluster& cluster);

// Sets cfg's schedule_cost_* keys (seconds per layer) for its mesh on `cluster`: the FLOP model
// (docs/performance.md#the-cost-model), or cluster.measured scaled as the header says.
void set_planner_costs(Config& cfg, const Cluster& cluster, const MeshLinks& links);

}  // namespace carousel::plan
