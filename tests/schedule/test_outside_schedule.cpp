// test_outside_schedule.cpp — layers outside the pipeline in the schedule IR (ir.h OUTSIDE,
// Layout::outside): where place_outside puts them, how lowering connects them to the last stage,
// what validate() refuses, the cost model against a timeline worked by hand, and the schedules
// that cannot run them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "compute/error.h"
#include "host/schedule/generators/generators.h"
#include "host/schedule/passes.h"
#include "host/schedule/registry.h"
#include "host/schedule/simulate.h"
#include "tests/support/test_util.h"

namespace carousel::schedule {
namespace {

ScheduleSpec outside_spec(const std::string& kind, int S, int M, int R = 1) {
  Layout layout{S, R, M};
  layout.outside = true;
  return {.kind = kind, .layout = layout};
}

// Microbatch m on rank m % S, after the rank's last F, in the order the last stage's backwards
// need them (gpipe: the last microbatch first).
TEST(OutsideSchedule, EachRankRunsItsMicrobatchesAfterItsLastForward) {
  const Program p = generate(outside_spec("gpipe", 2, 4));
  EXPECT_TRUE(p.layout.outside);
  EXPECT_EQ(to_text(p),
            "rank 0: 0F0 0F1 0F2 0F3 2OUTSIDE2 2OUTSIDE0 0B3 0B2 0B1 0B0\n"
            "rank 1: 1F0 1F1 1F2 1F3 2OUTSIDE3 2OUTSIDE1 1B3 1B2 1B1 1B0\n");
  // Circular with repeats: the outside stage is S x R = 4, after every repeat's forwards.
  const Program c = generate(outside_spec("circular", 2, 2, 2));
  for (int r = 0; r < 2; ++r) {
    const auto& list = c.ranks[std::size_t(r)];
    const auto o = std::find_if(list.begin(), list.end(),
                                [](const Action& a) { return a.kind == Kind::OUTSIDE; });
    ASSERT_NE(o, list.end());
    EXPECT_EQ(*o, (Action{Kind::OUTSIDE, 4, r}));
    EXPECT_TRUE(std::all_of(list.begin(), o, [](const Action& a) { return a.kind == Kind::F; }));
    EXPECT_TRUE(std::none_of(o + 1, list.end(), [](const Action& a) { return a.kind == Kind::F; }));
  }
}

// The last stage's output goes to the OUTSIDE's rank and its gradient comes back; on the last
// stage's own rank nothing is sent. The replay proves the program deadlock-free.
TEST(OutsideSchedule, LoweringSendsTheLastStagesOutputToTheOutsideRankAndBack) {
  const Program lowered = lower(generate(outside_spec("gpipe", 2, 2)), {0, 0, false});
  EXPECT_EQ(to_text(lowered),
            "rank 0: 0F0 0SEND_F0 2RECV_F0 0F1 0SEND_F1 2OUTSIDE0 2SEND_B0 0RECV_B1 0B1 0RECV_B0 "
            "0B0 OPTIMIZER\n"
            "rank 1: 1RECV_F0 1F0 1SEND_F0 1RECV_F1 1F1 1RECV_B0 2OUTSIDE1 1B1 1SEND_B1 1B0 "
            "1SEND_B0 OPTIMIZER\n");
  EXPECT_NO_THROW(replay(lowered));
  const Program text = parse_program(lowered.layout, to_text(lowered));  // peers from the layout
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t i = 0; i < text.ranks[r].size(); ++i)
      EXPECT_EQ(text.ranks[r][i].peer, lowered.ranks[r][i].peer) << r << " " << i;
  }
  // Every layout of every schedule that runs them replays, with FSDP's weight modes.
  for (const ScheduleInfo& row : schedules()) {
    if (!row.forwards_first) continue;
    for (int S : {1, 2, 3, 4})
      for (int M : {1, 2, 5})
        for (int slots : {0, 2, -1}) {
          const ScheduleSpec spec = outside_spec(std::string(row.name), S, M, row.repeats ? 2 : 1);
          SCOPED_TRACE(fmt::format("{} S={} M={} slots={}", row.name, S, M, slots));
          EXPECT_NO_THROW(replay(lower(generate(spec), {slots, 0, true})));
        }
  }
}

TEST(OutsideSchedule, ValidateNamesAMisplacedOrMissingOutsideAction) {
  const Layout layout = outside_spec("gpipe", 2, 2).layout;
  const auto error = [&](const std::string& text) {
    return testing::error_of([&] { validate(parse_program(layout, text)); });
  };
  EXPECT_EQ(error("rank 0: 0F0 0F1 2OUTSIDE0 0B1 0B0\nrank 1: 1F0 1F1 2OUTSIDE1 1B1 1B0\n"),
            "<no error>");
  EXPECT_NE(error("rank 0: 0F0 0F1 0B1 0B0\nrank 1: 1F0 1F1 2OUTSIDE1 1B1 1B0\n")
                .find("2OUTSIDE0 is missing"),
            std::string::npos);
  EXPECT_NE(error("rank 0: 0F0 0F1 2OUTSIDE1 0B1 0B0\nrank 1: 1F0 1F1 2OUTSIDE0 1B1 1B0\n")
                .find("2OUTSIDE1 runs on rank 1"),
            std::string::npos);
  EXPECT_NE(error("rank 0: 0F0 0F1 2OUTSIDE0 0B1 0B0\nrank 1: 1F0 1F1 1B1 2OUTSIDE1 1B0\n")
                .find("1B1 before 2OUTSIDE1"),
            std::string::npos);
  EXPECT_NE(error("rank 0: 0F0 0F1 2OUTSIDE0 0B1 0B0\nrank 1: 2OUTSIDE1 1F0 1F1 1B1 1B0\n")
                .find("2OUTSIDE1 before 1F1"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              validate(parse_program(Layout{2, 1, 2},
                                     "rank 0: 0F0 0F1 2OUTSIDE0 0B1 0B0\n"
                                     "rank 1: 1F0 1F1 1B1 1B0\n"));
            }).find("not the outside stage (the layout has none)"),
            std::string::npos);
}

