// The engine of `hearth serve`: one thread runs the step loop over the scheduler
// (continuous batching on a paged KV cache), samples each sequence, and streams
// deltas to the requests' channels. HTTP threads only call submit() and stats();
// everything else belongs to the engine thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "engine/block_manager.h"
#include "engine/fault_inject.h"
#include "engine/kv_disk.h"
#include "engine/mask_worker.h"
#include "engine/model_drafter.h"
#include "engine/ngram_drafter.h"
#include "engine/spec_policy.h"
#include "grammar/constraint.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "model/kv_cache.h"
#include "model/causal_lm.h"
#include "model/vision_encoder.h"
#include "tokenizer/tokenizer.h"

namespace hearth::engine {

struct EngineConfig {
  int64_t n_ctx = 4096;           // longest sequence (prompt + completion)
  int64_t n_blocks = 0;           // KV pool size in blocks (the hard memory budget)
  int64_t block_size = 16;
  ops::KvType kv_type = ops::KvType::F16;
  int32_t max_seqs = 8;
  int32_t prefill_chunk = 512;
  int32_t max_queue = 64;         // requests waiting beyond max_seqs
  // Hybrid (recurrent) models: slots of recurrent-state snapshots kept for prefix
  // reuse (each the size of one sequence's state), and the prompt interval at which
  // long prompts get one besides message boundaries.
  int32_t n_snapshots = 32;
  int32_t snapshot_every = 2048;
  bool commit_kv = false;         // touch the whole KV pool at construction (--kv-commit)
  // Test only (--test-fault-inject): faults injected into requests chosen by a prompt marker.
  std::vector<FaultRule> faults;
  // The KV disk tier (--kv-disk DIR, --kv-disk-bytes): off when kv_disk_dir is empty.
  // The model's identity (kvdisk::model_identity of its file and of its vision tower's,
  // 0 for none) goes into the files' fingerprint with the KV type and block size.
  std::string kv_disk_dir;
  uint64_t kv_disk_bytes = 0;
  uint64_t kv_disk_model = 0;
  uint64_t kv_disk_projector = 0;
  std::string kv_disk_model_name;  // for the folder's ABOUT file and the log
  // Host swap space of preempted sequences (--kv-swap-bytes; 0: off, every preempted
  // sequence is recomputed). See serve_engine_swap.cpp.
  uint64_t kv_swap_bytes = 0;
  // Disk space of preempted sequences that the host swap space cannot hold (needs
  // kv_disk_dir; 0: off). A share of kv_disk_bytes: the prefix files get the rest. See
  // serve_engine_swap_disk.cpp.
  uint64_t kv_swap_disk_bytes = 0;
  // Speculative decoding (--spec, --spec-max; serve_engine_spec.cpp): off by default.
  SpecOptions spec;
};

// Hooks for metrics, called on the engine thread (the token hooks also on its sampling threads).
class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void on_step(int32_t n_seqs, int32_t n_tokens, double seconds) = 0;
  // These two may be called from several sampling threads at once (a step's rows are
  // finished in parallel).
  virtual void on_first_token(double ttft_seconds) = 0;
  virtual void on_token_interval(double seconds) = 0;
  virtual void on_finish(const Final& f) = 0;
  // KV disk tier: a read job (the disk blocks of one admitted request) took `seconds`.
  virtual void on_disk_read(double seconds) { (void)seconds; }
};

