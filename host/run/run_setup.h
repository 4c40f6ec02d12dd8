// run_setup.h — what every process of a run decides before its ranks start, and the ranks'
// agreement on it.
//
// set_up_run() checks the mesh against the config (and the mpirun job), lowers the schedule
// (validated and deadlock-free, host/config/schedule_config.h), chooses how the ranks talk
// (host/mesh/mesh.h; under mpirun the processes agree on it first), opens the tokenizer, the
// training data and the eval data once for the ranks of this process, and logs the plan.
#pragma once

#include <memory>
#include <optional>

#include "collectives/communicator.h"
#include "compute/backend.h"
#include "host/config/config.h"
#include "host/data/data.h"
#include "host/mesh/mesh.h"
#include "host/schedule/ir.h"

namespace carousel {

struct RunSetup {
  MeshShape mesh;
  schedule::Program program;  // lowered: every rank's instructions
  TransportChoice transport;
  std::optional<TokenizerInfo> tokenizer;  // tokenizer_path's, carried into checkpoints
  std::unique_ptr<DataLoader> data;        // reading is const: shared by the process's ranks
  std::unique_ptr<DataLoader> eval_data;   // eval_interval > 0: the held-out data, else null
  std::int64_t eval_batches = 0;           // batches per evaluation (eval_steps, or the split)
};

// process_world: nullptr when the ranks are threads of this process; else this process's place
// in the mpirun job, whose size must be the mesh's rank count.
RunSetup set_up_run(const Config& cfg, Communicator* process_world);

// Every rank must run the same config, program and build: under mpirun a process started with
// other arguments or another binary would train something else, or wait forever for a
// collective the others never issue. Each rank hashes the config table, the program text and
// the build identity; the hashes are compared over `world` before step 1 (an Error naming the
// ranks that differ from rank 0).
void check_ranks_agree(Communicator& world, Backend& be, const Config& cfg,
                       const schedule::Program& program);

}  // namespace carousel
