// plan_search.cpp — the candidates of a cluster (listed by plan_layout.cpp, validated as configs
// here), refuse what cannot fit, simulate the rest in order of their step-time bound, keep the
// best per mesh (and, reporting a layout that does not fit, the best of those), and report the
// progress of a long search.
#include "host/plan/plan_search.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "compute/error.h"
#include "host/schedule/registry.h"
#include "models/stage.h"

namespace carousel::plan {

namespace {

// Step times are compared in steps of 0.2% (a cost model is not more exact than that); within
// one step, fewer bytes sent is better (communication is where the model assumes most: full
// overlap with compute), then less memory.
constexpr double kTimeStep = 0.002;
std::int64_t time_bucket(double seconds) {
  CAROUSEL_ASSERT(seconds > 0 && std::isfinite(seconds), "a predicted step of {} s", seconds);
  return std::int64_t(std::floor(std::log(seconds) / std::log1p(kTimeStep)));
}
bool better(const Prediction& a, const Prediction& b) {
  const std::int64_t ta = time_bucket(a.step_seconds), tb = time_bucket(b.step_seconds);
  if (ta != tb) return ta < tb;
  const double sent_a = a.bytes.intra + a.bytes.inter, sent_b = b.bytes.intra + b.bytes.inter;
  if (sent_a != sent_b) return sent_a < sent_b;
  return a.memory.total() < b.memory.total();
}

struct Pending {
  CostedCandidate costed;
  double bound;
};

// The planner's own memory against the address-space and data-segment limits: a search that
// cannot fit stops with the sizes before the allocation that would fail (under `ulimit -v 2.3 GB`
// a search of schedules of 2^19 units ran 95 s, then ended as a bare "std::bad_alloc"). Measured:
// the process at start-up (its libraries mapped: 1.14 GiB; the planner starts no thread), a
// pending candidate (its config, costs and links, sizeof 1.6 KiB plus its strings) and one unit
// of a simulated schedule (S x M x R: the lowered program and the simulation's timeline, at most
// 0.96 KiB, with FSDP's per-use gathers), each with margin.
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kStartupBytes = 1280 * kMiB;
constexpr double kCandidateBytes = 4096;
constexpr double kScheduleUnitBytes = 1536;

struct MemoryLimit {
  double bytes = std::numeric_limits<double>::infinity();
  const char* which = "address-space limit (ulimit -v)";

