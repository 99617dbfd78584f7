// A two-rank program whose rank 1 fails on purpose after a first collective, for the tests of what the
// other rank does then (tests/dist/test_dist_cli.cpp):
//   opsnn-dist-fault-probe kill TIMEOUT    rank 1 dies by SIGKILL
//   opsnn-dist-fault-probe stuck TIMEOUT   rank 1 sleeps for 10 minutes
//   opsnn-dist-fault-probe exit TIMEOUT    rank 1 exits with code 3 without finalising MPI
// Rank 0 then waits in an all-reduce with distributed timeout TIMEOUT seconds.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "opsnn/opsnn.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: opsnn-dist-fault-probe kill|stuck|exit TIMEOUT\n");
    return 2;
  }
  const std::string mode = argv[1];
  opsnn::dist::InitOptions options;
  options.backend = "mpi";
  options.timeout_seconds = std::atof(argv[2]);
  auto comm = opsnn::dist::init(options);
  opsnn::Tensor values = opsnn::Tensor::ones({4});
  comm->all_reduce(values, opsnn::dist::ReduceOp::sum, "warm-up all-reduce");
  if (comm->rank() == 1) {
    if (mode == "kill") raise(SIGKILL);
    if (mode == "stuck") sleep(600);
    if (mode == "exit") std::_Exit(3);
  }
  comm->all_reduce(values, opsnn::dist::ReduceOp::sum, "probe all-reduce after the fault");
  std::printf("rank %d finished\n", comm->rank());
  return 0;
}
