// profiler.h — profiler_steps: a measured trace of real steps, with the calibrated prediction.
//
// The steps skip_first_n_steps_for_profiler .. + profiler_steps - 1 of this run (counted from
// its start step) record every action's timing into their rank's StepTrace
// (host/report/step_trace.h). After the run, finish() writes trace.json (Chrome / Perfetto: the
// measured ranks and the schedule predicted from costs calibrated on these very steps) and
// schedule_costs.yml (the measured costs, for `carousel schedule` and `carousel plan`), and
// puts the measured and predicted bubble and span into the result.
#pragma once

#include <cstdint>
#include <vector>

#include "host/config/config.h"
#include "host/mesh/mesh.h"
#include "host/report/step_trace.h"
#include "host/run/train_result.h"
#include "host/schedule/ir.h"

namespace carousel {

class Profiler {
 public:
  Profiler(const Config& cfg, const MeshShape& mesh, std::int64_t start_step);

  // Where rank `rank` records 0-based `step`: its trace when the step is profiled, else null.
  StepTrace* trace(int rank, std::int64_t step);

  // After the ranks ended: the trace and costs files of this process's ranks (trace-rank<r>.json
  // and schedule_costs-rank<r>.yml for a process of an mpirun job), and their figures.
  void finish(const schedule::Program& program, const Communicator* process_world,
              TrainResult& result) const;

 private:
  const Config& cfg_;
  std::int64_t first_, end_;       // profiled steps [first_, end_)
  std::vector<StepTrace> traces_;  // per rank of the mesh
};

}  // namespace carousel
