// sharded_checkpoint.h — assembling whole-model sets from ranks that live in separate processes.
//
// ShardedParams::exchange (sharded_checkpoint.cpp) fills the whole-model sets of a process with
// what its rank writes. With ranks as threads every rank fills the same sets; with ranks as
// processes each process's sets hold only its own rank's part, and collect_on_rank_zero brings
// the rest to process 0, which writes the checkpoint.
#pragma once

#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "models/params.h"

namespace carousel {

// Every process announces which parameters it wrote (an all-reduce of writer ids: each
// parameter has exactly one writer), then each writer sends its sets to process 0, which keeps
// the parameters that writer owns. Collective over `world`.
void collect_on_rank_zero(Communicator& world, Backend& host,
                          const std::vector<std::string>& written,
                          const std::vector<const ParamSet*>& sets);

}  // namespace carousel
