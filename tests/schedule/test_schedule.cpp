// test_schedule.cpp — the schedule IR, generators, lowering passes, deadlock replay and cost
// model against MaxText's tables, the textbook closed forms and deliberately broken programs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "compute/error.h"
#include "host/schedule/export.h"
#include "host/schedule/generators/generators.h"
#include "host/schedule/maxtext.h"
#include "host/schedule/passes.h"
#include "host/schedule/registry.h"
#include "host/schedule/simulate.h"
#include "tests/support/test_util.h"

namespace carousel::schedule {
namespace {

Program make(const std::string& kind, int S, int M, int R = 1, int g = 0) {
  return generate(ScheduleSpec{.kind = kind, .layout = Layout{S, R, M}, .group_size = g});
}

// ---- MaxText's circular table -------------------------------------------------------------

TEST(CircularTable, WorkedExampleOfTheSpec) {  // docs/circular-pipeline.md#worked-example
  const auto t = circular_table(4, 8, 2, 1, 1);
  ASSERT_EQ(t.size(), 19u);
  auto cell = [&](int it, int s) {
    const auto& c = t[it][s];
    return c.real ? "m" + std::to_string(c.microbatch) + "/r" + std::to_string(c.repeat) + " L" +
                        std::to_string(c.first_layer)
                  : std::string("--");
  };
  EXPECT_EQ(cell(0, 0), "m0/r0 L0");
  EXPECT_EQ(cell(0, 1), "--");
  EXPECT_EQ(cell(8, 0), "m0/r1 L4");
  EXPECT_EQ(cell(8, 1), "m7/r0 L1");
  EXPECT_EQ(cell(11, 3), "m0/r1 L7");
  EXPECT_EQ(cell(16, 0), "--");
  EXPECT_EQ(cell(18, 3), "m7/r1 L7");
  EXPECT_EQ(cell(17, 1), "--");
}

TEST(CircularTable, DelayExampleOfTheSpec) {  // #forwarding-delay: S=4, M=8, R=2, d=2, T=22
  const auto t = circular_table(4, 8, 2, 2, 1);
  ASSERT_EQ(t.size(), 22u);
  EXPECT_TRUE(t[6][3].real && t[6][3].microbatch == 0 && t[6][3].repeat == 0);
  EXPECT_TRUE(t[8][0].microbatch == 0 && t[8][0].repeat == 1 && t[8][1].microbatch == 6);
  EXPECT_TRUE(t[14][3].microbatch == 0 && t[14][3].repeat == 1);
  EXPECT_TRUE(t[21][3].microbatch == 7 && t[21][3].repeat == 1 && !t[21][2].real);
}

TEST(CircularTable, MatchesTheMaxTextReplayVectors) {
  std::ifstream in(CAROUSEL_TEST_DATA_DIR "/maxtext_circular_vectors.txt");
  ASSERT_TRUE(in.good());
  std::string line;
  int configs = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    int S, M, R, d;
    char bar;
    ls >> S >> M >> R >> d >> bar;
    const auto table = circular_table(S, M, R, d, 1);
    int real = 0;
    for (const auto& row : table)
      for (const auto& c : row) real += c.real;
    int cells = 0;
    std::string sep;
    while (true) {
      int t, s, m, r, layer;
      if (!(ls >> t >> s >> m >> r >> layer)) break;
      ++cells;
      const CircularCell& c = table.at(t).at(s);
      EXPECT_TRUE(c.real && c.microbatch == m && c.repeat == r && c.first_layer == layer)
          << "S=" << S << " M=" << M << " R=" << R << " d=" << d << " t=" << t << " s=" << s;
      ls >> sep;  // ","
    }
    EXPECT_EQ(cells, real) << "S=" << S << " M=" << M << " R=" << R << " d=" << d;
    ++configs;
  }
  EXPECT_EQ(configs, 60);
}

// docs/circular-pipeline.md#slot-rule: in repeat block k slot 1 holds W[k], slot 0 W[k-1]; the
// slot a stage reads must hold the layer it runs (MaxText's original rule fails this for S >= 3,
// #the-original-slot-rule-and-its-bug).
TEST(CircularTable, BufferSlidingWindowSlotHoldsTheLayerInUse) {
  for (int S : {2, 3, 4, 8})
    for (int k : {1, 2, 4})
      for (int R : {2, 3, 4}) {
        const int M = S * k;
        const auto table = circular_table(S, M, R, 1, 1);
        for (std::size_t t = 0; t < table.size(); ++t)
          for (int s = 0; s < S; ++s) {
            const CircularCell& c = table[t][s];
            if (!c.real) continue;
            const int block = std::min(int(t) / M, R - 1);
            const int repeat_in_slot = c.bsw_slot == 1 ? block : block - 1;
            EXPECT_EQ(repeat_in_slot * S + s, c.first_layer)
                << "S=" << S << " M=" << M << " R=" << R << " t=" << t << " s=" << s;
          }
      }
}

// ---- closed forms (docs/schedules.md#closed-forms: S=4, M=8, R=2, f=i=w=1) ----------------

struct ClosedFormCase {
  std::string kind;
  int repeats;
  double f, b, w;
  double step, bubble;
  std::vector<double> peak_activation_x_a;  // ranks 0..3
};

TEST(CostModel, MatchesTheSurveyWorkedExample) {
  const std::vector<ClosedFormCase> cases = {
      {"gpipe", 1, 1, 2, 1, 33, 3.0 / 11, {2, 2, 2, 2}},
      {"1f1b", 1, 1, 2, 1, 33, 3.0 / 11, {1, 0.75, 0.5, 0.25}},
      {"interleaved_1f1b", 2, 0.5, 1, 0.5, 28.5, 3.0 / 19, {1.375, 1.125, 0.875, 0.625}},
      {"zb_h1", 1, 1, 2, 1, 27, 1.0 / 9, {1, 1, 1, 1}},
      {"circular", 2, 1, 2, 1, 57, 3.0 / 19, {2, 2, 2, 2}},
      {"looped_bfs", 2, 1, 2, 1, 57, 3.0 / 19, {2, 2, 2, 2}},
      {"zbv", 2, 0.5, 1, 0.5, 25.5, 1.5 / 25.5, {1, 1, 1, 1}},
      // PyTorch's warm-up (S-s-1) + (R-1)g: S + (R-1)g = 8 chunks = 1 A on every rank.
      {"interleaved_zb", 2, 0.5, 1, 0.5, 25.5, 1.5 / 25.5, {1, 1, 1, 1}},
      // DeepSeek's table: idle (S-1)(F&B + B - 3W) = 3 (0.5 + 1 + 1 - 1.5) = 3 with F&B = f + b,
      // activations PP + 1 = 2S + 1 chunks = 9/8 A.
      {"dualpipev", 2, 0.5, 1, 0.5, 27, 3.0 / 27, {1.125, 1.125, 1.125, 1.125}},
  };
  for (const auto& c : cases) {
    const Program p = make(c.kind, 4, 8, c.repeats);
    Costs costs;
    costs.f = c.f, costs.b = c.b, costs.w = c.w, costs.i = c.b - c.w;
    const SimResult sim = simulate(lower(p, {0, 0, false}), costs);
    EXPECT_DOUBLE_EQ(sim.step_time, c.step) << c.kind;
    EXPECT_NEAR(sim.bubble_fraction, c.bubble, 1e-12) << c.kind;
    EXPECT_NEAR(closed_form_bubble(c.kind, p.layout, costs), c.bubble, 1e-12) << c.kind;
    for (int r = 0; r < 4; ++r) {
      EXPECT_DOUBLE_EQ(double(sim.peak_activations[r]) / p.layout.stages(),
                       c.peak_activation_x_a[r])
          << c.kind << " rank " << r;
    }
  }
}

TEST(CostModel, ForwardDelayAddsOneForwardPerHop) {
  Costs costs;
  costs.forward_delay = 2;
  const Program p = make("circular", 4, 8, 2);
  const SimResult sim = simulate(p, costs);
  EXPECT_NEAR(sim.bubble_fraction, closed_form_bubble("circular", p.layout, costs), 1e-12);
  EXPECT_DOUBLE_EQ(sim.step_time, 48 + 3 * (2 + 2));  // work + (S-1)(d f + b)
}

// ---- properties over many layouts -----------------------------------------------------------

TEST(Properties, EveryGeneratorValidatesLowersReplaysAndMeetsItsClosedForm) {
  int checked = 0;
  for (const std::string kind : {"circular", "gpipe", "1f1b", "interleaved_1f1b", "zb_h1",
                                 "looped_bfs", "interleaved_zb", "zbv", "dualpipev"})
    for (int S : {1, 2, 3, 4, 8})
      for (int M : {1, 2, 3, 4, 8, 12, 16, 32})
        for (int R : {1, 2, 3, 4}) {
          const bool one_stage = kind == "gpipe" || kind == "1f1b" || kind == "zb_h1";
          if (one_stage && R > 1) continue;
          if (kind.starts_with("interleaved") && (R < 2 || M < S || M % S != 0)) continue;
          if ((kind == "zbv" || kind == "dualpipev") && (R != 2 || M < 2 * S)) continue;
          const Program p = make(kind, S, M, R);
          SCOPED_TRACE(kind + " S=" + std::to_string(S) + " M=" + std::to_string(M) +
                       " R=" + std::to_string(R));
          ASSERT_NO_THROW(validate(p));
          for (int slots : {0, 2, -1}) {
            const Program lowered = lower(p, {slots, 0, true});
            ASSERT_NO_THROW(replay(lowered));
            const SimResult sim = simulate(lowered, Costs{});
            for (int r = 0; r < S; ++r) {
              const int local = R;  // stages per rank
              if (slots == 2) {
                EXPECT_LE(sim.peak_weight_slots[r], 2);
              }
              if (slots == -1) {
                EXPECT_EQ(sim.all_gathers[r], local);
              }
              if (slots == 0) {  // one gather per use; W reads no weights
                int uses = 0;
                for (const auto& a : p.ranks[r]) uses += a.kind != Kind::W;
                EXPECT_EQ(sim.all_gathers[r], uses);
              }
              EXPECT_EQ(sim.reduce_scatters[r], local);
              // BSW on the circular schedule: one gather per repeat forward, and backward the
              // two repeats still resident are reused: 2R - 2 (1 when R = 1).
              if (slots == 2 && (kind == "circular" || kind == "gpipe")) {
                EXPECT_EQ(sim.all_gathers[r], R == 1 ? 1 : 2 * R - 2);
              }
            }
            // Unit costs, no communication: the closed form holds (circular needs M >= S, or
            // the ring waits for the last stage; zb_h1 needs M >= S for its Ws to fill the
            // cooldown).
            // looped_bfs's form covers M < S too (the wait at each turn).
            if ((kind != "circular" && kind != "zb_h1") || M >= S) {
              EXPECT_NEAR(sim.bubble_fraction, closed_form_bubble(kind, p.layout, Costs{}), 1e-9);
            }
          }
          ++checked;
        }
  EXPECT_GT(checked, 150);
}

// ---- text form -------------------------------------------------------------------------------

TEST(TextForm, ProgramsRoundTrip) {
  const Program lowered = lower(make("interleaved_1f1b", 2, 4, 2), {2, 0, true});
  const std::string text = to_text(lowered);
  EXPECT_EQ(to_text(parse_program(lowered.layout, text)), text);
  EXPECT_EQ(to_string(parse_action("12SEND_F3")), "12SEND_F3");
  EXPECT_EQ(parse_action("4AG_ISSUE1").kind, Kind::AG_ISSUE);
  EXPECT_EQ(parse_action("3REDUCE_SCATTER").stage, 3);
  EXPECT_NE(testing::error_of([] { parse_action("0X1"); }).find("'0X1' is not valid"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { parse_action("F1"); }).find("takes a stage before it"),
            std::string::npos);
}

TEST(Export, ChromeTraceAndSvgDescribeEveryComputeAction) {
  const Program p = make("1f1b", 3, 4);
  const SimResult sim = simulate(p, Costs{});
  const auto trace = nlohmann::json::parse(chrome_trace_json(sim, 3, 1000.0));
  int compute = 0;
  for (const auto& e : trace["traceEvents"]) compute += e["ph"] == "X" && e["cat"] == "compute";
  EXPECT_EQ(compute, 3 * 4 * 2);  // F and B of every (stage, microbatch)
  const std::string svg = timeline_svg(sim, 3, "1f1b");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("<title>2B3</title>"), std::string::npos);
}

