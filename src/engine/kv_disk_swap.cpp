// Swap files of the KV disk tier (see kv_disk.h): a preempted sequence's KV blocks and
// live state, written by the tier's writer thread and read back by its reader, private
// to the sequence and to this tier (DIR/<fingerprint>/swap-<pid>-<n>/<id>.swap).
// The file format is the tier's (kv_disk_format.h, kind kSwap): the header's hash is the
// sequence's id and its parent hash the number of positions, its tokens are the
// sequence's tokens at those positions, so a file read back is checked like any other
// (sizes, fingerprint, id, tokens, both checksums) before a byte of it is used.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "engine/kv_disk.h"
#include "engine/kv_disk_io.h"

namespace hearth::engine::kvdisk {
namespace {

namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

constexpr const char* kSwapPrefix = "swap-";

}  // namespace

void KvDiskTier::init_swap_folder() {
  // Leftovers: the swap folders of processes that no longer run (a crash, a kill -9).
  // Another server running on the same folder keeps its own.
  uint64_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(folder_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kSwapPrefix, 0) != 0) continue;
    char* stop = nullptr;
    const long pid = std::strtol(name.c_str() + std::strlen(kSwapPrefix), &stop, 10);
    if (stop == nullptr || (*stop != '\0' && *stop != '-') || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // a live process's
    std::error_code e2;
    const auto n = fs::remove_all(it->path(), e2);
    if (n != static_cast<std::uintmax_t>(-1) && n > 1) removed += n - 1;
  }
  // One folder per tier: two engines of one model in this process (two names for one file)
  // share the fingerprint folder, and their sequence ids overlap.
  static std::atomic<uint64_t> n_tiers{0};
  const std::string dir =
      (fs::path(folder_) / (kSwapPrefix + std::to_string(::getpid()) + "-" + std::to_string(n_tiers++))).string();
  std::error_code e3;
  fs::remove_all(dir, e3);  // (a process of the same id long ago)
  e3.clear();
  fs::create_directories(dir, e3);
  if (e3 || !fs::is_directory(dir)) {
    log_line("cannot make the swap folder " + dir + " (" + e3.message() +
             "): preempted sequences are not swapped to disk");
    return;
  }
  swap_folder_ = dir;
  if (removed > 0) log_line("removed " + std::to_string(removed) + " swap files left by an earlier run");
}

std::string KvDiskTier::swap_path(uint64_t id) const {
  return (fs::path(swap_folder_) / file_name(id, Kind::kSwap)).string();
}

double KvDiskTier::read_bytes_per_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return read_bps_;
}

void KvDiskTier::note_read_speed(uint64_t bytes, double seconds) {
  if (bytes == 0 || seconds <= 0) return;
  const double bps = static_cast<double>(bytes) / seconds;
  read_bps_ = read_bps_ <= 0 ? bps : 0.8 * read_bps_ + 0.2 * bps;  // recent reads count most
}

bool KvDiskTier::swap_room(uint64_t bytes) const {
  if (!enabled() || swap_folder_.empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return queued_bytes_ + bytes <= config_.queue_bytes;
}

bool KvDiskTier::swap_write(uint64_t id, std::vector<int32_t> tokens, std::vector<uint8_t> payload) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!enabled() || swap_folder_.empty() || queued_bytes_ + payload.size() > config_.queue_bytes) return false;
    queued_bytes_ += payload.size();
    WriteJob job;
    job.kind = Kind::kSwap;
    job.hash = id;
    job.parent_hash = tokens.size();
    job.tokens = std::move(tokens);
    job.payload = std::move(payload);
    writes_.push_back(std::move(job));
  }
  cv_write_.notify_one();
  return true;
}

void KvDiskTier::swap_read(uint64_t id, std::vector<int32_t> tokens, uint64_t payload_bytes) {
  ReadJob job;
  job.seq_id = id;
  job.tokens = std::move(tokens);
  job.swap_bytes = payload_bytes;
  read(std::move(job));
}

