// fault_injection.h — faults on demand, so tests can prove how carousel behaves when a rank
// stalls, a value goes non-finite or the job is told to stop. Test-only: read from the
// environment variable CAROUSEL_FAULT, which a user never needs to set.
//
//   CAROUSEL_FAULT="stall:rank=1,step=0,action=5,seconds=3"   rank 1 sleeps before action 5
//   CAROUSEL_FAULT="nan:rank=0,step=2"                        a NaN in rank 0's step-2 gradient
//   CAROUSEL_FAULT="flip:rank=1,step=2"                       one bit of rank 1's weights flipped
//                                                              after step 2's update
//   CAROUSEL_FAULT="signal:step=1,signal=TERM"                 SIGTERM to this process after step 1
//   CAROUSEL_FAULT="signal:rank=2,step=1"                      ... to rank 2's process only
//   CAROUSEL_FAULT="kill:point=manifest,step=2"                SIGKILL while saving checkpoint 2
//                                                              (points: begin, model, manifest,
//                                                              renamed; see save_checkpoint)
//   CAROUSEL_FAULT="slowsave:step=2,seconds=1.5"               writing checkpoint 2 takes 1.5 s
//                                                              longer (a slow file system)
// Several faults are separated by ';'. A malformed value is an error naming the part that is
// wrong, and `carousel train` checks the faults against its config (check_faults_for_run), so a
// test cannot silently run without its fault.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace carousel {

struct Fault {
  enum class Kind { Stall, NonFinite, Signal, Kill, Flip, SlowSave } kind = Kind::Stall;
  int rank = -1;            // -1: every rank (signal: every process, once)
  std::int64_t step = 0;    // 0-based step
  std::int64_t action = 0;  // stall: index in the rank's action list
  double seconds = 0;       // stall, slowsave: how long
  int signal = 0;           // signal: the number
  std::string point;        // kill: where in a checkpoint save
};

// Parses `text` (the CAROUSEL_FAULT syntax above); throws carousel::Error on a mistake: numbers
// that are not whole (seconds: finite, >= 0), a key given twice, a stall without its rank, a kill
// without its point.
std::vector<Fault> parse_faults(const std::string& text);

// What of a run decides whether a fault can fire.
struct FaultRun {
  int ranks = 1;
  std::int64_t steps = 1;
  bool checkpointing = true;
  std::int64_t checkpoint_period = 0;  // 0: only the last step
};
// Throws carousel::Error for a fault that could never fire in `run`: a rank it does not have, a
// step it never reaches, a kill or slow save at a step where it saves no checkpoint.
void check_faults_for_run(const std::vector<Fault>& faults, const FaultRun& run);

// The faults of this process: CAROUSEL_FAULT, parsed at first use (empty when unset), or what
// the last inject_faults() set (tests in one process inject different faults in turn).
std::vector<Fault> injected_faults();
void inject_faults(const std::string& text);

// The hooks: each does nothing unless a matching fault was injected.
void maybe_stall(int rank, std::int64_t step, std::int64_t action);
bool should_inject_nonfinite(int rank, std::int64_t step);
bool should_flip_weight_bit(int rank, std::int64_t step);
// After `step` completed on `rank`: a fault for this rank, or for no rank in particular on the
// first rank of the process (one signal per process, as a scheduler sends it).
void maybe_raise_signal(int rank, bool first_rank_of_process, std::int64_t step);
// At the start of writing checkpoint `step`: sleep (a slow file system).
void maybe_slow_save(std::int64_t step);
// At `point` of saving checkpoint `step`: SIGKILL this process (a crash mid-save).
void maybe_kill(const char* point, std::int64_t step);

}  // namespace carousel
