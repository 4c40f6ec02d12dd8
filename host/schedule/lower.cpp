// lower.cpp — from a compute program to per-rank instruction lists: p2p, weight residency,
// gradient reduce-scatter, optimizer.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "compute/error.h"
#include "host/schedule/passes.h"

namespace carousel::schedule {

namespace {

// Weight residency of one rank: AG_ISSUE / AG_WAIT / RELEASE around its compute actions.
// before[j] / after[j] collect what goes right before / after compute action j.
struct Residency {
  std::vector<std::vector<Action>> before, after;
};

// Residency over a sequence of weight uses, `stages[j]` = the stage the j-th use reads.
Residency place_on_uses(const std::vector<int>& stages, int slots, int lookahead) {
  const std::size_t n = stages.size();
  Residency out{std::vector<std::vector<Action>>(n), std::vector<std::vector<Action>>(n)};
  if (n == 0) return out;
  if (slots == 0) {  // gather on every use, into slot 0, released right after
    for (std::size_t j = 0; j < n; ++j) {
      const int v = stages[j];
      out.before[j] = {{Kind::AG_ISSUE, v, 0}, {Kind::AG_WAIT, v, 0}};
      out.after[j] = {{Kind::RELEASE, v, 0}};
    }
    return out;
  }
  const std::set<int> local(stages.begin(), stages.end());
  const int capacity = slots < 0 ? int(local.size()) : slots;
  // next_use[j] = index of the next compute action using the same stage after j (n if none).
  std::vector<std::size_t> next_use(n, n);
  std::map<int, std::size_t> upcoming;
  for (std::size_t j = n; j-- > 0;) {
    const auto it = upcoming.find(stages[j]);
    next_use[j] = it == upcoming.end() ? n : it->second;
    upcoming[stages[j]] = j;
  }
  struct Resident {
    int slot;
    std::size_t last_use;  // latest compute action that used it so far
  };
  std::map<int, Resident> resident;  // stage -> slot
  std::vector<std::size_t> slot_free_after(capacity, 0);  // issue point: before compute j >= this
  std::vector<bool> slot_used(capacity, false);
  for (std::size_t j = 0; j < n; ++j) {
    const int v = stages[j];
    auto it = resident.find(v);
    if (it == resident.end()) {
      int slot = -1;
      for (int s = 0; s < capacity && slot < 0; ++s) {
        if (!slot_used[s]) slot = s;
      }
      if (slot < 0) {  // evict the resident stage whose next use is furthest away
        auto victim = resident.begin();
        std::size_t furthest = 0;
        for (auto r = resident.begin(); r != resident.end(); ++r) {
          const std::size_t nu = next_use[r->second.last_use];
          if (nu >= furthest) {
            furthest = nu;
            victim = r;
          }
        }
        slot = victim->second.slot;
        out.after[victim->second.last_use].push_back({Kind::RELEASE, victim->first, slot});
        slot_free_after[slot] = victim->second.last_use + 1;
        resident.erase(victim);
      }
      slot_used[slot] = true;
      const std::size_t earliest =
          lookahead > 0 && j >= std::size_t(lookahead) ? j - lookahead : 0;
      const std::size_t issue_at = std::max(slot_free_after[slot], earliest);
      out.before[issue_at].push_back({Kind::AG_ISSUE, v, slot});
      out.before[j].push_back({Kind::AG_WAIT, v, slot});
      it = resident.emplace(v, Resident{slot, j}).first;
    }
    it->second.last_use = j;
  }
  for (const auto& [v, r] : resident) out.after[r.last_use].push_back({Kind::RELEASE, v, r.slot});
  // An issue placed before j must precede the waits placed there by earlier iterations' logic:
  // order every before-list as issues first, then waits.
  for (auto& list : out.before) {
    std::stable_partition(list.begin(), list.end(),
                          [](const Action& a) { return a.kind == Kind::AG_ISSUE; });
  }
  return out;
}

// Residency of one rank's compute actions. W (the weight-gradient GEMMs of a zero-bubble split)
// reads activations and output gradients only, never the weights, so it is not a use; nor is
// OUTSIDE, whose layers every rank holds whole (no stage's weights).
Residency place_weights(const std::vector<Action>& computes, int slots, int lookahead) {
  std::vector<std::size_t> uses;
  std::vector<int> stages;
  for (std::size_t j = 0; j < computes.size(); ++j) {
    if (computes[j].kind == Kind::W || computes[j].kind == Kind::OUTSIDE) continue;
    uses.push_back(j);
    stages.push_back(computes[j].stage);
  }
  const Residency on_uses = place_on_uses(stages, slots, lookahead);
  Residency out{std::vector<std::vector<Action>>(computes.size()),
                std::vector<std::vector<Action>>(computes.size())};
  for (std::size_t u = 0; u < uses.size(); ++u) {
    // With slots, a gather issued before use u may start right after use u - 1 (its slot is
    // free by then), before any Ws in between, so it overlaps them (interleaved_zb, R > slots).
    const std::size_t issue_at = slots != 0 && u > 0 ? uses[u - 1] + 1 : uses[u];
    for (const Action& a : on_uses.before[u]) {
      out.before[a.kind == Kind::AG_ISSUE ? issue_at : uses[u]].push_back(a);
    }
    out.after[uses[u]] = on_uses.after[u];
  }
  return out;
}

// FSDP gathering per use puts a pair's residency between its halves (the F's release, the B's
// gather into the same slot): for a pair that would take turns, the B's gather moves before the
// pair into a slot of its own and the F's release after it, so both stages' weights are there
// while the halves take turns (one more slot). Other layouts are left as they are.
void hoist_pair_gathers(std::vector<Action>& list) {
  int fresh = 0;  // a slot no gather of this rank uses
  for (const Action& a : list)
    if (a.kind == Kind::AG_ISSUE) fresh = std::max(fresh, a.index + 1);
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!list[i].overlap) continue;
    const std::size_t j = overlap_partner(list, i);
    if (j + 1 >= list.size() || (!exchanges_at(list, i) && !exchanges_at(list, j))) continue;
    const int f = list[i].stage, b = list[j].stage;
    std::vector<Action> between, moved;  // p2p and A2A; the B's gather and wait, the F's release
    for (std::size_t k = i + 1; k < j; ++k) {
      const Action& a = list[k];
      const bool gather = (a.kind == Kind::AG_ISSUE || a.kind == Kind::AG_WAIT) && a.stage == b;
      ((gather || (a.kind == Kind::RELEASE && a.stage == f)) ? moved : between).push_back(a);
    }
    const bool per_use = moved.size() == 3 && moved[0].kind == Kind::RELEASE &&
                         moved[1].kind == Kind::AG_ISSUE && moved[2].kind == Kind::AG_WAIT &&
                         list[j + 1].kind == Kind::RELEASE && list[j + 1].stage == b;
    const bool transfers_only = std::all_of(between.begin(), between.end(), [](const Action& a) {
      return a.is_p2p() || a.is_exchange();
    });
    if (!per_use || !transfers_only) continue;
    const std::size_t start = exchanges_at(list, i) ? i - 1 : i;  // the F's A2A stays before it
    std::vector<Action> unit = {{Kind::AG_ISSUE, b, fresh}, {Kind::AG_WAIT, b, fresh}};
    unit.insert(unit.end(), list.begin() + std::ptrdiff_t(start),
                list.begin() + std::ptrdiff_t(i + 1));
    unit.insert(unit.end(), between.begin(), between.end());
    unit.insert(unit.end(), {list[j], moved[0], {Kind::RELEASE, b, fresh}});
    list.erase(list.begin() + std::ptrdiff_t(start), list.begin() + std::ptrdiff_t(j + 2));
    list.insert(list.begin() + std::ptrdiff_t(start), unit.begin(), unit.end());
    i = start + unit.size() - 1;
  }
}

}  // namespace

