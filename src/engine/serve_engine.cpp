#include "engine/serve_engine.h"


#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>

#include "core/error.h"
#include "core/tune.h"
#include "engine/generator.h"
#include "engine/row_reduce.h"
#include "engine/serve_engine_live.h"
#include "engine/stop_matcher.h"

namespace hearth::engine {
namespace {


using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

std::string request_fault(const std::string& where, const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return "out of memory in " + where;
  return "internal error in " + where + ": " + e.what();
}

struct ServeEngine::Encoding {
  std::unique_ptr<SeqSlot> seq;
  std::unique_ptr<Live> live;
  std::unique_ptr<model::VisionEncoder::Job> job;
};

ServeEngine::ServeEngine(model::CausalLm& model, const tokenizer::Tokenizer& tok, EngineConfig config,
                         EngineObserver* observer)
    : model_(model),
      tok_(tok),
      config_(config),
      observer_(observer),
      max_seq_tokens_(std::min(config.n_ctx, config.n_blocks * config.block_size)),
      eog_(end_of_generation_tokens(tok)),
      pool_(model.backend(), model.hparams(), config.kv_type, config.block_size, config.n_blocks,
            recurrent(model) ? config.max_seqs + config.n_snapshots + spec_state_slots(model, config) : 0),
      blocks_(static_cast<int32_t>(config.n_blocks), static_cast<int32_t>(config.block_size)),
      scheduler_(SchedulerConfig{config.max_seqs, config.prefill_chunk, recurrent(model), config.n_snapshots,
                                 config.snapshot_every},
                 blocks_) {
  stats_.kv_blocks_total = static_cast<int32_t>(config.n_blocks);
  if (config.commit_kv) pool_.commit();
  disk_init();
  swap_init();
  spec_init();
  const int64_t timing = tune::get(tune::kEngineTiming);  // 0 off, 1 steps, 2 each
  timing_on_ = timing >= 1;
  timing_each_ = timing == 2;
  // Rows finished on the sampling threads: where the device runs the step (it reduces rows
  // to their picks), the engine thread's serial finishing is what the device waits for; on
  // the CPU back-end the cores are the forward pass's, and on the 2-core VM spreading the
  // finishing measured neutral to slightly worse (docs/bench/serve-host.md): auto = there only.
  const int64_t pf = tune::get(tune::kEngineParallelFinish);  // 0 auto, 1 off, 2 on
  parallel_finish_ = pf == 2 || (pf == 0 && model.backend().device_argmax());
}

ServeEngine::~ServeEngine() {
  stop();
  try {
    copies_poll(true);  // no block copy may still write into what goes below
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearth: block copies failed at shutdown: %s\n", e.what());
  }
  // The disk tier's reader calls back into this engine (mu_, cv_): its threads end first.
  disk_.reset();
}

bool ServeEngine::recurrent(const model::CausalLm& model) { return model.hparams().n_recurrent_layers() > 0; }

void ServeEngine::apply(const std::vector<StateOp>& ops) {
  for (const StateOp& op : ops) {
    if (op.src < 0) {
      pool_.clear_state(op.dst);
    } else {
      pool_.copy_state(op.src, op.dst);
    }
  }
}

void ServeEngine::start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.running_loop = true;
  }
  thread_ = std::thread([this] { loop(); });
}

void ServeEngine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // What the memory tier holds goes to disk too, so that a restart finds it (not after an
  // engine fault: the pool's contents are suspect then).
  bool failed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed = !stats_.failure.empty();
  }
  if (!failed) {
    try {
      disk_flush();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hearth: kv-disk: the shutdown flush failed: %s\n", e.what());
    }
  }
  if (timing_on_ && times_.steps > 0) {
    const StepTimes& t = times_;
    const double k = 1000.0 / static_cast<double>(t.steps);  // ms per step
    std::fprintf(stderr,
                 "hearth: engine steps: %llu (%llu tokens, %llu sampled rows); per step: forward %.3f ms, host %.3f ms "
                 "(between %.3f, plan %.3f, prepare %.3f, sample %.3f, stream %.3f, finish %.3f); decode steps: %llu, "
                 "%.1f rows, forward %.3f ms, host %.3f ms\n",
                 static_cast<unsigned long long>(t.steps), static_cast<unsigned long long>(t.tokens),
                 static_cast<unsigned long long>(t.rows), t.forward * k, t.host() * k, t.between * k, t.plan * k,
                 t.prepare * k, t.sample * k, t.stream * k, t.finish * k,
                 static_cast<unsigned long long>(t.decode_steps),
                 t.decode_steps ? static_cast<double>(t.decode_rows) / static_cast<double>(t.decode_steps) : 0.0,
                 t.decode_steps ? t.decode_forward * 1000.0 / static_cast<double>(t.decode_steps) : 0.0,
                 t.decode_steps ? t.decode_host * 1000.0 / static_cast<double>(t.decode_steps) : 0.0);
    times_.steps = 0;
  }
  // No engine thread now (never started, or it has ended): end what is still queued,
  // so that no channel waits forever for its Final. (stop() runs in the destructor:
  // nothing may escape.)
  try {
    fail_all("the server is shutting down");
  } catch (const std::exception&) {
  }
}

