// plan_search.cpp — enumerate the candidates of a cluster (even and balanced uneven stages),
// refuse what cannot fit, simulate the rest in order of their step-time bound, keep the best per
// mesh.
#include "host/plan/plan_search.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "compute/error.h"
#include "host/schedule/registry.h"
#include "models/stage.h"

namespace carousel::plan {

namespace {

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// Expert-parallel degrees of a mesh with D data ranks: those dividing both D and the experts
// (1 for a dense model), or the one `fixed` (when it divides them).
std::vector<std::int64_t> expert_degrees(const ModelConfig& m, std::int64_t D, std::int64_t fixed) {
  std::vector<std::int64_t> out;
  for (const std::int64_t E : divisors(D)) {
    if ((fixed > 0 && E != fixed) || (E > 1 && (!m.is_moe() || m.num_experts % E != 0))) continue;
    out.push_back(E);
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
      check_tensor_split(m, int(o.tensor));
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

// One way to lay the layers over S pipeline ranks: R repeats of even stages of L layers, or
// R repeats of uneven stages (counts).
struct StageLayout {
  int repeats = 1, layers_per_stage = 1;
  std::vector<int> counts;  // empty: even
};

std::vector<StageLayout> stage_layouts(std::int64_t N, std::int64_t S, bool one_device,
                                       double head) {
  std::vector<StageLayout> out;
  if (N % S == 0) {
    for (const std::int64_t L : divisors(N / S)) {
      const std::int64_t R = N / (S * L);
      // One device runs the whole model as one stage (gradient accumulation), whatever the
      // keys say; a mesh of several devices with S = 1 runs R = N / L stages, which gives FSDP
      // its gather granularity.
      if (one_device && R != 1) continue;
      out.push_back({int(R), int(L), {}});
    }
  }
  if (S == 1) return out;  // one pipeline rank: moving layers between its stages balances nothing
  for (const std::int64_t R : divisors(N)) {
    if (S * R > N) continue;
    std::vector<int> counts = balanced_stage_layers(int(N), int(S * R), head);
    const bool even =
        std::all_of(counts.begin(), counts.end(), [&](int n) { return n == counts.front(); });
    if (!even) out.push_back({int(R), 1, std::move(counts)});
  }
  return out;
}

// Every valid candidate (a config that validates) with its bound, and the memory refusals.
std::vector<Pending> enumerate(const Workload& w, const Cluster& cluster,
                               const SearchOptions& options, SearchResult& result) {
  const std::int64_t N = w.model.num_layers, B = w.global_batch;
  std::vector<std::string> names = options.schedules;
  if (names.empty()) {
    for (const auto& row : schedule::schedules()) names.emplace_back(row.name);
  }
  for (const auto& name : names) schedule::find_schedule(name);  // an unknown name is an error
  const double head = head_layers(w.model, w.remat_policy, cluster);
  const bool one_device = cluster.devices == 1;
  result.smallest_memory = std::numeric_limits<std::int64_t>::max();
  std::vector<Pending> pending;
  // Tensor degrees inside a node that split the heads, KV heads, MLP columns and vocabulary;
  // context degrees that cut the sequence into 2C chunks (up to the node too: its key exchange is
  // per layer).
  std::vector<std::int64_t> tensors, contexts;
  for (const std::int64_t T : divisors(std::min(cluster.devices, cluster.devices_per_node))) {
    try {
      check_tensor_split(w.model, int(T));
      tensors.push_back(T);
    } catch (const Error&) {
    }
  }
  for (const std::int64_t C : divisors(std::min(cluster.devices, cluster.devices_per_node))) {
    if (C == 1 || w.model.max_target_length % (2 * C) == 0) contexts.push_back(C);
  }
  for (const std::int64_t T :
       options.tensor > 0 ? std::vector<std::int64_t>{options.tensor} : tensors)
    for (const std::int64_t C :
         options.context > 0 ? std::vector<std::int64_t>{options.context} : contexts)
      for (const std::int64_t S : divisors(cluster.devices)) {
        if (S > N || cluster.devices % (S * T * C) != 0) continue;
        const std::vector<StageLayout> layouts = stage_layouts(N, S, one_device, head);
        for (const std::int64_t F : divisors(cluster.devices / (S * T * C))) {
          const std::int64_t D = cluster.devices / (S * T * C) / F;
          if (B % (F * D) != 0) continue;
          result.batch_split = true;
          const MeshLinks links = mesh_links(int(S), int(F), int(D), cluster.devices_per_node,
                                             int(T), int(C));  // every candidate of this mesh
          for (const StageLayout& layout : layouts) {
            for (const auto& name : names) {
              if (one_device && name != names.front()) continue;
              for (const std::int64_t M : divisors(B / (F * D))) {
                if (options.max_microbatches > 0 && M > options.max_microbatches) continue;
                for (const std::int64_t E : expert_degrees(w.model, D, options.expert))
                  for (const int slots : F > 1 ? std::vector<int>{0, 2, -1} : std::vector<int>{0}) {
                    const Candidate c{
                        int(S),
                        int(F),
                        int(D / E),
                        int(M),
                        layout.repeats,
                        layout.layers_per_stage,
                        layout.counts,
                        one_device ? std::string(schedule::one_device_schedule().name) : name,
                        slots,
                        D * C > 1 && E == 1,  // ZeRO-1 with expert ranks is not built
                        int(T),
                        int(C),
                        int(E)};
                    Config cfg;
                    try {
                      cfg = candidate_config(w, c);
                    } catch (const Error& e) {
                      // The schedule's own constraints (R, M, groups) exclude it.
                      if (result.first_refusal.empty())
                        result.first_refusal = fmt::format(
                            "S={} F={} D={} T={} C={} E={} M={} {}: {}", c.stages, c.fsdp, c.data,
                            c.tensor, c.context, c.expert, c.microbatches, c.schedule, e.what());
                      continue;
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
                    CostedCandidate costed = cost_candidate(cluster, c, std::move(cfg), &links);
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
  SearchResult result;
  const MemoryLimit limit = MemoryLimit::of(options);
  std::vector<Pending> pending = enumerate(w, cluster, options, result);
  CAROUSEL_CHECK(result.candidates > 0 || result.batch_split,
                 "no mesh of {} devices splits a global batch of {} sequences into whole "
                 "microbatches with {} layers; choose a batch divisible by the data-parallel "
                 "ways (a power of two for a power-of-two device count)",
                 cluster.devices, w.global_batch, w.model.num_layers);
  CAROUSEL_CHECK(result.candidates > 0,
                 "no candidate of {} devices is a valid run of this model and batch; the first "
                 "refused: {}",
                 cluster.devices, result.first_refusal);
  limit.check(pending.size(), 0, "the search's candidates");
  std::stable_sort(pending.begin(), pending.end(),
                   [](const Pending& a, const Pending& b) { return a.bound < b.bound; });
  // The best prediction per mesh (S, F, D, T, C): one row per mesh, with its best schedule, M,
  // L and weight mode.
  std::map<std::tuple<int, int, int, int, int>, Prediction> best;
  auto kth_best = [&] {
    if (int(best.size()) < options.top) return std::numeric_limits<double>::infinity();
    std::vector<double> times;
    for (const auto& [key, p] : best) times.push_back(p.step_seconds);
    std::nth_element(times.begin(), times.begin() + (options.top - 1), times.end());
    return times[options.top - 1];
  };
  double kth = std::numeric_limits<double>::infinity();
  // The smallest total of the simulated candidates: what to report when none fits (the lower
  // bounds of the others can sit far below the device and say nothing).
  std::int64_t smallest_simulated = std::numeric_limits<std::int64_t>::max();
  Candidate smallest_simulated_candidate;
  for (const Pending& p : pending) {
    const Candidate& c = p.costed.candidate;
    const auto key = std::make_tuple(c.stages, c.fsdp, c.data, c.tensor, c.context);
    const auto it = best.find(key);
    // Beyond the next time step of the k-th best (and of its own mesh's best) it cannot enter.
    const double margin = 1 + 2 * kTimeStep;
    if (p.bound > kth * margin &&
        (it == best.end() || p.bound > it->second.step_seconds * margin)) {
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
    if (pred.memory.total() < smallest_simulated) {
      smallest_simulated = pred.memory.total();
      smallest_simulated_candidate = c;
    }
    if (!pred.fits) {
      ++result.refused_memory;
      ++result.refused_simulated;
      continue;
    }
    if (it == best.end() || better(pred, it->second)) best[key] = pred;
    kth = kth_best();
  }
  if (best.empty() && result.simulated > 0) {
    result.smallest_memory = smallest_simulated;
    result.smallest_candidate = smallest_simulated_candidate;
  }
  for (const auto& [key, p] : best) result.best.push_back(p);
  std::sort(result.best.begin(), result.best.end(), better);
  if (int(result.best.size()) > options.top) result.best.resize(options.top);
  return result;
}

}  // namespace carousel::plan
