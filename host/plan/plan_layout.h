// plan_layout.h — which layouts `carousel plan` considers: the axes and knobs a user pins
// (--stages, --fsdp, --data, --microbatches, --repeats, --weights, --stage-layers,
// --pipeline-layers; --tensor, --context, --expert and --schedule in SearchOptions), the check
// that a pinned layout can exist on the cluster (one error naming what does not fit and the
// nearest valid values), and the enumeration of every candidate the pins, the model and the
// cluster allow, for any device count (divisors by trial up to the square root).
//
// A mesh is S x F x D x E x T x C = devices: S pipeline stages, F FSDP ranks, D data replicas of
// E expert ranks each, T tensor and C context ranks (T and C within a node).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "host/plan/plan_model.h"

namespace carousel::plan {

struct SearchOptions;

// What a user fixed; 0 or empty: searched.
struct LayoutPins {
  std::int64_t stages = 0, fsdp = 0, data = 0;  // S, F, D (data replicas, not counting E)
  std::int64_t microbatches = 0, repeats = 0;   // M, R
  std::string weights{};                        // FSDP weight mode: per_use | bsw | once
  std::vector<int> stage_layers{};              // uneven stages, S x R counts
  bool even_stages = false;                     // only even stages (no uneven split searched)
  std::int64_t pipeline_layers = 0;  // pipeline_parallel_layers P (0: every layer pipelined)
  bool any() const;
};

// Every divisor of n, ascending (n >= 1).
std::vector<std::int64_t> divisors(std::int64_t n);
// The divisors of n nearest to v: the largest below and the smallest above (one when v divides
// n), for an error's "nearest valid values".
std::vector<std::int64_t> nearest_divisors(std::int64_t n, std::int64_t v);

// FSDP weight modes by name, and the Candidate::weight_slots each stands for: per_use = 0
// (gather before every use), bsw = 2 (the Buffer Sliding Window: pipeline_fsdp_ag_per_repeat),
// once = -1 (one gather per stage per step: pipeline_fsdp_ag_once). Throws carousel::Error
// naming the flag and the valid names.
int weight_slots_of(const std::string& weights);
// "per_use", "bsw", "once"; "-" without FSDP (F = 1).
std::string weight_mode_name(const Candidate& c);

// Throws one carousel::Error when the pins cannot make a layout on `cluster`: pinned sizes whose
// product does not divide the devices (or, all pinned, differs from them), a global batch the
// pinned F x D x E (x M) does not split, layers the pinned S (x R) does not divide, stage layers
// that do not add up, a weight mode without FSDP. Each names what does not fit and the nearest
// valid values.
void check_layout_pins(const Workload& w, const Cluster& cluster, const SearchOptions& options);

// Calls visit(candidate, links) for every candidate of the cluster that the pins, the model
// (T dividing heads and columns, C cutting the sequence, E the experts) and the batch (F x D x E
// dividing it, M every divisor of what is left) allow, with `links` where its mesh's groups sit
// on nodes. Candidates are not validated as configs (candidate_config does). Returns whether
// some mesh split the batch.
bool for_each_layout(const Workload& w, const Cluster& cluster, const SearchOptions& options,
                     const std::function<void(const Candidate&, const MeshLinks&)>& visit);

}  // namespace carousel::plan