// Preemption by swapping (serve_engine_swap.cpp): what was decided and copied.
struct SwapStats {
  uint64_t swapped_out = 0;        // preempted sequences whose KV went to the swap space
  uint64_t swapped_in = 0;         // ... and came back (no recomputation)
  uint64_t bytes_out = 0, bytes_in = 0;
  uint64_t recomputed = 0;         // preempted sequences left to recompute (any reason)
  uint64_t recompute_no_room = 0;  // of those: the swap space was full (or off)
  uint64_t recompute_cheaper = 0;  // of those: recomputing was estimated cheaper than copying
  uint64_t bytes_held = 0;         // in the swap space now (reserved included)
  uint64_t capacity = 0;           // --kv-swap-bytes
  double seconds = 0;              // copying out and in, in total
  // The estimates the decision uses: copy bandwidth (bytes/s, out or in) and prefill speed
  // (tokens/s), both measured (0: not yet).
  double copy_bytes_per_s = 0, prefill_tokens_per_s = 0;
  // The disk level (kv_swap_disk_bytes): preempted sequences that did not fit the host
  // swap space, swapped to the KV disk tier's folder. disk_out and disk_in are part of
  // swapped_out and swapped_in; disk_fallbacks are disk swaps that ended recomputed (a
  // failed write or read, a corrupt file), counted in recomputed too.
  uint64_t disk_out = 0, disk_in = 0;
  uint64_t disk_bytes_out = 0, disk_bytes_in = 0;  // swap files' bytes written, read back
  uint64_t disk_fallbacks = 0;
  uint64_t disk_bytes_held = 0;    // reserved on disk now
  uint64_t disk_capacity = 0;      // kv_swap_disk_bytes (0: no disk level)
  double disk_read_bytes_per_s = 0;  // the tier's measured read throughput the decision uses
  // Adds another engine's counters (the estimates are not added: the largest is kept).
  void add(const SwapStats& o);
};

// The swap decision's cost model: copying `bytes` out and back in at copy_bytes_per_s
// against prefilling n_tokens again at prefill_tokens_per_s. An unmeasured bandwidth (0)
// counts as free, an unmeasured prefill speed as infinitely slow.
bool swap_is_cheaper(uint64_t bytes, int64_t n_tokens, double copy_bytes_per_s, double prefill_tokens_per_s);
// The same for a swap to disk: the copies out and in, plus reading the file back at
// read_bytes_per_s while the sequence waits (the write is the tier's writer thread's: no
// step waits for it). Unmeasured speeds count as above (a read not yet measured: free).
bool disk_swap_is_cheaper(uint64_t bytes, int64_t n_tokens, double copy_bytes_per_s, double read_bytes_per_s,
                          double prefill_tokens_per_s);

// Where the engine thread's steps spend their time: running totals over every step that
// ran a forward pass, in seconds. `forward` is the model's step (forward_batch: what
// bench_step times, its launches and the wait for its picks on a GPU); everything else is
// host work of the engine thread that serializes with it (the device idles meanwhile).
// Cheap: a few clock reads per step. /metrics: hearth_engine_step_seconds_total{phase}.
struct StepTimes {
  uint64_t steps = 0, rows = 0, tokens = 0;  // steps, sampled rows, tokens through the model
  double forward = 0;  // forward_batch
  double between = 0;  // the loop's turn before the step: new requests, images, disk, swaps, cancellations
  double plan = 0;     // drafts, the scheduler's plan, swap and spill copies
  double prepare = 0;  // first admissions, the step's batch (rows, draws, penalties), masks, state copies
  double sample = 0;   // masks' wait, commit (block hashes), the rows' picks (and finishing: parallel_finish)
  double stream = 0;   // tokens accepted, detokenized, stop strings, deltas pushed to the requests
  double finish = 0;   // ended requests (their Final), the counts /metrics reads, observers
  // Of those, the decode steps (every row a sampled token's, no prompt chunk): the steps
  // bench_step's figure compares with (rows per step = its --batch).
  uint64_t decode_steps = 0, decode_rows = 0;
  double decode_forward = 0, decode_host = 0;
  double host() const { return between + plan + prepare + sample + stream + finish; }
  void add(const StepTimes& o);
};

struct EngineStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t kv_blocks_used = 0;
  int32_t kv_blocks_total = 0;
  int32_t state_snapshots = 0;  // hybrid models: recurrent-state snapshots held
  uint64_t prefix_query_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t steps = 0;
  uint64_t admitted = 0;          // requests accepted by submit() (each ends with one Final)
  uint64_t preemptions = 0;       // sequences sent back to the queue for want of KV blocks
  uint64_t spec_drafted = 0;      // speculative decoding: tokens drafted and verified
  uint64_t spec_accepted = 0;     // ... of which accepted
  int32_t kv_blocks_cached = 0;   // blocks held by no sequence, kept for prefix reuse
  bool running_loop = false;
  bool kv_disk = false;           // the KV disk tier is configured (kv_disk_stats holds its numbers)
  kvdisk::DiskStats kv_disk_stats;
  SwapStats kv_swap;
  StepTimes step_times;
  std::string failure;            // why the engine stopped on its own (an engine fault), else empty
};

