// passes.h — pure functions over Programs: validation, lowering (communication, weight
// residency, gradient reduce-scatter), and the deadlock replay. Every rank runs the same passes
// on the same inputs and so derives the same instruction lists.
#pragma once

#include <string>
#include <vector>

#include "host/schedule/ir.h"

namespace carousel::schedule {

// Checks a compute program: every action on the rank that owns its stage, microbatches in
// range, exactly one F and either one B or one I and one W per (stage, microbatch), in the order
// F < B/I < W on that rank. Throws carousel::Error with a rank x step grid marking the fault.
void validate(const Program& program);

struct LoweringOptions {
  // Weight slots per rank: 0 = gather before every compute action and release after it
  // (MaxText's default FSDP behaviour), 2 = Buffer Sliding Window (the next stage's weights are
  // gathered while the current stage computes), -1 = one slot per local stage (gather once per
  // step, MaxText's pipeline_fsdp_ag_once). Any c >= 1 works: furthest-next-use eviction.
  int weight_slots = 0;
  int lookahead = 0;   // issue a gather at most this many compute actions before its use;
                       // 0 = as soon as a slot is free
  bool fsdp = true;    // insert AG_*/RELEASE/REDUCE_SCATTER at all
};

// The layers after the pipeline (ir.h, Layout::outside): sets the layout's flag and puts the
// OUTSIDE action of microbatch m on rank m % S after the rank's last F, each rank's in the order
// the last stage's backwards need them.
// Throws carousel::Error when a rank runs a forward after a backward (only schedules whose
// registry row has forwards_first get here).
Program place_outside(Program compute);

// Adds SEND/RECV, weight residency, REDUCE_SCATTER after the last backward of each stage, and
// OPTIMIZER at the end. The SEND goes right after the producing action; the matching RECV is
// placed on the consumer at the moment the data is produced (found by walking all ranks in
// lock-step), so receives are posted early and a full ring never blocks. Consecutive p2p
// actions of a rank form one group (ncclGroupStart/End).
Program lower(const Program& compute, const LoweringOptions& options);

// Puts an A2A_F / A2A_B (ir.h) right before each F / B or I (an A2A_F before an OUTSIDE) of a
// lowered program's stages that exchange rows with expert ranks: `exchanging_layers[v]`, stage
// v's MoE layers whose routed experts are split over ranks (expert parallelism), and with layers
// outside the pipeline one more entry for the outside stage. Empty: the program as it is. With
// FSDP gathering per use, an overlapped pair with exchanges then gets both halves' weights
// before it (the B's in a slot of its own) and releases them after it, so its halves can take
// turns (ir.h takes_turns).
Program place_exchanges(Program lowered, const std::vector<int>& exchanging_layers);

// Replays all ranks of a lowered program with NCCL's blocking semantics: a rank's group of
// consecutive p2p actions completes only when every peer has posted the matching action in its
// own current group; sends and receives between two ranks match in issue order. Throws
// carousel::Error for a send/receive whose partner is of another (stage, microbatch, kind)
// ("crossed"), for actions with no partner, and for deadlocks (naming what each blocked rank
// waits for). AG/RS run over the FSDP group, whose members run identical programs, so they never
// wait on another pipeline rank.
void replay(const Program& lowered);

}  // namespace carousel::schedule
