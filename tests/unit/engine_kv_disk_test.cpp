// The KV disk tier's files, index and threads on a real folder: a file written reads back
// bit for bit; torn, corrupt, foreign and colliding files are refused and removed; the
// index keeps the budget in least-recently-used order and is rebuilt from the folder
// (file times) at start; a folder that cannot be written disables the tier.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/block_manager.h"
#include "engine/kv_disk.h"
#include "engine/kv_disk_format.h"
#include "engine/kv_disk_index.h"

namespace hearth::engine::kvdisk {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("hearth_kv_disk_test_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void write_all(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<int32_t> tokens_of(int32_t seed, int n = 16) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = seed * 1000 + i - (i == 3 ? 2000000 : 0);  // one image-like id < 0
  return t;
}
std::vector<uint8_t> payload_of(int32_t seed, size_t n) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>((i * 131u + static_cast<size_t>(seed) * 7u) & 0xff);
  return p;
}

std::vector<uint8_t> file_bytes(uint64_t fp, uint64_t hash, uint64_t parent, const std::vector<int32_t>& toks,
                                const std::vector<uint8_t>& payload, Kind kind = Kind::kKv) {
  Header h;
  h.kind = kind;
  h.fingerprint = fp;
  h.hash = hash;
  h.parent_hash = parent;
  std::vector<uint8_t> out = encode_header(h, toks, payload);
  const auto* tb = reinterpret_cast<const uint8_t*>(toks.data());
  out.insert(out.end(), tb, tb + toks.size() * 4);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

Expect expect_of(uint64_t fp, uint64_t hash, uint64_t parent, const std::vector<int32_t>& toks, uint64_t payload,
                 Kind kind = Kind::kKv) {
  Expect e;
  e.kind = kind;
  e.fingerprint = fp;
  e.hash = hash;
  e.parent_hash = parent;
  e.tokens = toks;
  e.payload_bytes = payload;
  return e;
}

TEST(KvDiskFormat, RoundTripAndEveryKindOfDamageIsNamed) {
  const auto toks = tokens_of(1);
  const auto payload = payload_of(1, 1000);
  const std::vector<uint8_t> good = file_bytes(42, 7, 5, toks, payload);
  ASSERT_EQ(good.size(), payload_offset(16) + 1000);
  EXPECT_EQ(check_file(good, expect_of(42, 7, 5, toks, 1000)), "");
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), good.begin() + static_cast<long>(payload_offset(16))));

  auto torn = good;
  torn.resize(good.size() - 1);
  EXPECT_NE(check_file(torn, expect_of(42, 7, 5, toks, 1000)).find("torn"), std::string::npos);
  EXPECT_NE(check_file(std::span<const uint8_t>(good).first(10), expect_of(42, 7, 5, toks, 1000)).find("torn"),
            std::string::npos);
  auto corrupt = good;
  corrupt[good.size() - 10] ^= 0x40;
  EXPECT_NE(check_file(corrupt, expect_of(42, 7, 5, toks, 1000)).find("checksum mismatch"), std::string::npos);
  auto bad_head = good;
  bad_head[44] ^= 1;  // the reserved field: only the header checksum can see it
  EXPECT_NE(check_file(bad_head, expect_of(42, 7, 5, toks, 1000)).find("header checksum"), std::string::npos);
  auto bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_NE(check_file(bad_magic, expect_of(42, 7, 5, toks, 1000)).find("magic"), std::string::npos);
  // Another model's file (a valid file, another fingerprint), a collision, a state file.
  EXPECT_NE(check_file(good, expect_of(43, 7, 5, toks, 1000)).find("foreign"), std::string::npos);
  EXPECT_NE(check_file(good, expect_of(42, 7, 6, toks, 1000)).find("parent"), std::string::npos);
  EXPECT_NE(check_file(good, expect_of(42, 7, 5, tokens_of(2), 1000)).find("tokens differ"), std::string::npos);
  EXPECT_NE(check_file(good, expect_of(42, 8, 5, toks, 1000)).find("chain hash"), std::string::npos);
  EXPECT_NE(check_file(good, expect_of(42, 7, 5, toks, 1000, Kind::kState)).find("kind"), std::string::npos);
  EXPECT_NE(check_file(good, expect_of(42, 7, 5, toks, 999)).find("payload"), std::string::npos);
}