// ---- broken programs ---------------------------------------------------------------------------

TEST(Broken, MissingBackwardIsShownOnTheGrid) {
  Program p = make("gpipe", 2, 2);
  p.ranks[1].pop_back();  // drop 1B0
  const std::string msg = testing::error_of([&] { validate(p); });
  EXPECT_NE(msg.find("1F0 has no backward"), std::string::npos) << msg;
  EXPECT_NE(msg.find(">>1F0<<"), std::string::npos) << msg;
}

TEST(Broken, ActionOnTheWrongRankOrOutOfOrder) {
  Program p = make("gpipe", 2, 2);
  std::swap(p.ranks[0][0], p.ranks[0][3]);  // 0B0 before 0F0
  EXPECT_NE(testing::error_of([&] { validate(p); }).find("backward before its forward 0F0"),
            std::string::npos);
  Program q = make("gpipe", 2, 2);
  q.ranks[0].push_back({Kind::F, 1, 0, -1});
  EXPECT_NE(testing::error_of([&] { validate(q); }).find("stage 1 runs on rank 1"),
            std::string::npos);
}

TEST(Broken, SwappedReceivesAreCrossed) {
  const Layout l{2, 1, 2};
  const Program p = parse_program(l,
                                  "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B1 0B1 0RECV_B0 0B0\n"
                                  "rank 1: 1RECV_F1 1RECV_F0 1F0 1F1 1B1 1SEND_B1 1B0 1SEND_B0\n");
  const std::string msg = testing::error_of([&] { replay(p); });
  EXPECT_NE(msg.find("crossed send/receive between rank 0 and rank 1: send #0 is 0SEND_F0 but the "
                     "matching receive #0 is 1RECV_F1"),
            std::string::npos)
      << msg;
}

