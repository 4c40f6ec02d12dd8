// launch.cpp — ProcessGroup: MPI when mpirun started this process and the build has it.
#include "host/launch.h"

#include "collectives/rendezvous.h"
#include "cuda/error.h"
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
  if (launched == 0) return group;
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
