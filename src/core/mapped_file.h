// Read-only memory-mapped file. Owns the mapping; movable, not copyable.
// Thread-safe for concurrent reads of data().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hearth {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps the whole file read-only. Throws Error(kIo / kNotFound) naming the path.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Drops this process's resident pages of [p, p + n) when that range lies inside a live
// MappedFile (they read back from the file if touched again) and returns true;
// returns false and does nothing for any other memory. For weights a back-end has
// copied into its own layout.
bool release_mapped_pages(const void* p, size_t n);

// Reads a whole (small) file into a string. Throws Error naming the path.
std::string read_text_file(const std::string& path);

}  // namespace hearth