TEST(Broken, UngroupedSendsDeadlock) {
  // Each rank sends before it receives, in separate groups (a compute action between them):
  // with rendezvous semantics both sends wait forever.
  const Layout l{2, 2, 1};  // stages 0,2 on rank 0; 1,3 on rank 1
  const Program p = parse_program(l,
                                  "rank 0: 0F0 0SEND_F0 2F0 2RECV_F0\n"
                                  "rank 1: 1F0 1SEND_B0 3F0 1RECV_F0\n");
  const std::string msg = testing::error_of([&] { replay(p); });
  EXPECT_TRUE(msg.find("deadlock") != std::string::npos ||
              msg.find("never sends") != std::string::npos ||
              msg.find("crossed") != std::string::npos)
      << msg;
}

TEST(Broken, GenuineCircularDeadlockIsNamed) {
  // Rank 0 waits for rank 1's activation before sending its own, and rank 1 the reverse.
  const Layout l{2, 2, 1};
  const Program p = parse_program(l,
                                  "rank 0: 2RECV_F0 0F0 0SEND_F0\n"
                                  "rank 1: 1RECV_F0 1F0 1SEND_F0\n");
  const std::string msg = testing::error_of([&] { replay(p); });
  EXPECT_NE(msg.find("deadlock — no rank can progress"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 blocked at 2RECV_F0"), std::string::npos) << msg;
}

TEST(Broken, ReceiveWithoutSend) {
  const Layout l{2, 1, 1};
  const Program p = parse_program(l, "rank 0: 0F0\nrank 1: 1RECV_F0 1F0\n");
  EXPECT_NE(testing::error_of([&] { replay(p); })
                .find("rank 1 receives 1RECV_F0 from rank 0 which never "
                      "sends it"),
            std::string::npos);
}

TEST(Broken, GeneratorConstraintsAreClear) {
  EXPECT_NE(
      testing::error_of([] { make("1f1b", 2, 4, 2); })
          .find("for repeats use circular, interleaved_1f1b, looped_bfs, interleaved_zb, zbv or "
                "dualpipev"),
      std::string::npos);
  EXPECT_NE(testing::error_of([] {
              make("interleaved_1f1b", 4, 3, 2);  // M < S: no group size fits
            }).find("S <= g <= M and M % g == 0"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              make("zigzag", 2, 2);
            }).find("pipeline_schedule='zigzag' is not valid"),
            std::string::npos);
}

// ---- the registry ------------------------------------------------------------------------------

// Every row, on every layout its check accepts, generates a program that validates, lowers with
// each weight-slot budget and replays without deadlock; each row accepts some layouts of each
// size, and a rejected layout fails generate() with exactly the check's message.
TEST(Registry, EveryRowGeneratesValidReplayablePrograms) {
  ASSERT_GE(schedules().size(), 5u);
  for (const ScheduleInfo& row : schedules()) {
    int accepted = 0;
    for (int S : {1, 2, 3, 4})
      for (int M : {1, 2, 4, 6, 8})
        for (int R : {1, 2, 3})
          for (int g : {0, 4}) {
            const ScheduleSpec spec{
                .kind = std::string(row.name), .layout = Layout{S, R, M}, .group_size = g};
            SCOPED_TRACE(std::string(row.name) + " S=" + std::to_string(S) + " M=" +
                         std::to_string(M) + " R=" + std::to_string(R) + " g=" + std::to_string(g));
            const std::string rejected = testing::error_of([&] { check_schedule(spec); });
            if (rejected != "<no error>") {
              EXPECT_EQ(testing::error_of([&] { generate(spec); }), rejected);
              continue;
            }
            const Program p = generate(spec);
            EXPECT_EQ(to_text(p), to_text(row.generate(spec)));
            ASSERT_NO_THROW(validate(p));
            for (int slots : {0, 2, -1}) {
              const Program lowered = lower(p, {slots, 0, true});
              ASSERT_NO_THROW(replay(lowered));
              ASSERT_NO_THROW(simulate(lowered, Costs{}));
            }
            ++accepted;
          }
    EXPECT_GE(accepted, 8) << row.name;
  }
}

TEST(Registry, NamesAreUniqueAndEachHasHelp) {
  std::set<std::string_view> names;
  for (const ScheduleInfo& row : schedules()) {
    EXPECT_TRUE(names.insert(row.name).second) << row.name << " is registered twice";
    EXPECT_FALSE(row.help.empty()) << row.name;
    EXPECT_EQ(row.help.find('\n'), std::string_view::npos) << row.name << ": one line";
    EXPECT_EQ(&find_schedule(row.name), &row);
  }
  EXPECT_EQ(schedules().front().name, ScheduleSpec{}.kind);  // the default is the first row
}

TEST(Registry, AnUnknownNameListsEveryRegisteredName) {
  const std::string msg = testing::error_of([] { make("zigzag", 2, 2); });
  EXPECT_NE(msg.find("pipeline_schedule='zigzag' is not valid; use "), std::string::npos) << msg;
  for (const ScheduleInfo& row : schedules()) {
    EXPECT_NE(msg.find(fmt::format(" {}", row.name)), std::string::npos) << row.name << ": " << msg;
  }
  EXPECT_EQ(testing::error_of([] { find_schedule("zigzag"); }), msg);
}

TEST(Registry, HelpListsEveryScheduleWithItsLine) {
  const std::string help = schedules_help();
  const std::string names = schedule_names(" | ");
  for (const ScheduleInfo& row : schedules()) {
    EXPECT_NE(help.find(fmt::format("  {} ", row.name)), std::string::npos) << row.name;
    EXPECT_NE(help.find(std::string(row.help)), std::string::npos) << row.name;
    EXPECT_NE(names.find(std::string(row.name)), std::string::npos) << row.name;
  }
}

// The flags of the table: a row without them rejects R > 1 or the forwarding delay, naming the
// rows that accept it.
TEST(Registry, FlagsRejectRepeatsAndTheDelayNamingTheRowsThatAcceptThem) {
  std::vector<std::string_view> with_repeats, with_delay;
  for (const ScheduleInfo& row : schedules()) {
    if (row.repeats) with_repeats.push_back(row.name);
    if (row.forward_delay) with_delay.push_back(row.name);
  }
  auto names_or = [](const std::vector<std::string_view>& names) {  // "a, b or c"
    std::string out;
    for (std::size_t i = 0; i < names.size(); ++i) {
      out += fmt::format("{}{}", i == 0 ? "" : i + 1 == names.size() ? " or " : ", ", names[i]);
    }
    return out;
  };
  for (const ScheduleInfo& row : schedules()) {
    SCOPED_TRACE(std::string(row.name));
    const std::string kind(row.name);
    const std::string repeats = testing::error_of([&] {
      check_schedule({.kind = kind, .layout = Layout{2, 2, 4}});
    });
    const std::string delay = testing::error_of([&] {
      check_schedule_knobs({.kind = kind, .layout = Layout{2, 1, 4}, .forward_delay = 2});
    });
    if (row.repeats) {
      EXPECT_EQ(repeats, "<no error>");
    } else {
      EXPECT_NE(repeats.find(fmt::format("for repeats use {}", names_or(with_repeats))),
                std::string::npos)
          << repeats;
    }
    if (row.forward_delay) {
      EXPECT_EQ(delay, "<no error>");
    } else {
      EXPECT_NE(delay.find(fmt::format("applies to pipeline_schedule={}, not {}",
                                       names_or(with_delay), row.name)),
                std::string::npos)
          << delay;
    }
  }
  EXPECT_NE(testing::error_of([] {
              generate({.kind = "1f1b", .layout = Layout{2, 1, 4}, .forward_delay = 2});
            })
                .find("pipeline_delay_activation_forwarding applies to pipeline_schedule=circular, "
                      "not 1f1b"),
            std::string::npos);
  EXPECT_NO_THROW(generate({.kind = "circular", .layout = Layout{2, 1, 4}, .forward_delay = 2}));
}

}  // namespace
}  // namespace carousel::schedule
