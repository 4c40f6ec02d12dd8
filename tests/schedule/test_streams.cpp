// test_streams.cpp — the GPU stream plan (host/schedule/streams.h) proven on the recording
// model: every registered schedule, layouts with S <= 4, M <= 8, R <= 3, every weight mode with
// FSDP on and off, is hazard-free on simulated streams; BSW prefetches can overlap compute and
// expose less all-gather time than gathering on every use; plans are deterministic; and dropping
// a single wait from a plan makes the checker report the hazard.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include "compute/error.h"
#include "host/schedule/passes.h"
#include "host/schedule/registry.h"
#include "host/runtime/step_capture.h"
#include "host/schedule/streams.h"
#include "tests/support/test_util.h"

namespace carousel::schedule {
namespace {

// Every registered schedule on every layout its check accepts, S <= 4, M <= 8, R <= 3, with
// layers outside the pipeline where the schedule runs them.
std::vector<ScheduleSpec> every_spec() {
  std::vector<ScheduleSpec> out;
  for (const ScheduleInfo& row : schedules())
    for (int S : {1, 2, 3, 4})
      for (int M : {1, 2, 3, 4, 8})
        for (int R : {1, 2, 3})
          for (int g : {0, 4})
            for (bool outside : {false, true}) {
              if ((g != 0 && !row.microbatch_groups) || (outside && !row.forwards_first)) continue;
              Layout layout{S, R, M};
              layout.outside = outside;
              const ScheduleSpec spec{
                  .kind = std::string(row.name), .layout = layout, .group_size = g};
              if (testing::error_of([&] { check_schedule(spec); }) != "<no error>") continue;
              out.push_back(spec);
            }
  return out;
}

std::string describe(const ScheduleSpec& s, int slots, bool fsdp) {
  return fmt::format("{} S={} M={} R={} g={} outside={} slots={} fsdp={}", s.kind, s.layout.ranks,
                     s.layout.microbatches, s.layout.repeats, s.group_size, s.layout.outside, slots,
                     fsdp);
}

Costs with_comm(double all_gather, double p2p, double reduce_scatter) {
  Costs c;  // f = 1, b = 2, i = w = 1
  c.outside = 2;  // an OUTSIDE action, where the program has them
  c.all_gather = all_gather;
  c.p2p = p2p;
  c.reduce_scatter = reduce_scatter;
  return c;
}

std::string first_violations(const std::vector<std::string>& v) {
  std::string out;
  for (std::size_t k = 0; k < v.size() && k < 3; ++k) out += v[k] + "\n";
  return out;
}

Program lowered_of(const ScheduleSpec& spec, int slots, bool fsdp) {
  return lower(generate(spec), {slots, 0, fsdp});
}

TEST(Streams, EveryScheduleLayoutAndWeightModeIsHazardFree) {
  const std::vector<ScheduleSpec> specs = every_spec();
  std::map<std::string, int> per_schedule;
  int runs = 0;
  for (const ScheduleSpec& spec : specs)
    for (bool fsdp : {true, false})
      for (int slots : {0, 2, -1}) {
        if (!fsdp && slots != 0) continue;  // no slots without FSDP
        SCOPED_TRACE(describe(spec, slots, fsdp));
        const Program lowered = lowered_of(spec, slots, fsdp);
        const std::vector<StreamPlan> plans = plan_streams(lowered);
        for (int r = 0; r < spec.layout.ranks; ++r) {
          // No host blocking inside the step: only before the optimizer, the last action.
          ASSERT_EQ(plans[r].host_blocks.size(), 1u);
          EXPECT_EQ(plans[r].host_blocks[0].action, int(lowered.ranks[r].size()) - 1);
          EXPECT_EQ(lowered.ranks[r].back().kind, Kind::OPTIMIZER);
          for (const StreamWait& w : plans[r].waits) {  // a wait crosses streams, forwards
            EXPECT_NE(plans[r].stream[w.action], plans[r].events[w.event].stream);
            EXPECT_LT(plans[r].events[w.event].action, w.action);
          }
        }
        for (const Costs& c : {with_comm(0, 0, 0), with_comm(1, 0.5, 1), with_comm(4, 3, 4)}) {
          const Recording rec = record_streams(lowered, plans, c);
          const auto violations = check_recording(lowered, rec);
          EXPECT_TRUE(violations.empty()) << first_violations(violations);
          // The recording covers every read and write the data flow has.
          std::size_t expected = 0;
          for (int r = 0; r < spec.layout.ranks; ++r) expected += data_accesses(lowered, r).size();
          EXPECT_EQ(rec.accesses.size(), expected);
          ++runs;
        }
        ++per_schedule[spec.kind];
      }
  for (const ScheduleInfo& row : schedules()) {
    EXPECT_GE(per_schedule[std::string(row.name)], 12) << row.name;
  }
  EXPECT_GT(runs, 900);
}

// Every rank that runs the same program derives the same plan: the FSDP and data-parallel
// members of a pipeline rank lower their own copy and must agree on every event.
TEST(Streams, SamePlanOnEveryRankThatSharesAProgram) {
  for (const ScheduleSpec& spec : every_spec())
    for (int slots : {0, 2, -1}) {
      SCOPED_TRACE(describe(spec, slots, true));
      const Program a = lowered_of(spec, slots, true);
      const Program b = lowered_of(spec, slots, true);        // another member's copy
      const Program c = parse_program(a.layout, to_text(a));  // read back from text
      const std::vector<StreamPlan> all = plan_streams(a);
      for (int r = 0; r < spec.layout.ranks; ++r) {
        EXPECT_EQ(plan_streams(b, r), all[r]);
        EXPECT_EQ(plan_streams(c, r), all[r]);
        EXPECT_EQ(to_text(b, plan_streams(b, r)), to_text(a, all[r]));
      }
    }
}

// BSW: each prefetch is enqueued before the compute action that precedes its stage's use, and
// waits for no compute event later than the RELEASE before that compute, so the gather can run
// while it computes. Exposed all-gather time (the compute stream's idle at AG_WAITs) with 2 slots
// is below gathering on every use (0 slots) when comm cost <= compute cost.
TEST(Streams, BufferSlidingWindowPrefetchOverlapsComputeAndExposesLess) {
  int prefetches = 0, first_use = 0, evicted_in_use = 0;
  double exposed[2] = {0, 0};  // summed over every config: 0 slots, 2 slots
  for (const ScheduleSpec& spec : every_spec()) {
    SCOPED_TRACE(describe(spec, 2, true));
    const Program bsw = lowered_of(spec, 2, true);
    const std::vector<StreamPlan> plans = plan_streams(bsw);
    for (int r = 0; r < spec.layout.ranks; ++r) {
      const auto& list = bsw.ranks[r];
      for (int i = 0; i < int(list.size()); ++i) {
        if (list[i].kind != Kind::AG_ISSUE) continue;
        int use = i + 1;  // the compute after this gather's AG_WAIT
        while (list[use].kind != Kind::AG_WAIT || list[use].stage != list[i].stage) ++use;
        while (!list[use].is_compute()) ++use;
        int preceding = -1;  // the compute action before the use
        for (int j = 0; j < use; ++j) {
          if (list[j].is_compute()) preceding = j;
        }
        if (preceding < 0) {
          ++first_use;  // the rank's first compute: nothing to overlap with
          continue;
        }
        // With more local stages than slots, furthest-next-use eviction may free the slot the
        // preceding compute itself reads (interleaved_1f1b, R = 3): the reuse guard then orders
        // the gather after that compute, and it cannot overlap. Counted, not hidden.
        bool evicts_preceding = false;
        for (int j = preceding + 1; j < i; ++j) {
          evicts_preceding = evicts_preceding ||
                             (list[j].kind == Kind::RELEASE && list[j].index == list[i].index &&
                              list[j].stage == list[preceding].stage);
        }
        if (evicts_preceding) {
          ++evicted_in_use;
          EXPECT_GT(spec.layout.repeats, 2);
          continue;
        }
        ++prefetches;
        EXPECT_LT(i, preceding) << to_string(list[i]) << " on rank " << r;
        for (const StreamWait& w : plans[r].waits) {
          if (w.action == i) {
            EXPECT_LT(plans[r].events[w.event].action, preceding);
          }
        }
      }
    }
    for (double ag : {1.0, 0.5}) {  // comm <= compute (f = 1, b = 2)
      const Costs c = with_comm(ag, 0, ag);
      double e[2];
      for (int k = 0; k < 2; ++k) {
        const Program lowered = k == 0 ? lowered_of(spec, 0, true) : bsw;
        const Recording rec = record_streams(lowered, plan_streams(lowered), c);
        e[k] = 0;
        for (double x : rec.exposed_all_gather) e[k] += x;
        exposed[k] += e[k];
      }
      // The OUTSIDE actions between a rank's last F and first B hide a gather per use behind
      // them as well as the slots do (S = M = 1: there is nothing else to hide).
      if (spec.layout.outside)
        EXPECT_LE(e[1], e[0]) << "all_gather=" << ag;
      else
        EXPECT_LT(e[1], e[0]) << "all_gather=" << ag;
    }
  }
  EXPECT_GT(prefetches, 100);
  EXPECT_GT(first_use, 0);
  fmt::print(
      "BSW prefetches: {} can overlap the preceding compute, {} follow the rank's first "
      "compute, {} refill the slot the preceding compute reads\n",
      prefetches, first_use, evicted_in_use);
  fmt::print("exposed all-gather time summed over every config: 2 slots {} / 0 slots {} = {:.3f}\n",
             exposed[1], exposed[0], exposed[1] / exposed[0]);
}

// The figure of docs/pipeline.md: circular S = 4, M = 8, R = 2, all_gather = f = 1.
TEST(Streams, ExposedAllGatherOfTheDocs) {
  const ScheduleSpec spec{.kind = "circular", .layout = Layout{4, 2, 8}};
  double exposed[3], step[3];
  const int modes[3] = {0, 2, -1};
  for (int k = 0; k < 3; ++k) {
    const Program lowered = lowered_of(spec, modes[k], true);
    const Recording rec = record_streams(lowered, plan_streams(lowered), with_comm(1, 0, 1));
    EXPECT_TRUE(check_recording(lowered, rec).empty());
    exposed[k] = *std::max_element(rec.exposed_all_gather.begin(), rec.exposed_all_gather.end());
    step[k] = rec.step_time;
    fmt::print("slots {:>2}: exposed all-gather (worst rank) {}, step {}\n", modes[k], exposed[k],
               step[k]);
  }
  EXPECT_GE(exposed[0], 32);  // every one of 32 uses waits for its gather (and one for an RS)
  EXPECT_LT(exposed[1], exposed[0] / 8);
  EXPECT_LT(step[1], step[0]);
}

// Mutation: the checker can fail. Each wait of these plans is dropped in turn. With plain
// costs (communication slower than compute) some drops go unseen because the timing happens to
// be safe, but every reason of wait is caught at least once; when the producer the dropped wait
// guarded is also made slow (an adversarial timing), every single drop is caught, so no wait of
// the plan is redundant.
TEST(Streams, DroppingAWaitIsReportedAsAHazard) {
  const Costs slow = with_comm(3, 2, 3);
  std::map<WaitReason, int> dropped, caught, caught_adversarial;
  for (const auto& [kind, S, M, R, slots] :
       std::vector<std::tuple<std::string, int, int, int, int>>{{"circular", 2, 4, 2, 0},
                                                                {"circular", 2, 4, 2, 2},
                                                                {"circular", 3, 3, 3, -1},
                                                                {"1f1b", 3, 4, 1, 0},
                                                                {"zb_h1", 2, 4, 1, 2},
                                                                {"interleaved_1f1b", 2, 4, 3, 2}}) {
    const ScheduleSpec spec{.kind = kind, .layout = Layout{S, R, M}};
    SCOPED_TRACE(describe(spec, slots, true));
    const Program lowered = lowered_of(spec, slots, true);
    const std::vector<StreamPlan> plans = plan_streams(lowered);
    ASSERT_TRUE(check_recording(lowered, record_streams(lowered, plans, slow)).empty());
    for (int r = 0; r < S; ++r)
      for (std::size_t k = 0; k < plans[r].waits.size(); ++k) {
        std::vector<StreamPlan> mutated = plans;
        const StreamWait w = plans[r].waits[k];
        mutated[r].waits.erase(mutated[r].waits.begin() + k);
        ++dropped[w.reason];
        caught[w.reason] +=
            !check_recording(lowered, record_streams(lowered, mutated, slow)).empty();
        std::vector<std::vector<double>> extra(S);
        extra[r].assign(lowered.ranks[r].size(), 0.0);
        // The guarded producer is slow: the last real work at or before the event on its stream
        // (a RELEASE is a marker; the compute before it is what read the slot).
        int producer = plans[r].events[w.event].action;
        while (lowered.ranks[r][producer].kind == Kind::RELEASE) --producer;
        extra[r][producer] = 100;
        // ...and the intact plan stays hazard-free under that timing.
        EXPECT_TRUE(check_recording(lowered, record_streams(lowered, plans, slow, extra)).empty());
        const auto v = check_recording(lowered, record_streams(lowered, mutated, slow, extra));
        caught_adversarial[w.reason] += !v.empty();
        EXPECT_FALSE(v.empty()) << "dropping " << reason_name(w.reason) << " wait of "
                                << to_string(lowered.ranks[r][w.action]) << " on rank " << r;
      }
    // And the host block: the optimizer would read gradients still being reduced.
    std::vector<StreamPlan> mutated = plans;
    mutated[0].host_blocks.clear();
    EXPECT_FALSE(check_recording(lowered, record_streams(lowered, mutated, slow)).empty());
  }
  for (WaitReason why :
       {WaitReason::activation_ready, WaitReason::received, WaitReason::weights_gathered,
        WaitReason::slot_free, WaitReason::gradient_ready}) {
    EXPECT_GT(caught[why], 0) << reason_name(why);
    EXPECT_EQ(caught_adversarial[why], dropped[why]) << reason_name(why);
    fmt::print(
        "dropping one {:<17} wait: caught {:>3} of {:>3} (plain costs), {:>3} (slow "
        "producer)\n",
        reason_name(why), caught[why], dropped[why], caught_adversarial[why]);
  }
}

// The exact report for the simplest mutation: a compute that no longer waits for its gather.
TEST(Streams, ReadBeforeTheGatherEndsIsNamed) {
  const Program lowered = lowered_of({.kind = "gpipe", .layout = Layout{1, 1, 1}}, 0, true);
  std::vector<StreamPlan> plans = plan_streams(lowered);
  ASSERT_EQ(plans[0].waits.front().reason, WaitReason::weights_gathered);
  plans[0].waits.erase(plans[0].waits.begin());
  const auto v = check_recording(lowered, record_streams(lowered, plans, with_comm(1, 0, 1)));
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v[0], "rank 0: 0F0 reads slot 0 v0 from 0 but 0AG_ISSUE0 writes it until 1");
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// Lists the plan cannot order are rejected, naming the action.
TEST(Streams, MalformedListsAreRejected) {
  const Layout l{1, 1, 1};
  auto error = [&](const std::string& text) {
    return testing::error_of([&] { plan_streams(parse_program(l, text), 0); });
  };
  EXPECT_CONTAINS(error("rank 0: 0AG_WAIT0 0AG_ISSUE0 0F0 0RELEASE0 0B0 OPTIMIZER"),
                  "waits at 0AG_WAIT0 for a gather of stage 0 into slot 0");
  EXPECT_CONTAINS(error("rank 0: 0AG_ISSUE0 0AG_WAIT0 0F0 0AG_ISSUE0 0B0 OPTIMIZER"),
                  "refills slot 0 (0AG_ISSUE0) before the RELEASE");
  EXPECT_CONTAINS(error("rank 0: 0AG_ISSUE0 0AG_WAIT0 0F0 0RELEASE0 0B0 OPTIMIZER"),
                  "no slot holds stage 0's weights");
  EXPECT_CONTAINS(error("rank 0: 0F0 0REDUCE_SCATTER 0B0 OPTIMIZER"),
                  "reduce-scatters stage 0 before any backward");
}

// Which ranks' forward and backward a graph can capture (host/runtime/step_capture.h): those
// that communicate in neither — one pipeline rank without FSDP, every schedule and layout —
// while every rank of a pipeline (S > 1) sends or receives, FSDP gathers, and tensor and context
// ranks exchange inside each layer; data replicas (D) communicate only in the optimizer.
TEST(Streams, StepGraphsCaptureExactlyTheRanksWhoseStepDoesNotCommunicate) {
  int capturable = 0;
  for (const ScheduleSpec& spec : every_spec())
    for (bool fsdp : {false, true})
      for (int slots : fsdp ? std::vector<int>{0, 2, -1} : std::vector<int>{0}) {
        SCOPED_TRACE(describe(spec, slots, fsdp));
        const Program lowered = lowered_of(spec, slots, fsdp);
        for (int r = 0; r < spec.layout.ranks; ++r) {
          MeshShape mesh{.data = 2, .stages = spec.layout.ranks, .fsdp = fsdp ? 2 : 1};
          const RankPlace place{.mesh = mesh, .data_rank = 1, .stage_rank = r};
          const std::string why = capture_blocker(lowered, place);
          const bool expected = spec.layout.ranks == 1 && !fsdp;
          EXPECT_EQ(why.empty(), expected) << why;
          EXPECT_NE(capture_blocker(lowered, place, /*host_routing=*/true).find("on the host"),
                    std::string::npos);  // mixture-of-experts routing
          capturable += why.empty();
          if (spec.layout.ranks > 1) {
            EXPECT_NE(why.find("pipeline sends"), std::string::npos) << why;
          }
          if (fsdp) {
            EXPECT_NE(why.find("FSDP weight gathers"), std::string::npos) << why;
          }
          for (auto [tensor, context] : {std::pair{2, 1}, std::pair{1, 2}}) {
            mesh.tensor = tensor;
            mesh.context = context;
            const std::string parallel = capture_blocker(lowered, {.mesh = mesh, .stage_rank = r});
            EXPECT_NE(parallel.find(tensor > 1 ? "tensor-parallel" : "context-parallel"),
                      std::string::npos)
                << parallel;
          }
        }
      }
  EXPECT_GT(capturable, 20);  // every schedule that runs on one pipeline rank
}

}  // namespace
}  // namespace carousel::schedule
