// Small file helpers the KV disk tier's prefix files (kv_disk.cpp) and swap files
// (kv_disk_swap.cpp) share.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <string>

namespace hearth::engine::kvdisk {

// One line of the tier's log on stderr.
inline void log_line(const std::string& s) {
  std::fprintf(stderr, "hearth: kv-disk: %s\n", s.c_str());
  std::fflush(stderr);
}

// Writes all of [p, p + n) to fd; the errno of a failure, else 0.
inline int write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

}  // namespace hearth::engine::kvdisk
