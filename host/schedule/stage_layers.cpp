// stage_layers.cpp — the layer <-> virtual stage map (stage_layers.h).
#include "host/schedule/stage_layers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "compute/error.h"

namespace carousel::schedule {

StageLayers StageLayers::even(int stages, int layers_per_stage) {
  return StageLayers(std::vector<int>(std::size_t(std::max(stages, 0)), layers_per_stage));
}

StageLayers::StageLayers(std::vector<int> counts) : counts_(std::move(counts)) {
  CAROUSEL_ASSERT(!counts_.empty(), "a pipeline has at least one virtual stage");
  first_.assign(1, 0);
  for (const int c : counts_) {
    CAROUSEL_ASSERT(c >= 1, "every virtual stage runs at least one layer, got {}", c);
    first_.push_back(first_.back() + c);
  }
}

int StageLayers::count(int stage) const {
  CAROUSEL_ASSERT(stage >= 0 && stage < stages(), "virtual stage {} of {}", stage, stages());
  return counts_[std::size_t(stage)];
}

int StageLayers::first(int stage) const {
  CAROUSEL_ASSERT(stage >= 0 && stage < stages(), "virtual stage {} of {}", stage, stages());
  return first_[std::size_t(stage)];
}

int StageLayers::stage_of(int layer) const {
  CAROUSEL_ASSERT(layer >= 0 && layer < layers(), "layer {} of {}", layer, layers());
  // The last stage whose first layer is <= layer.
  return int(std::upper_bound(first_.begin(), first_.end(), layer) - first_.begin()) - 1;
}

int StageLayers::max_count() const { return *std::max_element(counts_.begin(), counts_.end()); }

bool StageLayers::is_even() const {
  return std::all_of(counts_.begin(), counts_.end(), [&](int c) { return c == counts_[0]; });
}

std::string StageLayers::to_string() const { return fmt::format("[{}]", fmt::join(counts_, ", ")); }

}  // namespace carousel::schedule
