// test_cost_calibration.cpp — per-layer costs measured from traces: exact figures from traces
// built by hand, the schedule_costs.yml round trip through schedule_costs_file, and that the
// file a profiled run writes reproduces that run's own calibrated prediction.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/report/cost_calibration.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"
#include "host/schedule/passes.h"
#include "tests/support/profiled_run.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;
namespace sch = schedule;
using Clock = StepTrace::Clock;

// One step of `rank` holding (kind, stage, microseconds) slices laid end to end.
StepTrace trace_of(int rank, const std::vector<std::tuple<sch::Kind, int, double>>& slices) {
  StepTrace trace(rank, 0);
  Clock::time_point at{};
  trace.begin_step(0, at);
  int microbatch = 0;
  for (const auto& [kind, stage, micros] : slices) {
    const auto end = at + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double, std::micro>(micros));
    trace.compute(sch::Action{.kind = kind, .stage = stage, .index = microbatch++}, at, end);
    at = end;
  }
  trace.end_step(at);
  return trace;
}

// Two stages of 2 layers: the first stage's slices give 100 us per layer forward and 200 us
// backward; the last stage took 300 and 600, i.e. 100 + 200 us beyond its 2 layers, which is
// one layer's 100 + 200: the head is 1.0 layer.
TEST(CostCalibration, PerLayerMeansAndTheHeadFromHandBuiltTraces) {
  const StepTrace first = trace_of(0, {{sch::Kind::F, 0, 190},
                                       {sch::Kind::F, 0, 210},
                                       {sch::Kind::B, 0, 400},
                                       {sch::Kind::B, 0, 400}});
  const StepTrace last = trace_of(1, {{sch::Kind::F, 1, 300}, {sch::Kind::B, 1, 600}});
  const CalibratedCosts c = calibrate_costs({&first, &last}, sch::StageLayers({2, 2}), 0.25);
  EXPECT_NEAR(c.f, 100, 1e-6);
  EXPECT_NEAR(c.b, 200, 1e-6);
  EXPECT_NEAR(c.w, 100, 1e-6);  // B not split: half of it
  EXPECT_NEAR(c.head, 1.0, 1e-6);
  EXPECT_TRUE(c.measured_head);

  // Uneven [1, 3] with I/W split: per layer F 100, I 60, W 40 from stage 0; the last stage's
  // 3 layers + 0.5 layer of head: F 350, I 210, W 140.
  const StepTrace a =
      trace_of(0, {{sch::Kind::F, 0, 100}, {sch::Kind::I, 0, 60}, {sch::Kind::W, 0, 40}});
  const StepTrace b =
      trace_of(1, {{sch::Kind::F, 1, 350}, {sch::Kind::I, 1, 210}, {sch::Kind::W, 1, 140}});
  const CalibratedCosts split = calibrate_costs({&a, &b}, sch::StageLayers({1, 3}), 0);
  EXPECT_NEAR(split.f, 100, 1e-6);
  EXPECT_NEAR(split.i, 60, 1e-6);
  EXPECT_NEAR(split.w, 40, 1e-6);
  EXPECT_NEAR(split.b, 100, 1e-6);
  EXPECT_NEAR(split.head, 0.5, 1e-6);
  const sch::Costs costs = calibrated_schedule_costs(split, sch::StageLayers({1, 3}), {});
  EXPECT_EQ(costs.stage_scale, (std::vector<double>{1, 3.5}));

  // One stage: the head is the configured value, the layers carry everything.
  const StepTrace only = trace_of(0, {{sch::Kind::F, 0, 400}, {sch::Kind::B, 0, 800}});
  const CalibratedCosts one = calibrate_costs({&only}, sch::StageLayers({4}), 0.25);
  EXPECT_NEAR(one.f, 100, 1e-6);
  EXPECT_EQ(one.head, 0.25);
  EXPECT_FALSE(one.measured_head);
}

