// cost_calibration.cpp — per-layer costs from traced steps (see cost_calibration.h).
#include "host/report/cost_calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <utility>

namespace carousel {

namespace sch = schedule;

namespace {

struct Sum {
  double micros = 0, layers = 0;  // durations summed, layers they covered
  int slices = 0;
  double per_layer() const { return layers > 0 ? micros / layers : 0; }
  double mean() const { return slices > 0 ? micros / slices : 0; }
};

// The actions whose output of the same microbatch is `a`'s input: (kind, stage) of the F of
// the stage before, or of the backward (B or I) of the stage after, or for the last stage's the
// OUTSIDE after it when the layers after the pipeline run there. None for stage 0's F, the last
// stage's B and I without layers outside, and W.
std::vector<std::pair<sch::Kind, int>> producers_of(const sch::Action& a, int last_stage) {
  if ((a.kind == sch::Kind::F || a.kind == sch::Kind::OUTSIDE) && a.stage > 0)
    return {{sch::Kind::F, a.stage - 1}};
  if ((a.kind == sch::Kind::B || a.kind == sch::Kind::I) && a.stage <= last_stage) {
    return {{sch::Kind::B, a.stage + 1},
            {sch::Kind::I, a.stage + 1},
            {sch::Kind::OUTSIDE, a.stage + 1}};
  }
  return {};
}

double median(std::vector<double> values) {  // the upper middle one; 0 when empty
  if (values.empty()) return 0;
  const auto middle = values.begin() + std::ptrdiff_t(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

// Each traced rank's compute actions as wholes (compute_times).
using RankComputes = std::map<const StepTrace*, std::vector<ComputeTime>>;

// Every hand-off: a consumer's start minus its producer's end, when the consumer's rank was idle.
std::vector<double> handoffs_of(const std::vector<const StepTrace*>& ranks,
                                const RankComputes& computes, int last_stage) {
  // Every compute action by (step, kind, stage, microbatch): when it ended, on which rank. With
  // replicas (data or FSDP ranks of one process) a key has one entry per replica.
  using Key = std::tuple<std::int64_t, sch::Kind, int, int>;
  std::map<Key, std::vector<std::pair<double, const StepTrace*>>> ended;
  for (const StepTrace* rank : ranks) {
    for (const ComputeTime& s : computes.at(rank))
      ended[{s.step, s.action.kind, s.action.stage, s.action.index}].push_back({s.end_us, rank});
  }
  std::vector<double> handoffs;
  for (const StepTrace* consumer_rank : ranks) {
    double rank_free = -1e300;  // when this rank's previous compute action ended
    for (const ComputeTime& s : computes.at(consumer_rank)) {
      // The latest producer on another rank that ended before this action started.
      double produced = -1e300;
      for (const auto& [kind, stage] : producers_of(s.action, last_stage)) {
        const auto it = ended.find({s.step, kind, stage, s.action.index});
        if (it == ended.end()) continue;
        for (const auto& [end_us, rank] : it->second) {
          if (rank != consumer_rank && end_us <= s.start_us) produced = std::max(produced, end_us);
        }
      }
      // An overlapped F&B pair starts when both halves' inputs are there: its F may have waited
      // for the B's input, which is not a hand-off of its own.
      if (produced > -1e300 && produced > rank_free && !s.action.overlap) {
        handoffs.push_back(s.start_us - produced);
      }
      rank_free = s.end_us;
    }
  }
  return handoffs;
}

}  // namespace

std::vector<double> exchange_times(std::vector<std::pair<double, double>> posted_completed) {
  std::sort(posted_completed.begin(), posted_completed.end());
  std::vector<double> out;
  double free = -1e300;  // when the exchange before completed
  for (const auto& [posted, completed] : posted_completed) {
    out.push_back(completed - std::max(posted, std::min(free, completed)));
    free = std::max(free, completed);
  }
  return out;
}

CalibratedCosts calibrate_costs(const std::vector<const StepTrace*>& ranks,
                                const sch::StageLayers& layers, double configured_head,
                                int outside_layers, bool full_remat) {
  const int last = layers.stages() - 1;
  std::map<sch::Kind, Sum> body, last_stage, collectives;
  Sum exchanges, turns, outside;  // outside: the OUTSIDE actions, whole
  RankComputes computes;
  for (const StepTrace* rank : ranks) {
    computes[rank] = compute_times(*rank);
    std::vector<std::pair<double, double>> exchange_slices;  // (posted, completed)
    for (const auto& s : rank->slices()) {
      const sch::Action& a = s.action;
      const double duration = s.end_us - s.start_us;
      if (a.kind == sch::Kind::AG_ISSUE || a.kind == sch::Kind::REDUCE_SCATTER) {
        auto& sum = collectives[a.kind];
        sum.micros += duration, sum.layers += layers.count(a.stage), ++sum.slices;
      } else if (a.is_exchange() && s.row == "expert") {
        exchange_slices.push_back({s.start_us, s.end_us});
      } else if (s.hand_over) {
        turns.micros += duration, ++turns.slices;
      }
    }
    for (const double t : exchange_times(std::move(exchange_slices))) {
      exchanges.micros += t;
      ++exchanges.slices;
    }
    for (const ComputeTime& s : computes[rank]) {
      const sch::Action& a = s.action;
      if (a.stage < 0) continue;  // the optimizer
      if (a.kind == sch::Kind::OUTSIDE) {
        outside.micros += s.busy_us, ++outside.slices;
        continue;
      }
      // With one stage, its slices are the only measure of the layers (head included); with
      // layers outside the pipeline the head runs there, and the last stage is like the others.
      const bool with_head = a.stage == last && last > 0 && outside_layers == 0;
      auto& sum = with_head ? last_stage[a.kind] : body[a.kind];
      sum.micros += s.busy_us, sum.layers += layers.count(a.stage), ++sum.slices;
    }
  }
  auto per_layer = [](const std::map<sch::Kind, Sum>& sums, sch::Kind kind) {
    const auto it = sums.find(kind);  // (find: operator[] would invent the kinds it asks for)
    return it == sums.end() ? 0.0 : it->second.per_layer();
  };
  const bool split = body.count(sch::Kind::W) > 0;
  CalibratedCosts c;
  c.f = per_layer(body, sch::Kind::F);
  c.i = per_layer(body, sch::Kind::I);
  c.w = per_layer(body, sch::Kind::W);
  c.b = body.count(sch::Kind::B) ? per_layer(body, sch::Kind::B) : c.i + c.w;
  if (!split) {  // B not split here: W as the default model's half of B
    c.w = c.b / 2;
    c.i = c.b - c.w;
  }
  c.all_gather = per_layer(collectives, sch::Kind::AG_ISSUE);
  c.reduce_scatter = per_layer(collectives, sch::Kind::REDUCE_SCATTER);
  c.exchange = exchanges.mean();
  c.turn = turns.mean();
  c.head = configured_head;
  c.outside_layers = outside_layers;
  c.full_remat = full_remat;
  if (outside.slices > 0 && c.f + c.b > 0) {  // an OUTSIDE: sch::outside_cost, solved for head
    const double layers = sch::outside_cost(outside_layers, 0, c.f, c.b, full_remat);
    c.head = std::max(0.0, (outside.mean() - layers) / (c.f + c.b));
    c.measured_head = true;
  } else if (last > 0 && !last_stage.empty()) {
    double beyond = 0, layer_total = 0;
    for (const auto& [kind, sum] : last_stage) {
      const double layer_cost = per_layer(body, kind);
      if (layer_cost <= 0) continue;
      beyond += sum.mean() - layers.count(last) * layer_cost;
      layer_total += layer_cost;
    }
    if (layer_total > 0) {
      c.head = std::max(0.0, beyond / layer_total);
      c.measured_head = true;
    }
  }
  c.handoffs = handoffs_of(ranks, computes, last);
  c.p2p = median(c.handoffs);
  return c;
}

sch::Costs calibrated_schedule_costs(const CalibratedCosts& measured,
                                     const sch::StageLayers& layers, sch::Costs base) {
  base.f = measured.f;
  base.b = measured.b;
  base.i = measured.i;
  base.w = measured.w;
  base.all_gather = measured.all_gather;
  base.reduce_scatter = measured.reduce_scatter;
  base.p2p = measured.p2p;
  base.exchange = measured.exchange;
  base.turn = measured.turn;
  base.stage_scale.clear();
  for (const int n : layers.counts()) base.stage_scale.push_back(double(n));
  if (measured.outside_layers > 0) {
    base.outside = sch::outside_cost(measured.outside_layers, measured.head, measured.f, measured.b,
                                     measured.full_remat);
  } else {
    base.stage_scale.back() += measured.head;
  }
  return base;
}

namespace {

// Spans and busy times of simulations pooled as measure_schedule pools the measured steps: the
// mean span, and the bubble of the total busy time over ranks x the total span.
struct Pooled {
  double span = 0, busy = 0;
  int simulations = 0;
  void add(const sch::SimResult& sim) {
    span += sim.step_time;
    for (const double b : sim.busy) busy += b;
    ++simulations;
  }
  Replay result(int ranks) const {
    if (simulations == 0 || span <= 0) return {};
    return {.span_us = span / simulations, .bubble = 1 - busy / (double(ranks) * span)};
  }
};

// The durations the traced compute actions measured, in one pass over the slices, in the two
// tables the predictions read: per step, each action's (kind, stage, microbatch: unique in a
// step) sum over a stage's replicas, for the replay; per (kind, stage), every duration in trace
// order, for the spread's draws.
struct TracedDurations {
  using Action = std::tuple<sch::Kind, int, int>;
  std::map<std::int64_t, std::map<Action, Sum>> by_step;
  std::map<std::pair<sch::Kind, int>, std::vector<double>> by_kind_and_stage;
};

TracedDurations traced_durations(const std::vector<const StepTrace*>& ranks) {
  TracedDurations traced;
  for (const StepTrace* rank : ranks) {
    for (const ComputeTime& s : compute_times(*rank)) {
      const double duration = s.busy_us;
      Sum& sum = traced.by_step[s.step][{s.action.kind, s.action.stage, s.action.index}];
      sum.micros += duration;
      ++sum.slices;
      traced.by_kind_and_stage[{s.action.kind, s.action.stage}].push_back(duration);
    }
  }
  return traced;
}

Replay replay(const TracedDurations& traced, const sch::Program& program,
              const sch::Costs& calibrated) {
  Pooled pooled;
  for (const auto& [step, durations] : traced.by_step) {
    sch::Costs costs = calibrated;
    costs.measured_compute = [&, &durations = durations](const sch::Action& a) {
      const auto it = durations.find({a.kind, a.stage, a.index});
      return it == durations.end() ? calibrated.compute_cost(a) : it->second.mean();
    };
    pooled.add(sch::simulate(program, costs));
  }
  return pooled.result(program.layout.ranks);
}

Replay spread(const TracedDurations& traced, const sch::Program& program,
              const sch::Costs& calibrated, const std::vector<double>& handoffs, int samples) {
  const auto& measured = traced.by_kind_and_stage;
  if (measured.empty() || samples < 1) return {};
  std::mt19937_64 random(20261123);
  auto draw = [&](const std::vector<double>& values) {
    return values[std::uniform_int_distribution<std::size_t>(0, values.size() - 1)(random)];
  };
  Pooled pooled;
  for (int sample = 0; sample < samples; ++sample) {
    sch::Costs costs = calibrated;
    costs.measured_compute = [&](const sch::Action& a) {
      const auto it = measured.find({a.kind, a.stage});
      return it == measured.end() ? calibrated.compute_cost(a) : draw(it->second);
    };
    if (!handoffs.empty()) costs.measured_p2p = [&] { return draw(handoffs); };
    pooled.add(sch::simulate(program, costs));
  }
  return pooled.result(program.layout.ranks);
}

}  // namespace

Replay replay_traced_steps(const std::vector<const StepTrace*>& ranks, const sch::Program& program,
                           const sch::Costs& calibrated) {
  return replay(traced_durations(ranks), program, calibrated);
}

Replay predict_with_spread(const std::vector<const StepTrace*>& ranks, const sch::Program& program,
                           const sch::Costs& calibrated, const std::vector<double>& handoffs,
                           int samples) {
  return spread(traced_durations(ranks), program, calibrated, handoffs, samples);
}

TracedPredictions predict_traced_steps(const std::vector<const StepTrace*>& ranks,
                                       const sch::Program& program, const sch::Costs& calibrated,
                                       const std::vector<double>& handoffs) {
  const TracedDurations traced = traced_durations(ranks);  // one walk of the slices for both
  return {.mean_cost = sch::simulate(program, calibrated),
          .spread = spread(traced, program, calibrated, handoffs, kSpreadSamples),
          .replayed = replay(traced, program, calibrated)};
}

std::string schedule_costs_yaml(const CalibratedCosts& m, const std::string& description) {
  return fmt::format(
      "# schedule_costs.yml — cost model inputs measured by a profiled carousel run\n"
      "# ({}).\n"
      "# Microseconds per layer (the head: in layers, added to the last stage{}).\n"
      "# Use: carousel schedule ... schedule_costs_file=<this file>\n"
      "schedule_cost_f: {:.9g}\n"
      "schedule_cost_b: {:.9g}\n"
      "schedule_cost_w: {:.9g}\n"
      "schedule_cost_all_gather: {:.9g}\n"
      "schedule_cost_reduce_scatter: {:.9g}\n"
      "schedule_cost_head: {:.9g}\n"
      "schedule_cost_p2p: {:.9g}\n"
      "schedule_cost_exchange: {:.9g}\n",
      description, m.measured_head ? "" : "; not measured with one stage: the configured value",
      m.f, m.b, m.w, m.all_gather, m.reduce_scatter, m.head, m.p2p, m.exchange);
}

}  // namespace carousel
