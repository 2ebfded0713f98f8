#include "engine/kv_disk.h"
#include "engine/kv_disk_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

#include "core/error.h"

namespace hearth::engine::kvdisk {
namespace {

namespace fs = std::filesystem;

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

KvDiskTier::KvDiskTier(DiskConfig config)
    : config_(std::move(config)), folder_((fs::path(config_.dir) / hex64(config_.fingerprint)).string()),
      index_(config_.budget_bytes) {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec || !fs::is_directory(folder_)) {
    fail(ErrorKind::kIo, "kv-disk", "cannot make the folder " + folder_ + ": " + ec.message());
  }
  const DiskIndex::ScanResult sr = index_.scan(folder_);
  // For people looking at DIR: what this fingerprint stands for (not read by Hearth).
  if (FILE* f = std::fopen((fs::path(folder_) / "ABOUT").c_str(), "w")) {
    std::fprintf(f, "%s\n", config_.description.c_str());
    std::fclose(f);
  }
  const IndexCounts c = index_.counts();
  std::string line = folder_ + ": " + std::to_string(c.kv_files) + " KV blocks and " + std::to_string(c.state_files) +
                     " state snapshots on disk, " + std::to_string(c.bytes >> 20) + " MiB of a " +
                     std::to_string(config_.budget_bytes >> 20) + " MiB budget (" + config_.description + ")";
  if (sr.removed_tmp > 0) line += "; removed " + std::to_string(sr.removed_tmp) + " unfinished writes";
  if (sr.removed_budget > 0) line += "; removed " + std::to_string(sr.removed_budget) + " files over the budget";
  log_line(line);
  init_swap_folder();
  writer_ = std::thread([this] { writer_loop(); });
  reader_ = std::thread([this] { reader_loop(); });
}

KvDiskTier::~KvDiskTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_write_.notify_all();
  cv_read_.notify_all();
  cv_space_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
  // Swap files are this run's alone: none outlives it.
  if (!swap_folder_.empty()) {
    std::error_code ec;
    fs::remove_all(swap_folder_, ec);
  }
}

std::string KvDiskTier::path_of(Key key) const { return (fs::path(folder_) / file_name(key.hash, key.kind)).string(); }

void KvDiskTier::disable(const std::string& why) {
  if (disabled_.exchange(true)) return;
  log_line("DISABLED, serving goes on from memory: " + why);
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Queued swap writes end as failures (their sequences are recomputed); swap removals
    // stay queued (the writer still does them).
    std::deque<WriteJob> keep;
    for (WriteJob& j : writes_) {
      if (j.kind == Kind::kSwap && j.remove) {
        keep.push_back(std::move(j));
      } else if (j.kind == Kind::kSwap) {
        swap_done_.push_back(SwapResult{j.hash, false, false, {}, 0, 0, "the disk tier is disabled: " + why});
      } else {
        ++stats_.writes_dropped;
      }
    }
    writes_.swap(keep);
    queued_.clear();
    queued_bytes_ = 0;
    if (!swap_done_.empty()) fn = on_done_;
  }
  cv_space_.notify_all();
  if (fn) fn();
}

bool KvDiskTier::has(Key key) const {
  if (index_.contains(key)) return true;
  std::lock_guard<std::mutex> lock(mu_);
  return queued_.count(key) != 0;
}

bool KvDiskTier::wants(Key key, uint64_t bytes) const {
  if (!enabled() || index_.contains(key)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return queued_.count(key) == 0 && queued_bytes_ + bytes <= config_.queue_bytes;
}

bool KvDiskTier::offer(WriteJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Key key{job.hash, job.kind};
    if (queued_.count(key) != 0) return true;
    if (!enabled() || queued_bytes_ + job.payload.size() > config_.queue_bytes) {
      ++stats_.writes_dropped;
      return false;
    }
    queued_bytes_ += job.payload.size();
    queued_.insert(key);
    writes_.push_back(std::move(job));
  }
  cv_write_.notify_one();
  return true;
}

