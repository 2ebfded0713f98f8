// The model factory of `hearth serve`; see serve_model.h.
#include "cli/serve_model.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "backends/backend_factory.h"
#include "cli/common.h"
#include "cli/model_ref.h"
#include "convert/hf_import.h"
#include "core/error.h"
#include "core/tune.h"
#include "convert/hf_vision.h"
#include "engine/chat_prompt.h"
#include "engine/kv_disk_fingerprint.h"
#include "engine/model_drafter.h"
#include "engine/serve_engine.h"
#include "model/vision_encoder.h"
#include "server/image_tokens.h"
#include "format/gguf.h"
#include "model/causal_lm.h"
#include "server/chat_output.h"
#include "store/folder_scan.h"
#include "store/model_info.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {
namespace {

// --chat-template FILE: a Jinja file, or a tokenizer_config.json holding "chat_template".
std::string load_chat_template(const std::string& path) {
  std::string text = read_text_file(path);
  if (!text.empty() && text[0] == '{') {
    try {
      const auto j = nlohmann::json::parse(text);
      if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string()) {
        return j["chat_template"].get<std::string>();
      }
    } catch (const nlohmann::json::exception&) {
      // a template that starts with '{': use it as it is
    }
  }
  return text;
}

server::ChatSettings chat_settings(const ServeOptions& o, const engine::ChatPrompt& chat) {
  server::ChatSettings cs;
  cs.caps = server::detect_template_caps(chat.source());
  cs.parse_reasoning = o.reasoning_format != "none";
  cs.reasoning_budget = o.reasoning_budget;
  cs.media = o.media;
  if (!o.chat_template_kwargs.empty())
    cs.default_kwargs = nlohmann::ordered_json::parse(o.chat_template_kwargs);
  return cs;
}

// One model in memory. Members are built in this order and destroyed in reverse: the
// engine stops first, the mapped file goes last.
struct Loaded final : server::LoadedModel {
  std::optional<gguf::File> file;
  std::optional<tokenizer::Tokenizer> tok;
  std::unique_ptr<ops::Backend> backend;
  std::unique_ptr<model::CausalLm> model;
  std::optional<gguf::File> draft_file;          // --spec draft: the draft model (on the same back-end)
  std::unique_ptr<model::CausalLm> draft_model;
  std::optional<gguf::File> projector;           // the vision tower's file (models that take images)
  std::unique_ptr<model::VisionEncoder> vision;  // used by the engine: built before it, freed after
  std::optional<engine::ChatPrompt> chat;
  server::ChatSettings settings;
  std::optional<server::ModelObserver> observer;
  std::optional<engine::ServeEngine> engine;
  server::ServedModel view;
  server::ModelFacts model_facts;

  ~Loaded() override {
    if (engine) engine->stop();
  }
  const server::ServedModel& served() const override { return view; }
  uint64_t device_bytes() const override { return backend ? backend->device_memory_used() : 0; }
  server::ModelFacts facts() const override { return model_facts; }
};

// What one model will take: its file, shape, context and KV budget on its device.
struct Plan {
  std::optional<gguf::File> file;
  model::Hparams hp;
  int64_t n_ctx = 0;
  int32_t max_seqs = 8;
  ops::KvType kv_type = ops::KvType::F16;
  int64_t block_size = 16;
  uint64_t block_bytes = 0, state_bytes = 0;
  int64_t spec_slots = 0;  // hybrid models: speculation checkpoint state slots (counted in state_bytes)
  int64_t n_blocks = 0;
  uint64_t need = 0;  // weights + KV + states (+ the device reserve)
  backends::Device device;
};

