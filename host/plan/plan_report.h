// plan_report.h — what `carousel plan` prints: the candidates as a table or JSON, the details of
// the best (memory by part, bytes by link, the keys), --explain's breakdown of its step time
// and memory, the launch line, and a long search's progress line.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
// The data keys of a carousel YAML config (carousel plan --config): the dataset_*, eval_*,
// tokenizer_path, steps, packing, eos_id and shuffling keys the file (or its base_config) sets,
// as key=value in table order. Throws carousel::Error naming the file when it does not load.
std::vector<std::string> launch_data_keys(const std::string& config_path);
// The command that runs `p`, with `data_keys` (launch_data_keys; nullptr: no --config) at its
// end; without dataset keys it says plainly that it trains on synthetic data and which keys to
// add. A model carousel cannot train (the GPT-style MLP), or a layout that does not fit, gets a
// note instead.
std::string launch_text(const Prediction& p, const Cluster& cluster, const Workload& w,
                        const std::vector<std::string>* data_keys);
void print_launch(const Prediction& p, const Cluster& cluster, const Workload& w,
                  const std::vector<std::string>* data_keys = nullptr);

// One line for stderr: elapsed time, candidates listed, simulated, pruned, the best so far.
std::string progress_line(const SearchProgress& p);

}  // namespace carousel::plan