class ServeEngine {
 public:
  ServeEngine(model::CausalLm& model, const tokenizer::Tokenizer& tok, EngineConfig config,
              EngineObserver* observer = nullptr);
  ~ServeEngine();
  ServeEngine(const ServeEngine&) = delete;
  ServeEngine& operator=(const ServeEngine&) = delete;

  // The model's vision encoder (nullptr: text only), set before start(). Requests with
  // images are encoded with it on the engine thread when they are admitted.
  void set_vision(model::VisionEncoder* vision) { vision_ = vision; }
  model::VisionEncoder* vision() const { return vision_; }

  void start();
  // Stops the loop; every request still queued or running ends with Final
  // "cancelled" and the error "the server is shutting down".
  void stop();

  enum class Admit { kOk, kQueueFull, kTooLong, kStopped };
  // Queues a request. kTooLong: prompt + max_tokens can never fit (context or KV
  // budget); kQueueFull: too many waiting; kStopped: the engine has stopped (shutting
  // down, or failed: stats().failure says why). Thread-safe.
  Admit submit(GenRequest request, std::shared_ptr<RequestChannel> channel);

  // Most tokens (prompt + completion) one sequence can ever hold: min(n_ctx, KV pool).
  int64_t max_sequence_tokens() const { return max_seq_tokens_; }
  int64_t n_ctx() const { return config_.n_ctx; }
  const EngineConfig& config() const { return config_; }
  EngineStats stats() const;

  // Compiles a constraint for GenRequest::constraint against the model's vocabulary
  // (cached by spec). Thread-safe; call it on the HTTP thread before submit(). Throws
  // Error (kInvalidInput / kUnsupported) naming what is wrong with the spec.
  std::shared_ptr<const grammar::Constraint> compile_constraint(const grammar::ConstraintSpec& spec);

 private:
  struct Live;  // engine-side state of one sequence (sampler, decoder, channel, timings)
  void loop();
  void take_incoming();
  // Makes the engine-side state of one incoming request and queues its sequence; throws
  // (leaving nothing behind) when that fails.
  void admit_one(GenRequest req, const std::shared_ptr<RequestChannel>& ch);
  // Queues an admitted sequence (its disk reads planned); leaves nothing behind when it throws.
  void queue_seq(std::unique_ptr<SeqSlot> seq, std::unique_ptr<Live> live);
  // Requests with images are encoded before they are queued, in arrival order, between
  // steps (encode_slice): with sequences running, each turn runs the front request's next
  // vision blocks for about as long as the last step took (at least one block), so the
  // running sequences keep at least half their speed however large the image; with
  // nothing running, the whole encoding at once. A failed or cancelled encoding ends its
  // request alone.
  struct Encoding;
  void encode_slice();
  void drop_cancelled();
  void step();
  enum class RowEnd { kNone, kStop, kLength, kError };
  // A sequence's next token from its logits row, in two halves. A fault of the sequence
  // (non-finite logits, a throwing sampler or stop matcher) ends only that sequence.
  // pick_row checks, masks and samples the row (touching only that sequence's state, so
  // the rows of a step run on several threads); it sets `token`, or `error`, and never
  // throws. finish_row accepts the token, streams it and says whether the sequence ends;
  // it throws or returns kError with `error` set. It too touches only that sequence's
  // state (and the observer's token hooks), so with engine.parallel_finish on (the default
  // where the back-end reduces rows on a device) rows without a verified draft or a
  // constraint run it in their pick's pass; the others run it on the engine thread, in
  // row order, and the sequences that end are ended in row order there.
  struct RowPick {
    int32_t token = -1;
    std::string error;
    bool finished = false;  // finish_row ran in the pick's pass (then `end`, or `error` with kError)
    RowEnd end = RowEnd::kNone;
  };
  // am: the row reduced on the device (the sequence is greedy, or draw_u >= 0: a
  // temperature draw over the whole row with that uniform number, and nothing else reads
  // its logits; lg is then not written unless the back-end left the draw to the host),
  // else null. draw_u >= 0: the uniform number taken for this row's draw.
  void pick_row(SeqSlot& seq, Live& live, std::span<float> lg, const ops::ArgmaxRow* am, double draw_u, RowPick& pick);
  RowEnd finish_row(SeqSlot& seq, Live& live, int32_t next, std::string& error);
  void end(uint64_t id, const std::string& reason, const std::string& error = "");
  // Copies the scheduler's and block manager's counts into stats_ (mu_ held).
  void publish_counts();
  // Ends every queued and running request with `error` (finish reason `reason`:
  // "cancelled" when shutting down, "error" after an engine fault).
  void fail_all(const std::string& error, const std::string& reason = "cancelled");
  // Ends a request that never became a sequence (its engine-side setup failed).
  void reject(std::shared_ptr<RequestChannel> channel, int32_t n_prompt, const std::string& error);
  static bool recurrent(const model::CausalLm& model);
  void apply(const std::vector<StateOp>& ops);  // recurrent-state clears and copies

