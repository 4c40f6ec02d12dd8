// rank_monitor.cpp — failure reports and end-of-run figures of the ranks.
#include "host/run/guards/rank_monitor.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "compute/cpu_backend.h"

namespace carousel {

namespace {

// After a rank fails, how long the other rank threads get to come back before the process
// reports and exits (their communicator waits end at once; only a computation can hold them).
constexpr double kStuckRankGraceSeconds = 5;

}  // namespace

RankMonitor::RankMonitor(const MeshShape& mesh, const Communicator* process_world)
    : mesh_(mesh),
      process_world_(process_world),
      recorders_(std::size_t(mesh.ranks())),
      peak_bytes_(std::size_t(mesh.ranks())),
      all_gathers_(std::size_t(mesh.ranks())),
      graph_replays_(std::size_t(mesh.ranks())),
      device_names_(std::size_t(mesh.ranks())) {}

void RankMonitor::record_end(int rank, Backend& be, const ShardedParams& params,
                             std::int64_t graph_replays, Communicator& host_world) {
  peak_bytes_[std::size_t(rank)] = double(be.allocator().stats().peak_bytes);
  all_gathers_[std::size_t(rank)] = double(params.all_gathers());
  graph_replays_[std::size_t(rank)] = double(graph_replays);
  device_names_[std::size_t(rank)] = be.allocator().name();
  if (!process_world_ || process_world_->size() == 1) return;
  CpuBackend host(rank);
  for (std::vector<double>* v : {&peak_bytes_, &all_gathers_, &graph_replays_}) {
    Tensor all = host.zeros({host_world.size()}, DType::F64);
    host_world.all_gather(host.from_host(std::vector<double>{(*v)[std::size_t(rank)]}, {1}), all)
        .wait();
    *v = host.to_host<double>(all);
  }
}

void RankMonitor::report_ranks() const {
  for (int rank = 0; rank < mesh_.ranks(); ++rank) {
    if (process_world_ && rank != process_world_->rank()) continue;
    spdlog::error("rank {}: {}", rank, recorders_[std::size_t(rank)].report());
  }
}

StuckRanks RankMonitor::stuck_ranks() const {
  return {kStuckRankGraceSeconds,
          [this](const std::vector<int>& running, const std::string& failure) {
            spdlog::error("{}", failure);
            // What each stuck rank's thread is doing: a wait that cannot be cut short (a slow
            // simulated link's transfer, which was reported as a computation) or a computation.
            std::map<int, ThreadState> state;
            bool computing = false, waiting = false;
            for (const int rank : running) {
              state[rank] = recorders_[std::size_t(rank)].thread_state();
              computing |= state[rank] == ThreadState::Running;
              waiting |= state[rank] != ThreadState::Running;
            }
            const char* why =
                !waiting ? "stuck in a computation"
                : !computing
                    ? "blocked in waits, not computing: a communication that cannot be cut short, "
                      "such as a transfer over a slow simulated link "
                      "(cpu_link_gigabytes_per_second), or a sleep"
                    : "some computing, some blocked in waits";
            spdlog::error("rank(s) {} did not stop within {} s of that failure ({}); where every "
                          "rank is:",
                          fmt::join(running, ", "), kStuckRankGraceSeconds, why);
            for (int rank = 0; rank < mesh_.ranks(); ++rank) {
              if (process_world_ && rank != process_world_->rank()) continue;
              const auto it = state.find(rank);
              spdlog::error("rank {}: {}{}", rank, recorders_[std::size_t(rank)].report(),
                            it == state.end() ? std::string()
                                              : fmt::format("; its thread is {}",
                                                            describe(it->second)));
            }
            spdlog::error("exiting with status 2");
            spdlog::default_logger()->flush();
          }};
}

void RankMonitor::report_figures(TrainResult& result) const {
  for (int rank = 0; rank < mesh_.ranks(); ++rank) {
    const RankPlace place = RankPlace::of(rank, mesh_);
    const std::string& name = device_names_[std::size_t(rank)];
    const double peak = peak_bytes_[std::size_t(rank)], gathers = all_gathers_[std::size_t(rank)];
    const auto replays = std::int64_t(graph_replays_[std::size_t(rank)]);
    spdlog::info(
        "rank {} {}(data rank {}, stage rank {}, fsdp rank {}, context rank {}, tensor rank "
        "{}): peak memory {}, {} weight all-gathers{}",
        rank, name.empty() ? "" : "on " + name + " ", place.data_rank, place.stage_rank,
        place.fsdp_rank, place.context_rank, place.tensor_rank, format_bytes(std::size_t(peak)),
        std::int64_t(gathers),
        replays ? fmt::format(", {} steps replayed from a captured graph", replays) : "");
    result.peak_device_bytes = std::max(result.peak_device_bytes, std::size_t(peak));
    result.all_gathers_per_device.push_back(std::int64_t(gathers));
    result.graph_replays_per_device.push_back(replays);
  }
}

}  // namespace carousel