// Layers outside the pipeline: two stages of 2 layers at 100 / 200 us per layer (the last one
// now without the head), and OUTSIDE actions of 3 layers + the head taking 1050 us = (100 + 200)
// x 3.5: the head is 0.5 layer, and the calibrated model charges each OUTSIDE that whole time.
// Under full remat the stages' B recompute the forward and an OUTSIDE's layers do not: 3 x (100
// + 100) + 0.5 x 300 = 750 us.
TEST(CostCalibration, TheHeadFromTheOutsideActions) {
  const StepTrace first =
      trace_of(0, {{sch::Kind::F, 0, 200}, {sch::Kind::OUTSIDE, 2, 1000}, {sch::Kind::B, 0, 400}});
  const StepTrace last =
      trace_of(1, {{sch::Kind::F, 1, 200}, {sch::Kind::OUTSIDE, 2, 1100}, {sch::Kind::B, 1, 400}});
  const sch::StageLayers stages({2, 2});
  const CalibratedCosts c = calibrate_costs({&first, &last}, stages, 0.25, 3);
  EXPECT_NEAR(c.f, 100, 1e-6);
  EXPECT_NEAR(c.b, 200, 1e-6);
  EXPECT_NEAR(c.head, 0.5, 1e-6);
  EXPECT_TRUE(c.measured_head);
  const sch::Costs costs = calibrated_schedule_costs(c, stages, {});
  EXPECT_EQ(costs.stage_scale, (std::vector<double>{2, 2}));  // no head on the last stage
  EXPECT_NEAR(costs.outside, 1050, 1e-6);

  const StepTrace a =
      trace_of(0, {{sch::Kind::F, 0, 200}, {sch::Kind::OUTSIDE, 2, 700}, {sch::Kind::B, 0, 400}});
  const StepTrace b =
      trace_of(1, {{sch::Kind::F, 1, 200}, {sch::Kind::OUTSIDE, 2, 800}, {sch::Kind::B, 1, 400}});
  const CalibratedCosts full = calibrate_costs({&a, &b}, stages, 0.25, 3, /*full_remat=*/true);
  EXPECT_NEAR(full.head, 0.5, 1e-6);
  EXPECT_NEAR(calibrated_schedule_costs(full, stages, {}).outside, 750, 1e-6);
}

// Steps 0, 1, ... of slices at given times: (kind, stage, microbatch, start us, end us); step i
// spans [1000 i, 1000 (i + 1)) us.
using TimedSlices = std::vector<std::tuple<sch::Kind, int, int, double, double>>;
StepTrace traced_steps(int rank, const std::vector<TimedSlices>& steps) {
  StepTrace trace(rank, 0);
  const Clock::time_point zero{};
  auto at = [&](double micros) {
    return zero + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double, std::micro>(micros));
  };
  for (std::size_t step = 0; step < steps.size(); ++step) {
    trace.begin_step(std::int64_t(step), at(1000.0 * double(step)));
    for (const auto& [kind, stage, microbatch, start, end] : steps[step]) {
      trace.compute(sch::Action{.kind = kind, .stage = stage, .index = microbatch}, at(start),
                    at(end));
    }
    trace.end_step(at(1000.0 * double(step + 1)));
  }
  return trace;
}

StepTrace timed_trace(int rank, const TimedSlices& slices) { return traced_steps(rank, {slices}); }

// Hand-offs from rank 0's F of stage 0 to rank 1's F of stage 1: 30, 50 and 40 us after the
// producer ended, rank 1 idle each time: median 40. A consumer whose rank was still busy when
// its input came (rank 1's F of microbatch 3: its input ended at 900, the rank at 950) is not a
// hand-off measurement.
// An F&B pair that took turns (one stage of 2 layers): the F in two parts of 100 and 300 us, the
// B in two of 180 and 20, with a wait for the F's exchange and hand-overs of 20 and 40 us
// between them. Per layer: F 200, B 100 (the parts summed; the wait and the hand-overs are not
// compute); a turn 30.
TEST(CostCalibration, PartsAreSummedAndHandOversAreTheTurn) {
  const auto at = [](double micros) {
    return Clock::time_point{} + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double, std::micro>(micros));
  };
  StepTrace trace(0, 0);
  trace.begin_step(0, at(0));
  const sch::Action f{sch::Kind::F, 0, 1}, b{sch::Kind::B, 0, 0};
  const sch::Action f_exchange{sch::Kind::A2A_F, 0, 1}, b_exchange{sch::Kind::A2A_B, 0, 0};
  trace.compute_part(f, at(0), at(100), 0);
  trace.hand_over(b_exchange, at(100), at(120));
  trace.compute_part(b, at(120), at(300), 0);
  trace.hand_over(f_exchange, at(300), at(340));
  trace.compute(f_exchange, at(340), at(400));  // the rest of the F's exchange
  trace.compute_part(f, at(400), at(700), 1);
  trace.compute_part(b, at(700), at(720), 1);
  trace.end_step(at(800));
  const CalibratedCosts c = calibrate_costs({&trace}, sch::StageLayers({2}), 0);
  EXPECT_NEAR(c.f, 200, 1e-6);
  EXPECT_NEAR(c.b, 100, 1e-6);
  EXPECT_NEAR(c.turn, 30, 1e-6);
  const std::vector<ComputeTime> whole = compute_times(trace);
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_NEAR(whole[0].end_us - whole[0].start_us, 700, 1e-6);  // F: first part to last
  EXPECT_NEAR(whole[0].busy_us, 400, 1e-6);
}

