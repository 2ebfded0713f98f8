#include "server/client_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

namespace hearth::server {

bool socket_address(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  const int rc = peer ? getpeername(sock, reinterpret_cast<sockaddr*>(&ss), &len)
                      : getsockname(sock, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0) return false;
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  ip = text;
  return true;
}

ClientWatch::ClientWatch(std::string remote_addr, int remote_port) : addr_(std::move(remote_addr)), port_(remote_port) {}

int ClientWatch::find_fd() const {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    std::string ip;
    int port = -1;
    if (!socket_address(static_cast<int>(fd), true, ip, port)) continue;
    if (port == port_ && addr_ == ip) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool ClientWatch::due(std::chrono::steady_clock::duration every) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_check_ < every) return false;
  last_check_ = now;
  return true;
}

bool ClientWatch::closed() {
  // The descriptor is looked up again a few times when not found at first (the
  // connection table is read while other threads open and close sockets).
  if (fd_ == -2 || (fd_ == -1 && lookups_ < 8)) {
    fd_ = find_fd();
    ++lookups_;
  }
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace hearth::server
