// TCP rendezvous for the torchrun-style launch (rendezvous.h): a length-prefixed payload from rank 0 to
// every other rank, with a deadline on every step (listen, accept, connect, send, receive).
#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "opsnn/core/error.h"

namespace opsnn::dist {
namespace {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw RuntimeFailure(detail::concat("distributed rendezvous at ", where, ": ", what));
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(std::min<int64_t>(left, 1 << 30)) : 0;
}

// Waits until fd is ready for `events` or the deadline passes.
void wait_ready(int fd, short events, Clock::time_point deadline, const std::string& where, const char* step) {
  for (;;) {
    pollfd entry{fd, events, 0};
    int ready = ::poll(&entry, 1, remaining_ms(deadline));
    if (ready > 0) return;
    if (ready == 0) fail(where, detail::concat(step, " timed out (distributed.timeout_s)"));
    if (errno != EINTR) fail(where, detail::concat(step, ": ", std::strerror(errno)));
  }
}

void send_all(int fd, const uint8_t* data, size_t bytes, Clock::time_point deadline, const std::string& where) {
  while (bytes > 0) {
    wait_ready(fd, POLLOUT, deadline, where, "send");
    ssize_t sent = ::send(fd, data, bytes, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) fail(where, detail::concat("send: ", std::strerror(errno)));
    data += sent;
    bytes -= static_cast<size_t>(sent);
  }
}

void receive_all(int fd, uint8_t* data, size_t bytes, Clock::time_point deadline, const std::string& where) {
  while (bytes > 0) {
    wait_ready(fd, POLLIN, deadline, where, "receive");
    ssize_t got = ::recv(fd, data, bytes, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) fail(where, "rank 0 closed the connection before sending the NCCL id");
    if (got < 0) fail(where, detail::concat("receive: ", std::strerror(errno)));
    data += got;
    bytes -= static_cast<size_t>(got);
  }
}

}  // namespace

std::vector<uint8_t> rendezvous_broadcast(int rank, int world_size, const std::string& address, int port,
                                          const std::vector<uint8_t>& payload, double timeout_seconds) {
  const std::string where = detail::concat(address, ":", port, " (MASTER_ADDR:MASTER_PORT)");
  if (port < 1 || port > 65535) fail(where, "MASTER_PORT must be a TCP port in [1, 65535]");
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  if (world_size == 1) return payload;
  if (rank == 0) {
    Socket listener(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
    if (listener.fd() < 0) fail(where, detail::concat("socket: ", std::strerror(errno)));
    int one = 1;
    ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr.s_addr = htonl(INADDR_ANY);
    local.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(listener.fd(), reinterpret_cast<sockaddr*>(&local), sizeof local) != 0)
      fail(where, detail::concat("rank 0 cannot listen on port ", port, ": ", std::strerror(errno)));
    if (::listen(listener.fd(), world_size) != 0) fail(where, detail::concat("listen: ", std::strerror(errno)));
    const uint64_t length = payload.size();
    for (int accepted = 1; accepted < world_size; ++accepted) {
      wait_ready(
          listener.fd(), POLLIN, deadline, where,
          detail::concat("waiting for rank connections (", accepted - 1, " of ", world_size - 1, " arrived)").c_str());
      Socket peer(::accept(listener.fd(), nullptr, nullptr));
      if (peer.fd() < 0) {
        if (errno == EAGAIN || errno == EINTR) {
          --accepted;
          continue;
        }
        fail(where, detail::concat("accept: ", std::strerror(errno)));
      }
      send_all(peer.fd(), reinterpret_cast<const uint8_t*>(&length), sizeof length, deadline, where);
      send_all(peer.fd(), payload.data(), payload.size(), deadline, where);
    }
    return payload;
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int code = ::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found); code != 0)
    fail(where, detail::concat("cannot resolve MASTER_ADDR: ", ::gai_strerror(code)));
  sockaddr_in remote{};
  std::memcpy(&remote, found->ai_addr, sizeof remote);
  ::freeaddrinfo(found);
  for (;;) {  // rank 0 may not be listening yet: retry until the deadline
    Socket connection(::socket(AF_INET, SOCK_STREAM, 0));
    if (connection.fd() < 0) fail(where, detail::concat("socket: ", std::strerror(errno)));
    if (::connect(connection.fd(), reinterpret_cast<sockaddr*>(&remote), sizeof remote) == 0) {
      uint64_t length = 0;
      receive_all(connection.fd(), reinterpret_cast<uint8_t*>(&length), sizeof length, deadline, where);
      if (length > (1u << 20)) fail(where, detail::concat("rank 0 announced a payload of ", length, " bytes"));
      std::vector<uint8_t> received(static_cast<size_t>(length));
      receive_all(connection.fd(), received.data(), received.size(), deadline, where);
      return received;
    }
    if (remaining_ms(deadline) == 0)
      fail(where, detail::concat("rank ", rank,
                                 " could not connect to rank 0 within distributed.timeout_s: ", std::strerror(errno)));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace opsnn::dist
