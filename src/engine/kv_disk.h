// The KV disk tier of `hearth serve --kv-disk DIR --kv-disk-bytes SIZE`: full KV blocks
// and recurrent-state snapshots that leave the memory tier are written under
// DIR/<fingerprint>/ (kv_disk_format.h), and a prefix that misses memory but hits disk
// is read back. The engine copies a block's bytes to the host (a step never waits on
// the disk) and hands them over; a writer thread writes them (temporary name, then
// rename), a reader thread reads what admitted requests will need and the engine puts
// it back into the pool before the request is scheduled (engine/serve_engine_disk.cpp).
//
// Failure policy: a torn, foreign or corrupt file is removed and counts as a miss; a
// failed write or read of the folder itself (a full disk, an I/O error, a folder made
// read-only) disables the tier for the rest of the run with one log line and the
// `hearth_kv_disk_disabled` metric: serving goes on from memory. The write queue is
// bounded (bytes): a write that does not fit is dropped and counted, never waited for
// (except by put(), which the shutdown flush uses).
//
// Swap files (kv_disk_swap.cpp): preempted sequences whose KV the host swap space cannot
// hold may be swapped to disk instead (engine/serve_engine_swap_disk.cpp). Such a file is
// private to its sequence: it lives in DIR/<fingerprint>/swap-<pid>-<n>/ (n: this
// process's tiers in order), named by the
// sequence's id, outside the index (no prefix lookup finds it, the budget's LRU never
// removes it), and it is removed when read back or dropped; at start the folders of
// processes that no longer run are removed (a crash's leftovers), at the end this one's.
// The same threads write and read them (the same queue, the same failure policy), and
// every swap write or read ends with exactly one SwapResult, also when it failed or was
// dropped by a disabled tier: the engine then recomputes that sequence.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/huge_pages.h"
#include "engine/kv_disk_format.h"
#include "engine/kv_disk_index.h"

