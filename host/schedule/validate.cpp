// validate.cpp — validation of compute programs and the deadlock replay of lowered ones.
#include <fmt/format.h>

#include <map>
#include <tuple>

#include "compute/error.h"
#include "host/schedule/passes.h"

namespace carousel::schedule {

namespace {

// "rank 1 | 1F0 1F1 >>1B3<< 1B0" — every rank's program, the faulty action bracketed.
std::string grid(const Program& p, int bad_rank, std::size_t bad_step) {
  std::string out;
  for (std::size_t r = 0; r < p.ranks.size(); ++r) {
    out += fmt::format("\n  rank {} |", r);
    for (std::size_t i = 0; i < p.ranks[r].size(); ++i) {
      const std::string a = to_string(p.ranks[r][i]);
      out += (int(r) == bad_rank && i == bad_step) ? " >>" + a + "<<" : " " + a;
    }
  }
  return out;
}

[[noreturn]] void fault(const Program& p, int rank, std::size_t step, const std::string& what) {
  fail("invalid schedule: {} (rank {}, step {}):{}", what, rank, step, grid(p, rank, step));
}

// An overlapped pair (Action::overlap) is a forward and the next compute action, a backward of
// another microbatch: the two share no data (a backward never needs another microbatch's
// forward), so they may run at the same time, and lowering can wait for both inputs at once.
void check_pair(const Program& p, int r, std::size_t i) {
  const Action& f = p.ranks[r][i];
  if (f.kind != Kind::F) fault(p, r, i, to_string(f) + ": only a forward may start an F&B pair");
  const std::size_t j = overlap_partner(p.ranks[r], i);
  if (j == p.ranks[r].size())
    fault(p, r, i, to_string(f) + " starts an F&B pair with nothing after it");
  const Action& b = p.ranks[r][j];
  if (b.kind != Kind::B && b.kind != Kind::I) {
    fault(p, r, j,
          fmt::format("{} is paired with {}, which is not a backward (B or I)", to_string(f),
                      to_string(b)));
  }
  if (b.index == f.index) {
    fault(p, r, j,
          fmt::format("{} is paired with {} of the same microbatch, which depends on it",
                      to_string(f), to_string(b)));
  }
}

}  // namespace

void validate(const Program& p) {
  const Layout& l = p.layout;
  CAROUSEL_CHECK(int(p.ranks.size()) == l.ranks, "invalid schedule: {} rank programs for {} ranks",
                 p.ranks.size(), l.ranks);
  // Position of each (kind, stage, microbatch) in its rank's list.
  std::map<std::tuple<Kind, int, int>, std::pair<int, std::size_t>> seen;
  for (int r = 0; r < l.ranks; ++r) {
    for (std::size_t i = 0; i < p.ranks[r].size(); ++i) {
      const Action& a = p.ranks[r][i];
      if (!a.is_compute()) fault(p, r, i, to_string(a) + " is not a compute action");
      const bool outside = a.kind == Kind::OUTSIDE;
      if (outside && (!l.outside || a.stage != l.stages())) {
        fault(p, r, i,
              fmt::format("{} is not the outside stage{}", to_string(a),
                          l.outside ? fmt::format(" ({})", l.stages()) : " (the layout has none)"));
      }
      if (!outside && (a.stage < 0 || a.stage >= l.stages())) {
        fault(p, r, i, fmt::format("stage {} is outside [0, {})", a.stage, l.stages()));
      }
      if (a.index < 0 || a.index >= l.microbatches) {
        fault(p, r, i, fmt::format("microbatch {} is outside [0, {})", a.index, l.microbatches));
      }
      if (l.rank_of(a.stage, a.index) != r) {
        fault(p, r, i,
              fmt::format("{} runs on rank {}",
                          outside ? to_string(a) : fmt::format("stage {}", a.stage),
                          l.rank_of(a.stage, a.index)));
      }
      if (!seen.emplace(std::tuple{a.kind, a.stage, a.index}, std::pair{r, i}).second) {
        fault(p, r, i, to_string(a) + " appears twice");
      }
      if (a.overlap) check_pair(p, r, i);
    }
  }
  auto where = [&](Kind k, int v, int m) -> const std::pair<int, std::size_t>* {
    const auto it = seen.find({k, v, m});
    return it == seen.end() ? nullptr : &it->second;
  };
  for (int v = 0; v < l.stages(); ++v) {
    const int r = l.rank_of(v);
    for (int m = 0; m < l.microbatches; ++m) {
      const auto* f = where(Kind::F, v, m);
      const auto* b = where(Kind::B, v, m);
      const auto* i = where(Kind::I, v, m);
      const auto* w = where(Kind::W, v, m);
      const std::string fm = fmt::format("{}F{}", v, m);
      if (!f) fault(p, r, p.ranks[r].size(), fmt::format("{} is missing", fm));
      if (!b && !(i && w)) {
        fault(p, r, f->second, fmt::format("{} has no backward: {}B{} or both {}I{} and {}W{} are "
                                           "needed", fm, v, m, v, m, v, m));
      }
      if (b && (i || w)) fault(p, r, b->second, fmt::format("{}B{} and an I/W split both appear", v, m));
      const auto* back = b ? b : i;
      if (back->second < f->second) fault(p, r, back->second, "backward before its forward " + fm);
      if (w && w->second < i->second) fault(p, r, w->second, fmt::format("{}W{} before {}I{}", v, m, v, m));
    }
  }
  if (!l.outside) return;
  // The outside stage: one OUTSIDE per microbatch, between the last stage's F and backward when
  // they share its rank (across ranks lowering orders them by the transfers).
  const int V = l.stages();
  for (int m = 0; m < l.microbatches; ++m) {
    const int r = l.rank_of(V, m);
    const auto* o = where(Kind::OUTSIDE, V, m);
    if (!o) fault(p, r, p.ranks[r].size(), fmt::format("{}OUTSIDE{} is missing", V, m));
    if (l.rank_of(V - 1) != r) continue;
    const auto* f = where(Kind::F, V - 1, m);
    const auto* b = where(Kind::B, V - 1, m);
    const auto* back = b ? b : where(Kind::I, V - 1, m);
    if (o->second < f->second)
      fault(p, r, o->second, fmt::format("{}OUTSIDE{} before {}F{}", V, m, V - 1, m));
    if (back->second < o->second) {
      fault(p, r, back->second,
            fmt::format("{} before {}OUTSIDE{}, which computes its gradient",
                        to_string(p.ranks[r][back->second]), V, m));
    }
  }
}

namespace {

// The identity of what a p2p action carries: (is forward, stage of the producer, microbatch).
std::tuple<bool, int, int> payload(const Action& a) {
  switch (a.kind) {
    case Kind::SEND_F: return {true, a.stage, a.index};
    case Kind::RECV_F: return {true, a.stage - 1, a.index};
    case Kind::SEND_B: return {false, a.stage, a.index};
    default: return {false, a.stage + 1, a.index};  // RECV_B
  }
}
bool is_send(const Action& a) { return a.kind == Kind::SEND_F || a.kind == Kind::SEND_B; }

}  // namespace

void replay(const Program& p) {
  const int R = p.layout.ranks;
  // k-th send from a to b <-> k-th receive at b from a: index them.
  std::map<std::pair<int, int>, std::vector<std::pair<int, std::size_t>>> sends, recvs;
  std::vector<std::vector<int>> partner_pos(R);  // partner's position for each p2p action
  for (int r = 0; r < R; ++r) {
    partner_pos[r].assign(p.ranks[r].size(), -1);
    for (std::size_t i = 0; i < p.ranks[r].size(); ++i) {
      const Action& a = p.ranks[r][i];
      if (!a.is_p2p()) continue;
      CAROUSEL_CHECK(a.peer >= 0 && a.peer < R && a.peer != r,
                     "invalid schedule: {} on rank {} has no valid peer rank", to_string(a), r);
      if (is_send(a)) sends[{r, a.peer}].push_back({r, i});
      else recvs[{a.peer, r}].push_back({r, i});
    }
  }
  for (const auto& [link, list] : sends) {
    const auto& rl = recvs[link];
    for (std::size_t k = 0; k < list.size(); ++k) {
      const Action& s = p.ranks[list[k].first][list[k].second];
      if (k >= rl.size()) {
        fail("invalid schedule: rank {} sends {} to rank {} (its send #{} to that rank) but rank "
             "{} posts only {} receive(s) from rank {}:{}",
             link.first, to_string(s), link.second, k, link.second, rl.size(), link.first,
             grid(p, list[k].first, list[k].second));
      }
      const Action& rv = p.ranks[rl[k].first][rl[k].second];
      if (payload(s) != payload(rv)) {
        fail("invalid schedule: crossed send/receive between rank {} and rank {}: send #{} is {} "
             "but the matching receive #{} is {}:{}",
             link.first, link.second, k, to_string(s), k, to_string(rv),
             grid(p, rl[k].first, rl[k].second));
      }
      partner_pos[list[k].first][list[k].second] = int(rl[k].second);
      partner_pos[rl[k].first][rl[k].second] = int(list[k].second);
    }
  }
  for (const auto& [link, list] : recvs) {
    const std::size_t matched = sends.count(link) ? sends.at(link).size() : 0;
    if (list.size() > matched) {
      const auto [r, i] = list[matched];
      fail("invalid schedule: rank {} receives {} from rank {} which never sends it:{}", r,
           to_string(p.ranks[r][i]), link.first, grid(p, r, i));
    }
  }
  // Lock-step replay. pos[r] = first action not yet done; when pos[r] is a p2p action, rank r has
  // posted the group of consecutive p2p actions starting there and waits for all of them.
  std::vector<std::size_t> pos(R, 0);
  std::vector<std::vector<bool>> done(R);
  for (int r = 0; r < R; ++r) done[r].assign(p.ranks[r].size(), false);
  auto group_end = [&](int r) {
    std::size_t e = pos[r];
    while (e < p.ranks[r].size() && p.ranks[r][e].is_p2p()) ++e;
    return e;
  };
  auto posted = [&](int r, std::size_t i) { return i >= pos[r] && i < group_end(r); };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      while (pos[r] < p.ranks[r].size() && !p.ranks[r][pos[r]].is_p2p()) {
        done[r][pos[r]++] = true;  // compute and collectives of the FSDP group
        progress = true;
      }
      if (pos[r] == p.ranks[r].size()) continue;
      const std::size_t end = group_end(r);
      bool ready = true;
      for (std::size_t i = pos[r]; i < end && ready; ++i) {
        const int peer = p.ranks[r][i].peer;
        const std::size_t q = std::size_t(partner_pos[r][i]);
        ready = done[peer][q] || posted(peer, q);
      }
      if (ready) {
        for (std::size_t i = pos[r]; i < end; ++i) done[r][i] = true;
        pos[r] = end;
        progress = true;
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    if (pos[r] < p.ranks[r].size()) {
      std::string waits;
      for (int q = 0; q < R; ++q) {
        if (pos[q] < p.ranks[q].size()) {
          waits += fmt::format("\n  rank {} blocked at {}", q, to_string(p.ranks[q][pos[q]]));
        }
      }
      fail("invalid schedule: deadlock — no rank can progress:{}\nprograms:{}", waits,
           grid(p, r, pos[r]));
    }
  }
}

}  // namespace carousel::schedule