  // The KV disk tier (serve_engine_disk.cpp), all on the engine thread.
  void disk_init();
  // Copies what left the memory tier (BlockManager::take_spills) to the host and queues
  // its writes; runs before anything can write over those pool blocks and slots.
  void spill_pending();
  // Plans the disk reads of a new sequence's prefix (gating it until they are back).
  void disk_prefetch(SeqSlot& seq);
  // Puts the blocks and snapshots read back into the pool (as cached prefix blocks) and
  // lets their sequences be admitted.
  void disk_install();
  // At shutdown: every prefix block and snapshot still in memory goes to disk too.
  void disk_flush();
  // The layout block copies use (disk_part_bytes_, disk_layer_floats_); false when a
  // block is not whole floats per layer (then neither the disk tier nor swapping works).
  bool init_block_copy();
  void read_block(BlockId b, std::vector<uint8_t>& out);
  void read_block_to(BlockId b, uint8_t* dst);          // block_bytes_ bytes
  void write_block_from(BlockId b, const uint8_t* src);
  // Many blocks in one batch of copies (Backend::copy_ranges_*): block ids[i] to / from
  // block_bytes_ bytes at host[i].
  void read_blocks_to(const BlockId* ids, int64_t n_ids, uint8_t* const* host);
  void write_blocks_from(const BlockId* ids, int64_t n_ids, uint8_t* const* host);
  // The ranges of those copies (a block: each layer's K part, then its V part).
  void block_ranges(const BlockId* ids, int64_t n_ids, uint8_t* const* host, std::vector<ops::HostRange>& out);
  std::vector<std::unique_ptr<ops::Buffer>> views_;  // block_ranges' windows on the pool's layers
  uint64_t block_bytes_ = 0;  // one block of every layer's K and V (0: not set up)
  void read_state(int32_t slot, std::vector<uint8_t>& out);
  void write_state(int32_t slot, std::span<const uint8_t> in);

  // Block copies beside the steps (serve_engine_copies.cpp). The disk tier's and the
  // swap's block copies are started between steps (Backend::copy_ranges_*_async) and
  // recorded here with the host memory they use and what follows once the back-end says
  // they are done: copies_poll finishes them in order, each turn of the loop (waiting for
  // them only when no sequence runs). Until a copy is finished its host memory is left
  // alone and an upload's blocks stay held (never evicted, so never spilled or reused).
  // A disk hit's blocks are registered for prefix reuse at once (its next piece chains to
  // them; its own sequence stays gated until they are in): a step whose sequences hold
  // one of them (another request with that prefix) waits for the upload on the device
  // (copies_fence), never the host. A swapped-in sequence's step does likewise.
  struct PendingCopy {
    enum class Kind { kSpill, kInstall, kSwapOut, kSwapIn } kind = Kind::kSpill;
    ops::Backend::CopyId id = 0;         // 0: none (finished at the next poll)
    std::vector<kvdisk::WriteJob> jobs;  // kSpill: the payloads the download fills, offered when done
    std::vector<BlockId> blocks;         // kInstall: the blocks the upload writes
    std::vector<BlockId> held;           // kInstall: the chain held until done (released last first)
    kvdisk::ReadResult read;             // kInstall: the piece (its payloads are the upload's source)
    std::chrono::steady_clock::time_point t0;  // kInstall: when the piece was taken
    uint64_t seq = 0;                    // kSwapOut / kSwapIn: the sequence
    std::vector<uint8_t> kv;             // kSwapOut: the download's buffer; kSwapIn: the upload's source
    bool to_disk = false;                // kSwapOut: then handed to the tier's writer
    int64_t n_past = 0;                  // kSwapOut
  };
  std::deque<PendingCopy> copies_;
  // Starts copies of blocks ids[i] to / from block_bytes_ bytes at host[i] (their host
  // memory is the copy's until it is finished: keep it in the PendingCopy).
  ops::Backend::CopyId read_blocks_async(const BlockId* ids, int64_t n_ids, uint8_t* const* host);
  ops::Backend::CopyId write_blocks_async(const BlockId* ids, int64_t n_ids, uint8_t* const* host);
  void copies_poll(bool wait);               // finishes the copies done (wait: every one)
  void copies_wait(ops::Backend::CopyId id);  // waits for copy id, finishing those up to it
  void copy_finished(PendingCopy& c);
  void install_finished(PendingCopy& c);     // serve_engine_disk.cpp
  void swap_out_finished(PendingCopy& c);    // serve_engine_swap.cpp
  // The step hook (step(), before the forward pass): a step whose sequences hold blocks
  // of an upload in flight waits for it on the device (Backend::copy_fence).
  void copies_fence(const StepPlan& plan);

