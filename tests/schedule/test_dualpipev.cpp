// test_dualpipev.cpp — DeepSeek's DualPipeV (pipeline_schedule=dualpipev) and the overlapped F&B
// pairs it introduces into the IR (Action::overlap). Each check compares against something
// computed without the code under test: the program and the timeline worked out by hand in
// docs/schedules.md ("Worked examples beyond the anchors") from the reference's eight phases,
// DeepSeek's closed-form bubble and activation count, and the pair's definition.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "host/schedule/export.h"
#include "host/schedule/passes.h"
#include "host/schedule/registry.h"
#include "host/schedule/simulate.h"
#include "tests/support/schedule_timeline.h"
#include "tests/support/test_util.h"

namespace carousel::schedule {
namespace {

Program make(int S, int M, int R = 2) {
  return generate(ScheduleSpec{.kind = "dualpipev", .layout = Layout{S, R, M}});
}

// ---- the program -----------------------------------------------------------------------------

// S = 2, M = 4, worked by hand from the phase counts of DeepSeek's DualPipeV.step() and
// PyTorch's ScheduleDualPipeV (docs/schedules.md). Rank 0 holds stages 0 and 3: phase 1 two F0,
// phase 2 one (F0, F1), phase 3 one (I1, W1, F1), phase 4 one (F0&B1, F1&B0), phase 5 one
// (B1, F1&B0), phase 6 (B1, I0), phase 7 (W, I0), phase 8 one W. Rank 1 (the last, stages 1
// and 2): phase 2 twice, phase 4 twice with its first F0, B1 unpaired, phase 6 (B1, B0) then
// (I1, I0), phase 8 two Ws.
TEST(DualPipeV, ProgramFollowsTheReferencesEightPhasesS2M4) {
  const Program p = make(2, 4);
  EXPECT_EQ(p.layout.placement, Placement::V);
  EXPECT_EQ(to_text(p),
            "rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 0F3& 3B1 3F2& 0B0 3B2 3F3& 0B1 3B3 0I2 0W2 0I3 "
            "0W3\n"
            "rank 1: 1F0 2F0 1F1 2F1 1F2 2B0 2F2& 1B0 1F3& 2B1 2F3& 1B1 2B2 1B2 2I3 1I3 2W3 "
            "1W3\n");
}

// S = 4, M = 8, worked by hand the same way: every phase is non-empty on some rank. Rank 1, for
// one: four F0 (phase 1), two (F0, F1), two (I1, W1, F1), two (F0&B1, F1&B0), two (B1, F1&B0),
// (B1, B0) then (I1, I0) (odd rank: zero bubble from the second iteration, before the B1), two
// (W, I0) whose Ws are the queue's oldest (6W7, then 1W5), and the two Ws left.
TEST(DualPipeV, ProgramFollowsTheReferencesEightPhasesS4M8) {
  EXPECT_EQ(to_text(make(4, 8)),
            "rank 0: 0F0 0F1 0F2 0F3 0F4 0F5 0F6 7F0 7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 0F7& 7B3 "
            "7F4& 0B0 7B4 7F5& 0B1 7B5 7F6& 0B2 7B6 7F7& 0B3 7B7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 "
            "0W7\n"
            "rank 1: 1F0 1F1 1F2 1F3 1F4 6F0 1F5 6F1 6I0 6W0 6F2 6I1 6W1 6F3 1F6& 6B2 6F4& 1B0 "
            "1F7& 6B3 6F5& 1B1 6B4 6F6& 1B2 6B5 6F7& 1B3 6B6 1B4 6I7 1I5 6W7 1I6 1W5 1I7 1W6 "
            "1W7\n"
            "rank 2: 2F0 2F1 2F2 5F0 2F3 5F1 2F4 5F2 5I0 5W0 5F3 2F5& 5B1 5F4& 2B0 2F6& 5B2 5F5& "
            "2B1 2F7& 5B3 5F6& 2B2 5B4 5F7& 2B3 5B5 2B4 5B6 2I5 5I7 2I6 2W5 2I7 5W7 2W6 2W7\n"
            "rank 3: 3F0 4F0 3F1 4F1 3F2 4F2 3F3 4F3 3F4 4B0 4F4& 3B0 3F5& 4B1 4F5& 3B1 3F6& 4B2 "
            "4F6& 3B2 3F7& 4B3 4F7& 3B3 4B4 3B4 4B5 3B5 4I6 3I6 4I7 3I7 4W6 3W6 4W7 3W7\n");
}

// docs/schedules.md, worked example: S = 2, M = 4, f = i = w = 1 (b = 2) per chunk, a pair's
// halves one after the other. The pair 3F2& 0B0 starts at 11 although rank 0 is free at 10 and
// 2F2 ended at 9: a pair waits for both inputs, here 1B0's gradient (ends 11).
TEST(DualPipeV, HandWorkedTimelineS2M4) {
  const Program p = make(2, 4);
  const SimResult sim = simulate(lower(p, {0, 0, false}), Costs{});
  const std::vector<std::string> expected = {
      "0F0@0 0F1@1 0F2@2 3F0@3 3I0@4 3W0@5 3F1@6 0F3&@7 3B1@8 3F2&@11 0B0@12 3B2@14 3F3&@17 "
      "0B1@18 3B3@20 0I2@22 0W2@23 0I3@24 0W3@25",
      "1F0@1 2F0@2 1F1@3 2F1@4 1F2@5 2B0@6 2F2&@8 1B0@9 1F3&@11 2B1@12 2F3&@14 1B1@15 2B2@17 "
      "1B2@19 2I3@22 1I3@23 2W3@24 1W3@25",
  };
  EXPECT_EQ(timeline_text(sim, 2), expected);
  EXPECT_DOUBLE_EQ(sim.step_time, 26);  // work 2M(f + b) = 24, idle (S-1)(F&B + b - 3w) = 2
  EXPECT_NEAR(sim.bubble_fraction, 4.0 / 52, 1e-12);
  EXPECT_NEAR(closed_form_bubble("dualpipev", p.layout, Costs{}), 4.0 / 52, 1e-12);
  EXPECT_EQ(sim.peak_activations, (std::vector<int>{5, 5}));  // PP + 1 = 2S + 1 chunks
}

// ---- properties over many layouts -------------------------------------------------------------

// Every S <= 8 and M in [2S, 32]: the program validates, lowers with each weight-slot budget,
// replays without deadlock, meets DeepSeek's closed form at unit costs and holds 2S + 1 chunk
// activations at most (the table's PP + 1). Every pair runs a forward of one chunk and a
// backward of the other, and the lowered list receives both halves' inputs before the pair.
TEST(DualPipeV, EveryLayoutValidatesReplaysMeetsTheClosedFormAndPairsChunks) {
  int checked = 0;
  for (int S = 1; S <= 8; ++S)
    for (int M = 2 * S; M <= 32; ++M) {
      SCOPED_TRACE("S=" + std::to_string(S) + " M=" + std::to_string(M));
      const Program p = make(S, M);
      ASSERT_NO_THROW(validate(p));
      for (int r = 0; r < S; ++r) {
        const auto& list = p.ranks[r];
        for (std::size_t i = 0; i + 1 < list.size(); ++i) {
          if (!list[i].overlap) continue;
          EXPECT_EQ(list[i + 1].kind, Kind::B);
          EXPECT_EQ(list[i].stage + list[i + 1].stage, 2 * S - 1) << "chunks 0 and 1 of rank " << r;
        }
      }
      for (int slots : {0, 2, -1}) {
        const Program lowered = lower(p, {slots, 0, true});
        ASSERT_NO_THROW(replay(lowered));
        const SimResult sim = simulate(lowered, Costs{});
        EXPECT_NEAR(sim.bubble_fraction, closed_form_bubble("dualpipev", p.layout, Costs{}), 1e-9);
        EXPECT_EQ(*std::max_element(sim.peak_activations.begin(), sim.peak_activations.end()),
                  2 * S + 1);
        for (int r = 0; r < S; ++r) {
          const auto& list = lowered.ranks[r];
          std::set<std::tuple<bool, int, int>> received;  // (forward?, stage, microbatch)
          for (std::size_t i = 0; i < list.size(); ++i) {
            const Action& a = list[i];
            if (a.kind == Kind::RECV_F) received.insert({true, a.stage, a.index});
            if (a.kind == Kind::RECV_B) received.insert({false, a.stage, a.index});
            if (!a.overlap) continue;
            const Action& b = list[overlap_partner(list, i)];
            if (lowered.layout.rank_of(b.stage + 1) != r) {
              EXPECT_TRUE(received.count({false, b.stage, b.index})) << to_string(b);
            }
            if (a.stage > 0 && lowered.layout.rank_of(a.stage - 1) != r) {
              EXPECT_TRUE(received.count({true, a.stage, a.index})) << to_string(a);
            }
          }
        }
      }
      ++checked;
    }
  EXPECT_EQ(checked, 8 * 33 - 2 * 36);  // sum over S of (32 - 2S + 1)
}

// ---- the pair in the IR ----------------------------------------------------------------------

TEST(OverlapPair, TextFormMarksTheForwardAndRoundTrips) {
  const Action a = parse_action("0F4&");
  EXPECT_TRUE(a.overlap);
  EXPECT_EQ(a.kind, Kind::F);
  EXPECT_EQ(to_string(a), "0F4&");
  EXPECT_FALSE(parse_action("0F4").overlap);
  EXPECT_NE(testing::error_of([] { parse_action("3B0&"); }).find("only a forward"),
            std::string::npos);
  const Program lowered = lower(make(2, 4), {2, 0, true});
  const std::string text = to_text(lowered);
  EXPECT_NE(text.find("0F3&"), std::string::npos);
  EXPECT_EQ(to_text(parse_program(lowered.layout, text)), text);
}

TEST(OverlapPair, ValidateRejectsPairsThatCannotOverlap) {
  Layout l{2, 1, 2};
  // 1F1 paired with 1B1: the backward needs that forward's output.
  EXPECT_NE(testing::error_of([&] {
              validate(parse_program(l, "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1F1& 1B1 1B0\n"));
            }).find("1F1& is paired with 1B1 of the same microbatch"),
            std::string::npos);
  // a forward paired with a forward
  EXPECT_NE(testing::error_of([&] {
              validate(parse_program(l, "rank 0: 0F0& 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1\n"));
            }).find("0F0& is paired with 0F1, which is not a backward"),
            std::string::npos);
  // nothing after the pair's forward
  EXPECT_NE(testing::error_of([&] {
              validate(parse_program(l, "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1B1 1F1&\n"));
            }).find("starts an F&B pair with nothing after it"),
            std::string::npos);
  // a valid pair: 1F1 with 1B0
  EXPECT_NO_THROW(
      validate(parse_program(l, "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1F1& 1B0 1B1\n")));
}

// A pair is one unit: its forward waits for its backward's input. S = 2, R = 1, M = 2, f = 1,
// b = 2, rank 0 pairs 0F1 (input: the embedding, ready at 0) with 0B0 (input: 1B0's gradient).
// Worked by hand: rank 1 runs 1F0 1-2 and 1B0 2-4, so the pair starts at 4, not when rank 0 is
// free (1); 1F1 then waits for 0F1 (ends 5) and 0B1 for 1B1 (ends 8): step 10. The same order
// unpaired takes 9 (0F1 1-2, 0B0 4-6, 1F1 4-5, 1B1 5-7, 0B1 7-9).
TEST(OverlapPair, APairStartsWhenBothInputsAreReady) {
  const Layout l{2, 1, 2};
  const Program paired = parse_program(l, "rank 0: 0F0 0F1& 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1\n");
  const Program unpaired = parse_program(l, "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1\n");
  const SimResult with_pair = simulate(lower(paired, {0, 0, false}), Costs{});
  EXPECT_EQ(timeline_text(with_pair, 2),
            (std::vector<std::string>{"0F0@0 0F1&@4 0B0@5 0B1@8", "1F0@1 1B0@2 1F1@5 1B1@6"}));
  EXPECT_DOUBLE_EQ(with_pair.step_time, 10);
  const SimResult without = simulate(lower(unpaired, {0, 0, false}), Costs{});
  EXPECT_EQ(timeline_text(without, 2),
            (std::vector<std::string>{"0F0@0 0F1@1 0B0@4 0B1@7", "1F0@1 1B0@2 1F1@4 1B1@5"}));
  EXPECT_DOUBLE_EQ(without.step_time, 9);
  // Lowered, the pair's receive of 1B0's gradient comes before the pair, not between its halves.
  const Program lowered = lower(paired, {0, 0, false});
  std::vector<std::string> names;
  for (const Action& a : lowered.ranks[0]) names.push_back(to_string(a));
  const auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n); };
  EXPECT_LT(at("0RECV_B0"), at("0F1&"));
  EXPECT_EQ(at("0F1&") + 2, at("0B0"));  // only the forward's send between the halves
  EXPECT_EQ(*(at("0F1&") + 1), "0SEND_F1");
}

