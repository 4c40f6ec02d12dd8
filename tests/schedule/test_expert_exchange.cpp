// test_expert_exchange.cpp — expert exchanges in the schedule IR (A2A_F / A2A_B): where
// lowering puts them, which overlapped pairs take turns, and the cost model's turns against a
// timeline worked out by hand.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compute/error.h"
#include "host/schedule/passes.h"
#include "host/schedule/registry.h"
#include "host/schedule/simulate.h"
#include "host/schedule/streams.h"

namespace carousel::schedule {
namespace {

// plan_streams throws for a compute reading weights no slot holds, an AG_WAIT without its
// AG_ISSUE and a slot refilled before its RELEASE.
void validate_residency(const Program& p) { EXPECT_NO_THROW(plan_streams(p)); }

Program dualpipev(int S, int M, const LoweringOptions& options) {
  return lower(generate(ScheduleSpec{.kind = "dualpipev", .layout = Layout{S, 2, M}}), options);
}

TEST(ExpertExchange, TextFormNamesTheComputeActionsExchanges) {
  EXPECT_EQ(to_string(Action{Kind::A2A_F, 3, 1}), "3A2A_F1");
  EXPECT_EQ(parse_action("2A2A_B0"), (Action{Kind::A2A_B, 2, 0}));
  EXPECT_THROW(parse_action("A2A_F1"), carousel::Error);  // an exchange belongs to a stage
}

// Stage 1 of four is dense (no exchanging layer): every F, B and I of stages 0, 2 and 3 comes
// right after the A2A of its own (stage, microbatch), nothing else does.
TEST(ExpertExchange, PlacedRightBeforeEachExchangingComputeAction) {
  const Program lowered = dualpipev(2, 4, {0, 0, false});
  const Program p = place_exchanges(lowered, {1, 0, 2, 1});
  int exchanging = 0, placed = 0;
  for (std::size_t r = 0; r < p.ranks.size(); ++r) {
    const auto& list = p.ranks[r];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.is_exchange()) {
        ++placed;
        ASSERT_LT(i + 1, list.size());
        const Action& next = list[i + 1];
        EXPECT_EQ(next.stage, a.stage);
        EXPECT_EQ(next.index, a.index);
        EXPECT_EQ(next.kind == Kind::F, a.kind == Kind::A2A_F) << to_string(next);
        continue;
      }
      const bool exchanges =
          a.stage != 1 && (a.kind == Kind::F || a.kind == Kind::B || a.kind == Kind::I);
      exchanging += exchanges;
      EXPECT_EQ(i > 0 && list[i - 1].is_exchange(), exchanges) << to_string(a) << " on rank " << r;
    }
    // Without the A2As the list is the lowered one.
    std::vector<Action> without;
    for (const Action& a : list)
      if (!a.is_exchange()) without.push_back(a);
    EXPECT_EQ(without, lowered.ranks[r]);
  }
  EXPECT_EQ(placed, exchanging);
  EXPECT_GT(placed, 0);
  EXPECT_EQ(to_text(place_exchanges(lowered, {})), to_text(lowered));
  EXPECT_THROW(place_exchanges(lowered, {1, 1}), carousel::Error);  // two counts for four stages
}

// The halves of a pair can take turns only when nothing between them must happen between
// them: without FSDP every pair of dualpipev does, and with the Buffer Sliding Window or
// gathering once (dualpipev's two stages per rank stay in their two slots); gathering weights
// per use, place_exchanges moves the B's gather before the pair (into slot 1) and the F's
// release after it, so every pair does too.
TEST(ExpertExchange, PairsTakeTurnsWhateverTheWeightMode) {
  struct Mode {
    const char* name;
    LoweringOptions options;
  };
  for (const Mode& mode : {Mode{"no FSDP", {0, 0, false}}, Mode{"BSW", {2, 0, true}},
                           Mode{"once", {-1, 0, true}}, Mode{"per use", {0, 0, true}}}) {
    const Program p = place_exchanges(dualpipev(2, 8, mode.options), {1, 1, 1, 1});
    int pairs = 0, turns = 0;
    for (const auto& list : p.ranks) {
      for (std::size_t i = 0; i < list.size(); ++i) {
        pairs += list[i].overlap;
        turns += takes_turns(list, i);
      }
    }
    EXPECT_GT(pairs, 0);
    EXPECT_EQ(turns, pairs) << mode.name;
    validate_residency(p);  // every compute reads weights a slot holds, no slot refilled early
  }
  // Gathering per use, each pair now reads like "2AG_ISSUE1 2AG_WAIT1 1A2A_F3 1F3& 2A2A_B1 2B1
  // 1RELEASE0 2RELEASE1": both stages' weights before it, in slots 0 and 1, released after it.
  const Program per_use = place_exchanges(dualpipev(2, 8, {0, 0, true}), {1, 1, 1, 1});
  for (const auto& list : per_use.ranks) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].overlap) continue;
      const std::size_t j = overlap_partner(list, i);
      const int f = list[i].stage, b = list[j].stage;
      EXPECT_EQ(list[i - 2], (Action{Kind::AG_WAIT, b, 1})) << to_string(list[i]);
      EXPECT_EQ(list[i - 3], (Action{Kind::AG_ISSUE, b, 1}));
      EXPECT_EQ(list[i - 4], (Action{Kind::AG_WAIT, f, 0}));
      EXPECT_EQ(list[j + 1], (Action{Kind::RELEASE, f, 0}));
      EXPECT_EQ(list[j + 2], (Action{Kind::RELEASE, b, 1}));
    }
  }
  // A pair without exchanges has nothing to overlap: its halves run one after the other.
  const Program dense = dualpipev(2, 8, {0, 0, false});
  for (const auto& list : dense.ranks)
    for (std::size_t i = 0; i < list.size(); ++i) EXPECT_FALSE(takes_turns(list, i));
}

