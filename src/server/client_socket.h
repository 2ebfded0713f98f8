// Noticing that an HTTP client went away while its request is still being worked on.
// cpp-httplib (Debian's 0.11) hands handlers no socket, and a peer that closed its
// end still looks writable, so a request that has nothing to send yet (a long
// prefill, a non-streamed completion) would never learn of it. ClientWatch finds the
// connection's descriptor once, by the peer address and port the request came from,
// and then asks the kernel whether the peer has hung up (POLLRDHUP), without reading.
#pragma once

#include <chrono>
#include <string>

namespace hearth::server {

// The IPv4 / IPv6 address and port of a socket's peer (peer) or of its own end, as text
// ("127.0.0.1", "::1"). False, leaving ip and port alone, for other families or errors.
bool socket_address(int sock, bool peer, std::string& ip, int& port);

class ClientWatch {
 public:
  ClientWatch(std::string remote_addr, int remote_port);
  // True once the peer has closed or reset the connection. False when unsure.
  bool closed();
  // True at most once per `every` (callers poll from a loop that may spin faster).
  bool due(std::chrono::steady_clock::duration every);

 private:
  int find_fd() const;
  std::string addr_;
  int port_;
  int fd_ = -2;  // -2: not looked up yet; -1: not found (looked up again later)
  int lookups_ = 0;
  std::chrono::steady_clock::time_point last_check_{};
};

}  // namespace hearth::server
