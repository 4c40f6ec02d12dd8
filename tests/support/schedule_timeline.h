// schedule_timeline.h — a simulated timeline as text, for tests that compare it with a timeline
// worked out by hand: per rank, "action@start" of the compute actions in time order.
#pragma once

#include <string>
#include <vector>

#include "host/schedule/simulate.h"

namespace carousel::schedule {

inline std::vector<std::string> timeline_text(const SimResult& sim, int ranks) {
  std::vector<std::string> out(ranks);
  for (const auto& iv : sim.timeline) {
    if (!iv.action.is_compute()) continue;
    auto& line = out[iv.rank];
    if (!line.empty()) line += ' ';
    line += to_string(iv.action) + "@" + std::to_string(int(iv.start));
  }
  return out;
}

}  // namespace carousel::schedule