// gpipe, S = 2, M = 2, f = 1, b = 2, an OUTSIDE of 3, no transfer cost, by hand:
//   rank 0: F0 [0,1] F1 [1,2] OUTSIDE0 [2,5] (stage 1's F0 ended at 2)       B1 [8,10] B0 [10,12]
//   rank 1:          F0 [1,2] F1 [2,3] OUTSIDE1 [3,6] B1 [6,8] B0 [8,10] (OUTSIDE0 ended at 5)
// step 12; each rank busy 1 + 1 + 3 + 2 + 2 = 9 of 12: bubble 1 - 18 / 24 = 25 %.
TEST(OutsideSchedule, SimulationMatchesATimelineWorkedByHand) {
  Costs c;  // f = 1, b = 2
  c.outside = 3;
  const SimResult sim = simulate(lower(generate(outside_spec("gpipe", 2, 2)), {0, 0, false}), c);
  EXPECT_DOUBLE_EQ(sim.step_time, 12);
  EXPECT_DOUBLE_EQ(sim.busy[0], 9);
  EXPECT_DOUBLE_EQ(sim.busy[1], 9);
  EXPECT_DOUBLE_EQ(sim.bubble_fraction, 0.25);
  const auto at = [&](int rank, Action a) {
    for (const Interval& iv : sim.timeline)
      if (iv.rank == rank && iv.action == a) return std::pair{iv.start, iv.end};
    return std::pair{-1.0, -1.0};
  };
  EXPECT_EQ(at(0, {Kind::OUTSIDE, 2, 0}), (std::pair{2.0, 5.0}));
  EXPECT_EQ(at(1, {Kind::OUTSIDE, 2, 1}), (std::pair{3.0, 6.0}));
  EXPECT_EQ(at(1, {Kind::B, 1, 0}), (std::pair{8.0, 10.0}));
  EXPECT_EQ(at(0, {Kind::B, 0, 0}), (std::pair{10.0, 12.0}));
}

// Expert parallelism in the layers after the pipeline: one more count, the outside stage's; an
// A2A_F before each OUTSIDE, whose exchanges are its forward's and its backward's, each between
// two of its parts in the simulation.
TEST(OutsideSchedule, ExpertExchangesGoBeforeTheOutsideActions) {
  const Program lowered = lower(generate(outside_spec("gpipe", 2, 2)), {0, 0, false});
  EXPECT_THROW(place_exchanges(lowered, {0, 1}), carousel::Error);  // no count for stage 2
  const Program p = place_exchanges(lowered, {0, 1, 2});
  EXPECT_EQ(to_text(p),
            "rank 0: 0F0 0SEND_F0 2RECV_F0 0F1 0SEND_F1 2A2A_F0 2OUTSIDE0 2SEND_B0 0RECV_B1 0B1 "
            "0RECV_B0 0B0 OPTIMIZER\n"
            "rank 1: 1RECV_F0 1A2A_F0 1F0 1SEND_F0 1RECV_F1 1A2A_F1 1F1 1RECV_B0 2A2A_F1 "
            "2OUTSIDE1 1A2A_B1 1B1 1SEND_B1 1A2A_B0 1B0 1SEND_B0 OPTIMIZER\n");
  EXPECT_NO_THROW(replay(p));
  Costs c;
  c.outside = 9;
  c.exchange = 0.5;
  c.exchanges_f = {0, 2, 4};
  c.exchanges_b = {0, 4, 4};  // the outside stage's backward recomputes nothing
  EXPECT_EQ(c.exchanges({Kind::OUTSIDE, 2, 0}), 8);
  const SimResult sim = simulate(p, c);
  int parts = 0;
  double exchanging = 0;
  for (const Interval& iv : sim.timeline) {
    if (iv.rank != 0) continue;
    if (iv.action == Action{Kind::OUTSIDE, 2, 0}) {
      ++parts;
      EXPECT_EQ(iv.parts, 9);
      EXPECT_DOUBLE_EQ(iv.end - iv.start, 1.0);
    }
    if (iv.action == Action{Kind::A2A_F, 2, 0}) exchanging += iv.end - iv.start;
  }
  EXPECT_EQ(parts, 9);
  EXPECT_DOUBLE_EQ(exchanging, 8 * 0.5);
}

TEST(OutsideSchedule, SchedulesThatInterleaveForwardsAndBackwardsRefuse) {
  for (const ScheduleInfo& row : schedules()) {
    if (row.forwards_first) continue;
    const int R = row.repeats ? 2 : 1;  // zbv and dualpipev need their two chunks
    const std::string error =
        testing::error_of([&] { check_schedule(outside_spec(std::string(row.name), 2, 4, R)); });
    EXPECT_NE(error.find("pipeline_parallel_layers"), std::string::npos) << row.name << error;
    EXPECT_NE(error.find("use circular, gpipe or looped_bfs"), std::string::npos) << error;
  }
  // place_outside itself refuses a program whose forwards follow a backward.
  const Program one_f_one_b = generate({.kind = "1f1b", .layout = Layout{2, 1, 4}});
  EXPECT_NE(testing::error_of([&] { place_outside(one_f_one_b); }).find("forward after a backward"),
            std::string::npos);
}

}  // namespace
}  // namespace carousel::schedule
