// step_trace.cpp — recording profiled steps and writing them, with the prediction, as Chrome
// trace JSON.
#include "host/report/step_trace.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "compute/hash.h"

namespace carousel {

namespace sch = schedule;

namespace {

double micros(StepTrace::Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

const char* row_of(const sch::Action& a) {
  if (a.is_p2p()) return "pipe";
  if (a.kind == sch::Kind::AG_ISSUE || a.kind == sch::Kind::REDUCE_SCATTER) return "fsdp";
  return "compute";
}

constexpr const char* kRows[] = {"compute", "pipe", "fsdp", "expert"};  // tid = index

int thread_of(const std::string& row) {
  for (int t = 0; t < 4; ++t) {
    if (row == kRows[t]) return t;
  }
  return 0;
}

// Rows' lanes: the tid of lane l of a row. Lane 0 keeps the row's own tid (0 to 3).
int lane_tid(const std::string& row, int lane) {
  return lane == 0 ? thread_of(row) : 100 * thread_of(row) + lane;
}

// Lane of each slice of one rank: the first lane of its row free at its start (interval
// partitioning in start order uses as few lanes as the most transfers ever in flight at once).
std::vector<int> assign_lanes(const std::vector<StepTrace::Slice>& slices) {
  std::vector<std::size_t> order(slices.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return slices[a].start_us < slices[b].start_us;
  });
  std::vector<int> lane(slices.size(), 0);
  std::map<std::string, std::vector<double>> lane_ends;  // row -> end of each lane's last slice
  for (std::size_t i : order) {
    auto& ends = lane_ends[slices[i].row];
    std::size_t l = 0;
    while (l < ends.size() && ends[l] > slices[i].start_us) ++l;
    if (l == ends.size()) ends.push_back(0);
    ends[l] = slices[i].end_us;
    lane[i] = int(l);
  }
  return lane;
}

// FNV-1a, cut to 53 bits: the same id on both ends of an arrow, in every process, and exact
// in the JavaScript numbers trace viewers parse JSON into.
std::uint64_t flow_id(const std::string& text) {
  return fnv1a64(text) & ((std::uint64_t(1) << 53) - 1);
}

nlohmann::json slice_args(const StepTrace::Slice& s) {
  nlohmann::json args = {{"step", s.step + 1}};
  const bool of_microbatch =
      s.action.is_p2p() || s.action.is_compute() || s.action.is_exchange();
  if (s.action.index >= 0) args[of_microbatch ? "microbatch" : "slot"] = s.action.index;
  if (s.action.stage >= 0) args["stage"] = s.action.stage;
  if (s.action.peer >= 0) args["peer"] = s.action.peer;
  if (s.bytes > 0) args["bytes"] = s.bytes;
  return args;
}

}  // namespace

void StepTrace::begin_step(std::int64_t step, Clock::time_point at) {
  step_ = step;
  steps_.push_back({step, micros(at), micros(at), micros(at)});
}

void StepTrace::end_step(Clock::time_point at) {
  for (const Pending& p : pending_) {  // every collective and p2p group has completed by now
    const double issued = micros(p.issued);
    const double done = std::max(issued, micros(p.done.completed_at()));
    const sch::Action& first = p.actions.front();
    if (first.is_p2p()) {
      add_p2p_slice(p.actions, issued, done, p.bytes);
    } else if (first.is_exchange()) {
      slices_.push_back({sch::to_string(first), "expert", issued, done, first, step_, p.bytes});
    } else {
      slices_.push_back(
          {sch::to_string(first), row_of(first), issued, done, first, step_, p.bytes});
    }
  }
  pending_.clear();
  steps_.back().end_us = micros(at);
}

void StepTrace::compute(const sch::Action& action, Clock::time_point start, Clock::time_point end) {
  slices_.push_back({sch::to_string(action), "compute", micros(start), micros(end), action, step_});
  if (action.kind == sch::Kind::OPTIMIZER) steps_.back().optimizer_us = micros(start);
}

void StepTrace::compute_part(const sch::Action& action, Clock::time_point start,
                             Clock::time_point end, int part) {
  slices_.push_back({fmt::format("{} ({})", sch::to_string(action), part + 1), "compute",
                     micros(start), micros(end), action, step_, 0, part});
}

void StepTrace::exchange(const sch::Action& action, Clock::time_point posted, const Event& done,
                         std::int64_t bytes) {
  pending_.push_back({{action}, posted, done, bytes});
}

void StepTrace::hand_over(const sch::Action& exchange, Clock::time_point from,
                          Clock::time_point woke) {
  Slice s{"hand-over", "compute", micros(from), micros(woke), exchange, step_};
  s.hand_over = true;
  slices_.push_back(std::move(s));
}

void StepTrace::p2p_group(const std::vector<sch::Action>& group, Clock::time_point start,
                          const Event& done, std::int64_t bytes) {
  pending_.push_back({group, start, done, bytes});
}

void StepTrace::add_p2p_slice(const std::vector<sch::Action>& group, double start_us, double end_us,
                              std::int64_t bytes) {
  std::vector<std::string> names;
  for (const auto& a : group) names.push_back(sch::to_string(a));
  const std::string name = fmt::format("{}", fmt::join(names, " "));
  slices_.push_back({name, "pipe", start_us, end_us, group.front(), step_, bytes});
  for (const auto& a : group) {
    // The flow is named after the sending stage: SEND_F of stage v meets RECV_F of v + 1,
    // SEND_B of v meets RECV_B of v - 1.
    const bool forward = a.kind == sch::Kind::SEND_F || a.kind == sch::Kind::RECV_F;
    const bool send = a.kind == sch::Kind::SEND_F || a.kind == sch::Kind::SEND_B;
    const int sender = send ? a.stage : forward ? a.stage - 1 : a.stage + 1;
    flows_.push_back(
        {fmt::format("{}:{}:{}:{}:{}", step_, ring_, forward ? 'F' : 'B', sender, a.index), send,
         send ? start_us : end_us, slices_.size() - 1});
  }
}

void StepTrace::collective(const sch::Action& action, Clock::time_point issued, const Event& done,
                           std::int64_t bytes) {
  pending_.push_back({{action}, issued, done, bytes});
}

MeasuredSchedule measure_schedule(const std::vector<const StepTrace*>& ranks) {
  double busy = 0, span = 0, gather_waits = 0, exchange_waits = 0, exchanges = 0;
  std::map<std::int64_t, std::pair<double, double>> steps;  // step -> (first start, last optimizer)
  for (const StepTrace* r : ranks) {
    for (const auto& s : r->slices()) {
      const double duration = s.end_us - s.start_us;
      if (s.action.is_compute()) busy += duration;
      if (s.action.kind == sch::Kind::AG_WAIT) gather_waits += duration;
      if (s.action.is_exchange()) (s.row == "expert" ? exchanges : exchange_waits) += duration;
    }
    for (const auto& step : r->steps()) {
      auto [it, fresh] = steps.try_emplace(step.step, step.start_us, step.optimizer_us);
      it->second.first = std::min(it->second.first, step.start_us);
      it->second.second = std::max(it->second.second, step.optimizer_us);
    }
  }
  for (const auto& [step, bounds] : steps) span += bounds.second - bounds.first;
  if (span <= 0) return {};
  const double rank_steps = double(ranks.size()) * double(steps.size());
  return {.bubble = 1 - busy / (double(ranks.size()) * span),
          .span_us = span / double(steps.size()),
          .exposed_gather_us = gather_waits / rank_steps,
          .exposed_exchange_us = exchange_waits / rank_steps,
          .exchange_us = exchanges / rank_steps};
}

std::vector<ComputeTime> compute_times(const StepTrace& rank) {
  std::vector<ComputeTime> out;
  std::map<std::tuple<std::int64_t, sch::Kind, int, int>, std::size_t> at;  // -> index in out
  for (const auto& s : rank.slices()) {
    if (!s.action.is_compute()) continue;
    const auto key = std::make_tuple(s.step, s.action.kind, s.action.stage, s.action.index);
    const auto it = at.find(key);
    const double busy = s.end_us - s.start_us;
    if (s.part == 0 || it == at.end()) {  // (the optimizer has no stage: never in parts)
      at[key] = out.size();
      out.push_back({s.action, s.step, s.start_us, s.end_us, busy});
    } else {
      ComputeTime& whole = out[it->second];
      whole.end_us = std::max(whole.end_us, s.end_us);
      whole.busy_us += busy;
    }
  }
  return out;
}

std::string step_trace_json(const std::vector<const StepTrace*>& ranks, const sch::Program& program,
                            const sch::SimResult& predicted) {
  double origin = 1e300;
  for (const StepTrace* r : ranks) {
    for (const auto& s : r->slices()) origin = std::min(origin, s.start_us);
    for (const auto& step : r->steps()) origin = std::min(origin, step.start_us);
  }

  nlohmann::json events = nlohmann::json::array();
  auto name_process = [&](int pid, const std::string& name) {
    events.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", name}}}});
    for (const char* row : kRows) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid},
                        {"tid", thread_of(row)},
                        {"args", {{"name", row}}}});
    }
  };
  for (const StepTrace* r : ranks) {
    name_process(r->rank(), fmt::format("rank {} (measured)", r->rank()));
    const std::vector<int> lanes = assign_lanes(r->slices());
    std::map<std::pair<std::string, int>, bool> named;  // extra lanes get a thread name once
    for (std::size_t i = 0; i < r->slices().size(); ++i) {
      const auto& s = r->slices()[i];
      const int tid = lane_tid(s.row, lanes[i]);
      if (lanes[i] > 0 && !named[{s.row, lanes[i]}]) {
        named[{s.row, lanes[i]}] = true;
        events.push_back({{"ph", "M"},
                          {"name", "thread_name"},
                          {"pid", r->rank()},
                          {"tid", tid},
                          {"args", {{"name", fmt::format("{} {}", s.row, lanes[i] + 1)}}}});
      }
      events.push_back({{"ph", "X"},
                        {"name", s.name},
                        {"cat", s.row},
                        {"pid", r->rank()},
                        {"tid", tid},
                        {"ts", s.start_us - origin},
                        {"dur", s.end_us - s.start_us},
                        {"args", slice_args(s)}});
    }
    for (const auto& step : r->steps()) {
      events.push_back({{"ph", "i"},
                        {"name", fmt::format("step {}", step.step + 1)},
                        {"s", "p"},
                        {"pid", r->rank()},
                        {"tid", 0},
                        {"ts", step.start_us - origin}});
    }
    for (const auto& f : r->flows()) {
      events.push_back({{"ph", f.is_send ? "s" : "f"},
                        {"bp", "e"},
                        {"name", "p2p"},
                        {"cat", "p2p"},
                        {"id", flow_id(f.id)},
                        {"pid", r->rank()},
                        {"tid", lane_tid("pipe", lanes[f.slice])},
                        {"ts", f.at_us - origin}});
    }
  }
  for (int s = 0; s < program.layout.ranks; ++s) {
    name_process(1000 + s, fmt::format("pipeline rank {} (predicted)", s));
  }
  for (const auto& iv : predicted.timeline) {
    events.push_back({{"ph", "X"},
                      {"name", sch::to_string(iv.action)},
                      {"cat", "predicted"},
                      {"pid", 1000 + iv.rank},
                      {"tid", iv.action.is_compute() ? 0 : iv.action.is_exchange() ? 3 : 2},
                      {"ts", iv.start},
                      {"dur", iv.end - iv.start}});
  }
  // The origin on the system clock, for merging the traces of several processes (the steady
  // clock's epoch is per machine; the system clock is shared, NTP-close across machines).
  const double steady_to_unix_us =
      std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch())
          .count() -
      micros(StepTrace::Clock::now());
  return nlohmann::json{
      {"traceEvents", events},
      {"displayTimeUnit", "ms"},
      {"otherData",
       {{"origin_unix_us", std::llround(origin + steady_to_unix_us)}, {"ranks", ranks.size()}}}}
      .dump();
}

}  // namespace carousel