ServeEngine::Admit ServeEngine::submit(GenRequest request, std::shared_ptr<RequestChannel> channel) {
  const auto total = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (request.prompt.empty() || total > max_seq_tokens_) return Admit::kTooLong;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Admit::kStopped;
    const int64_t queued = static_cast<int64_t>(incoming_.size()) + stats_.waiting;
    const int64_t free_slots = std::max<int64_t>(0, config_.max_seqs - stats_.running);
    if (queued >= config_.max_queue + free_slots) return Admit::kQueueFull;
    incoming_.emplace_back(std::move(request), std::move(channel));
    ++stats_.admitted;
  }
  cv_.notify_all();
  return Admit::kOk;
}

std::shared_ptr<const grammar::Constraint> ServeEngine::compile_constraint(const grammar::ConstraintSpec& spec) {
  std::call_once(grammar_once_, [this] {
    grammar_ = std::make_unique<grammar::ConstraintCompiler>(tok_, static_cast<int32_t>(model_.hparams().n_vocab), eog_);
  });
  return grammar_->compile(spec);
}

EngineStats ServeEngine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = stats_;
  }
  if (disk_) {
    s.kv_disk = true;
    s.kv_disk_stats = disk_->stats();
  }
  return s;
}

void ServeEngine::loop() {
  try {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (stop_) break;
        // Idle: nothing running, and nothing waiting but requests whose disk reads are out.
        const auto& w = scheduler_.waiting();
        if (incoming_.empty() && !disk_ready_ && encoding_.empty() && copies_.empty() && scheduler_.running().empty() &&
            std::all_of(w.begin(), w.end(), [](const auto& s) { return s->gated; })) {
          cv_.wait_for(lock, std::chrono::milliseconds(100));
          if (stop_) break;
        }
      }
      turn_start_ = Clock::now();
      take_incoming();
      encode_slice();
      disk_install();
      copies_poll(scheduler_.running().empty());  // block copies done (waited for when nothing runs)
      swap_poll();
      drop_cancelled();
      const auto t_step = Clock::now();
      step();
      if (!scheduler_.running().empty()) step_ms_ = ms_between(t_step, Clock::now());
    }
    fail_all("the server is shutting down");
  } catch (const std::exception& e) {
    // A failure of the engine itself (not of one request): refuse new requests (no
    // thread is left to serve them) and end every request with it.
    const std::string why = std::string("engine failure: ") + e.what();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      stats_.failure = why;
      stats_.running_loop = false;  // before the requests hear of it: /health already says so
    }
    try {
      fail_all(why, "error");
    } catch (const std::exception&) {
      // Ending the requests failed too: the HTTP side notices the stopped loop and
      // answers its waiting requests itself.
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.running_loop = false;
}

void ServeEngine::take_incoming() {
  std::vector<std::pair<GenRequest, std::shared_ptr<RequestChannel>>> in;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in.swap(incoming_);
  }
  for (auto& [req, ch] : in) {
    const auto n_prompt = static_cast<int32_t>(req.prompt.size());
    try {
      admit_one(std::move(req), ch);
    } catch (const std::exception& e) {
      // Only this request's setup failed (e.g. memory for its grammar mask).
      reject(ch, n_prompt, request_fault("the request's setup", e));
    }
  }
}