TEST(KvDiskFormat, NamesParseBack) {
  uint64_t h = 0;
  Kind k = Kind::kKv;
  ASSERT_TRUE(parse_name(file_name(0x0123456789abcdefull, Kind::kState), h, k));
  EXPECT_EQ(h, 0x0123456789abcdefull);
  EXPECT_EQ(k, Kind::kState);
  EXPECT_FALSE(parse_name("0123456789abcdef.kv.123.tmp", h, k));
  EXPECT_FALSE(parse_name("0123456789abcdeX.kv", h, k));
  EXPECT_FALSE(parse_name("ABOUT", h, k));
}

TEST(KvDiskIndex, KeepsTheBudgetLeastRecentlyUsedFirst) {
  DiskIndex ix(300);
  EXPECT_TRUE(ix.insert({1, Kind::kKv}, 100).empty());
  EXPECT_TRUE(ix.insert({2, Kind::kKv}, 100).empty());
  EXPECT_TRUE(ix.insert({3, Kind::kState}, 100).empty());
  EXPECT_TRUE(ix.touch({1, Kind::kKv}));  // 1 is now the most recent: 2 goes first
  std::vector<Key> gone = ix.insert({4, Kind::kKv}, 150);
  ASSERT_EQ(gone.size(), 2u);
  EXPECT_EQ(gone[0], (Key{2, Kind::kKv}));
  EXPECT_EQ(gone[1], (Key{3, Kind::kState}));
  EXPECT_FALSE(ix.contains({2, Kind::kKv}));
  EXPECT_TRUE(ix.contains({1, Kind::kKv}));
  const IndexCounts c = ix.counts();
  EXPECT_EQ(c.bytes, 250u);
  EXPECT_EQ(c.kv_files, 2u);
  EXPECT_EQ(c.state_files, 0u);
  // Larger than the whole budget: refused, nothing else removed.
  gone = ix.insert({5, Kind::kKv}, 301);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0], (Key{5, Kind::kKv}));
  EXPECT_EQ(ix.counts().bytes, 250u);
  EXPECT_TRUE(ix.erase({1, Kind::kKv}));
  EXPECT_FALSE(ix.erase({1, Kind::kKv}));
  EXPECT_EQ(ix.counts().bytes, 150u);
}

TEST(KvDiskIndex, ScanOrdersByFileTimeRemovesTempFilesAndKeepsTheBudget) {
  TempDir dir;
  const auto now = fs::file_time_type::clock::now();
  for (uint64_t h : {3, 1, 2}) {
    const fs::path p = dir.path() / file_name(h, Kind::kKv);
    write_all(p, std::vector<uint8_t>(100, 1));
    fs::last_write_time(p, now - std::chrono::hours(10 - static_cast<int>(h)));  // 1 oldest, 3 newest
  }
  write_all(dir.path() / (file_name(9, Kind::kKv) + ".77.tmp"), std::vector<uint8_t>(10, 0));
  write_all(dir.path() / "ABOUT", std::vector<uint8_t>(10, 0));
  DiskIndex ix(250);
  const DiskIndex::ScanResult r = ix.scan(dir.path().string());
  EXPECT_EQ(r.removed_tmp, 1u);
  EXPECT_EQ(r.removed_budget, 1u);  // the oldest (1) goes: 300 bytes in a 250-byte budget
  EXPECT_FALSE(fs::exists(dir.path() / file_name(1, Kind::kKv)));
  EXPECT_TRUE(fs::exists(dir.path() / "ABOUT"));
  const std::vector<Key> order = ix.lru_order();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0].hash, 2u);
  EXPECT_EQ(order[1].hash, 3u);
}

DiskConfig config_in(const fs::path& dir, uint64_t budget = 1u << 20) {
  DiskConfig c;
  c.dir = dir.string();
  c.budget_bytes = budget;
  c.fingerprint = 0xfeedull;
  c.description = "test";
  c.block_size = 16;
  c.kv_payload_bytes = 4096;
  c.state_payload_bytes = 512;
  return c;
}

