// rendezvous.h — how separate processes agree on a communicator's id: the torchrun convention.
//
// Every process sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. Rank 0 listens on
// MASTER_ADDR:MASTER_PORT and sends its payload (the NCCL unique id) to each of the other
// WORLD_SIZE - 1 ranks, which connect (retrying until the master is up) and read it. Every wait
// is bounded by the timeout and fails naming the rank, the address and what did not happen.
#pragma once

#include <string>
#include <vector>

namespace carousel {

struct RendezvousConfig {
  int rank = 0, world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double timeout_seconds = 300.0;
};

// Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; throws carousel::Error naming the variable
// that is missing or invalid and what would be valid.
RendezvousConfig rendezvous_from_env(double timeout_seconds = 300.0);

// How many processes mpirun (Open MPI, MPICH or a PMI launcher such as srun) started this job
// with, read from the launcher's environment (env_process_count); 0 when this process was not
// started that way.
int mpi_launch_size();

// A process count a launcher sets (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS, ...): 0 when
// unset or empty; otherwise a whole number in [1, 2^20], or carousel::Error naming the variable
// (atoi read "abc" as 0: such a job ran as one process without a word).
int env_process_count(const char* name);

// Rank 0 passes `payload`; every rank returns rank 0's payload.
std::vector<char> rendezvous_broadcast(const RendezvousConfig& cfg, std::vector<char> payload);

}  // namespace carousel