// W runs no layer (only weight-gradient GEMMs, dense or of experts already done in I): no A2A.
Program place_exchanges(Program p, const std::vector<int>& exchanging_layers) {
  if (exchanging_layers.empty()) return p;
  const int stages = p.layout.stages() + (p.layout.outside ? 1 : 0);
  CAROUSEL_CHECK(int(exchanging_layers.size()) == stages,
                 "lowering: exchanging layers for {} stages, the program has {}",
                 exchanging_layers.size(), stages);
  for (auto& list : p.ranks) {
    std::vector<Action> with;
    for (const Action& a : list) {
      const bool exchanges =
          a.is_compute() && a.kind != Kind::W && exchanging_layers[std::size_t(a.stage)] > 0;
      if (exchanges) with.push_back(exchange_of(a));
      with.push_back(a);
    }
    list = std::move(with);
    hoist_pair_gathers(list);
  }
  return p;
}

Program lower(const Program& compute, const LoweringOptions& options) {
  validate(compute);
  const Layout& l = compute.layout;
  const int V = l.stages(), R = l.ranks;
  CAROUSEL_CHECK(options.weight_slots >= -1, "weight slots must be -1 (one per stage), 0 (gather "
                 "every use) or a positive count, got {}", options.weight_slots);
  CAROUSEL_CHECK(options.lookahead >= 0, "prefetch lookahead must be >= 0, got {}",
                 options.lookahead);
  std::vector<Residency> res(R);
  std::vector<std::map<int, std::size_t>> last_grad(R);  // stage -> its last B/W on the rank
  for (int r = 0; r < R; ++r) {
    const auto& prog = compute.ranks[r];
    if (options.fsdp) res[r] = place_weights(prog, options.weight_slots, options.lookahead);
    for (std::size_t j = 0; j < prog.size(); ++j) {
      if (prog[j].kind == Kind::B || prog[j].kind == Kind::W) last_grad[r][prog[j].stage] = j;
    }
  }
  // Lock-step walk: in each round every rank runs its next compute action if its input is there.
  // The producer places the SEND right after its action and the consumer's RECV at the consumer's
  // current position (the sender decides the order, so both sides agree). A receive is thus
  // posted as soon as its data exists, and the data waits in the receiver's buffer (MaxText's
  // circular storage) instead of blocking the ring.
  Program out{l, std::vector<std::vector<Action>>(R)};
  std::set<std::tuple<Kind, int, int>> done;      // compute actions run: (kind, stage, mb)
  std::set<std::tuple<bool, int, int>> received;  // (forward?, consumer stage, mb) delivered
  std::vector<std::size_t> ptr(R, 0);
  auto has = [&](Kind k, int v, int m) { return done.count({k, v, m}) > 0; };
  auto input_ready = [&](int r, const Action& a) {
    const int v = a.stage, m = a.index;
    switch (a.kind) {
      case Kind::F:
        if (v == 0) return true;
        return l.rank_of(v - 1) == r ? has(Kind::F, v - 1, m) : received.count({true, v, m}) > 0;
      case Kind::B:
      case Kind::I:
        if (v == V - 1 && !l.outside) return has(Kind::F, v, m);
        if (l.rank_of(v + 1, m) != r) return received.count({false, v, m}) > 0;
        return has(Kind::B, v + 1, m) || has(Kind::I, v + 1, m) || has(Kind::OUTSIDE, v + 1, m);
      case Kind::OUTSIDE:
        return l.rank_of(v - 1) == r ? has(Kind::F, v - 1, m) : received.count({true, v, m}) > 0;
      default:  // W
        return has(Kind::I, v, m);
    }
  };
  // An overlapped F&B pair (Action::overlap) is one unit: it runs when both inputs are there
  // (the backward's cannot come from the forward, validate() checks they are of different
  // microbatches), so every receive either half needs is posted before the pair starts.
  auto unit_size = [&](int r) -> std::size_t {
    const auto& prog = compute.ranks[r];
    if (ptr[r] == prog.size() || !input_ready(r, prog[ptr[r]])) return 0;
    if (!prog[ptr[r]].overlap) return 1;
    const std::size_t partner = overlap_partner(prog, ptr[r]);  // validate(): it exists
    return input_ready(r, prog[partner]) ? partner - ptr[r] + 1 : 0;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      const auto& prog = compute.ranks[r];
      for (std::size_t unit = unit_size(r); unit > 0; --unit) {
        const std::size_t j = ptr[r]++;
        const Action& a = prog[j];
        auto& list = out.ranks[r];
        if (options.fsdp) list.insert(list.end(), res[r].before[j].begin(), res[r].before[j].end());
        list.push_back(a);
        if (options.fsdp) list.insert(list.end(), res[r].after[j].begin(), res[r].after[j].end());
        done.insert({a.kind, a.stage, a.index});
        const int v = a.stage, m = a.index;
        // The last stage's output goes on to the outside stage's rank, if there is one.
        const bool has_next = v < V - 1 || l.outside;
        if (a.kind == Kind::F && has_next && l.rank_of(v + 1, m) != r) {
          const int q = l.rank_of(v + 1, m);
          list.push_back({Kind::SEND_F, v, m, q});
          out.ranks[q].push_back({Kind::RECV_F, v + 1, m, r});
          received.insert({true, v + 1, m});
        }
        const bool backward = a.kind == Kind::B || a.kind == Kind::I || a.kind == Kind::OUTSIDE;
        if (backward && v > 0 && l.rank_of(v - 1) != r) {
          const int q = l.rank_of(v - 1);
          list.push_back({Kind::SEND_B, v, m, q});
          out.ranks[q].push_back({Kind::RECV_B, v - 1, m, r});
          received.insert({false, v - 1, m});
        }
        if (options.fsdp && last_grad[r].count(v) && last_grad[r][v] == j) {
          list.push_back({Kind::REDUCE_SCATTER, v, -1});
        }
        progress = true;
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    if (ptr[r] < compute.ranks[r].size()) {
      fail("invalid schedule: rank {} can never run {}: its input is produced after it in the "
           "order of the ranks' programs (a dependency cycle)\n{}",
           r, to_string(compute.ranks[r][ptr[r]]), to_text(compute));
    }
    out.ranks[r].push_back({Kind::OPTIMIZER, -1, -1});
  }
  return out;
}

}  // namespace carousel::schedule