// One expert communicator runs a rank's exchanges one at a time: posted at 100 and done at 400,
// posted at 300 (queued behind it) and done at 600, posted at 700 and done at 750 take 300, 200
// and 50.
TEST(CostCalibration, AnExchangeQueuedBehindAnotherStartsWhenItEnds) {
  EXPECT_EQ(exchange_times({{300, 600}, {100, 400}, {700, 750}}),
            (std::vector<double>{300, 200, 50}));
}

TEST(CostCalibration, HandOffIsTheMedianWaitOfIdleConsumers) {
  using K = sch::Kind;
  const StepTrace first = timed_trace(0, {{K::F, 0, 0, 0, 100},
                                          {K::F, 0, 1, 300, 400},
                                          {K::F, 0, 2, 600, 700},
                                          {K::F, 0, 3, 800, 900}});
  const StepTrace second = timed_trace(1, {{K::F, 1, 0, 130, 230},
                                           {K::F, 1, 1, 450, 550},
                                           {K::F, 1, 2, 740, 950},
                                           {K::F, 1, 3, 955, 990}});
  const CalibratedCosts c = calibrate_costs({&first, &second}, sch::StageLayers({1, 1}), 0);
  EXPECT_NEAR(c.p2p, 40, 1e-6);
  EXPECT_EQ(calibrated_schedule_costs(c, sch::StageLayers({1, 1}), {}).p2p, c.p2p);
}

// A consumer's producer is the same microbatch's action of the same step. Rank 1's F of
// microbatch 0 in step 1 has no traced producer (rank 0 traced step 0 only): matching rank 0's
// step-0 F of microbatch 0 (ended at 500, after rank 1's last compute) would add a hand-off of
// 500 us and make the median 500; the only hand-off is microbatch 1's in step 0, 40 us.
TEST(CostCalibration, HandOffsPairActionsOfOneStep) {
  using K = sch::Kind;
  const StepTrace first = traced_steps(0, {{{K::F, 0, 1, 0, 100}, {K::F, 0, 0, 400, 500}}, {}});
  const StepTrace second = traced_steps(1, {{{K::F, 1, 1, 140, 300}}, {{K::F, 1, 0, 1000, 1100}}});
  const CalibratedCosts c = calibrate_costs({&first, &second}, sch::StageLayers({1, 1}), 0);
  EXPECT_NEAR(c.p2p, 40, 1e-6);
}

// Replay: each traced step simulated with its own durations and the calibrated hand-off (10 us).
// Program (1F1B-like, S = 2, M = 2): rank 0 "0F0 0F1 0B0 0B1", rank 1 "1F0 1B0 1F1 1B1".
// Steps 0 and 2: F 100 / B 150 on rank 0, F 200 / B 300 on rank 1. By hand: rank 0 forwards
// [0, 200]; rank 1 1F0 [110, 310], 1B0 [310, 610], 1F1 [610, 810], 1B1 [810, 1110]; rank 0
// 0B0 [620, 770], 0B1 [1120, 1270]: span 1270, busy 1500. Step 1: rank 1 F 100 / B 100: 1F0
// [110, 210], 1B0 [210, 310], 1F1 [310, 410], 1B1 [410, 510], 0B1 ends 670: span 670, busy 900.
// Pooled as the measured steps are: mean span 3210 / 3 = 1070, bubble 1 - 3900 / (2 x 3210).
TEST(CostCalibration, ReplaySimulatesEachStepWithItsOwnDurations) {
  using K = sch::Kind;
  auto end_to_end = [](double origin, const std::vector<std::tuple<K, int, int, double>>& list) {
    TimedSlices out;
    for (const auto& [kind, stage, microbatch, micros] : list) {
      out.emplace_back(kind, stage, microbatch, origin, origin + micros);
      origin += micros;
    }
    return out;
  };
  auto first_steps = [&](double origin) {
    return end_to_end(origin,
                      {{K::F, 0, 0, 100}, {K::F, 0, 1, 100}, {K::B, 0, 0, 150}, {K::B, 0, 1, 150}});
  };
  auto second_steps = [&](double origin, double f, double b) {
    return end_to_end(origin, {{K::F, 1, 0, f}, {K::B, 1, 0, b}, {K::F, 1, 1, f}, {K::B, 1, 1, b}});
  };
  const StepTrace first = traced_steps(0, {first_steps(0), first_steps(1000), first_steps(2000)});
  const StepTrace second = traced_steps(
      1, {second_steps(0, 200, 300), second_steps(1000, 100, 100), second_steps(2000, 200, 300)});
  const sch::Layout layout{.ranks = 2, .repeats = 1, .microbatches = 2};
  const sch::Program program =
      sch::parse_program(layout, "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1\n");
  sch::Costs calibrated;
  calibrated.p2p = 10;
  const Replay replay = replay_traced_steps({&first, &second}, program, calibrated);
  EXPECT_NEAR(replay.span_us, 1070, 1e-6);
  EXPECT_NEAR(replay.bubble, 1 - 3900.0 / (2 * 3210), 1e-9);
}

