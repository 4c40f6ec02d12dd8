// mesh.cpp — rank placement on the named axes, communicator splits, devices and starting the
// ranks.
#include "host/mesh/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "collectives/local_communicator.h"
#include "compute/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_info.h"
#include "cuda/plans/rehearsal_backend.h"
#include "models/params.h"
#ifdef CAROUSEL_HAVE_NCCL
#include "collectives/nccl_communicator.h"
#endif

namespace carousel {

MeshShape MeshShape::of(const Config& cfg) {
  return {int(cfg.data_ranks()),
          int(cfg.ici_pipeline_parallelism),
          int(cfg.ici_fsdp_parallelism),
          int(cfg.ici_tensor_parallelism),
          int(cfg.ici_context_parallelism),
          int(cfg.ici_expert_parallelism)};
}

MeshAxes MeshShape::axes() const {
  CAROUSEL_ASSERT(expert >= 1 && data % expert == 0,
                  "the data axis ({} ranks) holds whole expert groups of {}", data, expert);
  MeshAxes axes;
  axes.sizes[std::size_t(Axis::Replica)] = data / expert;
  axes.sizes[std::size_t(Axis::Expert)] = expert;
  axes.sizes[std::size_t(Axis::Stage)] = stages;
  axes.sizes[std::size_t(Axis::Fsdp)] = fsdp;
  axes.sizes[std::size_t(Axis::Context)] = context;
  axes.sizes[std::size_t(Axis::Tensor)] = tensor;
  return axes;
}

int MeshShape::replicas() const { return axes().size(mesh_group::data); }
int MeshShape::expert_replicas() const { return axes().size(mesh_group::expert_data); }

// The config's fields and the named coordinates are the same facts; these two functions are the
// only places that translate (the data rank is replica * E + expert: the expert axis is faster).
Coordinates RankPlace::coordinates() const {
  Coordinates c{};
  c[std::size_t(Axis::Replica)] = data_rank / mesh.expert;
  c[std::size_t(Axis::Expert)] = data_rank % mesh.expert;
  c[std::size_t(Axis::Stage)] = stage_rank;
  c[std::size_t(Axis::Fsdp)] = fsdp_rank;
  c[std::size_t(Axis::Context)] = context_rank;
  c[std::size_t(Axis::Tensor)] = tensor_rank;
  return c;
}

RankPlace RankPlace::of(int rank, const MeshShape& mesh) {
  const Coordinates c = mesh.axes().coordinates(rank);
  const auto on = [&](Axis a) { return carousel::coordinate(c, a); };
  RankPlace place{mesh};
  place.data_rank = on(Axis::Replica) * mesh.expert + on(Axis::Expert);
  place.stage_rank = on(Axis::Stage);
  place.fsdp_rank = on(Axis::Fsdp);
  place.context_rank = on(Axis::Context);
  place.tensor_rank = on(Axis::Tensor);
  return place;
}

GroupSplit group_split(const RankPlace& place, Axes axes) {
  // The key, the rank's place in mesh order, orders the members by rank (their other
  // coordinates are equal) and equals the accessors' counts (replica_rank(), ...). The colour,
  // the same number over the other axes, is what the per-group formulas before the named axes
  // gave, so the communicators' names ("world/split(3)") are unchanged too.
  const MeshAxes mesh = place.mesh.axes();
  const Coordinates at = place.coordinates();
  return {mesh.index(at, axes.complement()), mesh.index(at, axes)};
}

std::unique_ptr<Communicator> split_group(Communicator& world, const RankPlace& place, Axes axes,
                                          bool joins) {
  CAROUSEL_ASSERT(world.size() == place.mesh.ranks() && world.rank() == place.rank(),
                  "split_group over a world of {} ranks (this one {}) for rank {} of a mesh of {}",
                  world.size(), world.rank(), place.rank(), place.mesh.ranks());
  const GroupSplit split = group_split(place, axes);
  return world.split(joins ? split.color : -1, split.key);
}

RankCommunicators split_communicators(Communicator& world, const RankPlace& place,
                                      const schedule::Layout& layout, const ModelConfig& model) {
  RankCommunicators comms{};
  comms.world = &world;
  // split() is collective over `world`: every rank makes the same calls in the same order.
  comms.pipe = split_group(world, place, mesh_group::pipe);
  comms.fsdp = split_group(world, place, mesh_group::fsdp);
  comms.data = split_group(world, place, mesh_group::data);
  comms.tensor = split_group(world, place, mesh_group::tensor);
  comms.context = split_group(world, place, mesh_group::context);
  // Expert parallelism's groups (none without it: every use is guarded by mesh.expert > 1).
  const bool with_experts = place.mesh.expert > 1;
  comms.expert = split_group(world, place, mesh_group::expert, with_experts);
  comms.expert_data = split_group(world, place, mesh_group::expert_data, with_experts);
  // Ranks sharing one KV head: consecutive tensor ranks, in tensor order.
  const int tensor = place.coordinate(Axis::Tensor);
  const int kv = kv_replicas(model, place.mesh.tensor);
  comms.kv_share = comms.tensor->split(kv > 1 ? tensor / kv : -1, tensor);
  // The tied embedding's holders, among the stage ranks of a pipeline ring: the first stage's
  // rank and where the head runs, the last stage's or, with layers outside the pipeline, every
  // stage rank. The first stage's rank has always been the group's rank 0 (its own key, before
  // the others'); both placements put stage 0 on pipeline rank 0, the ring's lowest rank, so
  // the group's order by rank keeps it there.
  const int first = layout.rank_of(0), last = layout.rank_of(layout.stages() - 1);
  CAROUSEL_ASSERT(first == 0, "the first stage runs on pipeline rank {}, not 0", first);
  const int stage = place.coordinate(Axis::Stage);
  const bool tied = model.logits_via_embedding && layout.ranks > 1;
  const bool holds = layout.outside || stage == first || stage == last;
  const bool in_group = tied && (layout.outside || first != last) && holds;
  comms.tie = split_group(world, place, mesh_group::pipe, in_group);
  return comms;
}

bool runs_on_gpus(const Config& cfg) {
  return cfg.device == "cuda" || (cfg.device == "auto" && !list_cuda_devices().devices.empty());
}

namespace {

// The CUDA backend of logical device `rank` on GPU `gpu`; the first logical device of a GPU
// without stream-ordered memory pools says that its memory comes from cudaMalloc / cudaFree,
// which synchronise the device: slower steps, and with NCCL across GPUs a free waiting behind a
// collective whose peer waits in its own free can stall until the collective timeout.
std::unique_ptr<Backend> make_gpu_backend(const Config& cfg, const CudaDevices& gpus, int gpu,
                                          int rank, bool first_on_gpu) {
  if (first_on_gpu && gpu < int(gpus.devices.size()) && !gpus.devices[gpu].memory_pools) {
    spdlog::warn(
        "GPU {} ({}) has no stream-ordered memory pools: device memory comes from cudaMalloc / "
        "cudaFree, which synchronise the device (slower steps; with NCCL across GPUs a stall "
        "until collective_timeout_seconds is possible)",
        gpu, gpus.devices[gpu].name);
  }
  return make_cuda_backend(
      gpu, rank, cfg.gpu_kernels == "reference" ? GpuKernels::Reference : GpuKernels::Fast);
}

// CAROUSEL_CPU_DEVICE_MEMORY=<bytes, or a number with KiB, MiB or GiB> (test-only, like
// CAROUSEL_FAULT): every CPU device refuses allocations past that size, as a GPU of that size
// would, so a whole run's out-of-memory failure is testable on CPUs; unset: no limit.
std::size_t cpu_device_memory_limit() {
  const char* text = std::getenv("CAROUSEL_CPU_DEVICE_MEMORY");
  if (!text || !*text) return 0;
  char* end = nullptr;
  const double count = std::strtod(text, &end);
  const std::string unit = end ? end : "";
  const double scale = unit.empty()    ? 1.0
                       : unit == "KiB" ? 1024.0
                       : unit == "MiB" ? 1024.0 * 1024.0
                       : unit == "GiB" ? 1024.0 * 1024.0 * 1024.0
                                       : 0.0;
  CAROUSEL_CHECK(end != text && count >= 1 && scale > 0,
                 "CAROUSEL_CPU_DEVICE_MEMORY='{}' is not a size; use bytes or a number with KiB, "
                 "MiB or GiB (e.g. 512MiB), or unset it for no limit",
                 text);
  return std::size_t(count * scale);
}

}  // namespace

std::unique_ptr<Backend> make_device_backend(const Config& cfg, int rank) {
  if (runs_on_gpus(cfg)) {
    const CudaDevices gpus = list_cuda_devices();  // once: each call asks the driver
    const int visible = std::max<int>(1, int(gpus.devices.size()));
    return make_gpu_backend(cfg, gpus, rank % visible, rank, rank < visible);
  }
  const std::size_t limit = cpu_device_memory_limit();
  if (cfg.rehearse_gpu_kernels) return gpu::make_rehearsal_backend(rank, limit);
  return std::make_unique<CpuBackend>(rank, limit);
}

TransportChoice choose_transport(const Config& cfg, int ranks, const MachineView& machine) {
  // A tensor group exchanges activations at every layer: it must sit inside one node. Ranks are
  // numbered tensor-fastest and mpirun fills a node's slots in rank order, so a group stays in a
  // node when each node's process count is a multiple of T.
  const std::int64_t T = cfg.ici_tensor_parallelism;
  CAROUSEL_CHECK(machine.processes <= 1 || machine.local_processes % T == 0,
                 "ici_tensor_parallelism={} but this node runs {} of the job's {} processes: a "
                 "tensor group (T consecutive ranks) would span nodes, and it exchanges "
                 "activations at every layer; start a multiple of {} processes per node (mpirun "
                 "--map-by ppr:{}:node or more) or choose an ici_tensor_parallelism dividing {}",
                 T, machine.local_processes, machine.processes, T, T, machine.local_processes);
  const bool gpus = cfg.device == "cuda" || (cfg.device == "auto" && machine.visible_gpus > 0);
  const bool job = machine.processes > 1;
  if (!gpus) {
    if (job) return {Transport::Mpi, "ranks are mpirun processes on CPU devices: MPI communicator"};
    return {Transport::Local,
            ranks == 1
                ? "one CPU device"
                : "ranks are threads of this process on CPU devices: in-process communicator"};
  }
  CAROUSEL_CHECK(machine.visible_gpus > 0,
                 "device={} but no GPU is visible to this process; use device=cpu (or auto)",
                 cfg.device);
  if (machine.processes > 1) {
    CAROUSEL_CHECK(machine.nccl_built,
                   "device={} with ranks as mpirun processes needs the NCCL communicator, which "
                   "this build lacks (configure with CAROUSEL_NCCL=ON and NCCL installed); or run "
                   "without mpirun (ranks as threads) or with device=cpu",
                   cfg.device);
    CAROUSEL_CHECK(machine.local_processes <= machine.visible_gpus,
                   "mpirun started {} processes on this node but it has {} visible GPU(s); start "
                   "at most one process per GPU (mpirun -np N with N GPUs per node)",
                   machine.local_processes, machine.visible_gpus);
    return {Transport::Nccl,
            "ranks are mpirun processes, one GPU each: NCCL communicators "
            "bootstrapped over MPI"};
  }
  if (ranks == 1) {  // nothing moves between GPUs: no NCCL start-up (sockets, topology, buffers)
    return {Transport::Local,
            "one GPU device: nothing to exchange between GPUs (in-process "
            "communicator, no NCCL)"};
  }
  if (ranks <= machine.visible_gpus && machine.nccl_built) {
    return {Transport::Nccl,
            fmt::format("{} rank(s) on {} visible GPU(s), one GPU each: NCCL communicators, ranks "
                        "as threads of this process",
                        ranks, machine.visible_gpus)};
  }
  return {Transport::Local,
          machine.nccl_built
              ? fmt::format("{} ranks on {} visible GPU(s): logical devices share the GPUs and "
                            "exchange through host memory (in-process communicator)",
                            ranks, machine.visible_gpus)
              : "this build has no NCCL: logical GPU devices exchange through host memory "
                "(in-process communicator)"};
}

TransportChoice agree_on_transport(const Config& cfg, int ranks, const MachineView& machine,
                                   Communicator& processes) {
  constexpr std::int32_t kRefused = -1;
  std::optional<TransportChoice> mine;
  std::exception_ptr refusal;
  try {
    mine = choose_transport(cfg, ranks, machine);
  } catch (const Error&) {
    refusal = std::current_exception();
  }
  CpuBackend host(processes.rank());
  const Tensor own = host.from_host(
      std::vector<std::int32_t>{mine ? std::int32_t(mine->transport) : kRefused}, {1});
  Tensor all = host.zeros({processes.size()}, DType::I32);
  processes.all_gather(own, all).wait();
  const std::vector<std::int32_t> choices = host.to_host<std::int32_t>(all);
  if (refusal) std::rethrow_exception(refusal);  // this process's own reason
  // Which processes chose `code`, for the message: "0, 1, 5".
  auto processes_with = [&](std::int32_t code) {
    std::vector<int> which;
    for (int p = 0; p < int(choices.size()); ++p) {
      if (choices[p] == code) which.push_back(p);
    }
    return fmt::format("{}", fmt::join(which, ", "));
  };
  CAROUSEL_CHECK(std::count(choices.begin(), choices.end(), kRefused) == 0,
                 "process(es) {} of this mpirun job cannot run with device={} (their error says "
                 "why); this process would have used {}",
                 processes_with(kRefused), cfg.device, transport_name(mine->transport));
  if (std::count(choices.begin(), choices.end(), choices.front()) !=
      std::ptrdiff_t(choices.size())) {
    std::vector<std::string> groups;  // one per choice, in the order of the first process
    for (std::size_t p = 0; p < choices.size(); ++p) {
      if (std::find(choices.begin(), choices.begin() + std::ptrdiff_t(p), choices[p]) !=
          choices.begin() + std::ptrdiff_t(p)) {
        continue;
      }
      groups.push_back(fmt::format("{} on process(es) {}", transport_name(Transport(choices[p])),
                                   processes_with(choices[p])));
    }
    fail(
        "the processes of this mpirun job chose different transports with device={}: {} (a node "
        "without GPUs beside nodes with them?); every node needs the same GPUs (device=cuda), "
        "or run device=cpu",
        cfg.device, fmt::join(groups, "; "));
  }
  return *mine;
}

std::string_view transport_name(Transport t) {
  switch (t) {
    case Transport::Local:
      return "in-process communicator";
    case Transport::Mpi:
      return "MPI on CPUs";
    case Transport::Nccl:
      return "NCCL on GPUs";
  }
  return "?";
}

namespace {

// How many processes of the job share this machine (Open MPI tells; else assume one).
int local_processes() {
  const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return v ? std::max(1, std::atoi(v)) : 1;
}

}  // namespace

MachineView this_machine(const Communicator* process_world) {
#ifdef CAROUSEL_HAVE_NCCL
  const bool nccl = true;
#else
  const bool nccl = false;
#endif
  return {int(list_cuda_devices().devices.size()), nccl, process_world ? process_world->size() : 1,
          local_processes()};
}

int threads_per_rank(int ranks_sharing_cores) {
  const int share = std::max(1, omp_get_num_procs() / ranks_sharing_cores);
  const char* requested = std::getenv("OMP_NUM_THREADS");
  if (!requested) return share;
  char* end = nullptr;
  const long n = std::strtol(requested, &end, 10);
  return (end != requested && *end == '\0' && n >= 1) ? int(std::min<long>(n, share)) : share;
}

int rank_threads(int ranks, const Communicator* process_world) {
  return threads_per_rank(process_world ? local_processes() : ranks);
}

void launch_ranks(const Config& cfg, int ranks, Transport transport, Communicator* process_world,
                  const RankMain& rank_main, const StuckRanks& stuck) {
  if (process_world) {  // this process is one rank of an mpirun job
    omp_set_num_threads(rank_threads(ranks, process_world));
    const int rank = process_world->rank();
    if (transport == Transport::Nccl) {
#ifdef CAROUSEL_HAVE_NCCL
      const auto device = make_gpu_backend(cfg, list_cuda_devices(), process_gpu(rank), rank,
                                           /*first_on_gpu=*/true);
      const auto world = NcclWorld::connect(*process_world, cfg.collective_timeout_seconds);
      rank_main(rank, *device, *world, *process_world);
      return;
#endif
    }
    const auto device = make_device_backend(cfg, rank);
    rank_main(rank, *device, *process_world, *process_world);
    return;
  }
  const LocalWorld host_world(ranks, cfg.collective_timeout_seconds,
                              cfg.cpu_link_gigabytes_per_second * 1e9);
#ifdef CAROUSEL_HAVE_NCCL
  std::unique_ptr<NcclWorld> nccl;
  if (transport == Transport::Nccl)
    nccl = std::make_unique<NcclWorld>(ranks, cfg.collective_timeout_seconds);
#endif
  auto run_one = [&](int rank) {
    // The ranks share the machine's cores: each rank's OpenMP loops (and OpenBLAS, which uses
    // the same pool) get threads_per_rank threads.
    omp_set_num_threads(rank_threads(ranks, nullptr));
    const auto device = make_device_backend(cfg, rank);  // rank r on GPU r with NCCL
    const auto host = host_world.communicator(rank);     // destroyed before the device
#ifdef CAROUSEL_HAVE_NCCL
    if (nccl) {
      const auto world = nccl->communicator(rank);  // collective: every rank's thread at once
      rank_main(rank, *device, *world, *host);
      return;
    }
#endif
    rank_main(rank, *device, *host, *host);
  };
  if (ranks == 1) {
    run_one(0);
  } else {
    run_ranks(ranks, run_one, &host_world, stuck);  // a rank's error ends the others' waits
  }
}

}  // namespace carousel
