// launch.cpp — ProcessGroup: MPI when mpirun started this process and the build has it; the
// launchers' process counts (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, ...) read strictly.
#include "host/mesh/launch.h"

#include <cstdlib>

#include "collectives/rendezvous.h"
#include "compute/error.h"
#if CAROUSEL_HAVE_MPI
#include "collectives/mpi_communicator.h"
#endif

namespace carousel {

struct ProcessGroup::Impl {
#if CAROUSEL_HAVE_MPI
  std::unique_ptr<MpiRuntime> mpi;
#endif
  std::unique_ptr<Communicator> world;  // destroyed before MPI finalises (declared after it)
};

ProcessGroup::ProcessGroup() : impl_(std::make_unique<Impl>()) {}
ProcessGroup::~ProcessGroup() = default;


std::unique_ptr<ProcessGroup> ProcessGroup::join(double timeout_seconds) {
  std::unique_ptr<ProcessGroup> group(new ProcessGroup());
  const int launched = mpi_launch_size();
  if (launched == 0) {
    // Started torchrun-style: every process would run the whole job and write the same run
    // directory. Refuse rather than train N times over each other.
    const int world_size = env_process_count("WORLD_SIZE");
    CAROUSEL_CHECK(world_size <= 1,
                   "this process was started with WORLD_SIZE={} (torchrun-style), but carousel "
                   "train runs ranks as processes only under mpirun (mpirun -np {} carousel train "
                   "...); without a launcher start one process: its devices run as threads",
                   world_size, world_size);
    // Started by Slurm as one of several tasks without an MPI rendezvous (srun without --mpi,
    // or a cluster whose Open MPI lacks PMI support): same outcome, same refusal.
    const int tasks = env_process_count("SLURM_NTASKS");
    CAROUSEL_CHECK(tasks <= 1,
                   "this process is one of SLURM_NTASKS={} Slurm tasks but no MPI rendezvous "
                   "reached it (no PMI/PMIx variables); start the job with `srun --mpi=pmix "
                   "carousel train ...` (or mpirun inside the allocation), so the tasks become "
                   "the ranks of one job instead of {} separate runs",
                   tasks, tasks);
    return group;
  }
#if CAROUSEL_HAVE_MPI
  group->impl_->mpi = std::make_unique<MpiRuntime>();
  if (group->impl_->mpi->size() > 1)
    group->impl_->world = group->impl_->mpi->world(timeout_seconds);
#else
  CAROUSEL_CHECK(launched == 1,
                 "this process was started by mpirun as one of {} processes, but carousel was "
                 "built without MPI; install libopenmpi-dev and rebuild (scripts/build.sh), or "
                 "run without mpirun: the devices then run as threads of one process",
                 launched);
#endif
  return group;
}

int ProcessGroup::rank() const { return impl_->world ? impl_->world->rank() : 0; }
int ProcessGroup::size() const { return impl_->world ? impl_->world->size() : 1; }
Communicator* ProcessGroup::world() const { return impl_->world.get(); }

void ProcessGroup::abort(int code) const {
#if CAROUSEL_HAVE_MPI
  if (impl_->world) MpiRuntime::abort(code);
#endif
  (void)code;
}

}  // namespace carousel