Plan plan_model(const ServeOptions& o, const server::ModelSpec& spec,
                const store::ModelEntry& entry, const std::string& what) {
  Plan p;
  p.file.emplace(open_model_entry(entry));
  const gguf::File& file = *p.file;
  p.hp = model::read_hparams(file);
  // --spec mtp: the pool also holds the MTP block's attention (one more KV layer a block).
  p.hp.mtp_kv = engine::parse_spec_mode(o.spec) == engine::SpecMode::kMtp;
  const model::Hparams& hp = p.hp;
  p.max_seqs = spec.max_seqs.value_or(o.max_seqs);
  const int64_t ctx = spec.ctx.value_or(o.ctx);
  p.n_ctx = ctx > 0 ? ctx : (hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096);
  if (p.n_ctx < 8 || p.n_ctx > (int64_t{1} << 22))
    fail(ErrorKind::kInvalidInput, "serve", "--ctx must be in [8, 4194304]");
  p.kv_type = parse_kv_type(o.kv_type);
  model::KvPool::check_kv_type(hp, p.kv_type);
  const std::string kv_cache_bytes = spec.kv_cache_bytes.value_or(o.kv_cache_bytes);
  const int64_t block_size = p.block_size;
  const uint64_t block_bytes = model::KvPool::bytes_per_block(hp, p.kv_type, block_size);
  p.block_bytes = block_bytes;
  if (block_bytes == 0) {
    fail(ErrorKind::kUnsupported, "serve",
         what + ": the model has no attention layers (" + std::to_string(hp.n_layer) +
             " layers, all recurrent); hearth serve's paged KV cache needs at least one (hearth run works)");
  }
  // Hybrid models: a recurrent state per running sequence and per snapshot, besides the KV;
  // with speculative decoding also --spec-max checkpoints per running sequence (the state
  // after each verified row, to roll back to: engine/serve_engine_spec.cpp).
  p.spec_slots = engine::parse_spec_mode(o.spec) != engine::SpecMode::kOff && o.spec_max > 0
                     ? static_cast<int64_t>(p.max_seqs) * o.spec_max
                     : 0;
  const uint64_t state_bytes = hp.n_recurrent_layers() > 0
                                   ? model::KvPool::bytes_per_state(hp) *
                                         static_cast<uint64_t>(p.max_seqs + o.state_snapshots + p.spec_slots)
                                   : 0;
  p.state_bytes = state_bytes;
  const uint64_t full_budget = static_cast<uint64_t>(p.max_seqs) *
                               static_cast<uint64_t>((p.n_ctx + block_size - 1) / block_size) *
                               block_bytes;
  // The device: auto checks that the weights, states and a minimal cache fit.
  p.device = choose_device(
      spec.device.value_or(o.device),
      file.file_size() + state_bytes +
          (kv_cache_bytes.empty() ? 2 * block_bytes
                                  : parse_byte_size(kv_cache_bytes, "--kv-cache-bytes")),
      "serve");
  const backends::Device& device = p.device;
  uint64_t budget = 0;
  // Where the weights and cache live: host RAM, or the GPU's free memory.
  const uint64_t avail = device.cuda ? backends::device_free_memory(device) : available_memory();
  const uint64_t reserve = device.cuda ? kDeviceReserveBytes : 0;
  if (!kv_cache_bytes.empty()) {
    budget = parse_byte_size(kv_cache_bytes, "--kv-cache-bytes");
  } else if (device.cuda) {
    // On a GPU: room for every sequence at full context, at most 90% of the device
    // memory left after the weights, the states and the reserve.
    budget = full_budget;
    const uint64_t fixed = file.file_size() + state_bytes + reserve;
    budget = avail > fixed ? std::min<uint64_t>(budget, (avail - fixed) / 10 * 9) : 0;
  } else {
    // Room for every sequence at full context, but never more than 40% of the memory
    // left after the model.
    budget = full_budget;
    if (avail > file.file_size())
      budget = std::min<uint64_t>(budget, (avail - file.file_size()) / 5 * 2);
  }
  p.n_blocks = static_cast<int64_t>(budget / block_bytes);
  if (p.n_blocks < 2) {
    fail(ErrorKind::kInvalidInput, "serve",
         "--kv-cache-bytes " + std::to_string(budget) + " holds fewer than 2 KV blocks of " +
             std::to_string(block_bytes) + " bytes (" + std::to_string(block_size) +
             " tokens) for this model");
  }
  p.need = file.file_size() + static_cast<uint64_t>(p.n_blocks) * block_bytes + state_bytes +
           (device.cuda ? reserve : uint64_t{100} << 20);
  if (avail != 0 && p.need > avail) {
    fail(ErrorKind::kResource, "serve",
         what + ": needs about " + std::to_string(p.need >> 20) + " MiB (model + KV budget" +
             (state_bytes ? " + recurrent states" : "") + ") but only " +
             std::to_string(avail >> 20) + " MiB " +
             (device.cuda ? "of device memory are free on " + device.str()
                          : std::string("are available")) +
             "; lower --kv-cache-bytes" + (state_bytes ? " or --state-snapshots" : ""));
  }
  return p;
}

