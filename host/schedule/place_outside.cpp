// place_outside.cpp — the OUTSIDE actions of the layers after the pipeline (ir.h,
// Layout::outside) in a compute program whose ranks run every forward before any backward.
#include <algorithm>

#include "compute/error.h"
#include "host/schedule/passes.h"

namespace carousel::schedule {

Program place_outside(Program p) {
  Layout& l = p.layout;
  l.outside = true;
  const int V = l.stages();
  // The order in which the last stage's backwards need the OUTSIDE actions' gradients (gpipe
  // and circular: the last microbatch first): each rank runs its OUTSIDE actions in that order,
  // so the first backward waits for one of them, not for all.
  std::vector<int> needed;
  for (const Action& a : p.ranks[std::size_t(l.rank_of(V - 1))]) {
    if ((a.kind == Kind::B || a.kind == Kind::I) && a.stage == V - 1) needed.push_back(a.index);
  }
  CAROUSEL_ASSERT(int(needed.size()) == l.microbatches,
                  "schedule: the last stage has {} backwards for {} microbatches", needed.size(),
                  l.microbatches);
  for (int r = 0; r < l.ranks; ++r) {
    std::vector<Action>& list = p.ranks[std::size_t(r)];
    // After the rank's last forward: the pipeline's first backward needs the OUTSIDE actions'
    // gradients, and every rank's forwards are done (or on their way) by then.
    const auto first_backward =
        std::find_if(list.begin(), list.end(), [](const Action& a) { return a.kind != Kind::F; });
    CAROUSEL_CHECK(
        std::all_of(first_backward, list.end(), [](const Action& a) { return a.kind != Kind::F; }),
        "schedule: rank {} runs a forward after a backward, so the layers outside the "
        "pipeline (pipeline_parallel_layers) have no place between the two",
        r);
    std::vector<Action> outside;
    for (const int m : needed)
      if (l.rank_of(V, m) == r) outside.push_back({Kind::OUTSIDE, V, m});
    list.insert(first_backward, outside.begin(), outside.end());
  }
  return p;
}

}  // namespace carousel::schedule
