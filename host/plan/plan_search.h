// plan_search.h — the search of `carousel plan`: every mesh S x F x D x T x C of the cluster's
// devices (any device count; T and C within a node), every stage layout (even: L, so R; uneven:
// R and the split balancing the head), schedule, M and FSDP weight mode the registry and the
// batch allow, ranked by predicted step time among the candidates that fit in device memory: one
// row per mesh (its best schedule, M, layout and weight mode), times compared in steps of 0.2%
// (within one, fewer bytes sent wins, then less memory). What the user pins (SearchOptions'
// degrees and LayoutPins, plan_layout.h) is searched at that value only; everything pinned is
// exactly one layout, evaluated and, with report_unfit, reported even when it does not fit.
// A long search reports its progress (SearchOptions::progress).
//
// Uneven stages: for S > 1 and every R dividing the layers N with S x R <= N, the split of N
// layers over the S x R virtual stages that minimises the largest stage time, the last stage
// costing its layers plus the head (balanced_stage_layers), when it is not the even split. With
// S not dividing N it is the only layout of S stages.
//
// Pruning keeps it to seconds (under half a minute for 512 devices with T and C searched,
// docs/performance.md): a candidate whose state and program-free working set exceed the device
// is refused without simulating (memory_lower_bound), and the rest are simulated in order of a
// lower bound on their step time (compute on the busiest rank, the pipeline fill before it
// and drain after it, plus exposed reductions) until
// that bound exceeds the k-th best simulated time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "host/plan/plan_layout.h"
#include "host/plan/plan_model.h"

namespace carousel::plan {

// Where a long search stands, for its progress line (SearchOptions::progress).
struct SearchProgress {
  double elapsed_seconds = 0;
  bool enumerating = false;        // still listing the candidates (counts so far)
  std::int64_t candidates = 0;     // valid configurations considered
  std::int64_t refused_memory = 0;
  std::int64_t simulated = 0, pruned = 0;
  const Prediction* best = nullptr;  // the fastest that fits so far; nullptr: none yet
};

struct SearchOptions {
  int top = 5;                         // candidates to return
  std::vector<std::string> schedules;  // empty: every registered schedule
  std::int64_t max_microbatches = 0;   // 0: up to B / (F x D), one sequence per microbatch part
  // Tensor and context degrees: 0 searches every degree within a node that the model allows; a
  // number fixes it (1: none).
  std::int64_t tensor = 0, context = 0;
  // Expert ranks of an MoE model (carved from the data ranks): 0 searches every E dividing the
  // experts and the data ranks; a number fixes it (1: none).
  std::int64_t expert = 0;
  // The memory the search may use, in bytes; 0: this process's address-space and data-segment
  // limits (ulimit -v / -d), none when unlimited. Tests give one.
  double memory_limit_bytes = 0;
  // Pinned stages, FSDP, data, microbatches, repeats, weight mode, stage layers and pipelined
  // layers (plan_layout.h); `schedules` with one name pins the schedule. Everything pinned: the
  // search evaluates exactly that layout.
  LayoutPins pins{};
  // When no candidate fits: `best` holds the fastest that do not (fits false, by how much in
  // Prediction::memory_over_bytes) instead of nothing, the candidates refused before simulating
  // simulated too. For evaluating a given layout: it is reported, not refused.
  bool report_unfit = false;
  // Called at most every progress_seconds while the search runs (not at all when it is done
  // sooner): candidates enumerated, simulated and pruned, the best so far.
  std::function<void(const SearchProgress&)> progress{};
  double progress_seconds = 3;
  // Polled before each candidate is listed and before each is simulated: true stops the search,
  // which returns the best simulated so far with SearchResult::interrupted (Ctrl-C in carousel
  // plan; tests stop it after a number of polls).
  std::function<bool()> stop{};
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
  // Why the search found no valid candidate (for its error): whether any mesh split the batch,
  // and the first refusal of a candidate's config that did.
  bool batch_split = false;
  std::string first_refusal;
  bool unfit = false;  // `best` holds candidates that do not fit (report_unfit)
  // SearchOptions::stop stopped it: `best` is the best of what was simulated until then (none
  // when it stopped while listing), the counts are those reached.
  bool interrupted = false;
};

// The address space the search needs (its estimate: the process at start-up, `candidates` kept
// and one simulated schedule of `schedule_units` = S x M x R), in bytes.
double search_memory_bytes(std::size_t candidates, std::int64_t schedule_units);

// `layers` split over `stages` virtual stages (each at least 1) to minimise the largest stage
// time, stage time = its layers, plus `head` (in layers) on the last: the last stage gets
// fewer layers the more the head costs, the others share the rest evenly, the extra layers of
// an uneven share going to the stages just before the last (the first stage, which stashes
// the most activations in 1F1B-like schedules, keeps the smaller share). Of splits equally good,
// the one whose last stage is largest.
std::vector<int> balanced_stage_layers(int layers, int stages, double head);

// Throws carousel::Error when the inputs are inconsistent (devices not a multiple of
// devices_per_node, a fixed tensor, context or expert degree the model or cluster cannot take, a
// pinned layout that cannot exist (check_layout_pins), a batch that no mesh splits, an unknown
// schedule name), and when its own memory would pass the
// address-space or data-segment limit (ulimit -v / -d): its candidates once enumerated, and each
// schedule before it is simulated, are estimated against the limit as `carousel train` estimates
// a run's (host/run/run_setup.cpp).
SearchResult search(const Workload& w, const Cluster& cluster, const SearchOptions& options);

}  // namespace carousel::plan
