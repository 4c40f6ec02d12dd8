// plan_search.cpp — enumerate the candidates of a cluster, refuse what cannot fit, simulate the
// rest in order of their step-time bound, keep the best per mesh.
#include "host/plan/plan_search.h"

#include <algorithm>
#include <cmath>
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
        // One device runs the whole model as one stage (gradient accumulation), whatever the
        // keys say; a mesh of several devices with S = 1 runs R = N / L stages, which gives
        // FSDP its gather granularity.
        const bool one_device = cluster.devices == 1;
        if (one_device && R != 1) continue;
        for (const auto& name : names) {
          if (one_device && name != names.front()) continue;
          for (const std::int64_t M : divisors(B / (F * D))) {
            if (options.max_microbatches > 0 && M > options.max_microbatches) continue;
            for (const int slots : F > 1 ? std::vector<int>{0, 2, -1} : std::vector<int>{0}) {
              const Candidate c{int(S),
                                int(F),
                                int(D),
                                int(M),
                                int(R),
                                int(L),
                                one_device ? std::string("1f1b") : name,
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
              CostedCandidate costed = cost_candidate(cluster, c, std::move(cfg));
              const double bound = step_time_lower_bound(costed, cluster);
              pending.push_back({std::move(costed), bound});
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
  // The best prediction per mesh (S, F, D): one row per mesh, with its best schedule, M, L and
  // weight mode.
  std::map<std::tuple<int, int, int>, Prediction> best;
  auto kth_best = [&] {
    if (int(best.size()) < options.top) return std::numeric_limits<double>::infinity();
    std::vector<double> times;
    for (const auto& [key, p] : best) times.push_back(p.step_seconds);
    std::nth_element(times.begin(), times.begin() + (options.top - 1), times.end());
    return times[options.top - 1];
  };
  double kth = std::numeric_limits<double>::infinity();
  for (const Pending& p : pending) {
    const Candidate& c = p.costed.candidate;
    const auto key = std::make_tuple(c.stages, c.fsdp, c.data);
    const auto it = best.find(key);
    // Beyond the next time step of the k-th best (and of its own mesh's best) it cannot enter.
    const double margin = 1 + 2 * kTimeStep;
    if (p.bound > kth * margin &&
        (it == best.end() || p.bound > it->second.step_seconds * margin)) {
      ++result.pruned;
      continue;
    }
    const Prediction pred = predict(w, cluster, p.costed);
    ++result.simulated;
    if (pred.memory.total() < result.smallest_memory) {
      result.smallest_memory = pred.memory.total();
      result.smallest_candidate = c;
    }
    if (!pred.fits) {
      ++result.refused_memory;
      ++result.refused_simulated;
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
