// stage_layers.h — which decoder layers each virtual stage runs: the one owner of the
// layer <-> stage map.
//
// Virtual stage v runs the consecutive layers [first(v), first(v) + count(v)). The even split
// (every stage L layers, stage v = layers [v L, (v + 1) L)) is the default; uneven counts give
// Megatron-style layouts where the first and the last stage hold fewer layers because they also
// run the embedding and the head. Everything that needs "which stage holds layer i" or "how big
// is stage v" asks this map (the parameter layout, the cost model, `carousel schedule`); nothing
// computes layer / L itself. Plain integers: the schedule room knows nothing of tensors.
#pragma once

#include <string>
#include <vector>

namespace carousel::schedule {

class StageLayers {
 public:
  // Every one of `stages` virtual stages runs `layers_per_stage` layers.
  static StageLayers even(int stages, int layers_per_stage);
  // counts[v] layers in virtual stage v, in model order; every count at least 1 (callers
  // validate user input first: a count below 1 here is an internal error).
  explicit StageLayers(std::vector<int> counts);

  int stages() const { return int(counts_.size()); }
  int layers() const { return first_.back(); }  // the decoder layers of the whole model
  int count(int stage) const;                   // layers of virtual stage `stage`
  int first(int stage) const;                   // its first layer
  int stage_of(int layer) const;                // the virtual stage that runs `layer`
  int max_count() const;                        // the largest stage (weight slots fit it)
  bool is_even() const;                         // every stage the same size
  const std::vector<int>& counts() const { return counts_; }

  // "[1, 3]": the counts as the pipeline_stage_layers key writes them.
  std::string to_string() const;

 private:
  std::vector<int> counts_;
  std::vector<int> first_;  // [stages + 1]: first_[v] = layers before stage v
};

}  // namespace carousel::schedule
