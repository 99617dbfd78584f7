// Registration of the NCCL backend (nccl_communicator.cpp) and the CUDA pair scatter-add of the top-k
// exchange by the composition root in CUDA builds.
#pragma once

namespace opsnn::dist {

void register_nccl_backend();

}  // namespace opsnn::dist