// One rank, one stage, two microbatches; F costs 4 and B 6, each with one exchange of 3
// between two equal parts. Worked by hand:
//   F0 alone:     part [0,2], exchange [2,5] waited for, part [5,7]
//   F1& with B0:  F1 part [7,9], F1's exchange [9,12]; B0 part [9,12] meanwhile, its exchange
//                 [12,15]; F1's exchange is done at 12: part [12,14]; B0 waits to 15: [15,18]
//   B1 alone:     part [18,21], exchange [21,24], part [24,27]
// Step 27; without the pair (F1, then B0) 32: the turns hide 5 of the pair's 6 exchange units.
TEST(ExpertExchange, PairTakesTurnsAsWorkedByHand) {
  const Layout layout{1, 1, 2};
  const std::string paired = "rank 0: 0A2A_F0 0F0 0A2A_F1 0F1& 0A2A_B0 0B0 0A2A_B1 0B1 OPTIMIZER";
  Costs c;
  c.f = 4, c.b = 6, c.exchange = 3;
  c.exchanges_f = {1};
  c.exchanges_b = {1};
  const SimResult sim = simulate(parse_program(layout, paired), c);
  EXPECT_DOUBLE_EQ(sim.step_time, 27);
  EXPECT_DOUBLE_EQ(sim.bubble_fraction, 1 - 20.0 / 27);
  std::vector<std::string> got;
  for (const Interval& iv : sim.timeline)
    got.push_back(fmt::format("{} {}-{}", to_string(iv.action), iv.start, iv.end));
  const std::vector<std::string> expected = {
      "0F0 0-2",       "0A2A_F0 2-5", "0F0 5-7",   "0F1& 7-9",  "0A2A_F1 9-12",  "0B0 9-12",
      "0A2A_B0 12-15", "0F1& 12-14",  "0B0 15-18", "0B1 18-21", "0A2A_B1 21-24", "0B1 24-27"};
  EXPECT_EQ(got, expected);
  std::string unpaired = paired;
  unpaired.erase(unpaired.find('&'), 1);
  EXPECT_DOUBLE_EQ(simulate(parse_program(layout, unpaired), c).step_time, 32);
  c.exchange = 0;  // free exchanges: the compute alone
  EXPECT_DOUBLE_EQ(simulate(parse_program(layout, paired), c).step_time, 20);
}

// The stream plan treats A2A as a marker of the compute stream: the recording of a program with
// exchanges is as hazard-free as without them.
TEST(ExpertExchange, StreamPlanOfAProgramWithExchangesIsHazardFree) {
  for (const int slots : {2, 0}) {  // BSW; per use with the pairs' gathers moved before them
    const Program p = place_exchanges(dualpipev(2, 4, {slots, 0, true}), {1, 1, 1, 1});
    const std::vector<StreamPlan> plans = plan_streams(p);
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
      for (std::size_t i = 0; i < p.ranks[r].size(); ++i) {
        if (p.ranks[r][i].is_exchange()) EXPECT_EQ(plans[r].stream[i], Stream::compute);
      }
    }
    Costs c;
    c.all_gather = 0.5, c.reduce_scatter = 0.5, c.p2p = 0.1;
    EXPECT_EQ(check_recording(p, record_streams(p, plans, c)), std::vector<std::string>{});
    replay(p);  // and deadlock-free
  }
}

}  // namespace
}  // namespace carousel::schedule
