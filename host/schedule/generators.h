// generators.h — schedules as pure functions (layout, knobs) -> compute-only Program.
//
//   circular          MaxText's circular pipeline: rank s runs microbatch m of repeat r in
//                     breadth-first order (r = 0..R-1, m = 0..M-1), the backward in exactly the
//                     reverse order (reverse-mode autodiff of the iteration loop). R = 1 is GPipe.
//   gpipe             all forwards, then all backwards in reverse order (= circular with R = 1).
//   1f1b              PipeDream-flush: S-s-1 warmup forwards, then one forward / one backward.
//   interleaved_1f1b  Megatron's virtual stages (R chunks per rank): microbatches in groups of
//                     g (g = S depth-first ... g = M breadth-first), warmup 2(S-s-1) + (R-1)g.
//   zb_h1             Zero Bubble H1: 1F1B with the backward split into I (input gradient) and
//                     W (weight gradient); W deferred into the cooldown, same memory as 1F1B.
#pragma once

#include <string>

#include "host/schedule/ir.h"

namespace carousel::schedule {

struct ScheduleSpec {
  std::string kind = "circular";  // circular | gpipe | 1f1b | interleaved_1f1b | zb_h1
  Layout layout;
  int group_size = 0;  // interleaved_1f1b microbatch group g; 0 = S (Megatron's default)
};

// Throws carousel::Error naming the constraint when the schedule cannot run the layout.
Program generate(const ScheduleSpec& spec);

}  // namespace carousel::schedule
