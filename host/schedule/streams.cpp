// streams.cpp — plan_streams(): which stream each lowered action is enqueued on, and the events
// that order the streams (the rules are listed in streams.h and docs/pipeline.md).
#include "host/schedule/streams.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

#include "compute/error.h"

namespace carousel::schedule {

std::string_view stream_name(Stream s) {
  switch (s) {
    case Stream::compute:
      return "compute";
    case Stream::pipe:
      return "pipe";
    case Stream::fsdp:
      return "fsdp";
    case Stream::host:
      return "host";
  }
  return "?";
}

std::string_view reason_name(WaitReason r) {
  switch (r) {
    case WaitReason::activation_ready:
      return "activation_ready";
    case WaitReason::received:
      return "received";
    case WaitReason::weights_gathered:
      return "weights_gathered";
    case WaitReason::slot_free:
      return "slot_free";
    case WaitReason::gradient_ready:
      return "gradient_ready";
  }
  return "?";
}

namespace {

Stream stream_of(Kind k) {
  switch (k) {
    case Kind::F:
    case Kind::B:
    case Kind::I:
    case Kind::W:
    case Kind::OUTSIDE:
    case Kind::AG_WAIT:
    case Kind::RELEASE:
    case Kind::A2A_F:  // the exchanges run inside the compute action that follows (ir.h)
    case Kind::A2A_B:
      return Stream::compute;
    case Kind::SEND_F:
    case Kind::RECV_F:
    case Kind::SEND_B:
    case Kind::RECV_B:
      return Stream::pipe;
    case Kind::AG_ISSUE:
    case Kind::REDUCE_SCATTER:
      return Stream::fsdp;
    case Kind::OPTIMIZER:
      return Stream::host;
  }
  return Stream::host;
}

}  // namespace

StreamPlan plan_streams(const Program& lowered, int rank) {
  CAROUSEL_CHECK(rank >= 0 && rank < int(lowered.ranks.size()),
                 "stream plan: rank {} is not in a program of {} ranks", rank,
                 lowered.ranks.size());
  const Layout& l = lowered.layout;
  const int V = l.stages();
  const std::vector<Action>& list = lowered.ranks[rank];
  const int n = int(list.size());
  StreamPlan plan;
  plan.rank = rank;
  plan.stream.resize(n);
  plan.group.assign(n, -1);
  plan.record.assign(n, -1);
  std::vector<int> group_last(n, -1);
  for (int i = 0; i < n; ++i) {
    plan.stream[i] = stream_of(list[i].kind);
    if (!list[i].is_p2p()) continue;
    plan.group[i] = i > 0 && list[i - 1].is_p2p() ? plan.group[i - 1] : i;
    for (int j = plan.group[i]; j <= i; ++j) group_last[j] = i;
  }
  // Where each compute and p2p action is: (kind, stage, microbatch) -> index.
  std::map<std::tuple<Kind, int, int>, int> at;
  for (int i = 0; i < n; ++i) {
    if (list[i].is_compute() || list[i].is_p2p())
      at[{list[i].kind, list[i].stage, list[i].index}] = i;
  }
  auto find_before = [&](int i, Kind k, int v, int m) {
    const auto it = at.find({k, v, m});
    CAROUSEL_CHECK(it != at.end() && it->second < i,
                   "stream plan: rank {} runs {} before (or without) the {} it depends on", rank,
                   to_string(list[i]), to_string(Action{k, v, m}));
    return it->second;
  };
  // The event after action i (after its whole group for p2p), created on first demand.
  auto event_after = [&](int i) {
    const int a = list[i].is_p2p() ? group_last[i] : i;
    if (plan.record[a] < 0) {
      plan.record[a] = int(plan.events.size());
      plan.events.push_back({a, plan.stream[a]});
    }
    return plan.record[a];
  };
  // covered[dst][src]: the latest work of stream src that stream dst has already waited for.
  // Events of one in-order stream complete in order, so an older one needs no second wait; a
  // RELEASE enqueues no work, so its event completes with the compute before it.
  std::array<std::array<int, kStreams>, kStreams> covered;
  for (auto& row : covered) row.fill(-1);
  auto wait = [&](int i, int producer, WaitReason why) {
    const int e = event_after(producer);
    const Stream dst = plan.stream[i], src = plan.events[e].stream;
    if (dst == src) return;  // in stream order already
    int work = plan.events[e].action;
    while (work >= 0 && (plan.stream[work] != src || list[work].kind == Kind::RELEASE)) --work;
    int& seen = covered[int(dst)][int(src)];
    if (work <= seen) return;
    seen = work;
    plan.waits.push_back({i, e, why});
  };

  std::map<int, int> resident;  // stage -> slot, between AG_WAIT and RELEASE
  std::map<int, int> last_issue, issued_stage, last_release, held;  // per slot
  std::map<int, int> last_grad;                                     // stage -> its latest B / W
  bool fsdp = false;
  for (const Action& a : list) fsdp = fsdp || a.kind == Kind::AG_ISSUE;
  std::array<int, kStreams> last_on;
  last_on.fill(-1);
  for (int i = 0; i < n; ++i) {
    const Action& a = list[i];
    const int v = a.stage, m = a.index;
    switch (a.kind) {
      case Kind::F:
      case Kind::B:
      case Kind::I:
      case Kind::W: {
        if (a.kind == Kind::F && v > 0 && l.rank_of(v - 1) != rank) {
          wait(i, find_before(i, Kind::RECV_F, v, m), WaitReason::received);
        }
        const bool after = v < V - 1 || l.outside;  // a stage (or the outside one) after v
        if ((a.kind == Kind::B || a.kind == Kind::I) && after && l.rank_of(v + 1, m) != rank) {
          wait(i, find_before(i, Kind::RECV_B, v, m), WaitReason::received);
        }
        CAROUSEL_CHECK(!fsdp || a.kind == Kind::W || resident.count(v),
                       "stream plan: rank {} runs {} but no slot holds stage {}'s weights (no "
                       "AG_WAIT since the last RELEASE)",
                       rank, to_string(a), v);
        if (a.kind == Kind::B || a.kind == Kind::W) last_grad[v] = i;
        break;
      }
      case Kind::OUTSIDE:  // its layers are every rank's own: no slot
        if (l.rank_of(v - 1) != rank) {
          wait(i, find_before(i, Kind::RECV_F, v, m), WaitReason::received);
        }
        break;
      case Kind::SEND_F:
        wait(i, find_before(i, Kind::F, v, m), WaitReason::activation_ready);
        break;
      case Kind::SEND_B: {
        const bool split = at.count({Kind::I, v, m}) > 0;
        const Kind producer = v == V ? Kind::OUTSIDE : split ? Kind::I : Kind::B;
        wait(i, find_before(i, producer, v, m), WaitReason::activation_ready);
        break;
      }
      case Kind::RECV_F:
      case Kind::RECV_B:
        break;  // into a fresh buffer of (stage, microbatch): nothing to wait for
      case Kind::AG_ISSUE:
        CAROUSEL_CHECK(!held[m],
                       "stream plan: rank {} refills slot {} ({}) before the RELEASE "
                       "of its stage {}",
                       rank, m, to_string(a), issued_stage[m]);
        if (last_release.count(m)) wait(i, last_release[m], WaitReason::slot_free);
        held[m] = 1;
        last_issue[m] = i;
        issued_stage[m] = v;
        break;
      case Kind::AG_WAIT:
        CAROUSEL_CHECK(last_issue.count(m) && held[m] && issued_stage[m] == v,
                       "stream plan: rank {} waits at {} for a gather of stage {} into slot {} "
                       "that was not issued",
                       rank, to_string(a), v, m);
        wait(i, last_issue[m], WaitReason::weights_gathered);
        resident[v] = m;
        break;
      case Kind::RELEASE:
        CAROUSEL_CHECK(resident.count(v) && resident[v] == m,
                       "stream plan: rank {} releases slot {} at {} but it does not hold stage {}",
                       rank, m, to_string(a), v);
        resident.erase(v);
        held[m] = 0;
        last_release[m] = i;
        break;
      case Kind::REDUCE_SCATTER:
        CAROUSEL_CHECK(last_grad.count(v),
                       "stream plan: rank {} reduce-scatters stage {} "
                       "before any backward of it",
                       rank, v);
        wait(i, last_grad[v], WaitReason::gradient_ready);
        break;
      case Kind::A2A_F:  // a marker: its compute action orders its own exchanges
      case Kind::A2A_B:
        break;
      case Kind::OPTIMIZER: {
        HostBlock block{i,
                        {},
                        "global gradient norm: the host reads the loss and the squared "
                        "norm after every gradient is final"};
        for (int s = 0; s < kStreams; ++s) {
          if (last_on[s] >= 0) block.events.push_back(event_after(last_on[s]));
        }
        plan.host_blocks.push_back(std::move(block));
        break;
      }
    }
    last_on[int(plan.stream[i])] = i;
  }
  return plan;
}

std::vector<StreamPlan> plan_streams(const Program& lowered) {
  std::vector<StreamPlan> plans;
  for (int r = 0; r < int(lowered.ranks.size()); ++r) plans.push_back(plan_streams(lowered, r));
  return plans;
}

std::string to_text(const Program& lowered, const StreamPlan& plan) {
  const auto& list = lowered.ranks.at(plan.rank);
  std::string out;
  for (int i = 0; i < int(list.size()); ++i) {
    out += fmt::format("{:<16}{:<8}", to_string(list[i]), stream_name(plan.stream[i]));
    for (const StreamWait& w : plan.waits) {
      if (w.action == i) out += fmt::format(" wait[e{} {}]", w.event, reason_name(w.reason));
    }
    for (const HostBlock& b : plan.host_blocks) {
      if (b.action != i) continue;
      out += " host_block[";
      for (std::size_t k = 0; k < b.events.size(); ++k)
        out += fmt::format("{}e{}", k ? " " : "", b.events[k]);
      out += "]";
    }
    if (plan.record[i] >= 0) out += fmt::format(" record e{}", plan.record[i]);
    out += '\n';
  }
  return out;
}

}  // namespace carousel::schedule