namespace hearth::engine::kvdisk {

struct DiskConfig {
  std::string dir;                 // DIR (the fingerprint folder is made inside)
  uint64_t budget_bytes = 0;       // the files of this fingerprint, at most
  uint64_t fingerprint = 0;
  std::string description;         // written to DIR/<fingerprint>/ABOUT for people
  uint32_t block_size = 16;
  uint64_t kv_payload_bytes = 0;     // of one KV block
  uint64_t state_payload_bytes = 0;  // of one state snapshot (0: not a hybrid model)
  uint64_t queue_bytes = 256ull << 20;  // payloads waiting for the writer, at most
  uint64_t piece_bytes = 32ull << 20;   // a read job comes back in pieces of about this many bytes
  size_t read_threads = 0;              // threads of one prefix read job (0: half the cores, 1 to 8)
  // A prefix hit's files are mapped from the page cache (no copy): on the H100 machine a
  // 16k-token 9B prefix (548 MiB, 995 files, 8 threads) read in 45-48 ms mapped against 94 ms
  // read into fresh memory. false: read (pread), also where the address range cannot be
  // reserved.
  bool map_files = true;
};

struct WriteJob {
  Kind kind = Kind::kKv;
  uint64_t hash = 0, parent_hash = 0;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> payload;
  bool remove = false;  // kSwap only: remove the swap file of sequence `hash` instead
};

// One file a reader should bring back; block is its index in ReadJob::tokens' blocks.
struct ReadItem {
  Kind kind = Kind::kKv;
  int32_t block = 0;
  uint64_t hash = 0, parent_hash = 0;
};

struct ReadJob {
  uint64_t seq_id = 0;
  std::vector<int32_t> tokens;  // the prompt's full blocks up to the last item's
  std::vector<ReadItem> items;  // KV items in block order, then at most one state item
  uint64_t swap_bytes = 0;      // > 0: read the swap file of seq_id (this payload, these tokens)
};

// A swap file written or read back (or failed).
struct SwapResult {
  uint64_t id = 0;
  bool read = false;              // a read (else a write)
  bool ok = false;
  std::vector<uint8_t> payload;   // a read's payload, checked
  uint64_t bytes = 0;             // the file's bytes
  double seconds = 0;
  std::string why;                // a failure's reason
};

// What came back: the items read and checked (KV items stop at the first that failed:
// the blocks after it are unreachable), each with its payload. A large job comes back in
// pieces, in item order, as its files are read (the engine puts one piece into the pool
// while the next is read); `last` marks the job's final piece (maybe with no items),
// after which nothing more of that job comes.
struct ReadResult {
  uint64_t seq_id = 0;
  std::shared_ptr<const std::vector<int32_t>> job_tokens;  // the job's tokens (shared by its pieces)
  const std::vector<int32_t>& tokens() const { return *job_tokens; }
  std::vector<ReadItem> items;
  // Each item's whole file as read (header, tokens, payload), in `memory`: the payload
  // starts at payload_at, so the read never moves half a gigabyte to drop a header.
  std::vector<std::span<uint8_t>> files;
  size_t payload_at = 0;
  std::span<const uint8_t> payload(size_t i) const { return files[i].subspan(payload_at); }
  std::span<uint8_t> payload(size_t i) { return files[i].subspan(payload_at); }
  // One region for the whole job's files, shared by its pieces (huge pages where the
  // system gives them: a 16k-token prefix of a 9B model is 0.5 GB, whose first touch in
  // 4 KiB pages cost more than reading and checking it; else the heap).
  std::shared_ptr<void> memory;
  bool last = true;
  double seconds = 0;  // from the job's start to this piece's delivery
  uint64_t bytes = 0;  // this piece's
  // The last piece's: the job's threads and their summed time opening, reading (or
  // mapping) and checking files.
  size_t threads = 0;
  bool mapped = false;  // the files were mapped (else read)
  double open_s = 0, read_s = 0, check_s = 0;
};

struct DiskStats {
  uint64_t kv_files = 0, state_files = 0, bytes_on_disk = 0;
  uint64_t files_read = 0, bytes_read = 0;      // files read back and checked
  uint64_t files_written = 0, bytes_written = 0;
  uint64_t writes_dropped = 0;                  // the queue was full (or the tier disabled)
  uint64_t files_rejected = 0;                  // torn / foreign / corrupt files removed
  uint64_t reads = 0;                           // read jobs done
  double read_seconds = 0;                      // their total time
  bool disabled = false;
};

class KvDiskTier {
 public:
  // Makes DIR/<fingerprint> (and DIR) if needed and rebuilds the index from it. Throws
  // Error (kIo) when the folder cannot be made or listed: a start-up mistake.
  explicit KvDiskTier(DiskConfig config);
  ~KvDiskTier();  // stops the threads; queued writes are dropped (drain() first to keep them)
  KvDiskTier(const KvDiskTier&) = delete;
  KvDiskTier& operator=(const KvDiskTier&) = delete;

  const DiskConfig& config() const { return config_; }
  const std::string& folder() const { return folder_; }
  bool enabled() const { return !disabled_.load(); }
  // On disk (or on its way there).
  bool has(Key key) const;
  // On disk now: what a read plan may count on (a miss is still possible).
  bool on_disk(Key key) const { return enabled() && index_.contains(key); }
  // Whether a write of `key` would be taken now: enabled, not there yet, and room in
  // the queue for `bytes`. A caller asks before it copies a block out of the pool.
  bool wants(Key key, uint64_t bytes) const;
  // Queues a write if there is room; else drops it (counted). Returns whether queued.
  bool offer(WriteJob job);
  // Queues a write, waiting for room (shutdown only: no step is waiting).
  void put(WriteJob job);
  // Counts a write the caller did not offer because wants() said the queue is full.
  void note_dropped() {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.writes_dropped;
  }
  // Waits until every queued write is done (or the tier is disabled).
  void drain();

