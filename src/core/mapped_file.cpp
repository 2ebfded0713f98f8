#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace hearth {
namespace {

// The live read-only file mappings, so that release_mapped_pages can tell a mapped
// range (safe to drop: it reads back from the file) from any other memory.
struct Mappings {
  std::mutex mu;
  std::vector<std::pair<const uint8_t*, size_t>> live;
};
Mappings& mappings() {
  static Mappings m;
  return m;
}
void add_mapping(const uint8_t* p, size_t n) {
  std::lock_guard<std::mutex> lock(mappings().mu);
  mappings().live.emplace_back(p, n);
}
void remove_mapping(const uint8_t* p) {
  std::lock_guard<std::mutex> lock(mappings().mu);
  auto& v = mappings().live;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].first == p) {
      v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

}  // namespace

bool release_mapped_pages(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  std::lock_guard<std::mutex> lock(mappings().mu);
  for (const auto& [start, size] : mappings().live) {
    if (b < start || b + n > start + size) continue;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t lo = (reinterpret_cast<uintptr_t>(b) + page - 1) / page * page;
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(b) + n) / page * page;
    if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
    return true;
  }
  return false;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    fail(err == ENOENT ? ErrorKind::kNotFound : ErrorKind::kIo, "file",
         path + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(ErrorKind::kIo, "file", path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorKind::kInvalidInput, "file", path + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail(ErrorKind::kIo, "file", path + ": cannot mmap: " + std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
    add_mapping(data_, size_);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void MappedFile::reset() {
  if (data_ != nullptr) {
    remove_mapping(data_);
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  data_ = nullptr;
  size_ = 0;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::kNotFound, "file", path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(ErrorKind::kIo, "file", path + ": read error");
  return ss.str();
}

}  // namespace hearth
