// export.h — pictures of a simulated schedule: a Chrome trace (chrome://tracing, Perfetto) and
// an SVG timeline, one row per rank.
#pragma once

#include <string>

#include "host/schedule/simulate.h"

namespace carousel::schedule {

// Chrome trace event JSON: one process per rank, compute on thread 0 and collectives on thread 1;
// `time_unit_us` scales the simulator's time unit to microseconds.
std::string chrome_trace_json(const SimResult& sim, int ranks, double time_unit_us);

// A self-contained SVG: one row per rank, F blue, B/I green, W olive, collectives grey; the
// microbatch number in each box; a black border around each overlapped F&B pair.
std::string timeline_svg(const SimResult& sim, int ranks, const std::string& title);

}  // namespace carousel::schedule