// Waits for the reader's result of one job.
ReadResult read_back(KvDiskTier& tier, ReadJob job) {
  tier.read(std::move(job));
  for (int i = 0; i < 2000; ++i) {
    std::vector<ReadResult> done = tier.take_done();
    if (!done.empty()) return std::move(done[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ADD_FAILURE() << "no read result";
  return {};
}

TEST(KvDiskTier, WritesReadBackAfterARestartAndBadFilesAreRemoved) {
  TempDir dir;
  std::vector<int32_t> all;
  for (int b = 0; b < 3; ++b) {
    auto t = tokens_of(b + 1);
    all.insert(all.end(), t.begin(), t.end());
  }
  {
    KvDiskTier tier(config_in(dir.path()));
    for (int b = 0; b < 3; ++b) {
      WriteJob j{Kind::kKv, 100u + static_cast<uint64_t>(b), b == 0 ? 0u : 99u + static_cast<uint64_t>(b),
                 tokens_of(b + 1), payload_of(b, 4096)};
      EXPECT_TRUE(tier.offer(std::move(j)));
    }
    tier.put(WriteJob{Kind::kState, 102, 101, tokens_of(3), payload_of(9, 512)});
    tier.drain();
    const DiskStats s = tier.stats();
    EXPECT_EQ(s.kv_files, 3u);
    EXPECT_EQ(s.state_files, 1u);
    EXPECT_EQ(s.files_written, 4u);
    EXPECT_FALSE(s.disabled);
  }
  const fs::path folder = dir.path() / hex64(0xfeed);
  ASSERT_TRUE(fs::exists(folder / file_name(101, Kind::kKv)));
  // A restart finds them; block 1 is then damaged: the read stops there (block 2 is
  // unreachable without it), the state file still comes back.
  auto bytes = read_all(folder / file_name(101, Kind::kKv));
  bytes[bytes.size() - 1] ^= 1;
  write_all(folder / file_name(101, Kind::kKv), bytes);
  KvDiskTier tier(config_in(dir.path()));
  EXPECT_TRUE(tier.on_disk({100, Kind::kKv}));
  EXPECT_TRUE(tier.on_disk({102, Kind::kState}));
  ReadJob job;
  job.seq_id = 5;
  job.tokens = all;
  job.items = {{Kind::kKv, 0, 100, 0}, {Kind::kKv, 1, 101, 100}, {Kind::kKv, 2, 102, 101}, {Kind::kState, 2, 102, 101}};
  ReadResult r = read_back(tier, job);
  EXPECT_EQ(r.seq_id, 5u);
  ASSERT_EQ(r.items.size(), 2u);
  EXPECT_EQ(r.items[0].block, 0);
  EXPECT_EQ(std::vector<uint8_t>(r.payload(0).begin(), r.payload(0).end()), payload_of(0, 4096));
  EXPECT_EQ(r.items[1].kind, Kind::kState);
  EXPECT_EQ(std::vector<uint8_t>(r.payload(1).begin(), r.payload(1).end()), payload_of(9, 512));
  EXPECT_FALSE(fs::exists(folder / file_name(101, Kind::kKv)));  // removed, never loaded
  EXPECT_FALSE(tier.on_disk({101, Kind::kKv}));
  EXPECT_EQ(tier.stats().files_rejected, 1u);

  // Torn (a crash mid-write without the rename's protection) and foreign files.
  auto b0 = read_all(folder / file_name(100, Kind::kKv));
  write_all(folder / file_name(100, Kind::kKv), std::vector<uint8_t>(b0.begin(), b0.begin() + 1000));
  r = read_back(tier, job);
  EXPECT_TRUE(r.items.size() == 1 && r.items[0].kind == Kind::kState);
  EXPECT_FALSE(fs::exists(folder / file_name(100, Kind::kKv)));
  auto st = read_all(folder / file_name(102, Kind::kState));
  write_all(folder / file_name(102, Kind::kState),
            file_bytes(0xbeef, 102, 101, tokens_of(3), payload_of(9, 512), Kind::kState));
  r = read_back(tier, job);
  EXPECT_TRUE(r.items.empty());
  EXPECT_FALSE(fs::exists(folder / file_name(102, Kind::kState)));
  EXPECT_EQ(tier.stats().files_rejected, 3u);
  EXPECT_FALSE(tier.stats().disabled);  // bad files are not the folder's fault
}

// A large job comes back in pieces, in block order, each as soon as the blocks before it
// are read (the engine puts one into the pool while the next is read); only the final
// piece is `last`; a damaged block stops the KV items there across pieces, and the state
// item still comes in the final piece.
void pieces_case(bool map_files, size_t threads) {
  TempDir dir;
  constexpr int kBlocks = 64;
  std::vector<int32_t> all;
  DiskConfig c = config_in(dir.path());
  c.map_files = map_files;
  c.read_threads = threads;
  c.piece_bytes = 5 * (payload_offset(16) + 4096);  // about five files a piece
  {
    KvDiskTier tier(c);
    for (int b = 0; b < kBlocks; ++b) {
      auto t = tokens_of(b + 1);
      all.insert(all.end(), t.begin(), t.end());
      tier.put(WriteJob{Kind::kKv, 1000u + static_cast<uint64_t>(b), b == 0 ? 0u : 999u + static_cast<uint64_t>(b),
                        tokens_of(b + 1), payload_of(b, 4096)});
    }
    tier.put(WriteJob{Kind::kState, 1000u + kBlocks - 1, 1000u + kBlocks - 2, tokens_of(kBlocks), payload_of(77, 512)});
    tier.drain();
  }
  ReadJob job;
  job.seq_id = 9;
  job.tokens = all;
  for (int b = 0; b < kBlocks; ++b) {
    job.items.push_back({Kind::kKv, b, 1000u + static_cast<uint64_t>(b), b == 0 ? 0u : 999u + static_cast<uint64_t>(b)});
  }
  job.items.push_back({Kind::kState, kBlocks - 1, 1000u + kBlocks - 1, 1000u + kBlocks - 2});
  auto read_pieces = [&](KvDiskTier& tier) {
    tier.read(job);
    std::vector<ReadResult> pieces;
    for (int i = 0; i < 4000 && (pieces.empty() || !pieces.back().last); ++i) {
      std::vector<ReadResult> done = tier.take_done();
      for (ReadResult& r : done) pieces.push_back(std::move(r));
      if (done.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return pieces;
  };
  {
    KvDiskTier tier(c);
    std::vector<ReadResult> pieces = read_pieces(tier);
    ASSERT_FALSE(pieces.empty());
    // One thread reads in order: a piece each time five files are read. Several finish in
    // any order, so a piece may hold more (at least one comes, the last).
    if (threads == 1) EXPECT_GT(pieces.size(), 3u);
    int next_block = 0;
    bool state_seen = false;
    for (size_t p = 0; p < pieces.size(); ++p) {
      EXPECT_EQ(pieces[p].last, p + 1 == pieces.size());
      EXPECT_EQ(pieces[p].seq_id, 9u);
      EXPECT_EQ(pieces[p].tokens(), all);
      for (size_t i = 0; i < pieces[p].items.size(); ++i) {
        const ReadItem& it = pieces[p].items[i];
        const std::vector<uint8_t> got(pieces[p].payload(i).begin(), pieces[p].payload(i).end());
        if (it.kind == Kind::kState) {
          EXPECT_EQ(p + 1, pieces.size());
          EXPECT_EQ(got, payload_of(77, 512));
          state_seen = true;
          continue;
        }
        EXPECT_EQ(it.block, next_block);
        EXPECT_EQ(got, payload_of(next_block, 4096));
        ++next_block;
      }
    }
    EXPECT_EQ(next_block, kBlocks);
    EXPECT_TRUE(state_seen);
    EXPECT_EQ(tier.stats().reads, 1u);
    EXPECT_EQ(tier.stats().files_read, static_cast<uint64_t>(kBlocks + 1));
  }
  // Block 40 damaged: blocks 0-39 and the state come back, nothing after 39.
  const fs::path folder = dir.path() / hex64(0xfeed);
  auto bytes = read_all(folder / file_name(1040, Kind::kKv));
  bytes[bytes.size() / 2] ^= 4;
  write_all(folder / file_name(1040, Kind::kKv), bytes);
  KvDiskTier tier(c);
  std::vector<ReadResult> pieces = read_pieces(tier);
  ASSERT_FALSE(pieces.empty());
  EXPECT_TRUE(pieces.back().last);
  int n_kv = 0, n_state = 0, max_block = -1;
  for (const ReadResult& r : pieces) {
    for (const ReadItem& it : r.items) {
      if (it.kind == Kind::kKv) {
        ++n_kv;
        max_block = std::max(max_block, it.block);
      } else {
        ++n_state;
      }
    }
  }
  EXPECT_EQ(n_kv, 40);
  EXPECT_EQ(max_block, 39);
  EXPECT_EQ(n_state, 1);
  EXPECT_EQ(tier.stats().files_rejected, 1u);
  EXPECT_EQ(pieces.back().threads, threads);
  EXPECT_EQ(pieces.back().mapped, map_files);
  EXPECT_FALSE(fs::exists(folder / file_name(1040, Kind::kKv)));
  // Torn (cut short): refused and removed the same way, read or mapped.
  auto b20 = read_all(folder / file_name(1020, Kind::kKv));
  write_all(folder / file_name(1020, Kind::kKv), std::vector<uint8_t>(b20.begin(), b20.begin() + 3000));
  pieces = read_pieces(tier);
  n_kv = 0;
  for (const ReadResult& r : pieces) {
    for (const ReadItem& it : r.items) n_kv += it.kind == Kind::kKv;
  }
  EXPECT_EQ(n_kv, 20);
  EXPECT_EQ(tier.stats().files_rejected, 2u);
  EXPECT_FALSE(fs::exists(folder / file_name(1020, Kind::kKv)));
}

TEST(KvDiskTier, ALargeReadComesBackInOrderedPiecesAndStopsAtADamagedBlock) {
  pieces_case(false, 1);
  pieces_case(false, 3);
}
TEST(KvDiskTier, MappedFilesComeBackLikeReadOnes) {
  pieces_case(true, 1);
  pieces_case(true, 3);
}

TEST(KvDiskTier, TheBudgetRemovesTheLeastRecentlyUsedFiles) {
  TempDir dir;
  const uint64_t file = payload_offset(16) + 4096;
  KvDiskTier tier(config_in(dir.path(), 3 * file));
  for (uint64_t h = 1; h <= 5; ++h) {
    tier.put(WriteJob{Kind::kKv, h, 0, tokens_of(static_cast<int32_t>(h)), payload_of(static_cast<int32_t>(h), 4096)});
    tier.drain();
  }
  const DiskStats s = tier.stats();
  EXPECT_EQ(s.kv_files, 3u);
  EXPECT_EQ(s.bytes_on_disk, 3 * file);
  const fs::path folder = dir.path() / hex64(0xfeed);
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(folder)) n += e.path().extension() == ".kv";
  EXPECT_EQ(n, 3u);
  EXPECT_FALSE(fs::exists(folder / file_name(1, Kind::kKv)));
  EXPECT_FALSE(fs::exists(folder / file_name(2, Kind::kKv)));
  EXPECT_TRUE(fs::exists(folder / file_name(5, Kind::kKv)));
}

TEST(KvDiskTier, AFullQueueDropsWritesAndAnUnwritableFolderDisablesTheTier) {
  TempDir dir;
  DiskConfig c = config_in(dir.path());
  c.queue_bytes = 4096;  // one block at a time
  KvDiskTier tier(c);
  // The folder turns into something no file can be made in.
  const fs::path folder = dir.path() / hex64(0xfeed);
  fs::remove_all(folder);
  write_all(folder, {1, 2, 3});
  int queued = 0;
  for (uint64_t h = 1; h <= 50; ++h) queued += tier.offer(WriteJob{Kind::kKv, h, 0, tokens_of(1), payload_of(1, 4096)});
  tier.drain();
  const DiskStats s = tier.stats();
  EXPECT_TRUE(s.disabled);
  EXPECT_FALSE(tier.enabled());
  EXPECT_EQ(s.files_written, 0u);
  // With room for one block in the queue, most of the 50 were dropped at the door or when
  // the tier turned off.
  EXPECT_LT(queued, 50);
  EXPECT_GT(s.writes_dropped, 0u);
  EXPECT_FALSE(tier.offer(WriteJob{Kind::kKv, 99, 0, tokens_of(1), payload_of(1, 16)}));
}

// Swap files of preempted sequences (kv_disk_swap.cpp): written by the writer, read back
// bit for bit by the reader and removed; private (outside the index, in this process's
// own folder); a corrupt file or one of other tokens is refused; a dead process's folder
// is removed at start, this one's at the end.
SwapResult swap_result(KvDiskTier& tier) {
  for (int i = 0; i < 2000; ++i) {
    std::vector<SwapResult> done = tier.take_swap_done();
    if (!done.empty()) {
      EXPECT_EQ(done.size(), 1u);
      return std::move(done[0]);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ADD_FAILURE() << "no swap result";
  return {};
}

TEST(KvDiskSwap, SwapFilesRoundTripStayPrivateAndBadOnesAreRefused) {
  TempDir dir;
  const fs::path folder = dir.path() / hex64(0xfeed);
  // A crashed run's leftovers (no process has this id: above any pid_max).
  fs::create_directories(folder / "swap-999999999");
  write_all(folder / "swap-999999999" / file_name(1, Kind::kSwap), {1, 2, 3});
  // And one of a process that runs (this one, under another tier's number): kept.
  fs::create_directories(folder / ("swap-" + std::to_string(::getpid()) + "-999"));
  fs::path mine;
  {
    KvDiskTier tier(config_in(dir.path()));
    EXPECT_FALSE(fs::exists(folder / "swap-999999999"));
    EXPECT_TRUE(fs::exists(folder / ("swap-" + std::to_string(::getpid()) + "-999")));
    mine = tier.swap_folder();
    EXPECT_EQ(mine.parent_path(), folder);
    EXPECT_EQ(mine.filename().string().rfind("swap-" + std::to_string(::getpid()) + "-", 0), 0u);
    // A second tier on the same folder (another engine of the same model) has its own.
    {
      KvDiskTier other(config_in(dir.path()));
      EXPECT_NE(other.swap_folder(), tier.swap_folder());
    }
    EXPECT_TRUE(fs::exists(mine));
    const auto toks = tokens_of(7, 40);
    const auto pay = payload_of(3, 10000);
    EXPECT_EQ(tier.read_bytes_per_s(), 0.0);
    ASSERT_TRUE(tier.swap_write(42, toks, pay));
    SwapResult w = swap_result(tier);
    EXPECT_TRUE(w.ok) << w.why;
    EXPECT_FALSE(w.read);
    EXPECT_EQ(w.id, 42u);
    EXPECT_EQ(w.bytes, payload_offset(40) + pay.size());
    EXPECT_TRUE(fs::exists(tier.swap_path(42)));
    // Not a prefix file: not in the index, not in the counts.
    EXPECT_FALSE(tier.on_disk({42, Kind::kKv}));
    EXPECT_EQ(tier.stats().kv_files + tier.stats().state_files + tier.stats().bytes_on_disk, 0u);
    tier.swap_read(42, toks, pay.size());
    SwapResult r = swap_result(tier);
    ASSERT_TRUE(r.ok) << r.why;
    EXPECT_TRUE(r.read);
    EXPECT_EQ(r.payload, pay);
    EXPECT_FALSE(fs::exists(tier.swap_path(42)));  // read: removed
    EXPECT_GT(tier.read_bytes_per_s(), 0.0);

    // Corrupt after it was written: refused, removed.
    ASSERT_TRUE(tier.swap_write(43, toks, pay));
    ASSERT_TRUE(swap_result(tier).ok);
    auto bytes = read_all(tier.swap_path(43));
    bytes[bytes.size() / 2] ^= 0x40;
    write_all(tier.swap_path(43), bytes);
    tier.swap_read(43, toks, pay.size());
    r = swap_result(tier);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.why.find("checksum mismatch (corrupt)"), std::string::npos) << r.why;
    EXPECT_FALSE(fs::exists(tier.swap_path(43)));
    EXPECT_EQ(tier.stats().files_rejected, 1u);
    // Torn, and asked for with other tokens.
    ASSERT_TRUE(tier.swap_write(44, toks, pay));
    ASSERT_TRUE(swap_result(tier).ok);
    tier.swap_read(44, tokens_of(8, 40), pay.size());
    r = swap_result(tier);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.why.find("tokens differ"), std::string::npos) << r.why;
    ASSERT_TRUE(tier.swap_write(45, toks, pay));
    ASSERT_TRUE(swap_result(tier).ok);
    bytes = read_all(tier.swap_path(45));
    bytes.resize(bytes.size() - 100);
    write_all(tier.swap_path(45), bytes);
    tier.swap_read(45, toks, pay.size());
    r = swap_result(tier);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.why.find("torn"), std::string::npos) << r.why;
    // Gone (removed by hand): a miss, the tier stays on.
    tier.swap_read(46, toks, pay.size());
    r = swap_result(tier);
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(tier.enabled());
    // Dropped once written: the writer removes it.
    ASSERT_TRUE(tier.swap_write(47, toks, pay));
    ASSERT_TRUE(swap_result(tier).ok);
    tier.swap_remove(47);
    tier.drain();
    EXPECT_FALSE(fs::exists(tier.swap_path(47)));
    EXPECT_FALSE(tier.stats().disabled);
    // A leftover of this run stays until the end.
    ASSERT_TRUE(tier.swap_write(48, toks, pay));
    ASSERT_TRUE(swap_result(tier).ok);
  }
  EXPECT_FALSE(fs::exists(mine));  // this run's swap files end with it
}

TEST(KvDiskSwap, AFailedSwapWriteIsReportedAndDisablesTheTier) {
  TempDir dir;
  KvDiskTier tier(config_in(dir.path()));
  // The swap folder turns into something no file can be made in.
  fs::remove_all(tier.swap_folder());
  write_all(tier.swap_folder(), {1, 2, 3});
  ASSERT_TRUE(tier.swap_write(7, tokens_of(1, 16), payload_of(1, 100)));
  const SwapResult w = swap_result(tier);
  EXPECT_FALSE(w.ok);
  EXPECT_EQ(w.id, 7u);
  EXPECT_NE(w.why.find("cannot write"), std::string::npos) << w.why;
  EXPECT_FALSE(tier.enabled());
  EXPECT_FALSE(tier.swap_room(1));
  EXPECT_FALSE(tier.swap_write(8, tokens_of(1, 16), payload_of(1, 100)));  // refused: no result to come
  // A read of a disabled tier fails too (the engine then recomputes).
  tier.swap_read(7, tokens_of(1, 16), 100);
  EXPECT_FALSE(swap_result(tier).ok);
  fs::remove(tier.swap_folder());
}

// The memory tier's side: an evicted block and a spilled snapshot are reported with what
// the disk needs (hash, parent, tokens, slot); probe_prefix finds without taking.
TEST(KvDiskSpill, EvictionsAndSpilledSnapshotsAreRecordedWhenOn) {
  BlockManager bm(2, 4);
  bm.set_spill(true);
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const BlockId a = bm.allocate(), b = bm.allocate();
  const uint64_t ha = bm.commit_full(a, 0, std::span(toks).first(4));
  const uint64_t hb = bm.commit_full(b, ha, std::span(toks).subspan(4, 4));
  bm.attach_snapshot(b, 7);
  PrefixProbe p = bm.probe_prefix(toks, 2);
  EXPECT_EQ(p.n_matched, 2);
  ASSERT_EQ(p.hashes.size(), 2u);
  EXPECT_EQ(p.hashes[1], hb);
  EXPECT_EQ(p.snapshots[1], 7);
  EXPECT_EQ(bm.n_used(), 2);  // nothing retained
  bm.detach_snapshot(b, true);
  bm.attach_snapshot(b, 8);
  bm.release(b);
  bm.release(a);
  std::vector<Spill> s = bm.take_spills();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_FALSE(s[0].kv);
  EXPECT_EQ(s[0].snapshot, 7);
  EXPECT_EQ(s[0].hash, hb);
  EXPECT_EQ(bm.cached_lru(), (std::vector<BlockId>{b, a}));
  // b is the least recently used: evicted first, with its KV and its snapshot slot.
  EXPECT_EQ(bm.allocate(), b);
  s = bm.take_spills();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_TRUE(s[0].kv);
  EXPECT_EQ(s[0].block, b);
  EXPECT_EQ(s[0].parent_hash, ha);
  EXPECT_EQ(s[0].tokens, std::vector<int32_t>(toks.begin() + 4, toks.begin() + 8));
  EXPECT_EQ(s[0].snapshot, 8);
  bm.set_spill(false);
  EXPECT_EQ(bm.allocate(), a);
  EXPECT_TRUE(bm.take_spills().empty());
  bm.check_invariants();
}

}  // namespace
}  // namespace hearth::engine::kvdisk