  void read(ReadJob job);
  std::vector<ReadResult> take_done();
  // Hands a result's memory back when the caller is done with it: the reader thread frees
  // it (unmapping half a gigabyte of files is not for the engine's thread).
  void release(std::shared_ptr<void> memory);
  // Called (on the reader thread) after each piece of a read job, e.g. to wake the engine.
  void set_on_done(std::function<void()> fn);

  DiskStats stats() const;
  // Disables the tier: `why` is logged once.
  void disable(const std::string& why);

  // Swap files (see the top). swap_room: whether a write of `bytes` would be queued now.
  // swap_write queues the file of sequence `id` (tokens: its positions' tokens, checked on
  // the way back); false (nothing queued, no result to come) when disabled or the queue is
  // full. swap_read asks for it back (payload_bytes expected); the file is removed after.
  // swap_remove drops it (a queued write is taken back; else the writer removes the file).
  bool swap_room(uint64_t bytes) const;
  bool swap_write(uint64_t id, std::vector<int32_t> tokens, std::vector<uint8_t> payload);
  void swap_read(uint64_t id, std::vector<int32_t> tokens, uint64_t payload_bytes);
  void swap_remove(uint64_t id);
  std::vector<SwapResult> take_swap_done();
  std::string swap_path(uint64_t id) const;
  const std::string& swap_folder() const { return swap_folder_; }
  // The measured read throughput (bytes/s) of this tier's reads, prefix and swap files
  // (a moving average over read jobs; 0: nothing read yet).
  double read_bytes_per_s() const;

 private:
  void writer_loop();
  void reader_loop();
  void write_one(const WriteJob& job);
  // Reads a prefix job's files on several threads, handing each piece to deliver() as
  // soon as the items before it are read.
  void read_prefix(const ReadJob& job);
  void deliver(ReadResult r);
  // Reads one file; "" and `out` filled when it is the file asked for.
  // Reads the item's file into out (its capacity: one byte more than the expected size,
  // so a file grown past it is seen); got: the bytes read. Checked as read_one says.
  // fd: the file already opened (by the readahead), else -1. map: the file is mapped over
  // `out` (page-aligned, in a reserved address range) instead of read into it.
  // times: nanoseconds spent opening, reading and checking, added to.
  bool read_file(const ReadItem& item, std::span<const int32_t> tokens, std::span<uint8_t> out, size_t& got,
                 int fd = -1, std::atomic<int64_t>* times = nullptr, bool map = false);
  void remove_file(Key key, const std::string& why);
  std::string path_of(Key key) const;
  // Swap files (kv_disk_swap.cpp).
  void init_swap_folder();
  SwapResult write_swap(const WriteJob& job);
  SwapResult read_swap(const ReadJob& job);
  void note_read_speed(uint64_t bytes, double seconds);  // mu_ held

  DiskConfig config_;
  // Threads a prefix read job uses (read_prefix): half the cores, 1 to 8, unless configured.
  size_t read_threads_ = config_.read_threads > 0 ? config_.read_threads
                                                  : std::clamp<size_t>(std::thread::hardware_concurrency() / 2, 1, 8);
  std::string folder_;
  DiskIndex index_;
  std::atomic<bool> disabled_{false};

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_write_, cv_space_, cv_read_;
  std::deque<WriteJob> writes_;
  std::unordered_set<Key, KeyHash> queued_;
  uint64_t queued_bytes_ = 0;
  bool writing_ = false;  // the writer holds a job it took from the queue
  std::deque<ReadJob> reads_;
  std::vector<ReadResult> done_;
  std::vector<std::shared_ptr<void>> spent_;  // results' memory to free (release)
  std::function<void()> on_done_;
  bool stop_ = false;
  DiskStats stats_;
  std::string swap_folder_;           // "" when it could not be made (no disk swapping)
  std::vector<SwapResult> swap_done_;
  double read_bps_ = 0;
  uint64_t job_bytes_ = 0;  // the pieces of the prefix job being read so far

  std::thread writer_, reader_;
};

}  // namespace hearth::engine::kvdisk
