// generators.h — schedules as pure functions (layout, knobs) -> compute-only Program: one
// ordered list of F / B (or I + W) actions per rank. Each schedule is one row of the registry
// (registry.h), which checks its constraints before calling its generator.
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
//   looped_bfs        PyTorch's ScheduleLoopedBFS: all microbatches of each local stage in turn,
//                     the backward over the local stages in reverse (= circular with d = 1).
//   interleaved_zb    interleaved_1f1b with B split into I and W; rank s defers each W by s
//                     backwards (ZB-H1's rule), PyTorch's ScheduleInterleavedZeroBubble order.
//   zbv               Zero Bubble V: two chunks per rank in V placement (Placement::V), I/W
//                     split; the generator sets the program's layout.placement.
//   dualpipev         DeepSeek's DualPipeV: zbv's placement, forward/backward pairs of different
//                     microbatches overlapped (Action::overlap) in the steady state, Ws deferred
//                     at the ends (generate_dualpipev.cpp).
#pragma once

#include <string>

#include "host/schedule/ir.h"

namespace carousel::schedule {

struct ScheduleSpec {
  std::string kind = "circular";  // a name in the registry (registry.h)
  Layout layout;
  int group_size = 0;     // interleaved_1f1b microbatch group g; 0 = chosen (group())
  int forward_delay = 1;  // MaxText's d: 2 with pipeline_delay_activation_forwarding (circular)

  // g after defaulting: the smallest divisor of M that is at least S — S itself when S divides
  // M (Megatron's default), else fewer, larger groups (PyTorch's interleaved schedules pick
  // M / max(1, M / S) and refuse when that does not divide M; this takes every M >= S). M < S
  // gives S, which the schedule's check refuses naming both.
  int group() const {
    if (group_size > 0) return group_size;
    for (int g = layout.ranks; g <= layout.microbatches; ++g) {
      if (layout.microbatches % g == 0) return g;
    }
    return layout.ranks;
  }
};

// Checks spec against the registry (unknown name, the schedule's constraints) and runs its
// generator; throws carousel::Error naming the constraint. Defined in registry.cpp.
Program generate(const ScheduleSpec& spec);

// The generators of the registry's rows. Each assumes its row's check has passed (call
// generate() unless you have checked the spec yourself).
Program generate_circular(const ScheduleSpec& spec);
Program generate_gpipe(const ScheduleSpec& spec);
Program generate_1f1b(const ScheduleSpec& spec);
Program generate_interleaved_1f1b(const ScheduleSpec& spec);
Program generate_zb_h1(const ScheduleSpec& spec);
Program generate_looped_bfs(const ScheduleSpec& spec);
Program generate_zbv(const ScheduleSpec& spec);
Program generate_interleaved_zb(const ScheduleSpec& spec);
Program generate_dualpipev(const ScheduleSpec& spec);

}  // namespace carousel::schedule