  static MemoryLimit of(const SearchOptions& options) {
    MemoryLimit out;
    if (options.memory_limit_bytes > 0) {
      out.bytes = options.memory_limit_bytes;
      out.which = "memory limit given to the search";
      return out;
    }
    for (const auto& [resource, name] :
         {std::pair{RLIMIT_AS, "address-space limit (ulimit -v)"},
          std::pair{RLIMIT_DATA, "data-segment limit (ulimit -d)"}}) {
      rlimit lim{};
      if (getrlimit(resource, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
          double(lim.rlim_cur) < out.bytes) {
        out.bytes = double(lim.rlim_cur);
        out.which = name;
      }
    }
    return out;
  }

  // `candidates` pending, and a schedule of `units` (S x M x R) being simulated.
  void check(std::size_t candidates, std::int64_t units, const std::string& what) const {
    const double need = search_memory_bytes(candidates, units);
    CAROUSEL_CHECK(need <= bytes,
                   "carousel plan would need about {:.0f} MiB for {} ({} candidates kept), but the "
                   "{} is {:.0f} MiB; raise the limit, or narrow the search: --max-microbatches, "
                   "--schedules, --tensor, --context, --expert",
                   need / kMiB, what, candidates, which, bytes / kMiB);
  }
};

// A degree the user fixed that no mesh can take, named with its reason (each ended as "no mesh
// splits the global batch" before).
void check_fixed_degrees(const Workload& w, const Cluster& cluster, const SearchOptions& o) {
  const std::int64_t node = std::min(cluster.devices, cluster.devices_per_node);
  const ModelConfig& m = w.model;
  for (const auto& [flag, degree] : {std::pair{"--tensor", o.tensor}, {"--context", o.context}}) {
    CAROUSEL_CHECK(degree <= 0 || node % degree == 0,
                   "{}={} does not divide the {} devices of a node ({} groups stay within a "
                   "node: their ranks exchange activations at every layer); valid: divisors of {}",
                   flag, degree, node, flag + 2, node);
  }
  if (o.tensor > 0) {
    try {
      check_tensor_split(llama_twin(m), int(o.tensor));
    } catch (const Error& e) {
      fail("--tensor={}: {}", o.tensor, e.what());
    }
  }
  CAROUSEL_CHECK(o.context <= 0 || m.max_target_length % (2 * o.context) == 0,
                 "--context={} cuts each sequence into 2 x {} = {} chunks, but the sequence length "
                 "{} (--seq-len) is not a multiple of {}",
                 o.context, o.context, 2 * o.context, m.max_target_length, 2 * o.context);
  if (o.expert > 1) {
    CAROUSEL_CHECK(m.is_moe(),
                   "--expert={} splits routed experts, and this model has none (num_experts={}); "
                   "leave --expert out or give 1",
                   o.expert, m.num_experts);
    CAROUSEL_CHECK(m.num_experts % o.expert == 0,
                   "--expert={} does not divide num_experts={}: each expert rank holds "
                   "num_experts / E whole experts",
                   o.expert, m.num_experts);
    CAROUSEL_CHECK(cluster.devices % o.expert == 0,
                   "--expert={} does not divide --devices={}: expert ranks are carved from the "
                   "data ranks",
                   o.expert, cluster.devices);
  }
}

using MeshKey = std::tuple<int, int, int, int, int, int>;
MeshKey mesh_key(const Candidate& c) {
  return {c.stages, c.fsdp, c.data, c.tensor, c.context, c.expert};
}

const Prediction* fastest(const std::map<MeshKey, Prediction>& best) {
  const Prediction* out = nullptr;
  for (const auto& [key, p] : best)
    if (!out || p.step_seconds < out->step_seconds) out = &p;
  return out;
}

// Reports progress at most every options.progress_seconds.
class ProgressClock {
 public:
  explicit ProgressClock(const SearchOptions& o) : o_(o), start_(Clock::now()), last_(start_) {}
  // `fit`: the best per mesh so far (nullptr while enumerating).
  void tick(const SearchResult& r, bool enumerating, const std::map<MeshKey, Prediction>* fit) {
    if (!o_.progress) return;
    const Clock::time_point now = Clock::now();
    if (std::chrono::duration<double>(now - last_).count() < o_.progress_seconds) return;
    last_ = now;
    const Prediction* best = fit ? fastest(*fit) : nullptr;
    o_.progress({.elapsed_seconds = std::chrono::duration<double>(now - start_).count(),
                 .enumerating = enumerating,
                 .candidates = r.candidates,
                 .refused_memory = r.refused_memory,
                 .simulated = r.simulated,
                 .pruned = r.pruned,
                 .best = best});
  }