void KvDiskTier::put(WriteJob job) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    const Key key{job.hash, job.kind};
    if (queued_.count(key) != 0) return;
    // A job larger than the whole queue waits for an empty queue.
    cv_space_.wait(lock, [&] {
      return stop_ || !enabled() || queued_bytes_ == 0 || queued_bytes_ + job.payload.size() <= config_.queue_bytes;
    });
    if (stop_ || !enabled()) {
      ++stats_.writes_dropped;
      return;
    }
    queued_bytes_ += job.payload.size();
    queued_.insert(key);
    writes_.push_back(std::move(job));
  }
  cv_write_.notify_one();
}

void KvDiskTier::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_space_.wait(lock, [&] { return stop_ || !enabled() || (writes_.empty() && !writing_); });
}

void KvDiskTier::writer_loop() {
  for (;;) {
    WriteJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_write_.wait(lock, [&] { return stop_ || !writes_.empty(); });
      if (stop_) return;
      job = std::move(writes_.front());
      writes_.pop_front();
      writing_ = true;
    }
    std::function<void()> fn;
    if (job.kind == Kind::kSwap) {
      if (job.remove) {
        ::unlink(swap_path(job.hash).c_str());
      } else {
        SwapResult r = enabled() ? write_swap(job)
                                 : SwapResult{job.hash, false, false, {}, 0, 0, "the disk tier is disabled"};
        std::lock_guard<std::mutex> lock(mu_);
        swap_done_.push_back(std::move(r));
        fn = on_done_;
      }
    } else if (enabled()) {
      write_one(job);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      queued_.erase(Key{job.hash, job.kind});
      queued_bytes_ -= std::min<uint64_t>(queued_bytes_, job.payload.size());
    }
    cv_space_.notify_all();
    if (fn) fn();
  }
}

void KvDiskTier::write_one(const WriteJob& job) {
  const Key key{job.hash, job.kind};
  const std::string path = path_of(key);
  const std::string tmp = path + "." + std::to_string(::getpid()) + ".tmp";
  Header h;
  h.kind = job.kind;
  h.fingerprint = config_.fingerprint;
  h.hash = job.hash;
  h.parent_hash = job.parent_hash;
  const std::vector<uint8_t> head = encode_header(h, job.tokens, job.payload);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    disable("cannot create " + tmp + ": " + errno_text(errno));
    return;
  }
  int err = write_all(fd, head.data(), head.size());
  if (err == 0) err = write_all(fd, reinterpret_cast<const uint8_t*>(job.tokens.data()), job.tokens.size() * 4);
  if (err == 0) err = write_all(fd, job.payload.data(), job.payload.size());
  // No fsync: a file a crash or power loss leaves torn fails its checksum and is removed
  // when read. The rename makes a finished file appear whole under its name.
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    disable("cannot write " + path + ": " + errno_text(err));
    return;
  }
  const uint64_t bytes = head.size() + job.tokens.size() * 4 + job.payload.size();
  std::vector<Key> gone = index_.insert(key, bytes);
  for (const Key& k : gone) {
    if (::unlink(path_of(k).c_str()) != 0 && errno != ENOENT) {
      disable("cannot remove " + path_of(k) + " (disk budget): " + errno_text(errno));
      return;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.files_written;
  stats_.bytes_written += bytes;
}

void KvDiskTier::read(ReadJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    reads_.push_back(std::move(job));
  }
  cv_read_.notify_one();
}

std::vector<ReadResult> KvDiskTier::take_done() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ReadResult> out;
  out.swap(done_);
  return out;
}

void KvDiskTier::release(std::shared_ptr<void> memory) {
  if (!memory) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    spent_.push_back(std::move(memory));
  }
  cv_read_.notify_one();
}

void KvDiskTier::set_on_done(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  on_done_ = std::move(fn);
}

void KvDiskTier::reader_loop() {
  for (;;) {
    ReadJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_read_.wait(lock, [&] { return stop_ || !reads_.empty() || !spent_.empty(); });
      if (stop_) return;
      if (!spent_.empty()) {
        std::vector<std::shared_ptr<void>> spent;
        spent.swap(spent_);
        lock.unlock();
        spent.clear();  // unmapped (or freed) here, off the engine's thread
        continue;
      }
      job = std::move(reads_.front());
      reads_.pop_front();
    }
    std::function<void()> fn;
    if (job.swap_bytes > 0) {
      SwapResult r = read_swap(job);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (r.ok) note_read_speed(r.bytes, r.seconds);
        swap_done_.push_back(std::move(r));
        fn = on_done_;
      }
      if (fn) fn();
      continue;
    }
    read_prefix(job);
  }
}