void KvDiskTier::swap_remove(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Still queued: taken back, nothing was written (and no result is to come).
    for (auto it = writes_.begin(); it != writes_.end(); ++it) {
      if (it->kind == Kind::kSwap && !it->remove && it->hash == id) {
        queued_bytes_ -= std::min<uint64_t>(queued_bytes_, it->payload.size());
        writes_.erase(it);
        cv_space_.notify_all();
        return;
      }
    }
    // Written, being written, or being read: the writer removes the file after.
    WriteJob job;
    job.kind = Kind::kSwap;
    job.hash = id;
    job.remove = true;
    writes_.push_back(std::move(job));
  }
  cv_write_.notify_one();
}

std::vector<SwapResult> KvDiskTier::take_swap_done() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SwapResult> out;
  out.swap(swap_done_);
  return out;
}

SwapResult KvDiskTier::write_swap(const WriteJob& job) {
  const auto t0 = std::chrono::steady_clock::now();
  SwapResult r;
  r.id = job.hash;
  const std::string path = swap_path(job.hash);
  const std::string tmp = path + ".tmp";
  Header h;
  h.kind = Kind::kSwap;
  h.fingerprint = config_.fingerprint;
  h.hash = job.hash;
  h.parent_hash = job.parent_hash;
  const std::vector<uint8_t> head = encode_header(h, job.tokens, job.payload);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = fd < 0 ? errno : 0;
  if (err == 0) err = write_all(fd, head.data(), head.size());
  if (err == 0) err = write_all(fd, reinterpret_cast<const uint8_t*>(job.tokens.data()), job.tokens.size() * 4);
  if (err == 0) err = write_all(fd, job.payload.data(), job.payload.size());
  // No fsync: a swap file never outlives this process, and a torn one fails its checksum.
  if (fd >= 0 && ::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    r.why = "cannot write " + path + ": " + std::strerror(err);
    disable(r.why);  // the folder's fault (a full disk, an I/O error, a read-only folder)
    return r;
  }
  r.ok = true;
  r.bytes = head.size() + job.tokens.size() * 4 + job.payload.size();
  r.seconds = seconds_since(t0);
  return r;
}

SwapResult KvDiskTier::read_swap(const ReadJob& job) {
  const auto t0 = std::chrono::steady_clock::now();
  SwapResult r;
  r.id = job.seq_id;
  r.read = true;
  const std::string path = swap_path(job.seq_id);
  if (!enabled()) {
    r.why = "the disk tier is disabled";
    ::unlink(path.c_str());
    return r;
  }
  const uint64_t want_size = payload_offset(static_cast<uint32_t>(job.tokens.size())) + job.swap_bytes;
  std::vector<uint8_t> bytes;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  int err = fd < 0 ? errno : 0;
  if (err == 0) {
    struct stat st {};
    err = ::fstat(fd, &st) != 0 ? errno : 0;
    if (err == 0) {
      bytes.resize(static_cast<size_t>(std::min(static_cast<uint64_t>(st.st_size), want_size + 1)));
      size_t got = 0;
      while (got < bytes.size()) {
        const ssize_t n = ::pread(fd, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
        if (n < 0) {
          if (errno == EINTR) continue;
          err = errno;
          break;
        }
        if (n == 0) break;
        got += static_cast<size_t>(n);
      }
      bytes.resize(got);
    }
    ::close(fd);
  }
  // The sequence resumes (or is recomputed): the file has served either way.
  ::unlink(path.c_str());
  if (err != 0) {
    r.why = "cannot read " + path + ": " + std::strerror(err);
    if (err != ENOENT) disable(r.why);  // gone is this file's loss; anything else the folder's
    return r;
  }
  Expect want;
  want.kind = Kind::kSwap;
  want.fingerprint = config_.fingerprint;
  want.hash = job.seq_id;
  want.parent_hash = job.tokens.size();
  want.tokens = job.tokens;
  want.payload_bytes = job.swap_bytes;
  const std::string why = check_file(bytes, want);
  if (!why.empty()) {
    r.why = "removed " + path + ", not loaded: " + why;
    log_line(r.why);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.files_rejected;
    return r;
  }
  r.bytes = bytes.size();
  r.payload.assign(bytes.begin() + static_cast<std::ptrdiff_t>(payload_offset(static_cast<uint32_t>(job.tokens.size()))),
                   bytes.end());
  r.ok = true;
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace hearth::engine::kvdisk
