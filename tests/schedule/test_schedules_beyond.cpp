// test_schedules_beyond.cpp — the schedules beyond the anchors, looped_bfs and zbv, and the V
// placement zbv needs. Each check compares against something computed without the simulator:
// the timelines worked out by hand in docs/schedules.md ("Worked examples beyond the anchors"),
// MaxText's circular order, and the placement's definition. The closed forms are checked over
// many layouts by Properties.* in test_schedule.cpp.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "host/schedule/passes.h"
#include "host/schedule/registry.h"
#include "host/schedule/simulate.h"
#include "tests/support/schedule_timeline.h"
#include "tests/support/test_util.h"

namespace carousel::schedule {
namespace {

Program make(const std::string& kind, int S, int M, int R) {
  return generate(ScheduleSpec{.kind = kind, .layout = Layout{S, R, M}});
}

// ---- placement ---------------------------------------------------------------------------------

TEST(Placement, LoopAndVPutStagesWhereTheirDefinitionsSay) {
  const Layout loop{4, 2, 8};
  Layout v{4, 2, 8};
  v.placement = Placement::V;
  const std::vector<int> loop_ranks = {0, 1, 2, 3, 0, 1, 2, 3};
  const std::vector<int> v_ranks = {0, 1, 2, 3, 3, 2, 1, 0};  // down, then back up
  for (int stage = 0; stage < 8; ++stage) {
    EXPECT_EQ(loop.rank_of(stage), loop_ranks[stage]) << stage;
    EXPECT_EQ(v.rank_of(stage), v_ranks[stage]) << stage;
  }
  EXPECT_EQ(make("zbv", 4, 8, 2).layout.placement, Placement::V);
  EXPECT_EQ(make("looped_bfs", 4, 8, 2).layout.placement, Placement::Loop);
}

// On the way back up the V, activations go to the previous rank and gradients to the next; the
// turn (stage S-1 -> S, both on rank S-1) and the two ends on rank 0 need no p2p at all.
TEST(Placement, ZbvLowersToSendsBackUpTheRanks) {
  const Program lowered = lower(make("zbv", 2, 4, 2), {0, 0, false});
  std::map<std::string, int> peer;  // "rank:action" -> peer
  for (int r = 0; r < 2; ++r)
    for (const Action& a : lowered.ranks[r])
      if (a.is_p2p()) peer[std::to_string(r) + ":" + to_string(a)] = a.peer;
  for (int m = 0; m < 4; ++m) {
    const std::string M = std::to_string(m);
    EXPECT_EQ(peer.at("0:0SEND_F" + M), 1);  // stage 0 -> 1, down
    EXPECT_EQ(peer.at("1:2SEND_F" + M), 0);  // stage 2 -> 3, back up
    EXPECT_EQ(peer.at("0:3SEND_B" + M), 1);  // gradient of stage 3's input -> stage 2
    EXPECT_EQ(peer.at("1:1SEND_B" + M), 0);
    EXPECT_EQ(peer.count("1:1SEND_F" + M), 0u);  // the turn is local
    EXPECT_EQ(peer.count("1:2SEND_B" + M), 0u);
  }
  EXPECT_NO_THROW(replay(lowered));
  // The text form re-reads with the peers of the V.
  const Program back = parse_program(lowered.layout, to_text(lowered));
  for (int r = 0; r < 2; ++r)
    for (std::size_t i = 0; i < back.ranks[r].size(); ++i)
      EXPECT_EQ(back.ranks[r][i].peer, lowered.ranks[r][i].peer) << r << " " << i;
}

// ---- looped_bfs ------------------------------------------------------------------------------

TEST(LoopedBfs, IsMaxTextsCircularOrderWithoutTheDelay) {
  for (int S : {1, 2, 3, 4})
    for (int M : {1, 2, 5, 8})
      for (int R : {1, 2, 3})
        EXPECT_EQ(to_text(make("looped_bfs", S, M, R)), to_text(make("circular", S, M, R)))
            << S << " " << M << " " << R;
}

// docs/schedules.md, worked example: S = 3, M = 2, R = 2, f = 1, b = 2. M < S, so rank 0 waits
// one forward at its turn to stage 3 and every rank waits at the backward turns.
TEST(LoopedBfs, HandWorkedTimelineS3M2R2) {
  const Program p = make("looped_bfs", 3, 2, 2);
  const SimResult sim = simulate(lower(p, {0, 0, false}), Costs{});
  const std::vector<std::string> expected = {
      "0F0@0 0F1@1 3F0@3 3F1@4 3B1@11 3B0@13 0B1@17 0B0@19",
      "1F0@1 1F1@2 4F0@4 4F1@5 4B1@9 4B0@11 1B1@15 1B0@17",
      "2F0@2 2F1@3 5F0@5 5F1@6 5B1@7 5B0@9 2B1@13 2B0@15",
  };
  EXPECT_EQ(timeline_text(sim, 3), expected);
  EXPECT_DOUBLE_EQ(sim.step_time, 21);  // work 12 + idle (S-1)(f+b) + (R-1)(S-M)(f+b) = 6 + 3
  EXPECT_NEAR(sim.bubble_fraction, 9.0 / 21, 1e-12);
  EXPECT_NEAR(closed_form_bubble("looped_bfs", p.layout, Costs{}), 9.0 / 21, 1e-12);
}

// ---- interleaved_zb --------------------------------------------------------------------------

// docs/schedules.md, worked example: S = 2, M = 2, R = 2 (g = S), f = i = w = 1 per chunk. Rank 1
// defers each W by one backward, which fills the wait for 2I0 / 2I1 with 3W0 / 3W1.
TEST(InterleavedZb, HandWorkedTimelineS2M2R2) {
  const Program p = make("interleaved_zb", 2, 2, 2);
  EXPECT_EQ(to_text(p),
            "rank 0: 0F0 0F1 2F0 2F1 2I0 2W0 2I1 2W1 0I0 0W0 0I1 0W1\n"
            "rank 1: 1F0 1F1 3F0 3I0 3F1 3I1 3W0 1I0 3W1 1I1 1W0 1W1\n");
  const SimResult sim = simulate(lower(p, {0, 0, false}), Costs{});
  const std::vector<std::string> expected = {
      "0F0@0 0F1@1 2F0@2 2F1@3 2I0@5 2W0@6 2I1@7 2W1@8 0I0@9 0W0@10 0I1@11 0W1@12",
      "1F0@1 1F1@2 3F0@3 3I0@4 3F1@5 3I1@6 3W0@7 1I0@8 3W1@9 1I1@10 1W0@11 1W1@12",
  };
  EXPECT_EQ(timeline_text(sim, 2), expected);
  EXPECT_DOUBLE_EQ(sim.step_time, 13);  // work 12, idle (S-1)(f + i - w) = 1
  EXPECT_NEAR(sim.bubble_fraction, 1.0 / 13, 1e-12);
  EXPECT_NEAR(closed_form_bubble("interleaved_zb", p.layout, Costs{}), 1.0 / 13, 1e-12);
}

// PyTorch's ScheduleInterleavedZeroBubble warms up with (S-1-s) + (R-1)g forwards and defers each
// W by s backwards, so it holds (S-1-s) + (R-1)g + 1 + s = S + (R-1)g chunk activations on every
// rank. carousel's is at most that on every layout the issue names (it held 2S-1-s + (R-1)g, up
// to 37.5 % more, with interleaved 1F1B's warm-up), and its step time is the closed form's.
TEST(InterleavedZb, HoldsNoMoreActivationsThanPyTorchsAtTheSameStepTime) {
  for (int S : {2, 3, 4}) {
    for (int M : {S, 2 * S, 3 * S}) {
      for (int R : {2, 3}) {
        const Program p = make("interleaved_zb", S, M, R);
        const SimResult sim = simulate(lower(p, {0, 0, false}), Costs{});
        const int g = S;  // the default group size
        for (int r = 0; r < S; ++r) {
          EXPECT_LE(sim.peak_activations[std::size_t(r)], S + (R - 1) * g)
              << "S=" << S << " M=" << M << " R=" << R << " rank " << r;
        }
        EXPECT_NEAR(sim.bubble_fraction, closed_form_bubble("interleaved_zb", p.layout, Costs{}),
                    1e-12)
            << "S=" << S << " M=" << M << " R=" << R;
      }
    }
  }
}

// Without pipeline_microbatch_group_size the interleaved schedules take any M >= S: g is the
// smallest divisor of M at least S (S = 4: M = 6 -> one group of 6, M = 10 -> groups of 5, M = 12
// -> 4, Megatron's), and each program validates, replays and meets its closed form. M < S is
// still refused naming g.
TEST(InterleavedGroups, AnyMicrobatchCountFromSUpChoosesItsGroupSize) {
  for (const char* kind : {"interleaved_1f1b", "interleaved_zb"}) {
    for (const auto& [M, g] : {std::pair{6, 6}, {10, 5}, {12, 4}, {9, 9}}) {
      const ScheduleSpec spec{.kind = kind, .layout = Layout{4, 2, M}};
      EXPECT_EQ(spec.group(), g) << kind << " M=" << M;
      const Program p = generate(spec);
      const SimResult sim = simulate(lower(p, {0, 0, false}), Costs{});
      EXPECT_NEAR(sim.bubble_fraction, closed_form_bubble(kind, p.layout, Costs{}), 1e-12)
          << kind << " M=" << M;
    }
    EXPECT_THROW(make(kind, 4, 3, 2), Error) << kind;
  }
}

// ---- zbv -------------------------------------------------------------------------------------

// docs/schedules.md, worked example: S = 2, M = 4, f = i = w = 1 per chunk. Rank 1 starts one
// forward late and then never waits; every rank idles S - 1 = 1.
TEST(Zbv, HandWorkedTimelineS2M4) {
  const Program p = make("zbv", 2, 4, 2);
  const SimResult sim = simulate(lower(p, {0, 0, false}), Costs{});
  const std::vector<std::string> expected = {
      "0F0@0 0F1@1 0F2@2 3F0@3 3I0@4 3W0@5 3F1@6 3I1@7 3W1@8 0F3@9 0I0@10 0W0@11 3F2@12 "
      "3I2@13 3W2@14 0I1@15 0W1@16 3F3@17 3I3@18 3W3@19 0I2@20 0W2@21 0I3@22 0W3@23",
      "1F0@1 2F0@2 1F1@3 2F1@4 2I0@5 2W0@6 1F2@7 1I0@8 1W0@9 2F2@10 2I1@11 2W1@12 1F3@13 "
      "1I1@14 1W1@15 2F3@16 2I2@17 2W2@18 1I2@19 2I3@20 1I3@21 1W2@22 2W3@23 1W3@24",
  };
  EXPECT_EQ(timeline_text(sim, 2), expected);
  EXPECT_DOUBLE_EQ(sim.step_time, 25);
  EXPECT_NEAR(sim.bubble_fraction, 1.0 / 25, 1e-12);
  EXPECT_EQ(sim.peak_activations, (std::vector<int>{4, 4}));  // 2S stage activations = 1 A
}

// S = 4, M = 8 (the survey's example size): 3/51 = 5.9 %, 1 A of activations on every rank.
TEST(Zbv, SurveySizeStepBubbleAndMemory) {
  const Program p = make("zbv", 4, 8, 2);
  const SimResult sim = simulate(lower(p, {0, 0, false}), Costs{});
  EXPECT_DOUBLE_EQ(sim.step_time, 51);  // work 2M(f+i+w) = 48, idle (S-1)f = 3
  EXPECT_NEAR(sim.bubble_fraction, 3.0 / 51, 1e-12);
  EXPECT_NEAR(closed_form_bubble("zbv", p.layout, Costs{}), 3.0 / 51, 1e-12);
  EXPECT_EQ(sim.peak_activations, (std::vector<int>{8, 8, 8, 8}));
}

// Rank 1 of S = 4, M = 8, worked by hand from the phases of PyTorch's
// ScheduleZBVZeroBubble._calculate_single_rank_operations: warm-up 2(S-r)-1 = 5 F0, r = 1
// (F1, F0), S-r = 3 (F1, I1, W1); stable (F0 while any, I0, W0, F1, I1, W1) until the forwards
// run out; cool-down r = 1 (I0, I1), S-r = 3 (I0, W0), then the W1s and the W0s left.
TEST(Zbv, RankOneFollowsPyTorchsPhasesS4M8) {
  const Program p = make("zbv", 4, 8, 2);
  std::string rank1;
  for (const Action& a : p.ranks[1]) {
    if (!rank1.empty()) rank1 += ' ';
    rank1 += to_string(a);
  }
  EXPECT_EQ(rank1,
            "1F0 1F1 1F2 1F3 1F4 6F0 1F5 6F1 6I0 6W0 6F2 6I1 6W1 6F3 6I2 6W2 1F6 1I0 1W0 6F4 6I3 "
            "6W3 1F7 1I1 1W1 6F5 6I4 6W4 1I2 1W2 6F6 6I5 6W5 1I3 1W3 6F7 6I6 6W6 1I4 6I7 1I5 1W4 "
            "1I6 1W5 1I7 1W6 6W7 1W7");
}

TEST(Zbv, ConstraintsAreClearErrors) {
  EXPECT_NE(testing::error_of([] { make("zbv", 2, 4, 1); }).find("num_pipeline_repeats=2"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { make("zbv", 2, 4, 3); }).find("got R=3"), std::string::npos);
  EXPECT_NE(testing::error_of([] {
              make("zbv", 4, 7, 2);
            }).find("num_pipeline_microbatches >= 2 x ici_pipeline_parallelism"),
            std::string::npos);
  EXPECT_NO_THROW(make("zbv", 4, 8, 2));
}

}  // namespace
}  // namespace carousel::schedule