void KvDiskTier::deliver(ReadResult r) {
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.files_read += r.items.size();
    stats_.bytes_read += r.bytes;
    job_bytes_ += r.bytes;
    if (r.last) {
      note_read_speed(job_bytes_, r.seconds);
      ++stats_.reads;
      stats_.read_seconds += r.seconds;
      job_bytes_ = 0;
    }
    done_.push_back(std::move(r));
    fn = on_done_;
  }
  if (fn) fn();
}

namespace {

// A prefix job's files in one region: item i's file in slot i (each slot the expected file
// size plus one byte, page-aligned), huge pages where they can be mapped. With map_files,
// an address range is reserved instead and each file is mapped over its slot; one munmap
// at the end drops them all.
struct JobMemory {
  HugeRegion region;
  std::unique_ptr<uint8_t[]> heap;
  void* reserved = nullptr;
  size_t reserved_bytes = 0;
  uint8_t* base = nullptr;
  JobMemory(size_t bytes, bool map_files) {
    bytes = std::max<size_t>(bytes, 1);
    if (map_files) {
      void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) {
        reserved = p;
        reserved_bytes = bytes;
        base = static_cast<uint8_t*>(p);
        return;
      }
    }
    region = HugeRegion::map(bytes);
    base = region.data();
    if (base == nullptr) {
      heap.reset(new uint8_t[bytes]);
      base = heap.get();
    }
  }
  ~JobMemory() {
    if (reserved != nullptr) ::munmap(reserved, reserved_bytes);
  }
  JobMemory(const JobMemory&) = delete;
  JobMemory& operator=(const JobMemory&) = delete;
};

int64_t ns_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