// `carousel schedule`'s picture draws one black border per pair, around both halves: S = 2,
// M = 4 has 3 pairs on each rank (the program above), 3F2& 0B0 spanning 11 to 14.
TEST(OverlapPair, TheTimelinePictureBordersEachPair) {
  const SimResult sim = simulate(lower(make(2, 4), {0, 0, false}), Costs{});
  const std::string svg = timeline_svg(sim, 2, "dualpipev");
  int pairs = 0;
  for (std::size_t at = svg.find("class=\"pair\""); at != std::string::npos;
       at = svg.find("class=\"pair\"", at + 1))
    ++pairs;
  EXPECT_EQ(pairs, 6);
  EXPECT_NE(svg.find("<title>3F2&amp; 0B0 overlapped</title>"), std::string::npos);
  EXPECT_EQ(svg.find("3F2&<"), std::string::npos);  // no raw '&': the SVG stays valid XML
}

TEST(DualPipeV, ConstraintsAreClearErrors) {
  EXPECT_NE(testing::error_of([] { make(2, 4, 1); }).find("dualpipev runs two chunks per rank"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { make(2, 4, 3); }).find("got R=3"), std::string::npos);
  EXPECT_NE(testing::error_of([] {
              make(4, 7);
            }).find("dualpipev needs num_pipeline_microbatches >= 2 x ici_pipeline_parallelism"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { make(4, 7); }).find("use M >= 8"), std::string::npos);
  EXPECT_NO_THROW(make(4, 8));
}

}  // namespace
}  // namespace carousel::schedule