void ServeEngine::admit_one(GenRequest req, const std::shared_ptr<RequestChannel>& ch) {
  auto seq = std::make_unique<SeqSlot>();
  seq->id = next_id_++;
  seq->tokens = req.images.empty() ? req.prompt : prompt_key_tokens(req.prompt, req.images);
  seq->n_prompt = static_cast<int32_t>(req.prompt.size());
  if (!req.images.empty() && (vision_ == nullptr || !model_.takes_images()))
    fail(ErrorKind::kInvalidInput, "engine", "this model takes text only (no vision encoder)");
  if (scheduler_.config().recurrent) {
    // Message boundaries for state snapshots: where the chat template's control tokens
    // (turn markers) sit in the prompt.
    const auto& vocab = tok_.vocab();
    for (size_t i = 0; i < req.prompt.size(); ++i) {
      const auto id = static_cast<size_t>(req.prompt[i]);
      if (id < vocab.tokens.size() && (vocab.tokens[id].attr & tokenizer::kAttrControl) != 0) {
        seq->boundaries.push_back(static_cast<int32_t>(i));
      }
    }
  }
  std::optional<FaultRule> fault;
  if (!config_.faults.empty()) fault = match_fault(config_.faults, tok_.decode(req.prompt));
  auto live = std::make_unique<Live>(std::move(req), ch, tok_);
  live->fault = std::move(fault);
  if (!live->request.images.empty()) {
    Encoding e{std::move(seq), std::move(live), nullptr};
    e.job = start_prompt_images(*vision_, e.live->request.images);
    encoding_.push_back(std::move(e));
    return;
  }
  queue_seq(std::move(seq), std::move(live));
}

void ServeEngine::queue_seq(std::unique_ptr<SeqSlot> seq, std::unique_ptr<Live> live) {
  disk_prefetch(*seq);
  const uint64_t id = seq->id;
  live_.emplace(id, std::move(live));
  try {
    scheduler_.add(std::move(seq));
  } catch (...) {
    live_.erase(id);
    throw;
  }
}

void ServeEngine::encode_slice() {
  if (encoding_.empty()) return;
  Encoding& e = encoding_.front();
  Live& live = *e.live;
  const int32_t n_prompt = e.seq->n_prompt;
  if (live.channel->cancelled()) {
    Final f;
    f.finish_reason = "cancelled";
    f.error = "the request was cancelled";
    f.prompt_tokens = n_prompt;
    f.timings.prompt_n = n_prompt;
    f.timings.queue_ms = ms_between(live.channel->created, Clock::now());
    if (observer_ != nullptr) observer_->on_finish(f);
    live.channel->finish(std::move(f));
    encoding_.pop_front();
    return;
  }
  const bool alone = scheduler_.running().empty();
  const auto t0 = Clock::now();
  try {
    bool done = false;
    do {
      done = vision_->advance(*e.job, 1);
    } while (!done && (alone || ms_between(t0, Clock::now()) < step_ms_));
    if (!done) return;
    // The spans point into the embeddings' buffer, which stays in Live unmoved.
    finish_prompt_images(*vision_, *e.job, n_prompt, live.request.images, live.embd, live.media);
  } catch (const std::exception& ex) {
    reject(live.channel, n_prompt, request_fault("the image encoding", ex));
    encoding_.pop_front();
    return;
  }
  Encoding done = std::move(e);
  encoding_.pop_front();
  done.job.reset();  // its device buffers go back before the sequence takes KV blocks
  const std::shared_ptr<RequestChannel> ch = done.live->channel;
  try {
    queue_seq(std::move(done.seq), std::move(done.live));
  } catch (const std::exception& ex) {
    reject(ch, n_prompt, request_fault("the request's setup", ex));
  }
}

void ServeEngine::reject(std::shared_ptr<RequestChannel> channel, int32_t n_prompt, const std::string& error) {
  Final f;
  f.finish_reason = "error";
  f.error = error;
  f.prompt_tokens = n_prompt;
  f.timings.prompt_n = n_prompt;
  f.timings.queue_ms = ms_between(channel->created, Clock::now());
  if (observer_ != nullptr) observer_->on_finish(f);
  channel->finish(std::move(f));
}

void ServeEngine::drop_cancelled() {
  std::vector<uint64_t> gone;
  for (const auto& [id, live] : live_) {
    if (live->channel->cancelled()) gone.push_back(id);
  }
  for (uint64_t id : gone) end(id, "cancelled", "the request was cancelled");
}

