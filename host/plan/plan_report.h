// plan_report.h — what `carousel plan` prints: the candidates as a table or JSON, the details of
// the best (memory by part, bytes by link, the keys), --explain's breakdown of its step time
// and memory, the launch line, and a long search's progress line.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "host/plan/plan_explain.h"
#include "host/plan/plan_search.h"

namespace carousel::plan {

// The stage layout's column: L for even stages; uneven, the counts in stage order, a run of n
// stages of k layers written nxk ("2x8,9,7" = 8, 8, 9, 7).
std::string layers_column(const Candidate& c);

// One candidate: its figures (step_seconds, tokens_per_second, tflops_per_device, mfu,
// peak_memory_bytes, fits, memory_over_bytes, ...), its full layout (every pinnable field), its
// memory and bytes by part, its keys; with `explain`, the step's breakdown.
nlohmann::json candidate_json(const Prediction& p, const Workload& w,
                              const StepBreakdown* explain = nullptr);

void print_table(const SearchResult& r, const Cluster& cluster);
// The best candidate's details: memory by part, bytes per step by link, the step's parts, keys.
void print_best(const Prediction& p);
// --explain: the step's time and the device's memory, part by part, with what is not modelled.
void print_explain(const Prediction& p, const StepBreakdown& b, const Workload& w);
// The command that runs `p`; a model carousel cannot train (the GPT-style MLP), or a layout that
// does not fit, gets a note instead.
void print_launch(const Prediction& p, const Cluster& cluster, const Workload& w);

// One line for stderr: elapsed time, candidates listed, simulated, pruned, the best so far.
std::string progress_line(const SearchProgress& p);

}  // namespace carousel::plan