  // Speculative decoding (serve_engine_spec.cpp), on the engine thread. spec_draft sets
  // the drafts of the sequences that decode next step (before plan()); spec_verify
  // accepts, after a sequence's first row was finished as usual (finish_row: `first`),
  // its drafted tokens while they equal the target's choice, finishing each row the
  // target gives, and rolls its KV back to what was accepted.
  void spec_init();
  bool spec_eligible(const SeqSlot& seq, const Live& live) const;
  void spec_draft();
  RowEnd spec_verify(SeqSlot& seq, Live& live, int32_t n_draft, size_t row0, int32_t first, RowEnd end,
                     std::string& error);
  // Hybrid models: per-row checkpoints of a verified draft's recurrent state, in state
  // slots of their own after the snapshot slots (max_draft per live slot): the model copies
  // the state after each drafted row's predecessor there (BatchSeq::snaps), and spec_verify
  // copies the one at the last accepted token back into the live slot.
  static int64_t spec_state_slots(model::CausalLm& model, const EngineConfig& config);
  std::vector<model::StateSnap> spec_checkpoints(const SeqSlot& seq, int32_t n_draft) const;
  int32_t spec_slot(int32_t live_slot, int32_t j) const;
  // --spec mtp: the MTP block's rows for every sequence of the last step (the positions
  // whose next token is known, from the hidden states that step kept), with the first
  // draft of those that want k > 0 (want: sequence id -> k), then one pass a further draft.
  void spec_draft_mtp(const std::unordered_map<uint64_t, int64_t>& want);
  struct StepRows {
    int64_t first_pos = 0, first_row = 0;  // its first row's position, and its row in the step
  };
  std::unordered_map<uint64_t, StepRows> step_rows_;  // the last step's sequences
  std::vector<float> mtp_logits_;
  bool spec_on_ = false;
  NgramDrafter drafter_;
  std::unique_ptr<ModelDrafter> model_drafter_;  // --spec draft
  double draft_s_ = 0;  // --spec draft: measured seconds per drafted token (draft_length counts it)
  StepCost spec_cost_{1};
  std::vector<std::vector<int32_t>> spec_in_;  // per step item: its pending token and draft
  uint64_t spec_drafted_ = 0, spec_accepted_ = 0;

