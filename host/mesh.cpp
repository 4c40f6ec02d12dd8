// mesh.cpp — rank placement, communicator splits, devices and starting the ranks.
#include "host/mesh.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>

#include "collectives/local_communicator.h"
#include "cuda/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_info.h"

namespace carousel {

MeshShape MeshShape::of(const Config& cfg) {
  return {int(cfg.ici_data_parallelism), int(cfg.ici_pipeline_parallelism),
          int(cfg.ici_fsdp_parallelism)};
}

RankPlace RankPlace::of(int rank, const MeshShape& mesh) {
  return {mesh, rank / (mesh.stages * mesh.fsdp), rank / mesh.fsdp % mesh.stages,
          rank % mesh.fsdp};
}

RankCommunicators split_communicators(Communicator& world, const RankPlace& place,
                                      const schedule::Layout& layout, bool tied_embeddings) {
  const int data = place.data_rank, stage = place.stage_rank, fsdp = place.fsdp_rank;
  const int stages = place.mesh.stages, fsdp_size = place.mesh.fsdp;
  RankCommunicators comms{&world, nullptr, nullptr, nullptr, nullptr};
  // split() is collective over `world`: every rank makes the same calls in the same order.
  comms.pipe = world.split(data * fsdp_size + fsdp, stage);
  comms.fsdp = world.split(data * stages + stage, fsdp);
  comms.data = world.split(stage * fsdp_size + fsdp, data);
  const int first = layout.rank_of(0), last = layout.rank_of(layout.stages() - 1);
  const bool in_pair = tied_embeddings && first != last && (stage == first || stage == last);
  comms.tie = world.split(in_pair ? data * fsdp_size + fsdp : -1, stage == first ? 0 : 1);
  return comms;
}

bool runs_on_gpus(const Config& cfg) {
  return cfg.device == "cuda" || (cfg.device == "auto" && !list_cuda_devices().devices.empty());
}

std::unique_ptr<Backend> make_device_backend(const Config& cfg, int rank) {
  if (runs_on_gpus(cfg)) {
    const int visible = std::max<int>(1, int(list_cuda_devices().devices.size()));
    return make_cuda_backend(rank % visible, rank);
  }
  return std::make_unique<CpuBackend>(rank);
}

namespace {

// How many processes of the job share this machine (Open MPI tells; else assume one).
int local_processes() {
  const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return v ? std::max(1, std::atoi(v)) : 1;
}

}  // namespace

void launch_ranks(const Config& cfg, int ranks, Communicator* process_world,
                  const RankMain& rank_main, const StuckRanks& stuck) {
  if (process_world) {
    omp_set_num_threads(std::max(1, omp_get_num_procs() / local_processes()));
    const int rank = process_world->rank();
    const auto device = make_device_backend(cfg, rank);
    rank_main(rank, *device, *process_world);
    return;
  }
  const LocalWorld world(ranks, cfg.collective_timeout_seconds);
  auto run_one = [&](int rank) {
    // The ranks share the machine's cores: each rank's OpenMP loops (and OpenBLAS, which uses
    // the same pool) get cores / ranks threads, at least one.
    omp_set_num_threads(std::max(1, omp_get_num_procs() / ranks));
    const auto device = make_device_backend(cfg, rank);
    const auto communicator = world.communicator(rank);  // destroyed before the device
    rank_main(rank, *device, *communicator);
  };
  if (ranks == 1) {
    run_one(0);
  } else {
    run_ranks(ranks, run_one, &world, stuck);  // a rank's error ends the others' waits at once
  }
}

}  // namespace carousel
