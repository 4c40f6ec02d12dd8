// generate_dualpipev.cpp — DualPipeV (DeepSeek's DualPipe folded into a V): two chunks per rank
// in V placement, forward/backward pairs of different microbatches overlapped in the steady
// state, weight gradients deferred (zero bubble) at the ends. Checked by the registry
// (registry.cpp: R = 2, M >= 2S) before it runs.
#include <deque>
#include <utility>

#include "compute/error.h"
#include "host/schedule/generators/generators.h"

namespace carousel::schedule {

namespace {

// One rank's program under construction: per-chunk counters of the next microbatch of each kind
// and the FIFO of weight gradients an I left for a later W (DualPipe's WeightGradStore).
class RankBuilder {
 public:
  RankBuilder(std::vector<Action>& out, int chunk0, int chunk1)
      : out_(out), stage_{chunk0, chunk1} {}

  void forward(int chunk) { out_.push_back({Kind::F, stage_[chunk], next_f_[chunk]++}); }

  // A backward: whole (B) or, with zero bubble, only the input gradient (I), its W queued.
  void backward(int chunk, bool zero_bubble) {
    const int mb = next_b_[chunk]++;
    out_.push_back({zero_bubble ? Kind::I : Kind::B, stage_[chunk], mb});
    if (zero_bubble) pending_w_.push_back({stage_[chunk], mb});
  }

  // The oldest queued weight gradient. The phases never ask on an empty queue (phase 3 pops
  // the W its I just queued, phases 7 and 8 the r + 1 that phase 6 queued).
  void weight() {
    CAROUSEL_ASSERT(!pending_w_.empty(),
                    "dualpipev: the rank of stage {} runs a W with none queued", stage_[0]);
    const auto [stage, mb] = pending_w_.front();
    pending_w_.pop_front();
    out_.push_back({Kind::W, stage, mb});
  }

  // The phases' counts add up to M forwards and M backwards per chunk, and every queued W ran
  // (the reference asserts the same of its WeightGradStore).
  void check_complete(int M) const {
    for (int c : {0, 1}) {
      CAROUSEL_ASSERT(next_f_[c] == M && next_b_[c] == M,
                      "dualpipev: stage {} got {} forwards and {} backwards of {} microbatches",
                      stage_[c], next_f_[c], next_b_[c], M);
    }
    CAROUSEL_ASSERT(pending_w_.empty(), "dualpipev: {} weight gradients never ran",
                    pending_w_.size());
  }

  // DualPipe's overlapped "F&B chunk": the forward of `f_chunk` and the full backward of
  // `b_chunk`, a different microbatch, as one pair (Action::overlap on the forward).
  void overlapped(int f_chunk, int b_chunk) {
    forward(f_chunk);
    out_.back().overlap = true;
    backward(b_chunk, /*zero_bubble=*/false);
  }

 private:
  std::vector<Action>& out_;
  int stage_[2];
  int next_f_[2] = {0, 0}, next_b_[2] = {0, 0};
  std::deque<std::pair<int, int>> pending_w_;  // (stage, microbatch) of Is awaiting their W
};

}  // namespace

// The eight phases of DeepSeek's DualPipeV (dualpipe/dualpipev.py, DualPipeV.step) and of
// PyTorch's ScheduleDualPipeV, on rank r of S with M microbatches; chunk 0 is stage r (down the
// V), chunk 1 stage 2S-1-r (back up), "F0&B1" an overlapped pair:
//   1  2(S-r-1) x  F0                      fill the way down
//   2  r+1      x  F0 F1                   the first microbatches turn at the bottom of the V
//   3  S-r-1    x  I1 W1 F1                chunk 1's first backwards, W right after its I
//   4  M-2S+r+1 x  F0&B1 F1&B0             the steady state; the last rank runs its first F0
//                                          and B1 unpaired ("to further reduce bubble size":
//                                          the F0 need not wait for the B1's gradient)
//   5  S-r-1    x  B1 F1&B0                chunk 0 has no forwards left
//   6  r+1      x  B1 B0                   from the ((r+1)/2)-th on, I instead of B: the Ws wait
//   7  S-r-1    x  W I0                    each W fills the wait for the next gradient
//   8  r+1      x  W                       the Ws still queued
// Microbatches run in order within each (kind, chunk). Every count is >= 0 because M >= 2S.
Program generate_dualpipev(const ScheduleSpec& spec) {
  Layout l = spec.layout;
  l.placement = Placement::V;
  const int S = l.ranks, M = l.microbatches;
  Program p{l, std::vector<std::vector<Action>>(S)};
  for (int r = 0; r < S; ++r) {
    RankBuilder rank(p.ranks[r], r, 2 * S - 1 - r);
    for (int k = 0; k < 2 * (S - r - 1); ++k) rank.forward(0);
    for (int k = 0; k < r + 1; ++k) rank.forward(0), rank.forward(1);
    for (int k = 0; k < S - r - 1; ++k) {
      rank.backward(1, /*zero_bubble=*/true);
      rank.weight();
      rank.forward(1);
    }
    for (int k = 0; k < M - 2 * S + r + 1; ++k) {
      if (k == 0 && r == S - 1) {
        rank.forward(0);
        rank.backward(1, /*zero_bubble=*/false);
      } else {
        rank.overlapped(0, 1);
      }
      rank.overlapped(1, 0);
    }
    for (int k = 0; k < S - r - 1; ++k) {
      rank.backward(1, /*zero_bubble=*/false);
      rank.overlapped(1, 0);
    }
    // Phase 6: the reference switches to zero bubble half-way, between B1 and B0 on even
    // ranks and before B1 on odd ones, so that r + 1 Ws are queued whatever the parity.
    const int half = (r + 1) / 2;
    bool zero_bubble = false;
    for (int k = 0; k < r + 1; ++k) {
      if (k == half && r % 2 == 1) zero_bubble = true;
      rank.backward(1, zero_bubble);
      if (k == half && r % 2 == 0) zero_bubble = true;
      rank.backward(0, zero_bubble);
    }
    for (int k = 0; k < S - r - 1; ++k) {
      rank.weight();
      rank.backward(0, /*zero_bubble=*/true);
    }
    for (int k = 0; k < r + 1; ++k) rank.weight();
    rank.check_complete(M);
  }
  return p;
}

}  // namespace carousel::schedule