  // Swapping preempted sequences (serve_engine_swap.cpp), all on the engine thread.
  void swap_init();
  bool swap_decide(const SeqSlot& seq);  // the scheduler's swap policy
  void swap_out(const StepPlan& plan);   // plan.swap_out to the host (before anything writes the pool)
  void swap_in(const StepPlan& plan);    // plan.swap_in back into the pool
  void swap_drop(uint64_t id);           // a sequence ended: its swapped copy goes
  uint64_t swap_bytes(int64_t n_past) const;
  // Measured speeds: a forward pass of n_tokens took seconds; a copy of bytes took seconds.
  void note_forward(int32_t n_tokens, double seconds);
  void note_copy(uint64_t bytes, double seconds);
  // The disk level (serve_engine_swap_disk.cpp).
  void swap_disk_init();
  enum class DiskSwap { kNoRoom, kRecomputeCheaper, kSwap };
  DiskSwap swap_disk_decide(const SeqSlot& seq, uint64_t bytes, double prefill_tps);  // reserves when kSwap
  bool swap_ready(SeqSlot& seq);  // the scheduler's readiness check
  void swap_disk_out(uint64_t id, std::vector<uint8_t> payload, int64_t n_past);
  void swap_disk_read(uint64_t id);
  void swap_poll();  // the disk level's finished writes and reads (engine loop)
  void swap_fallback(uint64_t id, const std::string& why);  // a disk swap ends recomputed
  struct SwapEntry {
    std::vector<uint8_t> kv;     // its blocks 0 .. in order, block_bytes_ each
    std::vector<uint8_t> state;  // hybrid models: the live state at swap_n_past
    uint64_t bytes = 0;          // reserved (swap_bytes)
    // The disk level: where the copy is (kRam: kv and state hold it); resume: the
    // scheduler wants it back (read it as soon as it is written).
    enum class Stage { kRam, kWriting, kOnDisk, kReading } stage = Stage::kRam;
    bool disk = false;
    bool resume = false;
    int64_t n_past = 0;
    ops::Backend::CopyId pending = 0;  // kRam: the download still filling kv (its PendingCopy holds kv)
  };
  std::unordered_map<uint64_t, SwapEntry> swap_;
  SwapStats swap_stats_;
  double small_step_tps_ = 0;  // tokens/s of steps too small to be prefill (fallback)

  model::CausalLm& model_;
  model::VisionEncoder* vision_ = nullptr;
  const tokenizer::Tokenizer& tok_;
  EngineConfig config_;
  EngineObserver* observer_;
  int64_t max_seq_tokens_;
  std::vector<int32_t> eog_;

  model::KvPool pool_;
  BlockManager blocks_;
  Scheduler scheduler_;
  std::unique_ptr<kvdisk::KvDiskTier> disk_;
  uint64_t disk_part_bytes_ = 0;   // one block of one layer's K (or V) in the pool
  int64_t disk_layer_floats_ = 0;  // one layer's K (or V) buffer, in floats
  bool disk_ready_ = false;        // a read finished (guarded by mu_): wakes the loop
  // A disk hit being put into the pool piece by piece, for its one log line.
  struct DiskHit {
    size_t blocks = 0;
    uint64_t bytes = 0;
    int pieces = 0;
    double install_s = 0;
  };
  std::unordered_map<uint64_t, DiskHit> disk_hits_;
  std::unordered_map<uint64_t, std::unique_ptr<Live>> live_;
  std::list<Encoding> encoding_;  // requests whose images are being encoded
  double step_ms_ = 0;            // the last step's time (the encoder's slice)
  std::vector<float> logits_;
  // Where the steps spend their time (StepTimes, always counted; published in stats_).
  // --tune engine.timing=steps prints the totals per step to stderr when the engine stops;
  // engine.timing=each also prints every step of more than 8 tokens and each request's
  // time to its first token.
  bool timing_on_ = false, timing_each_ = false;
  StepTimes times_;
  std::chrono::steady_clock::time_point turn_start_{};  // this loop turn's start (after any idle wait)
  std::vector<model::BatchSeq> batch_;
  // Threads for the rows of a step that samples many (a 64-stream step of a 248k-token
  // vocabulary scans 64 MB of logits); made on first use.
  std::unique_ptr<ThreadPool> sample_pool_;
  std::vector<RowPick> picks_;
  bool parallel_finish_ = true;  // --tune engine.parallel_finish (see pick_row / finish_row)

  std::once_flag grammar_once_;
  std::unique_ptr<grammar::ConstraintCompiler> grammar_;  // made on first use (vocabulary scan)
  MaskWorker mask_worker_;  // grammar masks of a step, computed during its forward pass
  std::vector<Live*> masked_;  // this step's constrained sequences (engine thread)

  mutable std::mutex mu_;   // guards incoming_, stats_, stop_
  std::condition_variable cv_;
  std::vector<std::pair<GenRequest, std::shared_ptr<RequestChannel>>> incoming_;
  EngineStats stats_;
  bool stop_ = false;
  uint64_t next_id_ = 1;
  std::thread thread_;
};

}  // namespace hearth::engine