void ServeEngine::end(uint64_t id, const std::string& reason, const std::string& error) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& live = *it->second;
  // A failed sequence's blocks are not kept for prefix reuse: what it computed is suspect.
  std::unique_ptr<SeqSlot> seq = scheduler_.finish(id, reason == "error");
  swap_drop(id);
  if (model_drafter_) model_drafter_->forget(id);
  Final f;
  f.finish_reason = reason;
  f.error = error;
  if (reason == "stop" || reason == "length") {
    // The text held back for a possible stop string (or an incomplete character) is sent.
    try {
      if (live.fault_due(FaultKind::kStop)) fail(ErrorKind::kInternal, "stop", "injected stop-matcher fault");
      std::string tail = live.decoder.flush();
      std::string out = live.stop.push(tail);
      if (!live.stop.stopped()) out += live.stop.flush();
      if (!out.empty()) live.channel->push(Delta{std::move(out), {}});
    } catch (const std::exception& e) {
      f.finish_reason = "error";
      f.error = request_fault("the stop-string matcher", e);
    }
  }
  if (f.finish_reason == "stop") f.stop_sequence = live.stop.matched();
  f.prompt_tokens = seq ? seq->n_prompt : static_cast<int32_t>(live.request.prompt.size());
  f.completion_tokens = live.n_generated;
  f.cached_tokens = seq ? seq->n_cached : 0;
  const auto now = Clock::now();
  Timings& t = f.timings;
  t.prompt_n = f.prompt_tokens;
  t.cached_n = f.cached_tokens;
  t.disk_n = seq ? seq->n_disk : 0;
  t.predicted_n = live.n_generated;
  t.drafted_n = live.drafted;
  t.accepted_n = live.accepted;
  if (live.scheduled) {
    t.queue_ms = ms_between(live.channel->created, live.t_scheduled);
    const auto prefill_end = live.n_generated > 0 ? live.t_first : now;
    t.prefill_ms = ms_between(live.t_scheduled, prefill_end);
  } else {
    t.queue_ms = ms_between(live.channel->created, now);
  }
  if (live.n_generated > 0) {
    t.ttft_ms = ms_between(live.channel->created, live.t_first);
    t.decode_ms = ms_between(live.t_first, live.t_last);
  }
  if (observer_ != nullptr) observer_->on_finish(f);
  {
    // The counts /v1/status and /metrics read agree with what the client is about to see
    // (the step's own update comes after its last finished sequence has answered).
    std::lock_guard<std::mutex> lock(mu_);
    publish_counts();
  }
  live.channel->finish(std::move(f));
  live_.erase(it);
}

void ServeEngine::fail_all(const std::string& error, const std::string& reason) {
  take_incoming();
  for (Encoding& e : encoding_) {
    Final f;
    f.finish_reason = reason;
    f.error = error;
    f.prompt_tokens = e.seq->n_prompt;
    f.timings.prompt_n = e.seq->n_prompt;
    f.timings.queue_ms = ms_between(e.live->channel->created, Clock::now());
    if (observer_ != nullptr) observer_->on_finish(f);
    e.live->channel->finish(std::move(f));
  }
  encoding_.clear();
  std::vector<uint64_t> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (uint64_t id : ids) end(id, reason, error);
}