void KvDiskTier::read_prefix(const ReadJob& job) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t bs = config_.block_size;
  // The items that fit the job's tokens (a plan never asks past them; a short one stops there).
  size_t n_items = 0;
  while (n_items < job.items.size() &&
         static_cast<size_t>(job.items[n_items].block) * bs + bs <= job.tokens.size()) {
    ++n_items;
  }
  // Read and checked by several threads at once: one thread reading, checking (crc32)
  // and copying measured 0.2-0.4 GB/s, where a 16k-token prefix of a 9B model is 0.5 GB;
  // parallel reads also keep a device with a high latency per request busy. Each worker
  // takes the next item; before its read it opens the file a few items ahead and tells the
  // kernel about it (readahead from a cold device), leaving that descriptor for the worker
  // that reads it. KV items past one that failed are skipped: KV items stop at the first
  // that failed (the blocks after it are unreachable). Whenever the items read in order
  // since the last piece reach piece_bytes, they go to the engine as the next piece, so
  // that putting them into the pool overlaps with reading the rest.
  auto slot_bytes = [&](const ReadItem& item) {
    const uint64_t want = payload_offset(bs) + (item.kind == Kind::kKv ? config_.kv_payload_bytes : config_.state_payload_bytes);
    return static_cast<size_t>((want + 1 + 4095) & ~uint64_t{4095});
  };
  std::vector<size_t> slot_at(n_items + 1, 0);
  for (size_t i = 0; i < n_items; ++i) slot_at[i + 1] = slot_at[i] + slot_bytes(job.items[i]);
  auto memory = std::make_shared<JobMemory>(slot_at[n_items], config_.map_files);
  uint8_t* base = memory->base;
  const bool mapped = memory->reserved != nullptr;
  std::atomic<int64_t> times[3] = {0, 0, 0};  // ns opening, reading, checking
  auto tokens = std::make_shared<const std::vector<int32_t>>(job.tokens);
  std::vector<size_t> got(n_items, 0);
  enum : uint8_t { kPending = 0, kOk = 1, kFailed = 2 };
  std::unique_ptr<std::atomic<uint8_t>[]> state(new std::atomic<uint8_t>[std::max<size_t>(n_items, 1)]);
  std::unique_ptr<std::atomic<int>[]> fds(new std::atomic<int>[std::max<size_t>(n_items, 1)]);
  for (size_t i = 0; i < n_items; ++i) {
    state[i].store(kPending);
    fds[i].store(-1);
  }
  std::atomic<size_t> next{0};
  std::atomic<size_t> first_bad{n_items};  // the first KV item that failed

  const size_t n_workers = std::min<size_t>(read_threads_, std::max<size_t>(1, n_items / 8));
  std::mutex pub_mu;  // guards what follows
  size_t published = 0;
  bool kv_broken = false;
  bool delivered_last = false;
  // Hands the items read in order since the last piece to the engine when they are
  // piece_bytes or more, or all of them when `all` (every item is settled by then).
  auto publish = [&](bool all) {
    std::lock_guard<std::mutex> lock(pub_mu);
    if (delivered_last) return;
    size_t frontier = published;
    uint64_t ready = 0;
    while (frontier < n_items && state[frontier].load(std::memory_order_acquire) != kPending) {
      ready += got[frontier];
      ++frontier;
    }
    const bool last = frontier == n_items;
    if (!all && !last && (frontier == published || ready < config_.piece_bytes)) return;
    ReadResult r;
    r.seq_id = job.seq_id;
    r.job_tokens = tokens;
    r.memory = memory;
    r.payload_at = payload_offset(bs);  // the header and tokens were checked
    for (size_t i = published; i < frontier; ++i) {
      const ReadItem& item = job.items[i];
      if (item.kind == Kind::kKv && kv_broken) continue;
      if (state[i].load() != kOk) {
        if (item.kind == Kind::kKv) kv_broken = true;
        continue;
      }
      r.bytes += got[i];
      r.items.push_back(item);
      r.files.emplace_back(base + slot_at[i], got[i]);
    }
    published = frontier;
    r.last = last;
    delivered_last = last;
    if (last) {
      r.threads = n_workers;
      r.mapped = mapped;
      r.open_s = static_cast<double>(times[0].load()) * 1e-9;
      r.read_s = static_cast<double>(times[1].load()) * 1e-9;
      r.check_s = static_cast<double>(times[2].load()) * 1e-9;
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    deliver(std::move(r));
  };
  auto work = [&] {
    const size_t ahead = 2 * n_workers;
    for (size_t i; (i = next.fetch_add(1)) < n_items;) {
      const ReadItem& item = job.items[i];
      if (!enabled() || (item.kind == Kind::kKv && i > first_bad.load())) {
        state[i].store(kFailed, std::memory_order_release);
        continue;
      }
      if (const size_t h = i + ahead; h < n_items) {
        const auto t_open = std::chrono::steady_clock::now();
        const int fd = ::open(path_of(Key{job.items[h].hash, job.items[h].kind}).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
          ::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
          int none = -1;
          if (!fds[h].compare_exchange_strong(none, fd)) ::close(fd);
        }
        times[0] += ns_since(t_open);
      }
      const size_t first = static_cast<size_t>(item.block) * bs;
      const std::span<uint8_t> slot(base + slot_at[i], slot_at[i + 1] - slot_at[i]);
      const int fd = fds[i].exchange(-2);  // -2: a late readahead open closes its own
      if (read_file(item, std::span<const int32_t>(job.tokens).subspan(first, bs), slot, got[i], fd, times, mapped)) {
        state[i].store(kOk, std::memory_order_release);
      } else {
        if (item.kind == Kind::kKv) {
          size_t seen = first_bad.load();
          while (i < seen && !first_bad.compare_exchange_weak(seen, i)) {
          }
        }
        state[i].store(kFailed, std::memory_order_release);
      }
      publish(false);
    }
  };
  std::vector<std::thread> workers;
  for (size_t w = 1; w < n_workers; ++w) workers.emplace_back(work);
  work();
  for (std::thread& t : workers) t.join();
  for (size_t i = 0; i < n_items; ++i) {
    if (const int fd = fds[i].exchange(-2); fd >= 0) ::close(fd);  // opened ahead for an item skipped
  }
  publish(true);
  // The files used become the most recent, here (read_file) and in the order a restart
  // sees (their times): after the engine has them, off the request's path.
  for (size_t i = 0; i < n_items; ++i) {
    if (state[i].load() == kOk) ::utimensat(AT_FDCWD, path_of(Key{job.items[i].hash, job.items[i].kind}).c_str(), nullptr, 0);
  }
}