// --kv-swap-bytes: "0" turns swapping off; unset, a quarter of the KV pool and of the running
// sequences' recurrent states (hybrid models: a state can outweigh a short sequence's KV).
uint64_t kv_swap_bytes(const ServeOptions& o, uint64_t pool_bytes) {
  if (o.kv_swap_bytes.empty()) return pool_bytes / 4;
  if (o.kv_swap_bytes == "0") return 0;
  return parse_byte_size(o.kv_swap_bytes, "--kv-swap-bytes");
}

// --kv-swap-disk-bytes: "0" turns the disk level off; unset, a quarter of --kv-disk-bytes.
uint64_t kv_swap_disk_bytes(const ServeOptions& o) {
  const uint64_t disk = parse_byte_size(o.kv_disk_bytes, "--kv-disk-bytes");
  if (o.kv_swap_disk_bytes.empty()) return disk / 4;
  if (o.kv_swap_disk_bytes == "0") return 0;
  const uint64_t b = parse_byte_size(o.kv_swap_disk_bytes, "--kv-swap-disk-bytes");
  if (b >= disk) {
    fail(ErrorKind::kInvalidInput, "serve",
         "--kv-swap-disk-bytes (" + o.kv_swap_disk_bytes + ") must be smaller than --kv-disk-bytes (" + o.kv_disk_bytes +
             "): it is a share of it");
  }
  return b;
}

}  // namespace

void check_serve_options(const ServeOptions& o) {
  if (o.max_seqs < 1 || o.max_seqs > 1024)
    fail(ErrorKind::kInvalidInput, "serve", "--max-seqs must be in [1, 1024]");
  if (o.prefill_chunk != -1 && o.prefill_chunk < 1) {
    fail(ErrorKind::kInvalidInput, "serve", "--prefill-chunk must be >= 1");
  }
  if (o.max_queue < 0) fail(ErrorKind::kInvalidInput, "serve", "--max-queue must be >= 0");
  if (o.state_snapshots < 0 || o.state_snapshots > 4096) {
    fail(ErrorKind::kInvalidInput, "serve", "--state-snapshots must be in [0, 4096]");
  }
  if (o.port < 0 || o.port > 65535)
    fail(ErrorKind::kInvalidInput, "serve", "--port must be in [0, 65535]");
  if (o.media.max_bytes < 1) fail(ErrorKind::kInvalidInput, "serve", "--max-media-bytes must be >= 1");
  if (o.media.max_images < 0) fail(ErrorKind::kInvalidInput, "serve", "--max-images-per-request must be >= 0");
  if (o.media.timeout_ms < 1) fail(ErrorKind::kInvalidInput, "serve", "--media-timeout-ms must be >= 1");
  if (o.max_image_pixels < 1) fail(ErrorKind::kInvalidInput, "serve", "--max-image-pixels must be >= 1");
  parse_kv_type(o.kv_type);
  engine::parse_spec_mode(o.spec);
  if (o.spec_max < 1 || o.spec_max > 64) fail(ErrorKind::kInvalidInput, "serve", "--spec-max must be in [1, 64]");
  if (parse_byte_size(o.kv_disk_bytes, "--kv-disk-bytes") == 0)
    fail(ErrorKind::kInvalidInput, "serve", "--kv-disk-bytes must be > 0");
  kv_swap_bytes(o, 0);
  kv_swap_disk_bytes(o);
  if (o.reasoning_format != "none" && o.reasoning_format != "auto" &&
      o.reasoning_format != "deepseek") {
    fail(ErrorKind::kInvalidInput, "serve",
         "--reasoning-format must be none or auto, got '" + o.reasoning_format + "'");
  }
  if (o.reasoning_budget < -1)
    fail(ErrorKind::kInvalidInput, "serve", "--reasoning-budget must be >= 0 (or -1: off)");
  if (!o.chat_template_kwargs.empty()) {
    nlohmann::ordered_json kw;
    try {
      kw = nlohmann::ordered_json::parse(o.chat_template_kwargs);
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorKind::kInvalidInput, "serve",
           std::string("--chat-template-kwargs is not valid JSON: ") + e.what());
    }
    if (!kw.is_object())
      fail(ErrorKind::kInvalidInput, "serve", "--chat-template-kwargs must be a JSON object");
  }
}

