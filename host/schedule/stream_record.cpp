// stream_record.cpp — the recording model of streams.h: every rank's streams executed in order
// on simulated device time, honouring only the stream plan's waits, with each buffer's reads and
// writes recorded and checked against the program's data flow.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

#include "compute/error.h"
#include "host/schedule/streams.h"

namespace carousel::schedule {

std::string to_string(const Buffer& b) {
  switch (b.kind) {
    case BufferKind::activation:
      return fmt::format("activation({}, {})", b.stage, b.microbatch);
    case BufferKind::input_grad:
      return fmt::format("input_grad({}, {})", b.stage, b.microbatch);
    case BufferKind::stash:
      return fmt::format("stash({}, {})", b.stage, b.microbatch);
    case BufferKind::deferred:
      return fmt::format("deferred({}, {})", b.stage, b.microbatch);
    case BufferKind::slot:
      return fmt::format("slot {}", b.stage);
    case BufferKind::weight_grad:
      return fmt::format("weight_grad({})", b.stage);
    case BufferKind::grad_shard:
      return fmt::format("grad_shard({})", b.stage);
  }
  return "?";
}

std::vector<Access> data_accesses(const Program& lowered, int rank) {
  const int V = lowered.layout.stages();
  const auto& list = lowered.ranks.at(rank);
  std::vector<Access> out;
  std::map<Buffer, int> version;  // latest version written so far
  auto write = [&](int i, Buffer b) {
    auto it = version.emplace(b, -1).first;
    out.push_back({rank, i, b, ++it->second, true});
  };
  auto read = [&](int i, Buffer b) {
    const auto it = version.find(b);
    CAROUSEL_CHECK(it != version.end(), "rank {}: {} reads {}, which nothing on the rank wrote",
                   rank, to_string(list[i]), to_string(b));
    out.push_back({rank, i, b, it->second, false});
  };
  using K = BufferKind;
  std::map<int, int> resident;  // stage -> slot
  std::map<int, bool> sharded;  // stage -> reduce-scattered
  for (int i = 0; i < int(list.size()); ++i) {
    const Action& a = list[i];
    const int v = a.stage, m = a.index;
    auto weights = [&] {
      const auto it = resident.find(v);
      if (it != resident.end()) read(i, {K::slot, it->second});
    };
    switch (a.kind) {
      case Kind::F:
        if (v > 0) read(i, {K::activation, v - 1, m});
        weights();
        write(i, {K::activation, v, m});
        write(i, {K::stash, v, m});
        break;
      case Kind::B:
      case Kind::I:
        read(i, {K::stash, v, m});
        if (v < V - 1 || lowered.layout.outside) read(i, {K::input_grad, v + 1, m});
        weights();
        if (v > 0) write(i, {K::input_grad, v, m});
        write(i, a.kind == Kind::B ? Buffer{K::weight_grad, v} : Buffer{K::deferred, v, m});
        break;
      case Kind::W:
        read(i, {K::deferred, v, m});
        write(i, {K::weight_grad, v});
        break;
      case Kind::OUTSIDE:  // the last stage's output in, its gradient out
        read(i, {K::activation, v - 1, m});
        write(i, {K::input_grad, v, m});
        break;
      case Kind::SEND_F:
        read(i, {K::activation, v, m});
        break;
      case Kind::RECV_F:
        write(i, {K::activation, v - 1, m});
        break;
      case Kind::SEND_B:
        read(i, {K::input_grad, v, m});
        break;
      case Kind::RECV_B:
        write(i, {K::input_grad, v + 1, m});
        break;
      case Kind::AG_ISSUE:
        write(i, {K::slot, m});
        break;
      case Kind::AG_WAIT:
        resident[v] = m;
        break;
      case Kind::RELEASE:
        resident.erase(v);
        break;
      case Kind::A2A_F:  // the rows exchanged are the compute action's own temporaries
      case Kind::A2A_B:
        break;
      case Kind::REDUCE_SCATTER:
        read(i, {K::weight_grad, v});
        write(i, {K::grad_shard, v});
        sharded[v] = true;
        break;
      case Kind::OPTIMIZER:
        for (int s = 0; s < V; ++s) {  // this rank's stages, in any placement
          if (lowered.layout.rank_of(s) == rank) {
            read(i, {sharded[s] ? K::grad_shard : K::weight_grad, s});
          }
        }
        break;
    }
  }
  return out;
}

namespace {

// The action a p2p action is matched with on its peer: (peer, kind, stage, microbatch).
std::tuple<int, Kind, int, int> partner(const Action& a) {
  switch (a.kind) {
    case Kind::SEND_F:
      return {a.peer, Kind::RECV_F, a.stage + 1, a.index};
    case Kind::RECV_F:
      return {a.peer, Kind::SEND_F, a.stage - 1, a.index};
    case Kind::SEND_B:
      return {a.peer, Kind::RECV_B, a.stage - 1, a.index};
    default:
      return {a.peer, Kind::SEND_B, a.stage + 1, a.index};  // RECV_B
  }
}

}  // namespace

Recording record_streams(const Program& p, const std::vector<StreamPlan>& plans, const Costs& c,
                         const std::vector<std::vector<double>>& extra) {
  const int R = int(p.ranks.size());
  CAROUSEL_CHECK(int(plans.size()) == R, "record_streams: {} plans for {} ranks", plans.size(), R);
  Recording rec;
  rec.start.resize(R);
  rec.end.resize(R);
  rec.exposed_all_gather.assign(R, 0);
  std::vector<std::vector<double>> event_time(R), posted(R);
  std::vector<std::vector<std::vector<int>>> waits_of(R), block_of(R);
  std::vector<std::array<std::vector<int>, kStreams>> queue(R);  // p2p: group heads only
  std::vector<std::array<std::size_t, kStreams>> pos(R);
  std::map<std::tuple<int, Kind, int, int>, std::pair<int, int>> group_of;  // -> (rank, head)
  for (int r = 0; r < R; ++r) {
    const StreamPlan& plan = plans[r];
    const auto& list = p.ranks[r];
    const int n = int(list.size());
    CAROUSEL_CHECK(int(plan.stream.size()) == n,
                   "record_streams: rank {}'s plan has {} actions, "
                   "its list {}",
                   r, plan.stream.size(), n);
    rec.start[r].assign(n, -1);
    rec.end[r].assign(n, -1);
    event_time[r].assign(plan.events.size(), -1);
    posted[r].assign(n, -1);
    waits_of[r].resize(n);
    block_of[r].resize(n);
    pos[r].fill(0);
    for (const StreamWait& w : plan.waits) {  // a group waits for all its actions' events
      waits_of[r][list[w.action].is_p2p() ? plan.group[w.action] : w.action].push_back(w.event);
    }
    for (const HostBlock& b : plan.host_blocks) {
      block_of[r][b.action].insert(block_of[r][b.action].end(), b.events.begin(), b.events.end());
    }
    for (int i = 0; i < n; ++i) {
      if (list[i].is_p2p())
        group_of[{r, list[i].kind, list[i].stage, list[i].index}] = {r, plan.group[i]};
      if (!list[i].is_p2p() || plan.group[i] == i) queue[r][int(plan.stream[i])].push_back(i);
    }
  }
  auto duration = [&](int r, int i) {
    const Action& a = p.ranks[r][i];
    const double more = r < int(extra.size()) && i < int(extra[r].size()) ? extra[r][i] : 0.0;
    return c.duration(a) + more;
  };
  // When every event in `events` has been recorded; -1 while one has not.
  auto ready_at = [&](int r, const std::vector<int>& events, double t) {
    for (int e : events) {
      if (event_time[r][e] < 0) return -1.0;
      t = std::max(t, event_time[r][e]);
    }
    return t;
  };
  auto finish = [&](int r, int i, double start, double end) {
    rec.start[r][i] = start;
    rec.end[r][i] = end;
    if (plans[r].record[i] >= 0) event_time[r][plans[r].record[i]] = end;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      const auto& list = p.ranks[r];
      for (int s = 0; s < kStreams; ++s) {
        auto& q = queue[r][s];
        while (pos[r][s] < q.size()) {
          const int i = q[pos[r][s]];
          const double free = pos[r][s] == 0 ? 0.0 : rec.end[r][q[pos[r][s] - 1]];
          if (!list[i].is_p2p()) {
            const double t = ready_at(r, waits_of[r][i], ready_at(r, block_of[r][i], free));
            if (t < 0) break;
            if (list[i].kind == Kind::AG_WAIT) rec.exposed_all_gather[r] += t - free;
            finish(r, i, t, t + duration(r, i));
          } else {
            if (posted[r][i] < 0) {  // post the group once its waits are met
              const double t = ready_at(r, waits_of[r][i], free);
              if (t < 0) break;
              posted[r][i] = t;
              progress = true;
            }
            // It completes when every partner group has been posted as well.
            double end = posted[r][i];
            int j = i;
            for (; j < int(list.size()) && plans[r].group[j] == i; ++j) {
              const auto it = group_of.find(partner(list[j]));
              CAROUSEL_CHECK(it != group_of.end(), "record_streams: rank {}'s {} has no partner", r,
                             to_string(list[j]));
              const double other = posted[it->second.first][it->second.second];
              if (other < 0) break;
              end = std::max(end, std::max(posted[r][i], other) + c.p2p + duration(r, j));
            }
            if (j < int(list.size()) && plans[r].group[j] == i) break;
            for (int k = i; k < j; ++k) finish(r, k, posted[r][i], end);
          }
          ++pos[r][s];
          progress = true;
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int s = 0; s < kStreams; ++s) {
      if (pos[r][s] < queue[r][s].size()) {
        fail("record_streams: the plans deadlock: rank {}'s {} stream is stuck at {}", r,
             stream_name(Stream(s)), to_string(p.ranks[r][queue[r][s][pos[r][s]]]));
      }
    }
    for (double e : rec.end[r]) rec.step_time = std::max(rec.step_time, e);
    for (Access a : data_accesses(p, r)) {
      a.start = rec.start[r][a.action];
      a.end = rec.end[r][a.action];
      rec.accesses.push_back(a);
    }
  }
  return rec;
}

std::vector<std::string> check_recording(const Program& p, const Recording& rec) {
  constexpr double eps = 1e-9;
  std::map<std::pair<int, Buffer>, std::vector<const Access*>> by_buffer;
  for (const Access& a : rec.accesses) by_buffer[{a.rank, a.buffer}].push_back(&a);
  std::vector<std::string> out;
  auto name = [&](const Access& a) { return to_string(p.ranks[a.rank][a.action]); };
  for (const auto& [key, accesses] : by_buffer) {
    std::map<int, const Access*> writes;
    for (const Access* a : accesses) {
      if (a->write) writes[a->version] = a;
    }
    for (const Access* a : accesses) {
      if (!a->write) {
        const auto w = writes.find(a->version);
        if (w == writes.end()) {
          out.push_back(fmt::format("rank {}: {} reads {} v{}, which is never written", a->rank,
                                    name(*a), to_string(a->buffer), a->version));
        } else if (a->start < w->second->end - eps) {
          out.push_back(fmt::format("rank {}: {} reads {} v{} from {} but {} writes it until {}",
                                    a->rank, name(*a), to_string(a->buffer), a->version, a->start,
                                    name(*w->second), w->second->end));
        }
        continue;
      }
      for (const Access* b : accesses) {  // every use of the previous contents has ended
        if (b->version != a->version - 1 || b->action == a->action) continue;
        if (a->start < b->end - eps) {
          out.push_back(
              fmt::format("rank {}: {} overwrites {} (v{}) from {} while {} still {} "
                          "v{} until {}",
                          a->rank, name(*a), to_string(a->buffer), a->version, a->start, name(*b),
                          b->write ? "writes" : "reads", b->version, b->end));
        }
      }
    }
  }
  return out;
}

}  // namespace carousel::schedule