// The spread prediction: rank 0 "0F0 0F1", rank 1 "1F0 1F1", no hand-off. Stage 0's forwards
// measured 100 us, stage 1's 50 and 150. The span is a1 + max(b1, a2) + b2 with a = 100 and b
// drawn from {50, 150}: expected 100 + (100 + 150) / 2 + 100 = 325 us, where the mean durations
// give 300 (4096 draws: the estimate's standard deviation is under 1 us).
TEST(CostCalibration, SpreadPredictionIsTheExpectedSpanOverMeasuredDurations) {
  using K = sch::Kind;
  const StepTrace first = timed_trace(0, {{K::F, 0, 0, 0, 100}, {K::F, 0, 1, 100, 200}});
  const StepTrace second = timed_trace(1, {{K::F, 1, 0, 100, 150}, {K::F, 1, 1, 200, 350}});
  const sch::Layout layout{.ranks = 2, .repeats = 1, .microbatches = 2};
  const sch::Program program = sch::parse_program(layout, "rank 0: 0F0 0F1\nrank 1: 1F0 1F1\n");
  const Replay spread = predict_with_spread({&first, &second}, program, sch::Costs{}, {}, 4096);
  EXPECT_NEAR(spread.span_us, 325, 4);
  EXPECT_EQ(predict_with_spread({&first, &second}, program, sch::Costs{}, {}, 4096).span_us,
            spread.span_us);  // seeded: the same traces give the same figure

  // Hand-offs drawn from the measured ones: "0F0" then "1F0", 100 us each, hand-off 10 or 50:
  // expected span 100 + 30 + 100 (the calibrated p2p, 0 here, is not used).
  const sch::Program chain = sch::parse_program({.ranks = 2, .repeats = 1, .microbatches = 1},
                                                "rank 0: 0F0\nrank 1: 1F0\n");
  const StepTrace a = timed_trace(0, {{K::F, 0, 0, 0, 100}});
  const StepTrace b = timed_trace(1, {{K::F, 1, 0, 100, 200}});
  EXPECT_NEAR(predict_with_spread({&a, &b}, chain, sch::Costs{}, {10, 50}, 4096).span_us, 230, 2);
}

// A drawn hand-off is drawn once per consuming action, however often the simulator asks: the
// overlapped pair "1F1& 1B0" of the middle stage (both halves fed from other ranks) is asked for
// its inputs when the pair starts and again when each half runs. S = 3, M = 2: 8 cross-rank
// inputs (stage 1 and 2's forwards, stage 0 and 1's backwards), so 8 draws, and the pair's halves
// run back to back.
TEST(CostCalibration, DrawnHandOffsAreDrawnOncePerConsumer) {
  const sch::Program program = sch::parse_program(
      {.ranks = 3, .repeats = 1, .microbatches = 2},
      "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1F1& 1B0 1B1\nrank 2: 2F0 2B0 2F1 2B1\n");
  int draws = 0;
  sch::Costs costs;
  costs.measured_p2p = [&] { return double(10 * ++draws); };  // every draw differs
  const sch::SimResult sim = sch::simulate(program, costs);
  EXPECT_EQ(draws, 8);
  double pair_f_end = -1, pair_b_start = -2;
  for (const auto& iv : sim.timeline) {
    if (iv.action.kind == sch::Kind::F && iv.action.stage == 1 && iv.action.index == 1) {
      pair_f_end = iv.end;
    }
    if (iv.action.kind == sch::Kind::B && iv.action.stage == 1 && iv.action.index == 0) {
      pair_b_start = iv.start;
    }
  }
  EXPECT_EQ(pair_b_start, pair_f_end);
}

