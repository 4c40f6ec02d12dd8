// simulate.cpp — list-scheduling simulation of a program with per-action costs.
#include "host/schedule/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "compute/error.h"

namespace carousel::schedule {

double Costs::cost(Kind k) const {
  switch (k) {
    case Kind::F:
      return f;
    case Kind::B:
      return b;
    case Kind::I:
      return i;
    case Kind::W:
      return w;
    default:
      return 0;
  }
}

double Costs::scale(int stage) const {
  if (stage_scale.empty()) return 1.0;
  CAROUSEL_ASSERT(stage >= 0 && std::size_t(stage) < stage_scale.size(),
                  "cost model: stage {} has no scale ({} given)", stage, stage_scale.size());
  return stage_scale[std::size_t(stage)];
}

double Costs::compute_cost(const Action& a) const {
  return a.kind == Kind::OUTSIDE ? outside : cost(a.kind, a.stage);
}

double Costs::duration(const Action& a) const {
  if (a.is_compute()) return measured_compute ? measured_compute(a) : compute_cost(a);
  if (a.kind == Kind::AG_ISSUE) return all_gather * scale(a.stage);
  if (a.kind == Kind::REDUCE_SCATTER) return reduce_scatter * scale(a.stage);
  return 0;
}

int Costs::exchanges(const Action& a) const {
  if (a.kind == Kind::OUTSIDE) {  // its forward's, then its backward's
    Action f = a, b = a;
    f.kind = Kind::F;
    b.kind = Kind::B;
    return exchanges(f) + exchanges(b);
  }
  const std::vector<int>& per_stage = a.kind == Kind::F ? exchanges_f : exchanges_b;
  if (per_stage.empty() || a.kind == Kind::W) return 0;
  CAROUSEL_ASSERT(a.stage >= 0 && std::size_t(a.stage) < per_stage.size(),
                  "cost model: stage {} has no exchange count ({} given)", a.stage,
                  per_stage.size());
  return per_stage[std::size_t(a.stage)];
}

namespace {

// One compute action of a turn-taking unit: how long it computes, how many exchanges it runs.
struct Half {
  Action action;
  double compute = 0;
  int exchanges = 0;
  double end = 0;  // filled by take_turns
};

// Runs an F&B pair's halves (or one action alone) from `start` as the executor does: a half
// computes one part, posts its next exchange (on the rank's expert stream, after the exchanges
// before it) and hands the compute to the other half, which first waits for its own exchange in
// flight. Appends every part and exchange to `timeline`; returns when the last half ends.
double take_turns(int rank, std::vector<Half>& halves, double start, const Costs& c,
                  double& expert_free, std::vector<Interval>& timeline) {
  struct State {
    int done = 0;             // parts computed
    double in_flight = -1;    // when its posted exchange completes; -1: none
  };
  std::vector<State> state(halves.size());
  double t = start;
  std::size_t turn = 0, finished = 0;
  while (finished < halves.size()) {
    Half& h = halves[turn];
    State& s = state[turn];
    const int parts = h.exchanges + 1;
    if (s.in_flight >= 0) t = std::max(t, s.in_flight);  // the exposed rest of its exchange
    const double part = h.compute / parts;
    timeline.push_back({rank, h.action, t, t + part, s.done, parts});
    t += part;
    const bool last = ++s.done == parts;
    if (last) {
      h.end = t;
      ++finished;
    } else {
      const double from = std::max(t, expert_free);
      expert_free = s.in_flight = from + c.exchange;
      timeline.push_back({rank, exchange_of(h.action), from, expert_free});
    }
    // The other half's turn, unless it has finished (this one then goes on alone).
    const std::size_t other = (turn + 1) % halves.size();
    if (other != turn && state[other].done < halves[other].exchanges + 1) {
      turn = other;
      t += c.turn;
    }
  }
  return t;
}

// How many expert exchanges the compute action at list[i] runs.
int exchange_count(const std::vector<Action>& list, std::size_t i, const Costs& c) {
  return exchanges_at(list, i) ? c.exchanges(list[i]) : 0;
}

}  // namespace

SimResult simulate(const Program& p, const Costs& c) {
  const Layout& l = p.layout;
  const int R = l.ranks, V = l.stages();
  CAROUSEL_CHECK(c.stage_scale.empty() || int(c.stage_scale.size()) == V,
                 "cost model: stage_scale has {} entries, but the program has {} virtual stages "
                 "(one per stage, or none for even stages)",
                 c.stage_scale.size(), V);
  constexpr double kUnknown = -1;
  std::map<std::tuple<Kind, int, int>, double> end_of;  // compute (kind, stage, mb) -> end
  auto finished = [&](Kind k, int v, int m) {
    const auto it = end_of.find({k, v, m});
    return it == end_of.end() ? kUnknown : it->second;
  };
  // A drawn hand-off is drawn once per consumer: input_ready may ask again (an overlapped
  // pair's partner, a retry), and the answer must not change.
  std::map<std::tuple<Kind, int, int>, double> drawn_p2p;
  // When the input of a compute action is ready (kUnknown while its producer has not run).
  auto input_ready = [&](int rank, const Action& a) -> double {
    const int v = a.stage, m = a.index;
    auto cross = [&](int other) {
      if (l.rank_of(other, m) == rank) return 0.0;
      if (!c.measured_p2p) return c.p2p;
      const auto [it, fresh] = drawn_p2p.try_emplace({a.kind, v, m}, 0.0);
      if (fresh) it->second = c.measured_p2p();
      return it->second;
    };
    switch (a.kind) {
      case Kind::F: {
        if (v == 0) return 0;
        const double e = finished(Kind::F, v - 1, m);
        if (e < 0) return kUnknown;
        const bool remote = l.rank_of(v - 1) != rank;
        // The delay is counted in forwards of the producing rank (stage v - 1's size).
        return e + cross(v - 1) + (remote ? (c.forward_delay - 1) * c.cost(Kind::F, v - 1) : 0.0);
      }
      case Kind::B:
      case Kind::I: {
        double own = finished(Kind::F, v, m);
        if (own < 0) return kUnknown;
        if (v == V - 1 && !l.outside) return own;
        double e = finished(Kind::B, v + 1, m);
        if (e < 0) e = finished(Kind::I, v + 1, m);
        if (e < 0) e = finished(Kind::OUTSIDE, v + 1, m);
        return e < 0 ? kUnknown : std::max(own, e + cross(v + 1));
      }
      case Kind::OUTSIDE: {
        const double e = finished(Kind::F, v - 1, m);
        return e < 0 ? kUnknown : e + cross(v - 1);
      }
      case Kind::W:
        return finished(Kind::I, v, m);
      default:
        return 0;
    }
  };

  SimResult res;
  res.busy.assign(R, 0);
  res.peak_activations.assign(R, 0);
  res.peak_weight_slots.assign(R, 0);
  res.all_gathers.assign(R, 0);
  res.reduce_scatters.assign(R, 0);
  std::vector<std::size_t> pos(R, 0);
  std::vector<double> compute_free(R, 0), comm_free(R, 0);
  std::vector<std::map<int, double>> gather_done(R);  // slot -> when its gather completes
  std::vector<double> pending(R, 0);                  // waits collected before the next compute
  std::vector<double> expert_free(R, 0);              // when the rank's expert stream is free
  std::vector<std::size_t> partner_done(R, SIZE_MAX);  // a pair's B, run with its F
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      const std::vector<Action>& list = p.ranks[r];
      while (pos[r] < list.size()) {
        const Action& a = list[pos[r]];
        if (a.is_compute() && pos[r] == partner_done[r]) {
          // run with its F
        } else if (a.is_compute()) {
          double ready = input_ready(r, a);
          std::vector<Half> halves = {{a, c.duration(a), exchange_count(list, pos[r], c)}};
          const std::size_t j = a.overlap ? overlap_partner(list, pos[r]) : list.size();
          if (a.overlap && ready >= 0) {  // an F&B pair starts when both inputs are there
            CAROUSEL_ASSERT(j < list.size(), "simulate: {} on rank {} has no partner",
                            to_string(a), r);
            const double partner = input_ready(r, list[j]);
            ready = partner < 0 ? kUnknown : std::max(ready, partner);
          }
          if (ready < 0) break;  // the producer has not been simulated yet
          const bool turns = takes_turns(list, pos[r]);
          if (turns) halves.push_back({list[j], c.duration(list[j]), exchange_count(list, j, c)});
          const double start = std::max({compute_free[r], ready, pending[r]});
          compute_free[r] = take_turns(r, halves, start, c, expert_free[r], res.timeline);
          for (const Half& h : halves) {
            // Taking turns, what the halves send leaves when the pair ends (the executor posts
            // the sends between them after both).
            const double end = turns ? compute_free[r] : h.end;
            end_of[{h.action.kind, h.action.stage, h.action.index}] = end;
            res.busy[r] += h.compute;
          }
          if (turns) partner_done[r] = j;
          pending[r] = 0;
        } else if (a.kind == Kind::AG_ISSUE) {
          const double start = std::max(compute_free[r], comm_free[r]);
          comm_free[r] = start + c.duration(a);
          gather_done[r][a.index] = comm_free[r];
          res.all_gathers[r] += 1;
          if (c.all_gather > 0) res.timeline.push_back({r, a, start, comm_free[r]});
        } else if (a.kind == Kind::AG_WAIT) {
          const auto it = gather_done[r].find(a.index);
          CAROUSEL_CHECK(it != gather_done[r].end(),
                         "schedule: {} on rank {} waits for a "
                         "gather that was never issued",
                         to_string(a), r);
          pending[r] = std::max(pending[r], it->second);
        } else if (a.kind == Kind::REDUCE_SCATTER) {
          const double start = std::max(compute_free[r], comm_free[r]);
          comm_free[r] = start + c.duration(a);
          res.reduce_scatters[r] += 1;
          if (c.reduce_scatter > 0) res.timeline.push_back({r, a, start, comm_free[r]});
        } else if (a.kind == Kind::OPTIMIZER) {
          compute_free[r] = std::max(compute_free[r], comm_free[r]);
        }
        ++pos[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    if (pos[r] < p.ranks[r].size()) {
      fail("schedule simulation is stuck: rank {} waits at {} for an input no rank produces", r,
           to_string(p.ranks[r][pos[r]]));
    }
    res.step_time = std::max(res.step_time, compute_free[r]);
  }
  double busy = 0;
  for (double b : res.busy) busy += b;
  res.bubble_fraction = res.step_time > 0 ? 1.0 - busy / (double(R) * res.step_time) : 0.0;

  // Activation live ranges per rank: +1 at F start, -1 at the end of B (or W when split).
  std::vector<std::vector<std::pair<double, int>>> events(R);
  for (const auto& iv : res.timeline) {
    const Action& a = iv.action;
    if (a.kind == Kind::F && iv.part == 0) events[iv.rank].push_back({iv.start, +1});
    const bool split = finished(Kind::W, a.stage, a.index) >= 0;
    const bool last_part = iv.part == iv.parts - 1;
    if ((a.kind == Kind::B || (a.kind == Kind::W && split)) && last_part)
      events[iv.rank].push_back({iv.end, -1});
  }
  for (int r = 0; r < R; ++r) {
    std::sort(events[r].begin(), events[r].end());  // frees (-1) sort before allocations at ties
    int live = 0;
    for (const auto& [t, d] : events[r])
      res.peak_activations[r] = std::max(res.peak_activations[r], live += d);
    // Weight slots: held from AG_ISSUE to RELEASE, in program order.
    int held = 0;
    for (const auto& a : p.ranks[r]) {
      if (a.kind == Kind::AG_ISSUE)
        res.peak_weight_slots[r] = std::max(res.peak_weight_slots[r], ++held);
      if (a.kind == Kind::RELEASE) --held;
    }
  }
  return res;
}

}  // namespace carousel::schedule