bool KvDiskTier::read_file(const ReadItem& item, std::span<const int32_t> tokens, std::span<uint8_t> out, size_t& got,
                           int fd, std::atomic<int64_t>* times, bool map) {
  const Key key{item.hash, item.kind};
  const std::string path = path_of(key);
  auto t = std::chrono::steady_clock::now();
  if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    index_.erase(key);
    // Gone (removed by the budget, or by hand) is a miss; anything else is the folder's fault.
    if (e != ENOENT) disable("cannot open " + path + ": " + errno_text(e));
    return false;
  }
  if (times != nullptr) times[0] += ns_since(t);
  t = std::chrono::steady_clock::now();
  struct stat st {};
  int err = ::fstat(fd, &st) != 0 ? errno : 0;
  const uint64_t want_size = payload_offset(config_.block_size) +
                             (item.kind == Kind::kKv ? config_.kv_payload_bytes : config_.state_payload_bytes);
  // Mapped over its slot (the page cache's pages, no copy) when it has exactly the
  // expected size (a shorter one would fault past its end); the tier's files are replaced
  // by rename, never rewritten in place, so a mapped file keeps its bytes. A file of
  // another size is read into memory of its own instead, for check_file to name what is
  // wrong with it.
  std::vector<uint8_t> odd;
  std::span<uint8_t> bytes = out;
  if (err == 0) {
    const auto size = static_cast<uint64_t>(st.st_size);
    got = 0;
    if (map && size == want_size && size <= out.size()) {
      if (::mmap(out.data(), size, PROT_READ, MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd, 0) == MAP_FAILED) {
        err = errno;
      } else {
        got = size;
      }
    } else {
      if (map) {
        odd.resize(static_cast<size_t>(std::min<uint64_t>(size, want_size + 1)));
        bytes = odd;
      }
      // Never more than the expected size is read (a file grown huge is simply wrong).
      const auto cap = static_cast<size_t>(std::min<uint64_t>({size, want_size + 1, bytes.size()}));
      while (got < cap) {
        const ssize_t n = ::pread(fd, bytes.data() + got, cap - got, static_cast<off_t>(got));
        if (n < 0) {
          if (errno == EINTR) continue;
          err = errno;
          break;
        }
        if (n == 0) break;
        got += static_cast<size_t>(n);
      }
    }
  }
  ::close(fd);
  if (times != nullptr) times[1] += ns_since(t);
  if (err != 0) {
    index_.erase(key);
    disable("cannot read " + path + ": " + errno_text(err));
    return false;
  }
  t = std::chrono::steady_clock::now();
  Expect want;
  want.kind = item.kind;
  want.fingerprint = config_.fingerprint;
  want.hash = item.hash;
  want.parent_hash = item.parent_hash;
  want.tokens = tokens;
  want.payload_bytes = item.kind == Kind::kKv ? config_.kv_payload_bytes : config_.state_payload_bytes;
  std::string why = check_file(bytes.first(got), want);
  if (why.empty() && !odd.empty()) why = "size " + std::to_string(got) + " bytes, expected " + std::to_string(want_size);
  if (times != nullptr) times[2] += ns_since(t);
  if (!why.empty()) {
    remove_file(key, why);
    return false;
  }
  index_.touch(key);
  return true;
}

void KvDiskTier::remove_file(Key key, const std::string& why) {
  const std::string path = path_of(key);
  index_.erase(key);
  ::unlink(path.c_str());
  log_line("removed " + path + ", not loaded: " + why);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.files_rejected;
}

DiskStats KvDiskTier::stats() const {
  DiskStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = stats_;
  }
  const IndexCounts c = index_.counts();
  s.kv_files = c.kv_files;
  s.state_files = c.state_files;
  s.bytes_on_disk = c.bytes;
  s.disabled = !enabled();
  return s;
}

}  // namespace hearth::engine::kvdisk
