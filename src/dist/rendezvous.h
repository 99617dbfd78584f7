// The torchrun-style bootstrap of NCCL: rank 0 hands a small payload (NCCL's unique id) to every other
// rank over TCP at MASTER_ADDR:MASTER_PORT. Only these bytes travel this way; all collectives go through
// NCCL itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace opsnn::dist {

// Rank 0 (rank == 0) listens on `port` and sends `payload` to each of the world_size - 1 other ranks as
// they connect; the others connect to address:port (retrying while rank 0 starts) and return what it
// sent. Every rank returns the payload. RuntimeFailure naming the address, the port and the step when
// the deadline (timeout_seconds) passes or the connection fails.
std::vector<uint8_t> rendezvous_broadcast(int rank, int world_size, const std::string& address, int port,
                                          const std::vector<uint8_t>& payload, double timeout_seconds);

}  // namespace opsnn::dist
