// Starting a distributed run: which process this is (from the launcher's environment) and the
// communicator of the whole world.
//
//   mpirun -np 4 my_program           (OpenMPI sets OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE)
//   RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 my_program   (torchrun-style)
//
//   auto comm = opsnn::dist::init({.backend = "auto"});   // world 1 without a launcher
//   opsnn::dist::DataParallel ddp(model, *optimizer, comm); // data_parallel.h
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "opsnn/dist/communicator.h"

namespace opsnn::dist {

// The world the environment describes: mpirun's variables first, then RANK/WORLD_SIZE (LOCAL_RANK,
// LOCAL_WORLD_SIZE default to RANK and WORLD_SIZE: one host), else world 1 with launcher "none".
// ConfigError naming the variable for a value that is not a number or out of range.
WorldInfo world_from_environment();

// True when the environment names a distributed launch (mpirun or RANK/WORLD_SIZE), even of one rank.
bool launched_distributed();

struct InitOptions {
  // auto: nccl for a GPU device (when this build has it), else mpi; or nccl | mpi.
  std::string backend = "auto";
  // The device this rank computes on: "cpu", or "cuda" for the GPU picked by the local rank.
  std::string device = "cpu";
  double timeout_seconds = 600.0;
};

// Creates the world communicator: MPI is initialised when mpirun started the process; NCCL is
// bootstrapped through MPI (its unique id broadcast by MPI_Bcast) or, with the torchrun-style
// environment, through a TCP rendezvous at MASTER_ADDR:MASTER_PORT. ConfigError for what cannot work
// here, before any communicator is created: NCCL without CUDA or with fewer GPUs on a host than ranks
// on it (two NCCL ranks on one GPU are refused by NCCL), the MPI backend without mpirun for more than
// one rank, an unknown backend.
std::shared_ptr<Communicator> init(const InitOptions& options);

// The GPU index a rank uses: local_rank for NCCL (one GPU each); local_rank modulo the GPU count for MPI,
// whose ranks may share a GPU.
int device_index_for(const WorldInfo& world, Backend backend, int cuda_devices);

// The backend `auto` resolves to for a device ("cpu" or "cuda").
Backend resolve_backend(const std::string& backend, const std::string& device);

// For a program's error exit: in a run of several ranks started by mpirun, ends every rank of the job
// now with exit_code (MPI_Abort), so a rank that fails alone never leaves the others waiting in a
// collective; otherwise returns and the program exits as usual.
void end_job_after_error(int exit_code);
// " (rank R of N)" in a distributed launch, else "": for a program's error messages.
std::string rank_label();

// ---- registry of backends (the composition root registers NCCL when the build has CUDA) ----
using CommunicatorFactory = std::shared_ptr<Communicator> (*)(const WorldInfo& world, const InitOptions& options,
                                                              int device_index);
void register_communicator_backend(Backend backend, CommunicatorFactory factory);
bool has_communicator_backend(Backend backend);

}  // namespace opsnn::dist
