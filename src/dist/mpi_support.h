// What the other parts of src/dist/ use of MPI without including mpi.h: the MPI communicator's factory,
// and the byte broadcast that bootstraps NCCL under mpirun.
#pragma once

#include <cstddef>
#include <memory>

#include "opsnn/dist/dist.h"

namespace opsnn::dist {

// The MPI backend (mpi_communicator.cpp): initialises MPI on first use (finalised at normal exit).
std::shared_ptr<Communicator> make_mpi_communicator(const WorldInfo& world, const InitOptions& options,
                                                    int device_index);

// Whether MPI has been initialised by this process (and not finalised).
bool mpi_active();
// MPI_Bcast of `bytes` bytes over MPI_COMM_WORLD from `root` (initialises MPI when needed); waits at most
// timeout_seconds, then ends the job naming `what`.
void mpi_broadcast_bytes(void* data, size_t bytes, int root, double timeout_seconds, const char* what);
// MPI_Abort(MPI_COMM_WORLD, exit_code) when MPI is active; returns otherwise.
void mpi_abort_world(int exit_code);

}  // namespace opsnn::dist