void ServeEngine::step() {
  const auto t_plan = Clock::now();
  spec_draft();
  StepPlan plan = scheduler_.plan();
  swap_out(plan);   // preempted sequences' blocks and states, before anything writes over them
  spill_pending();  // blocks and snapshots the plan evicted, likewise
  swap_in(plan);    // re-admitted swapped sequences, into blocks the two above have read
  copies_fence(plan);  // blocks of disk hits still uploading: this step waits for them on the device
  const auto t0 = Clock::now();
  const auto n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  // A sequence's first scheduling sets up its per-step buffers; a failure there ends
  // that sequence alone (its blocks go back before the forward pass).
  std::vector<std::pair<uint64_t, std::string>> failed;
  for (const StepItem& item : plan.items) {
    Live& live = *live_.at(item.seq->id);
    if (live.scheduled) continue;
    live.scheduled = true;
    live.t_scheduled = t0;
    live.channel->admitted(item.seq->n_cached);
    try {
      if (live.fault && live.fault->kind == FaultKind::kAlloc) throw std::bad_alloc();
      if (live.request.top_logprobs >= 0) live.raw.reserve(n_vocab);
    } catch (const std::exception& e) {
      failed.emplace_back(item.seq->id, request_fault("the request's admission", e));
    }
  }
  if (!failed.empty()) {
    std::erase_if(plan.items, [&](const StepItem& item) {
      return std::any_of(failed.begin(), failed.end(), [&](const auto& f) { return f.first == item.seq->id; });
    });
    for (const auto& [id, why] : failed) end(id, "error", why);
  }
  if (!plan.empty()) {
    batch_.clear();
    spec_in_.resize(plan.items.size());
    for (size_t it = 0; it < plan.items.size(); ++it) {
      const StepItem& item = plan.items[it];
      // Greedy rows that nothing else reads (no log-probabilities, constraint or injected
      // fault) need only their argmax: the back-end may reduce them where the logits are.
      Live& lv = *live_.at(item.seq->id);
      const bool plain = item.logits && lv.request.top_logprobs < 0 && !lv.matcher && !lv.fault;
      const bool argmax = plain && lv.sampler.plain_greedy();
      const int32_t* toks = item.seq->tokens.data() + item.seq->kv.n_past;
      if (item.n_draft > 0) {  // the pending token, then the draft (one row of logits each)
        std::vector<int32_t>& in = spec_in_[it];
        in.assign(1, item.seq->tokens.back());
        in.insert(in.end(), item.seq->draft.begin(), item.seq->draft.begin() + item.n_draft);
        toks = in.data();
      }
      batch_.push_back(model::BatchSeq{&item.seq->kv, toks, item.n_tokens, item.logits, argmax, item.snaps});
      batch_.back().n_logits = 1 + item.n_draft;
      batch_.back().decode_rows = item.n_draft > 0;  // bit for bit the logits of one-token steps
      if (item.n_draft > 0 && item.seq->kv.state_slot >= 0) {
        batch_.back().snaps = spec_checkpoints(*item.seq, item.n_draft);  // the state after each row
      }
      if (!lv.media.pos3.empty()) batch_.back().media = &lv.media;
      // Temperature draws and penalized greedy rows likewise (a draw's one uniform number
      // is taken now; a back-end that does not reduce the row leaves it to the host
      // sampler with it).
      // (Not a verified draft's rows: copied whole, each drawn on the host with a uniform
      // number of its own, serve_engine_spec.cpp.)
      if (plain && !argmax && item.n_draft == 0) {
        model::BatchSeq& b = batch_.back();
        b.draw = offered_row(lv.sampler, item.seq->tokens, b.penalties, !lv.reasoning.would_force());
      }
    }
    // The grammar masks of this step's samples depend only on the tokens accepted so
    // far: computed on the mask worker while the forward pass runs. A mask that fails
    // ends its own sequence only.
    masked_.clear();
    bool engine_fault = false;
    for (const StepItem& item : plan.items) {
      Live& live = *live_.at(item.seq->id);
      if (item.logits && live.matcher) masked_.push_back(&live);
      engine_fault = engine_fault || (live.fault && live.fault->kind == FaultKind::kEngine &&
                                      live.n_generated >= live.fault->at_token);
    }
    if (!masked_.empty()) {
      mask_worker_.start([this] {
        for (Live* live : masked_) {
          try {
            if (live->fault_due(FaultKind::kMask)) fail(ErrorKind::kInternal, "grammar", "injected mask fault");
            live->matcher->fill_mask(live->mask);
          } catch (const std::exception& e) {
            live->mask_error = request_fault("the output constraint's mask", e);
          }
        }
      });
    }
    struct WaitMasks {  // the job reads Live objects: never leave with it still running
      MaskWorker& w;
      ~WaitMasks() {
        try {
          w.wait();
        } catch (...) {
        }
      }
    } wait_masks{mask_worker_};
    apply(plan.state_before);
    if (engine_fault) fail(ErrorKind::kInternal, "forward", "injected engine fault (test only)");
    const auto t_forward = Clock::now();
    if (config_.spec.mode == SpecMode::kMtp) {  // where each sequence's rows are (spec_draft_mtp)
      step_rows_.clear();
      int64_t row = 0;
      for (size_t it = 0; it < plan.items.size(); ++it) {  // (batch_[it] is plan.items[it]'s)
        const model::BatchSeq& b = batch_[it];
        if (b.n_tokens <= 0) continue;
        step_rows_[plan.items[it].seq->id] = StepRows{b.kv->n_past, row};
        row += b.n_tokens;
      }
    }
    model_.forward_batch(pool_, batch_, logits_);
    const auto t_forward_end = Clock::now();
    note_forward(plan.n_tokens(), ms_between(t_forward, t_forward_end) / 1000.0);
    spec_cost_.note(plan.n_tokens(), ms_between(t_forward, t_forward_end) / 1000.0);
    if (!masked_.empty()) mask_worker_.wait();
    const std::vector<StateOp> state_ops = scheduler_.commit(plan);
    spill_pending();  // snapshots whose slots the copies below reuse
    apply(state_ops);
    // The sampled rows, picked in parallel when there are many, then finished in order.
    // row_at: each sampled sequence's first logits row (a verified draft's rows follow it).
    std::vector<std::pair<SeqSlot*, Live*>> rows;
    std::vector<size_t> row_at;
    std::vector<int32_t> row_draft;
    size_t n_out = 0;
    for (const StepItem& item : plan.items) {
      if (!item.logits) continue;
      rows.emplace_back(item.seq, live_.at(item.seq->id).get());
      row_at.push_back(n_out);
      row_draft.push_back(item.n_draft);
      n_out += static_cast<size_t>(1 + item.n_draft);
    }
    picks_.assign(rows.size(), RowPick{});
    const std::vector<ops::ArgmaxRow>& device_picks = model_.picks();
    std::vector<const model::BatchSeq*> row_seq;  // per sampled row, in the order of rows
    for (const model::BatchSeq& b : batch_) {
      if (b.logits) row_seq.push_back(&b);
    }
    auto pick = [&](int64_t r) {
      const auto i = static_cast<size_t>(r);
      const bool aligned = row_seq.size() == rows.size();
      const double draw_u =
          aligned && row_seq[i]->draw.kind == ops::RowKind::kDraw ? row_seq[i]->draw.u : -1.0;
      const bool reduced = aligned && device_picks.size() == n_out &&
                           (row_seq[i]->argmax_only || row_seq[i]->draw.kind != ops::RowKind::kCopy);
      pick_row(*rows[r].first, *rows[r].second,
               std::span<float>(logits_.data() + row_at[i] * n_vocab, n_vocab),
               reduced ? &device_picks[row_at[i]] : nullptr, draw_u, picks_[r]);
    };
    // A row without a verified draft or an output constraint is finished (its token
    // accepted, decoded, matched against the stop strings and pushed to its channel) in
    // the same pass as its pick: it touches that sequence's state alone, so the rows of a
    // step do that work on several threads too instead of one after another on the
    // engine thread (64 streams: 64 detokenizations, stop matchers and wake-ups a step).
    auto pick_finish = [&](int64_t r) {
      pick(r);
      RowPick& p = picks_[static_cast<size_t>(r)];
      Live& live = *rows[static_cast<size_t>(r)].second;
      if (!parallel_finish_ || row_draft[static_cast<size_t>(r)] > 0 || live.matcher || !p.error.empty()) return;
      p.finished = true;
      try {
        p.end = finish_row(*rows[static_cast<size_t>(r)].first, live, p.token, p.error);
      } catch (const std::exception& ex) {
        p.error = request_fault("sampling", ex);
        p.end = RowEnd::kError;
      }
    };
    constexpr size_t kParallelRows = 8;
    if (rows.size() >= kParallelRows && !sample_pool_) {
      sample_pool_ = std::make_unique<ThreadPool>(std::min(8, physical_core_count()));
    }
    if (rows.size() >= kParallelRows && sample_pool_->n_threads() > 1) {
      sample_pool_->parallel_for(static_cast<int64_t>(rows.size()), 1, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r) pick_finish(r);
      });
    } else {
      for (size_t r = 0; r < rows.size(); ++r) pick_finish(static_cast<int64_t>(r));
    }
    const size_t row = rows.size();
    const auto t_picked = Clock::now();
    std::vector<uint64_t> done_stop, done_length;
    std::vector<std::pair<uint64_t, std::string>> done_error;
    for (size_t r = 0; r < rows.size(); ++r) {
      SeqSlot& seq = *rows[r].first;
      Live& live = *rows[r].second;
      std::string error = std::move(picks_[r].error);
      RowEnd e = picks_[r].finished ? picks_[r].end : RowEnd::kError;
      if (error.empty() && !picks_[r].finished) {
        try {
          e = finish_row(seq, live, picks_[r].token, error);
          if (row_draft[r] > 0) e = spec_verify(seq, live, row_draft[r], row_at[r], picks_[r].token, e, error);
        } catch (const std::exception& ex) {
          error = request_fault("sampling", ex);
          e = RowEnd::kError;
        }
      }
      if (e == RowEnd::kStop) done_stop.push_back(seq.id);
      if (e == RowEnd::kLength) done_length.push_back(seq.id);
      if (e == RowEnd::kError) done_error.emplace_back(seq.id, std::move(error));
    }
    const auto t_streamed = Clock::now();
    // The step is counted before its requests end (end() publishes times_ with the counts):
    // a client that reads /metrics after its last Final sees this step. Its finish phase
    // (below) is published with the next counts.
    StepTimes& t = times_;
    const bool decode_step = static_cast<size_t>(plan.n_tokens()) == n_out;  // one token per sampled row
    ++t.steps;
    t.rows += row;
    t.tokens += static_cast<uint64_t>(plan.n_tokens());
    const double host_s = (ms_between(turn_start_, t_forward) + ms_between(t_forward_end, t_streamed)) / 1000.0;
    t.between += ms_between(turn_start_, t_plan) / 1000.0;
    t.plan += ms_between(t_plan, t0) / 1000.0;
    t.prepare += ms_between(t0, t_forward) / 1000.0;
    t.forward += ms_between(t_forward, t_forward_end) / 1000.0;
    t.sample += ms_between(t_forward_end, t_picked) / 1000.0;  // the grammar masks' wait too
    t.stream += ms_between(t_picked, t_streamed) / 1000.0;
    if (decode_step) {
      ++t.decode_steps;
      t.decode_rows += n_out;
      t.decode_forward += ms_between(t_forward, t_forward_end) / 1000.0;
      t.decode_host += host_s;
    }
    if (timing_each_ && plan.n_tokens() > 8) {
      std::fprintf(stderr,
                   "hearth: step of %zu sequences, %d tokens: between %.3f ms, plan %.3f ms, prepare %.3f ms, forward "
                   "%.3f ms, sample %.3f ms, stream %.3f ms\n",
                   plan.items.size(), plan.n_tokens(), ms_between(turn_start_, t_plan), ms_between(t_plan, t0),
                   ms_between(t0, t_forward), ms_between(t_forward, t_forward_end), ms_between(t_forward_end, t_picked),
                   ms_between(t_picked, t_streamed));
    }
    for (uint64_t id : done_stop) end(id, "stop");
    for (uint64_t id : done_length) end(id, "length");
    for (const auto& [id, why] : done_error) end(id, "error", why);
    if (observer_ != nullptr) {
      observer_->on_step(static_cast<int32_t>(plan.items.size()), plan.n_tokens(),
                         ms_between(t0, Clock::now()) / 1000.0);
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_.preemptions += plan.preempted.size();
    ++stats_.steps;
    // The finish phase runs to here: ended requests, observers, this lock.
    const double finish_s = ms_between(t_streamed, Clock::now()) / 1000.0;
    t.finish += finish_s;
    if (decode_step) t.decode_host += finish_s;
    publish_counts();
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.preemptions += plan.preempted.size();
  publish_counts();
}

void ServeEngine::publish_counts() {
  stats_.running = static_cast<int32_t>(scheduler_.running().size());
  stats_.waiting = static_cast<int32_t>(scheduler_.waiting().size() + encoding_.size());
  stats_.kv_blocks_used = blocks_.n_used();
  stats_.kv_blocks_cached = blocks_.n_cached();
  stats_.state_snapshots = scheduler_.n_snapshots_held();
  stats_.prefix_query_tokens = blocks_.prefix_query_tokens();
  stats_.prefix_hit_tokens = blocks_.prefix_hit_tokens();
  stats_.kv_swap = swap_stats_;
  stats_.step_times = times_;
  stats_.spec_drafted = spec_drafted_;
  stats_.spec_accepted = spec_accepted_;
  stats_.kv_swap.recomputed = stats_.preemptions - swap_stats_.swapped_out + swap_stats_.disk_fallbacks;
}

}  // namespace hearth::engine