 private:
  using Clock = std::chrono::steady_clock;
  const SearchOptions& o_;
  Clock::time_point start_, last_;
};

// Thrown from the enumeration's visitor when SearchOptions::stop says stop.
struct Stopped {};
bool stop_requested(const SearchOptions& o, SearchResult& r) {
  if (!r.interrupted && o.stop && o.stop()) r.interrupted = true;
  return r.interrupted;
}

// Every valid candidate (a config that validates) with its bound, and the memory refusals (kept
// in `refused` with report_unfit, to simulate when nothing fits).
std::vector<Pending> enumerate(const Workload& w, const Cluster& cluster,
                               const SearchOptions& options, SearchResult& result,
                               ProgressClock& clock, std::vector<Pending>& refused) {
  for (const auto& name : options.schedules) schedule::find_schedule(name);  // unknown: an error
  result.smallest_memory = std::numeric_limits<std::int64_t>::max();
  std::vector<Pending> pending;
  try {
    result.batch_split = for_each_layout(w, cluster, options, [&](const Candidate& c,
                                                                 const MeshLinks& links) {
      if (stop_requested(options, result)) throw Stopped{};
      clock.tick(result, true, nullptr);
      Config cfg;
      try {
        cfg = candidate_config(w, c);
      } catch (const Error& e) {
        // The schedule's own constraints (R, M, groups) exclude it.
        if (result.first_refusal.empty())
          result.first_refusal =
              fmt::format("S={} F={} D={} T={} C={} E={} M={} R={} {}: {}", c.stages, c.fsdp,
                          c.data, c.tensor, c.context, c.expert, c.microbatches, c.repeats,
                          c.schedule, e.what());
        return;
      }
      ++result.candidates;
      const std::int64_t lower = memory_lower_bound(cfg);
      if (lower < result.smallest_memory) {
        result.smallest_memory = lower;
        result.smallest_candidate = c;
      }
      const bool fits = double(lower) <= cluster.memory_bytes;
      if (!fits) ++result.refused_memory;
      if (!fits && !options.report_unfit) return;
      CostedCandidate costed = cost_candidate(cluster, c, std::move(cfg), &links);
      const double bound = step_time_lower_bound(costed, cluster);
      (fits ? pending : refused).push_back({std::move(costed), bound});
    });
  } catch (const Stopped&) {
    pending.clear();  // stopped while listing: nothing simulated, nothing to rank
    refused.clear();
  }
  return pending;
}

// The k-th best step time of `best` (infinite with fewer than k).
double kth_best(const std::map<MeshKey, Prediction>& best, int k) {
  if (int(best.size()) < k) return std::numeric_limits<double>::infinity();
  std::vector<double> times;
  for (const auto& [key, p] : best) times.push_back(p.step_seconds);
  std::nth_element(times.begin(), times.begin() + (k - 1), times.end());
  return times[std::size_t(k - 1)];
}

// Simulates `pending` in order of their bounds, keeping the best per mesh of those that fit in
// `fit` and, when `unfit` is given, of those that do not in `*unfit`, until the bound passes the
// k-th best of the map ranked (`unfit` with rank_unfit: nothing fits).
struct Ranked {
  std::map<MeshKey, Prediction> fit, unfit;
  std::int64_t smallest = std::numeric_limits<std::int64_t>::max();  // simulated total
  Candidate smallest_candidate;
};
void simulate_in_order(const Workload& w, const Cluster& cluster, const SearchOptions& options,
                       std::vector<Pending>& pending, const MemoryLimit& limit,
                       SearchResult& result, ProgressClock& clock, Ranked& ranked,
                       bool rank_unfit) {
  std::stable_sort(pending.begin(), pending.end(),
                   [](const Pending& a, const Pending& b) { return a.bound < b.bound; });
  std::map<MeshKey, Prediction>& ranking = rank_unfit ? ranked.unfit : ranked.fit;
  double kth = kth_best(ranking, options.top);
  for (const Pending& p : pending) {
    if (stop_requested(options, result)) return;
    clock.tick(result, false, &ranked.fit);
    const Candidate& c = p.costed.candidate;
    const MeshKey key = mesh_key(c);
    const auto it = ranking.find(key);
    // Beyond the next time step of the k-th best (and of its own mesh's best) it cannot enter.
    const double margin = 1 + 2 * kTimeStep;
    if (p.bound > kth * margin &&
        (it == ranking.end() || p.bound > it->second.step_seconds * margin)) {
      ++result.pruned;
      continue;
    }
    const std::int64_t units = std::int64_t(c.stages) * c.microbatches * c.repeats;
    limit.check(pending.size(), units,
                fmt::format("the schedule of S={} F={} D={} M={} R={} ({}: {} x {} x {} units)",
                            c.stages, c.fsdp, c.data, c.microbatches, c.repeats, c.schedule,
                            c.stages, c.microbatches, c.repeats));
    const Prediction pred = predict(w, cluster, p.costed);
    ++result.simulated;
    if (pred.memory.total() < ranked.smallest) {
      ranked.smallest = pred.memory.total();
      ranked.smallest_candidate = c;
    }
    if (!pred.fits && !rank_unfit) {
      ++result.refused_memory;
      ++result.refused_simulated;
    }
    std::map<MeshKey, Prediction>& into = pred.fits ? ranked.fit : ranked.unfit;
    if (!pred.fits && !options.report_unfit) continue;
    const auto at = into.find(key);
    if (at == into.end() || better(pred, at->second)) into[key] = pred;
    kth = kth_best(ranking, options.top);
  }
}

}  // namespace

double search_memory_bytes(std::size_t candidates, std::int64_t schedule_units) {
  return kStartupBytes + double(candidates) * kCandidateBytes +
         double(schedule_units) * kScheduleUnitBytes;
}

std::vector<int> balanced_stage_layers(int layers, int stages, double head) {
  CAROUSEL_ASSERT(stages >= 1 && layers >= stages, "{} layers over {} stages", layers, stages);
  if (stages == 1) return {layers};
  const int others = stages - 1;
  int best_last = 1;
  double best_time = std::numeric_limits<double>::infinity();
  for (int last = 1; last <= layers - others; ++last) {
    const int rest = layers - last;
    const double largest_other = rest / others + (rest % others > 0 ? 1 : 0);
    const double time = std::max(largest_other, last + head);
    if (time <= best_time) best_time = time, best_last = last;
  }
  const int rest = layers - best_last;
  std::vector<int> counts(std::size_t(stages), rest / others);
  for (int extra = 0; extra < rest % others; ++extra) ++counts[std::size_t(others - 1 - extra)];
  counts.back() = best_last;
  return counts;
}

SearchResult search(const Workload& w, const Cluster& cluster, const SearchOptions& options) {
  CAROUSEL_CHECK(cluster.devices >= 1 && cluster.devices_per_node >= 1 &&
                     (cluster.devices % cluster.devices_per_node == 0 ||
                      cluster.devices < cluster.devices_per_node),
                 "--devices={} must be a multiple of --devices-per-node={} (whole nodes), or "
                 "fewer than one node",
                 cluster.devices, cluster.devices_per_node);
  CAROUSEL_CHECK(options.top >= 1, "--top={} must be at least 1", options.top);
  check_fixed_degrees(w, cluster, options);
  check_layout_pins(w, cluster, options);
  SearchResult result;
  const MemoryLimit limit = MemoryLimit::of(options);
  ProgressClock clock(options);
  std::vector<Pending> refused;
  std::vector<Pending> pending = enumerate(w, cluster, options, result, clock, refused);
  if (result.interrupted) return result;
  CAROUSEL_CHECK(result.candidates > 0 || result.batch_split,
                 "no mesh of {} devices splits a global batch of {} sequences into whole "
                 "microbatches with {} layers{}; choose a batch divisible by the data-parallel "
                 "ways (F x D x E)",
                 cluster.devices, w.global_batch, w.model.num_layers,
                 options.pins.any() ? " and the pinned layout" : "");
  CAROUSEL_CHECK(result.candidates > 0,
                 "no candidate of {} devices is a valid run of this model and batch; the first "
                 "refused: {}",
                 cluster.devices, result.first_refusal);
  limit.check(pending.size() + refused.size(), 0, "the search's candidates");
  // The best prediction per mesh (S, F, D, T, C, E): one row per mesh, with its best schedule,
  // M, L and weight mode. The smallest total of the simulated candidates is what to report when
  // none fits (the lower bounds of the others can sit far below the device and say nothing).
  Ranked ranked;
  simulate_in_order(w, cluster, options, pending, limit, result, clock, ranked, false);
  if (ranked.fit.empty() && options.report_unfit && !result.interrupted) {
    // Nothing fits: the fastest of those that do not, the ones refused before simulating too.
    simulate_in_order(w, cluster, options, refused, limit, result, clock, ranked, true);
    result.unfit = !ranked.unfit.empty();
  }
  if (ranked.fit.empty() && result.simulated > 0) {
    result.smallest_memory = ranked.smallest;
    result.smallest_candidate = ranked.smallest_candidate;
  }
  for (const auto& [key, p] : ranked.fit.empty() ? ranked.unfit : ranked.fit)
    result.best.push_back(p);
  std::sort(result.best.begin(), result.best.end(), better);
  if (int(result.best.size()) > options.top) result.best.resize(options.top);
  return result;
}

}  // namespace carousel::plan