store::ModelEntry ServeModelFactory::resolve(const std::string& ref, bool check_path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = resolved_.find(ref);
  if (it == resolved_.end()) {
    store::ModelEntry e = resolve_model_arg(ref);
    // A path is opened only at its load: check now that it is there, so a typo fails the start.
    if (check_path && e.store == store::kStorePath) store::check_readable(e.path, "model");
    it = resolved_.emplace(ref, std::move(e)).first;
  }
  return it->second;
}

void ServeModelFactory::set_model_metrics(const std::string& name, server::ModelMetrics* metrics) {
  std::lock_guard<std::mutex> lock(mu_);
  model_metrics_[name] = metrics;
}

uint64_t ServeModelFactory::planned_bytes(const server::ModelSpec& spec) {
  return plan_model(o_, spec, resolve(spec.ref), spec.ref).need;
}

uint64_t ServeModelFactory::planned_device_bytes(const server::ModelSpec& spec) {
  const Plan plan = plan_model(o_, spec, resolve(spec.ref), spec.ref);
  return plan.device.cuda ? plan.need : 0;
}

std::unique_ptr<server::LoadedModel> ServeModelFactory::load(const server::ModelSpec& spec) {
  const ServeOptions& o = o_;
  Plan plan = plan_model(o, spec, resolve(spec.ref), spec.ref);
  const model::Hparams& hp = plan.hp;
  const backends::Device& device = plan.device;
  auto m = std::make_unique<Loaded>();
  m->file = std::move(plan.file);
  const gguf::File& file = *m->file;
  m->tok.emplace(tokenizer::Tokenizer::from_gguf(file));
  m->backend = backends::make_backend(device, o.threads);
  ops::Backend& backend = *m->backend;
  apply_deterministic(backend, o.deterministic);
  m->model = model::load_causal_lm(file, backend);
  if (engine::parse_spec_mode(o.spec) == engine::SpecMode::kMtp) {
    m->model->enable_mtp();  // before the engine's pool: it holds the MTP block's attention too
  }
  std::optional<std::string> template_source;
  const std::string chat_template = spec.chat_template.value_or(o.chat_template);
  if (!chat_template.empty()) template_source = load_chat_template(chat_template);
  m->chat.emplace(file, *m->tok, template_source);
  m->settings = chat_settings(o, *m->chat);
  // Vision: the model's projector (the HF folder's tower, an mmproj*.gguf beside the file, or
  // --mmproj) on the same back-end; requests' images are encoded on the engine thread.
  const store::ModelEntry entry = resolve(spec.ref);
  if (m->model->takes_images() || !o.mmproj.empty()) {
    m->projector = convert::open_projector(entry.path, o.mmproj.empty() ? entry.mmproj : o.mmproj);
    if (m->projector && !m->model->takes_images())
      fail(ErrorKind::kInvalidInput, "serve", spec.ref + ": --mmproj given, but this model takes text only");
  }
  if (m->projector) {
    m->vision = std::make_unique<model::VisionEncoder>(*m->projector, backend);
    model::check_projector_fits(*m->vision, m->model->hparams().n_embd, m->projector->name());
    m->settings.vision = true;
    m->settings.image_tokens = server::image_tokens_hook(*m->vision, *m->tok, o.max_image_pixels);
    std::fprintf(stderr, "hearth: %s: vision encoder from %s (%lld blocks of %lld, %lld heads)\n", spec.name.c_str(),
                 m->projector->name().c_str(), static_cast<long long>(m->vision->hparams().n_layer),
                 static_cast<long long>(m->vision->hparams().n_embd), static_cast<long long>(m->vision->hparams().n_head));
  }
  log_device_memory(backend, device);
  if (device.cuda && !o.no_warmup) log_warm_up(*m->model, backend, plan.n_ctx, plan.kv_type);
  if (m->vision && device.cuda && !o.no_warmup) log_vision_warm_up(*m->vision);

  engine::EngineConfig ec;
  ec.n_ctx = plan.n_ctx;
  ec.n_blocks = plan.n_blocks;
  ec.block_size = plan.block_size;
  ec.kv_type = plan.kv_type;
  ec.max_seqs = plan.max_seqs;
  // A GPU takes a 1,024-token step in about the time a CPU-sized chunk costs it in launches
  // and weight reads: a typical chat prompt is one step (time to first token), and many
  // streams' prompts go through in half the steps (9B, 64 streams: +14 % aggregate, p99
  // inter-token gap 56 -> 82 ms; docs/BENCHMARKS.md).
  ec.prefill_chunk = o.prefill_chunk != -1 ? o.prefill_chunk : device.cuda ? kGpuPrefillChunk : 512;
  ec.max_queue = o.max_queue;
  ec.n_snapshots = o.state_snapshots;
  ec.commit_kv = o.kv_commit;
  ec.spec.mode = engine::parse_spec_mode(o.spec);
  ec.spec.max_draft = o.spec_max;
  ec.spec.adaptive = tune::get(tune::kSpecAdaptive) != 0;
  if (ec.spec.mode == engine::SpecMode::kDraft) {
    if (o.draft_model.empty()) fail(ErrorKind::kInvalidInput, "serve", "--spec draft needs --draft-model");
    m->draft_file.emplace(open_model_arg(o.draft_model));
    m->draft_model = model::load_causal_lm(*m->draft_file, backend);
    if (const std::string why = engine::ModelDrafter::unsuitable(*m->draft_model, m->model->hparams().n_vocab); !why.empty())
      fail(ErrorKind::kInvalidInput, "serve", o.draft_model + ": " + why);
    ec.spec.draft = m->draft_model.get();
    std::fprintf(stderr, "hearth: %s: draft model %s (%.1f MB)\n", spec.name.c_str(), o.draft_model.c_str(),
                 static_cast<double>(m->draft_file->file_size()) / 1e6);
  } else if (!o.draft_model.empty()) {
    fail(ErrorKind::kInvalidInput, "serve", "--draft-model is for --spec draft");
  }
  if (!o.kv_disk.empty()) {
    ec.kv_disk_dir = o.kv_disk;
    ec.kv_disk_bytes = parse_byte_size(o.kv_disk_bytes, "--kv-disk-bytes");
    ec.kv_disk_model = engine::kvdisk::model_identity(file);
    if (m->projector) ec.kv_disk_projector = engine::kvdisk::model_identity(*m->projector);
    ec.kv_disk_model_name = file.name();
    ec.kv_swap_disk_bytes = kv_swap_disk_bytes(o);
  }
  ec.kv_swap_bytes = kv_swap_bytes(o, static_cast<uint64_t>(plan.n_blocks) * plan.block_bytes +
                                          (hp.n_recurrent_layers() > 0 ? model::KvPool::bytes_per_state(hp) *
                                                                             static_cast<uint64_t>(plan.max_seqs)
                                                                       : 0));
  if (!o.test_fault_inject.empty()) {
    ec.faults = engine::parse_fault_spec(o.test_fault_inject);
    std::fprintf(stderr,
                 "hearth: WARNING: --test-fault-inject is on (%zu rules): for tests only, never in "
                 "production\n",
                 ec.faults.size());
  }
  if (hp.n_recurrent_layers() > 0) {
    std::fprintf(stderr,
                 "hearth: hybrid model: %lld of %lld layers recurrent (Gated DeltaNet), %.2f MiB "
                 "of state per "
                 "sequence; %d running + %d snapshot + %lld speculation checkpoint slots (%.1f MiB)\n",
                 static_cast<long long>(hp.n_recurrent_layers()),
                 static_cast<long long>(hp.n_layer),
                 static_cast<double>(model::KvPool::bytes_per_state(hp)) / (1 << 20), plan.max_seqs,
                 o.state_snapshots, static_cast<long long>(plan.spec_slots),
                 static_cast<double>(plan.state_bytes) / (1 << 20));
  }
  server::ModelMetrics* mm = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = model_metrics_.find(spec.name); it != model_metrics_.end()) mm = it->second;
  }
  m->observer.emplace(metrics_, mm);
  m->engine.emplace(*m->model, *m->tok, ec, &*m->observer);
  m->engine->set_vision(m->vision.get());
  m->view = server::ServedModel{&*m->engine, &*m->tok, &*m->chat, &m->settings, spec.name};
  {  // what GET /v1/status shows of it (the header again: no tensor data is read)
    const store::ModelInfo info = store::describe_model(entry);
    server::ModelFacts& f = m->model_facts;
    f.architecture = info.architecture.empty() ? std::string(hp.arch.name ? hp.arch.name : "") : info.architecture;
    f.parameters = info.parameters;
    f.quantization = info.quantization;
    f.size_bytes = info.size_bytes ? info.size_bytes : file.file_size();
    f.context_train = hp.n_ctx_train;
    f.device = device.str();
    f.kv_type = ops::kv_type_name(plan.kv_type);
    f.max_seqs = plan.max_seqs;
  }

  std::printf(
      "hearth: serving %s (%s, ctx %lld, %lld KV blocks of %lld tokens = %.1f MiB %s, max %d "
      "sequences)\n",
      spec.name.c_str(), backend.name().c_str(), static_cast<long long>(plan.n_ctx),
      static_cast<long long>(plan.n_blocks), static_cast<long long>(plan.block_size),
      static_cast<double>(plan.n_blocks) * static_cast<double>(plan.block_bytes) / (1 << 20),
      ops::kv_type_name(plan.kv_type), plan.max_seqs);
  log_device_memory_total(backend, device);
  const server::ChatSettings& cs = m->settings;
  std::printf("hearth: chat template%s: tool calls %s%s, reasoning %s\n",
              chat_template.empty() ? "" : " (--chat-template)",
              server::tool_format_name(cs.caps.tool_format),
              cs.caps.renders_tools && cs.caps.tool_format != server::ToolFormat::kNone
                  ? ""
                  : " (tool list injected, Hermes)",
              cs.parse_reasoning ? "split" : "left in content");
  std::fflush(stdout);
  m->engine->start();
  return m;
}

}  // namespace hearth::cli