// The F of an overlapped F&B pair is no hand-off measurement: the pair started when its B's input
// came too. Rank 1's 1F0 waits 40 us for its input; its pair "1F1&" starts 400 us after 0F1
// ended (it waited for the B's input), which would make the median (upper middle) 400.
TEST(CostCalibration, HandOffsSkipTheForwardOfAnOverlappedPair) {
  using K = sch::Kind;
  const StepTrace first = timed_trace(0, {{K::F, 0, 0, 0, 20}, {K::F, 0, 1, 20, 100}});
  StepTrace second(1, 0);
  const Clock::time_point zero{};
  auto at = [&](double micros) {
    return zero + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double, std::micro>(micros));
  };
  second.begin_step(0, at(0));
  second.compute(sch::Action{.kind = K::F, .stage = 1, .index = 0}, at(60), at(80));
  second.compute(sch::Action{.kind = K::F, .stage = 1, .index = 1, .overlap = true}, at(500),
                 at(520));
  second.end_step(at(1000));
  const CalibratedCosts c = calibrate_costs({&first, &second}, sch::StageLayers({1, 1}), 0);
  EXPECT_NEAR(c.p2p, 40, 1e-6);
  EXPECT_EQ(c.handoffs, std::vector<double>{40});
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "carousel_cost_tests" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(CostCalibration, CostsFileReplacesDefaultsNotExplicitKeys) {
  const fs::path dir = scratch("file");
  CalibratedCosts m{.f = 812.5,
                    .b = 1700.25,
                    .i = 900,
                    .w = 800.25,
                    .all_gather = 12,
                    .reduce_scatter = 13,
                    .head = 0.75,
                    .measured_head = true,
                    .handoffs = {}};
  std::ofstream(dir / "costs.yml") << schedule_costs_yaml(m, "a test");
  const std::string file = "schedule_costs_file=" + (dir / "costs.yml").string();
  Config c = load_config("", {file}).config;
  EXPECT_EQ(c.schedule_cost_f, 812.5);
  EXPECT_EQ(c.schedule_cost_b, 1700.25);
  EXPECT_EQ(c.schedule_cost_w, 800.25);
  EXPECT_EQ(c.schedule_cost_all_gather, 12);
  EXPECT_EQ(c.schedule_cost_reduce_scatter, 13);
  EXPECT_EQ(c.schedule_cost_head, 0.75);
  c = load_config("", {file, "schedule_cost_f=5"}).config;  // the command line wins
  EXPECT_EQ(c.schedule_cost_f, 5);

  std::ofstream(dir / "bad.yml") << "schedule_cost_f: 1\nlearning_rate: 3\n";
  const std::string msg = testing::error_of(
      [&] { load_config("", {"schedule_costs_file=" + (dir / "bad.yml").string()}); });
  EXPECT_NE(msg.find("sets 'learning_rate'; the file may set only schedule_cost_* keys"),
            std::string::npos)
      << msg;
  EXPECT_NE(testing::error_of([&] {
              load_config("", {"schedule_costs_file=" + (dir / "none.yml").string()});
            }).find("does not exist"),
            std::string::npos);
}

// The file a profiled 2-stage run writes gives `carousel schedule` the prediction the run made
// from its own trace (9 significant digits in the file: 1e-6 relative).
TEST(CostCalibration, ProfiledRunWritesTheCostsOfItsPrediction) {
  init_logging({.rank = 0, .level = "error", .file_dir = {}});
  const std::vector<std::string> keys = testing::profiled_two_stage_run(scratch("run").string());
  const TrainResult r = train(load_config("", keys).config);
  ASSERT_FALSE(r.costs_path.empty());
  std::vector<std::string> with_file = keys;
  with_file.push_back("schedule_costs_file=" + r.costs_path);
  const Config cfg = load_config("", with_file).config;
  EXPECT_GT(cfg.schedule_cost_f, 0);
  EXPECT_GT(cfg.schedule_cost_b, cfg.schedule_cost_f * 0.5);
  const sch::SimResult sim = sch::simulate(lowered_program(cfg), schedule_costs(cfg));
  EXPECT_NEAR(sim.bubble_fraction, r.predicted_bubble, 1e-6);
  EXPECT_NEAR(sim.step_time / 1e3, r.predicted_span_ms, 1e-6 * r.predicted_span_ms);
}

}  // namespace
}  // namespace carousel
