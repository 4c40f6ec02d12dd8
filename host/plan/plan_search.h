// plan_search.h — the search of `carousel plan`: every mesh S x F x D of the cluster's devices,
// every L (so R), schedule, M and FSDP weight mode the registry and the batch allow, ranked by
// predicted step time among the candidates that fit in device memory: one row per mesh (its
// best schedule, M, L and weight mode), times compared in steps of 0.2% (within one, fewer bytes
// sent wins, then less memory).
//
// Pruning keeps it to seconds for 512 devices: a candidate whose parameter memory alone exceeds
// the device is refused without simulating, and the rest are simulated in order of a lower bound
// on their step time (compute on the busiest rank plus exposed reductions) until that bound
// exceeds the k-th best simulated time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/plan/plan_model.h"

namespace carousel::plan {

struct SearchOptions {
  int top = 5;                         // candidates to return
  std::vector<std::string> schedules;  // empty: every registered schedule
  std::int64_t max_microbatches = 0;   // 0: up to B / (F x D), one sequence per microbatch part
};

struct SearchResult {
  std::vector<Prediction> best;     // fitting candidates, fastest first (ties: less memory)
  std::int64_t candidates = 0;      // valid configurations considered
  std::int64_t refused_memory = 0;  // refused because they do not fit (before or after simulation)
  std::int64_t refused_simulated = 0;  // of those, refused after simulating (activations too)
  std::int64_t simulated = 0;
  std::int64_t pruned = 0;  // skipped: their time bound could not beat the k-th best
  // The smallest memory any candidate needs (its parameter part when none was simulated), for
  // the error when nothing fits.
  std::int64_t smallest_memory = 0;
  Candidate smallest_candidate;
};

// Throws carousel::Error when the inputs are inconsistent (devices not a multiple of
// devices_per_node, a batch that no mesh splits, an unknown schedule name).
SearchResult search(const Workload& w, const Cluster& cluster, const SearchOptions& options);

}  // namespace carousel::plan
