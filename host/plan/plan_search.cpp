// plan_search.cpp — enumerate the candidates of a cluster, refuse what cannot fit, simulate the
// rest in order of their step-time bound, keep the fastest per (mesh, schedule).
#include "host/plan/plan_search.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "compute/error.h"
#include "host/schedule/registry.h"

namespace carousel::plan {

namespace {

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// Faster first; at equal time, less memory.
bool better(const Prediction& a, const Prediction& b) {
  return a.step_seconds != b.step_seconds ? a.step_seconds < b.step_seconds
                                          : a.memory.total() < b.memory.total();
}

struct Pending {
  Candidate candidate;
  double bound;
};

// Every valid candidate (a config that validates) with its bound, and the memory refusals.
std::vector<Pending> enumerate(const Workload& w, const Cluster& cluster,
                               const SearchOptions& options, SearchResult& result) {
  const std::int64_t N = w.model.num_layers, B = w.global_batch;
  std::vector<std::string> names = options.schedules;
  if (names.empty()) {
    for (const auto& row : schedule::schedules()) names.emplace_back(row.name);
  }
  for (const auto& name : names) schedule::find_schedule(name);  // an unknown name is an error
  result.smallest_memory = std::numeric_limits<std::int64_t>::max();
  std::vector<Pending> pending;
  for (const std::int64_t S : divisors(cluster.devices)) {
    if (N % S != 0) continue;
    for (const std::int64_t F : divisors(cluster.devices / S)) {
      const std::int64_t D = cluster.devices / S / F;
      if (B % (F * D) != 0) continue;
      for (const std::int64_t L : divisors(N / S)) {
        const std::int64_t R = N / (S * L);
        if (S == 1 && R != 1) continue;  // one device runs the whole model as one stage
        for (const auto& name : names) {
          if (S == 1 && name != names.front()) continue;  // no pipeline: the schedule is moot
          for (const std::int64_t M : divisors(B / (F * D))) {
            if (options.max_microbatches > 0 && M > options.max_microbatches) continue;
            for (const int slots : F > 1 ? std::vector<int>{0, 2, -1} : std::vector<int>{0}) {
              const Candidate c{int(S),
                                int(F),
                                int(D),
                                int(M),
                                int(R),
                                int(L),
                                S == 1 ? std::string("1f1b") : name,
                                slots,
                                D > 1};
              Config cfg;
              try {
                cfg = candidate_config(w, c);
              } catch (const Error&) {
                continue;  // the schedule's own constraints (R, M, groups) exclude it
              }
              ++result.candidates;
              const std::int64_t lower = memory_lower_bound(cfg);
              if (lower < result.smallest_memory) {
                result.smallest_memory = lower;
                result.smallest_candidate = c;
              }
              if (double(lower) > cluster.memory_bytes) {
                ++result.refused_memory;
                continue;
              }
              pending.push_back({c, step_time_lower_bound(cfg, cluster)});
            }
          }
        }
      }
    }
  }
  return pending;
}

}  // namespace

SearchResult search(const Workload& w, const Cluster& cluster, const SearchOptions& options) {
  CAROUSEL_CHECK(cluster.devices >= 1 && cluster.devices_per_node >= 1 &&
                     (cluster.devices % cluster.devices_per_node == 0 ||
                      cluster.devices < cluster.devices_per_node),
                 "--devices={} must be a multiple of --devices-per-node={} (whole nodes), or "
                 "fewer than one node",
                 cluster.devices, cluster.devices_per_node);
  CAROUSEL_CHECK(options.top >= 1, "--top={} must be at least 1", options.top);
  SearchResult result;
  std::vector<Pending> pending = enumerate(w, cluster, options, result);
  CAROUSEL_CHECK(result.candidates > 0,
                 "no mesh of {} devices splits a global batch of {} sequences into whole "
                 "microbatches with {} layers; choose a batch divisible by the data-parallel "
                 "ways (a power of two for a power-of-two device count)",
                 cluster.devices, w.global_batch, w.model.num_layers);
  std::stable_sort(pending.begin(), pending.end(),
                   [](const Pending& a, const Pending& b) { return a.bound < b.bound; });
  // The best prediction per (S, F, D, schedule): one row per mesh and schedule.
  std::map<std::tuple<int, int, int, std::string>, Prediction> best;
  auto kth_best = [&] {
    if (int(best.size()) < options.top) return std::numeric_limits<double>::infinity();
    std::vector<double> times;
    for (const auto& [key, p] : best) times.push_back(p.step_seconds);
    std::nth_element(times.begin(), times.begin() + (options.top - 1), times.end());
    return times[options.top - 1];
  };
  double kth = std::numeric_limits<double>::infinity();
  for (const Pending& p : pending) {
    const auto key = std::make_tuple(p.candidate.stages, p.candidate.fsdp, p.candidate.data,
                                     p.candidate.schedule);
    const auto it = best.find(key);
    if (p.bound > kth && (it == best.end() || p.bound > it->second.step_seconds)) {
      ++result.pruned;
      continue;
    }
    const Prediction pred = predict(w, cluster, p.candidate);
    ++result.simulated;
    if (pred.memory.total() < result.smallest_memory) {
      result.smallest_memory = pred.memory.total();
      result.smallest_candidate = p.candidate;
    }
    if (!pred.fits) {
      ++result.refused_memory;
      continue;
    }
    if (it == best.end() || better(pred, it->second)) best[key] = pred;
    kth = kth_best();
  }
  for (const auto& [key, p] : best) result.best.push_back(p);
  std::sort(result.best.begin(), result.best.end(), better);
  if (int(result.best.size()) > options.top) result.best.resize(options.top);
  return result;
}

}  // namespace carousel::plan
