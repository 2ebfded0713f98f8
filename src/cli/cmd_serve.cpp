// `hearth serve`: the OpenAI-compatible server. Loads the model, starts the engine
// thread (continuous batching over a paged KV cache of a fixed byte budget) and the
// HTTP server, prints the URL, and stops cleanly on SIGINT / SIGTERM.
#include <pthread.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "cli/model_ref.h"
#include "cli/common.h"
#include "cli/default_model.h"
#include "convert/hf_import.h"
#include "convert/hf_vision.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "engine/chat_prompt.h"
#include "engine/serve_engine.h"
#include "format/gguf.h"
#include "model/causal_lm.h"
#include "model/vision_encoder.h"
#include "server/chat_output.h"
#include "server/chat_request.h"
#include "server/http_server.h"
#include "server/image_tokens.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {
namespace {

struct ServeOptions {
  bool no_warmup = false;
  bool deterministic = false;
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t ctx = 0;
  int32_t max_seqs = 8;
  std::string kv_cache_bytes;
  int32_t prefill_chunk = -1;  // -1: 512 on the CPU, kGpuPrefillChunk on a GPU
  int32_t max_queue = 64;
  std::string api_key;
  int threads = 0;
  std::string log_file;
  std::string kv_type = "f16";
  std::string model_id;
  int32_t state_snapshots = 32;
  std::string chat_template;         // --chat-template FILE
  std::string chat_template_kwargs;  // --chat-template-kwargs JSON
  std::string reasoning_format = "auto";
  int32_t reasoning_budget = -1;
  bool strict_model_names = false;
  std::vector<std::string> aliases;
  std::string device = "auto";
  int max_connections = 256;
  size_t max_body_bytes = 16u << 20;
  size_t max_header_bytes = 64u << 10;
  double request_timeout = 30;
  bool kv_commit = false;
  server::MediaSettings media;  // --allowed-media-dir, --allow-remote-media, --max-media-bytes, ...
  std::string mmproj;           // --mmproj: the vision projector (default: found beside the model)
  int64_t max_image_pixels = 64LL << 20;  // --max-image-pixels
  std::string test_fault_inject;  // hidden, test only: engine::parse_fault_spec
};

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
  if (o.reasoning_format == "none") {
    cs.parse_reasoning = false;
  } else if (o.reasoning_format != "auto" && o.reasoning_format != "deepseek") {
    fail(ErrorKind::kInvalidInput, "serve", "--reasoning-format must be none or auto, got '" + o.reasoning_format + "'");
  }
  if (o.reasoning_budget < -1) fail(ErrorKind::kInvalidInput, "serve", "--reasoning-budget must be >= 0 (or -1: off)");
  cs.reasoning_budget = o.reasoning_budget;
  if (o.media.max_bytes < 1) fail(ErrorKind::kInvalidInput, "serve", "--max-media-bytes must be >= 1");
  if (o.media.max_images < 0) fail(ErrorKind::kInvalidInput, "serve", "--max-images-per-request must be >= 0");
  if (o.media.timeout_ms < 1) fail(ErrorKind::kInvalidInput, "serve", "--media-timeout-ms must be >= 1");
  cs.media = o.media;
  if (!o.chat_template_kwargs.empty()) {
    nlohmann::ordered_json kw;
    try {
      kw = nlohmann::ordered_json::parse(o.chat_template_kwargs);
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorKind::kInvalidInput, "serve", std::string("--chat-template-kwargs is not valid JSON: ") + e.what());
    }
    if (!kw.is_object()) fail(ErrorKind::kInvalidInput, "serve", "--chat-template-kwargs must be a JSON object");
    cs.default_kwargs = std::move(kw);
  }
  return cs;
}

void serve(ServeOptions o) {
#if defined(__GLIBC__)
  // The HTTP side runs a thread per open connection (up to --max-connections). glibc
  // gives each new thread its own malloc arena, up to 8 per core, and an arena keeps what
  // its thread freed: resident memory then crept up for minutes as more threads were
  // first used (soak run, issue 16). One arena per hardware thread plus two (at least 4;
  // the soak's 2-core run had 4): as many as there are threads that compute at once, while
  // the HTTP threads, which mostly wait on sockets and the engine, share arenas and reuse
  // what each other freed.
  mallopt(M_ARENA_MAX, std::max(4, static_cast<int>(std::thread::hardware_concurrency()) + 2));
#endif
  if (o.model.empty()) o.model = find_default_model();
  if (o.max_seqs < 1 || o.max_seqs > 1024) fail(ErrorKind::kInvalidInput, "serve", "--max-seqs must be in [1, 1024]");
  if (o.prefill_chunk != -1 && o.prefill_chunk < 1) {
    fail(ErrorKind::kInvalidInput, "serve", "--prefill-chunk must be >= 1");
  }
  if (o.max_queue < 0) fail(ErrorKind::kInvalidInput, "serve", "--max-queue must be >= 0");
  if (o.state_snapshots < 0 || o.state_snapshots > 4096) {
    fail(ErrorKind::kInvalidInput, "serve", "--state-snapshots must be in [0, 4096]");
  }
  if (o.port < 0 || o.port > 65535) fail(ErrorKind::kInvalidInput, "serve", "--port must be in [0, 65535]");
  const ops::KvType kv_type = parse_kv_type(o.kv_type);

  // Signals go to the watcher thread only: block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGUSR1);  // internal: wakes the watcher when serving ends
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  store::ModelEntry entry;
  gguf::File file = open_model_arg(o.model, &entry);
  const model::Hparams hp = model::read_hparams(file);
  const int64_t n_ctx = o.ctx > 0 ? o.ctx : (hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096);
  if (n_ctx < 8 || n_ctx > (int64_t{1} << 22)) fail(ErrorKind::kInvalidInput, "serve", "--ctx must be in [8, 4194304]");

  const int64_t block_size = 16;
  const uint64_t block_bytes = model::KvPool::bytes_per_block(hp, kv_type, block_size);
  // Hybrid models: a recurrent state per running sequence and per snapshot, besides the KV.
  const uint64_t state_bytes = hp.n_recurrent_layers() > 0
                                   ? model::KvPool::bytes_per_state(hp) *
                                         static_cast<uint64_t>(o.max_seqs + o.state_snapshots)
                                   : 0;
  const uint64_t full_budget =
      static_cast<uint64_t>(o.max_seqs) * static_cast<uint64_t>((n_ctx + block_size - 1) / block_size) * block_bytes;
  // The device: auto checks that the weights, states and a minimal cache fit.
  const backends::Device device = choose_device(
      o.device,
      file.file_size() + state_bytes +
          (o.kv_cache_bytes.empty() ? 2 * block_bytes : parse_byte_size(o.kv_cache_bytes, "--kv-cache-bytes")),
      "serve");
  uint64_t budget = 0;
  // Where the weights and cache live: host RAM, or the GPU's free memory.
  const uint64_t avail = device.cuda ? backends::device_free_memory(device) : available_memory();
  const uint64_t reserve = device.cuda ? kDeviceReserveBytes : 0;
  if (!o.kv_cache_bytes.empty()) {
    budget = parse_byte_size(o.kv_cache_bytes, "--kv-cache-bytes");
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
    if (avail > file.file_size()) budget = std::min<uint64_t>(budget, (avail - file.file_size()) / 5 * 2);
  }
  const auto n_blocks = static_cast<int64_t>(budget / block_bytes);
  if (n_blocks < 2) {
    fail(ErrorKind::kInvalidInput, "serve",
         "--kv-cache-bytes " + std::to_string(budget) + " holds fewer than 2 KV blocks of " +
             std::to_string(block_bytes) + " bytes (" + std::to_string(block_size) + " tokens) for this model");
  }
  if (const uint64_t need = file.file_size() + static_cast<uint64_t>(n_blocks) * block_bytes + state_bytes +
                            (device.cuda ? reserve : uint64_t{100} << 20);
      avail != 0 && need > avail) {
    fail(ErrorKind::kResource, "serve",
         o.model + ": needs about " + std::to_string(need >> 20) + " MiB (model + KV budget" +
             (state_bytes ? " + recurrent states" : "") + ") but only " + std::to_string(avail >> 20) + " MiB " +
             (device.cuda ? "of device memory are free on " + device.str() : std::string("are available")) +
             "; lower --kv-cache-bytes" + (state_bytes ? " or --state-snapshots" : ""));
  }

  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_gguf(file);
  const std::unique_ptr<ops::Backend> backend_ptr = backends::make_backend(device, o.threads);
  ops::Backend& backend = *backend_ptr;
  apply_deterministic(backend, o.deterministic);
  const std::unique_ptr<model::CausalLm> loaded = model::load_causal_lm(file, backend);
  model::CausalLm& model = *loaded;
  std::optional<std::string> template_source;
  if (!o.chat_template.empty()) template_source = load_chat_template(o.chat_template);
  const engine::ChatPrompt chat(file, tok, template_source);
  server::ChatSettings chat_cfg = chat_settings(o, chat);
  // Vision: the model's projector (the HF folder's tower, an mmproj*.gguf beside the file, or
  // --mmproj) on the same back-end; requests' images are encoded on the engine thread.
  std::optional<gguf::File> projector;
  std::unique_ptr<model::VisionEncoder> vision;
  if (model.takes_images() || !o.mmproj.empty()) {
    projector = convert::open_projector(entry.path, o.mmproj.empty() ? entry.mmproj : o.mmproj);
    if (projector && !model.takes_images())
      fail(ErrorKind::kInvalidInput, "serve", o.model + ": --mmproj given, but this model takes text only");
  }
  if (projector) {
    vision = std::make_unique<model::VisionEncoder>(*projector, backend);
    if (device.cuda && !o.no_warmup) log_vision_warm_up(*vision);
    chat_cfg.vision = true;
    chat_cfg.image_tokens = server::image_tokens_hook(*vision, tok, o.max_image_pixels);
    std::fprintf(stderr, "hearth: vision encoder from %s (%lld blocks of %lld, %lld heads)\n", projector->name().c_str(),
                 static_cast<long long>(vision->hparams().n_layer), static_cast<long long>(vision->hparams().n_embd),
                 static_cast<long long>(vision->hparams().n_head));
  }
  log_device_memory(backend, device);
  if (device.cuda && !o.no_warmup) log_warm_up(model, backend, n_ctx, kv_type);

  engine::EngineConfig ec;
  ec.n_ctx = n_ctx;
  ec.n_blocks = n_blocks;
  ec.block_size = block_size;
  ec.kv_type = kv_type;
  ec.max_seqs = o.max_seqs;
  // A GPU takes a 1,024-token step in about the time a CPU-sized chunk costs it in launches
  // and weight reads: a typical chat prompt is one step (time to first token), and many
  // streams' prompts go through in half the steps (9B, 64 streams: +14 % aggregate, p99
  // inter-token gap 56 -> 82 ms; docs/BENCHMARKS.md).
  ec.prefill_chunk = o.prefill_chunk != -1 ? o.prefill_chunk : device.cuda ? kGpuPrefillChunk : 512;
  ec.max_queue = o.max_queue;
  ec.n_snapshots = o.state_snapshots;
  ec.commit_kv = o.kv_commit;
  if (!o.test_fault_inject.empty()) {
    ec.faults = engine::parse_fault_spec(o.test_fault_inject);
    std::fprintf(stderr, "hearth: WARNING: --test-fault-inject is on (%zu rules): for tests only, never in production\n",
                 ec.faults.size());
  }
  if (hp.n_recurrent_layers() > 0) {
    std::fprintf(stderr,
                 "hearth: hybrid model: %lld of %lld layers recurrent (Gated DeltaNet), %.2f MiB of state per "
                 "sequence; %d running + %d snapshot slots (%.1f MiB)\n",
                 static_cast<long long>(hp.n_recurrent_layers()), static_cast<long long>(hp.n_layer),
                 static_cast<double>(model::KvPool::bytes_per_state(hp)) / (1 << 20), o.max_seqs, o.state_snapshots,
                 static_cast<double>(state_bytes) / (1 << 20));
  }
  server::ServerMetrics metrics;
  server::MetricsObserver observer(metrics);
  engine::ServeEngine eng(model, tok, ec, &observer);
  eng.set_vision(vision.get());

  server::HttpOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  ho.api_key = o.api_key;
  // models/default.gguf is a link: name the model by the file it points to.
  // A name from a store (ORG/NAME:Q4_K_M, qwen3:8b) is the model's id as typed.
  std::error_code ec_path;
  const std::filesystem::path real = std::filesystem::canonical(o.model, ec_path);
  const bool from_store = entry.store != store::kStorePath;
  const std::string stem = from_store ? o.model : (ec_path ? std::filesystem::path(o.model) : real).stem().string();
  ho.model_id = o.model_id.empty() ? stem : o.model_id;
  ho.model_aliases = {stem, std::filesystem::path(o.model).stem().string(),
                      std::filesystem::path(o.model).filename().string(), o.model};
  if (from_store) ho.model_aliases.push_back(entry.name);
  ho.aliases = o.aliases;
  ho.strict_model_names = o.strict_model_names;
  ho.chat = chat_cfg;
  ho.max_connections = o.max_connections;
  ho.max_body_bytes = o.max_body_bytes;
  ho.max_header_bytes = o.max_header_bytes;
  ho.request_timeout_s = o.request_timeout;
  ho.log_file = o.log_file;
  server::HttpServer http(eng, tok, chat, metrics, ho);
  const int port = http.bind();
  eng.start();

  std::mutex done_mu;
  std::condition_variable done_cv;
  bool served = false;
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig == SIGUSR1) return;  // serve() ended on its own
    std::fprintf(stderr, "hearth: %s received, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    eng.stop();   // in-flight requests end with an error chunk
    http.stop();  // then the listener closes and the HTTP threads finish
    // An idle keep-alive connection holds its HTTP thread until the keep-alive timeout;
    // every request has had its answer by now, so do not wait for those.
    std::unique_lock<std::mutex> lock(done_mu);
    if (!done_cv.wait_for(lock, std::chrono::seconds(1), [&] { return served; })) {
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(0);
    }
  });
  std::printf("hearth: serving %s (%s, ctx %lld, %lld KV blocks of %lld tokens = %.1f MiB %s, max %d sequences)\n",
              ho.model_id.c_str(), backend.name().c_str(), static_cast<long long>(n_ctx),
              static_cast<long long>(n_blocks), static_cast<long long>(block_size),
              static_cast<double>(n_blocks) * static_cast<double>(block_bytes) / (1 << 20), ops::kv_type_name(kv_type),
              o.max_seqs);
  log_device_memory_total(backend, device);
  std::printf("hearth: chat template%s: tool calls %s%s, reasoning %s\n", o.chat_template.empty() ? "" : " (--chat-template)",
              server::tool_format_name(chat_cfg.caps.tool_format),
              chat_cfg.caps.renders_tools && chat_cfg.caps.tool_format != server::ToolFormat::kNone
                  ? ""
                  : " (tool list injected, Hermes)",
              chat_cfg.parse_reasoning ? "split" : "left in content");
  std::printf("hearth: listening on http://%s:%d (OpenAI API at http://%s:%d/v1)\n", o.host.c_str(), port,
              o.host.c_str(), port);
  std::fflush(stdout);
  http.serve();
  {
    std::lock_guard<std::mutex> lock(done_mu);
    served = true;
  }
  done_cv.notify_all();
  // The listener ended (a signal, or an error): make sure the watcher returns too.
  pthread_kill(watcher.native_handle(), SIGUSR1);
  watcher.join();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  cmd->add_option("-m,--model", o->model, "GGUF file, Hugging Face folder, or a name from the HF hub cache / LM Studio / Ollama (ORG/NAME[:QUANT], NAME:TAG; see `hearth list`; default: SmolLM2-135M-Instruct)");
  cmd->add_option("--host", o->host, "Address to bind")->default_val("127.0.0.1");
  cmd->add_option("--port", o->port, "Port (0: any free port)")->default_val(8080);
  cmd->add_option("--ctx", o->ctx, "Longest sequence in tokens, prompt + completion (default: the model's)");
  cmd->add_option("--max-seqs", o->max_seqs, "Sequences decoded together")->default_val(8);
  cmd->add_option("--kv-cache-bytes", o->kv_cache_bytes,
                  "Hard budget for all KV memory, e.g. 512M, 2G (default: max-seqs full contexts, at most 40% of "
                  "free memory; on a GPU at most 90% of its free memory after the weights)");
  cmd->add_option("--prefill-chunk", o->prefill_chunk,
                  "Prompt tokens processed per step [default: 512; 1024 on a GPU]");
  cmd->add_flag("--deterministic", o->deterministic,
                "Batch-invariant kernels: a request's output does not depend on what else runs with it (the CPU "
                "back-end always is; on a GPU slower: docs/ARCHITECTURE.md)");
  cmd->add_flag("--no-warmup", o->no_warmup,
                "On a GPU, skip the warm-up prompt at load (kernels then load inside the first request)");
  cmd->add_flag("--kv-commit", o->kv_commit,
                "Commit the whole KV pool at start (written once) instead of as blocks are first used: "
                "resident memory is flat from the start");
  cmd->add_option("--max-queue", o->max_queue, "Requests waiting beyond --max-seqs before 429")->default_val(64);
  cmd->add_option("--max-connections", o->max_connections,
                  "HTTP connections served at once (one thread each); more are answered 503")
      ->default_val(256)
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "Largest request body (413 above)")
      ->default_val(16u << 20)
      ->check(CLI::Range(size_t{1}, size_t{1} << 34));
  cmd->add_option("--max-header-bytes", o->max_header_bytes, "Largest request line + headers (431 above)")
      ->default_val(64u << 10)
      ->check(CLI::Range(size_t{256}, size_t{16} << 20));
  cmd->add_option("--request-timeout", o->request_timeout,
                  "Seconds a client has to send a whole request, headers and body (408 after)")
      ->default_val(30)
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' or 'x-api-key: KEY'");
  cmd->add_option("-t,--threads", o->threads, "Compute threads (default: physical cores)");
  cmd->add_option("--log-file", o->log_file, "Append the request log here (default: stderr)");
  cmd->add_option("--kv-type", o->kv_type, "KV cache element type: f16 or f32")->default_val("f16");
  cmd->add_option("--state-snapshots", o->state_snapshots,
                  "Hybrid models: recurrent-state snapshots kept for prefix reuse (each one sequence's state)")
      ->default_val(32);
  cmd->add_option("--device", o->device,
                  "cpu, cuda, cuda:N or auto (the first GPU when one is visible and the model fits)")
      ->default_val("auto");
  cmd->add_option("--model-id", o->model_id, "Model id to report (default: the file name without .gguf)");
  cmd->add_option("--alias", o->aliases, "Another name for the model, listed by /v1/models (repeatable)");
  cmd->add_flag("--strict-model-names", o->strict_model_names,
                "Answer 404 to a 'model' that is not the model's id or alias (default: any name is served)");
  cmd->add_option("--chat-template", o->chat_template,
                  "Use this Jinja chat template file (or tokenizer_config.json) instead of the model's");
  cmd->add_option("--chat-template-kwargs", o->chat_template_kwargs,
                  "Default chat template variables as a JSON object, e.g. '{\"enable_thinking\": false}' "
                  "(requests' chat_template_kwargs override them)");
  cmd->add_option("--reasoning-format", o->reasoning_format,
                  "auto: <think> text goes to reasoning_content; none: it stays in content")
      ->default_val("auto");
  cmd->add_option("--reasoning-budget", o->reasoning_budget,
                  "Close the <think> block after this many tokens (-1: no limit; 0: no reasoning)")
      ->default_val(-1);
  cmd->add_option("--allowed-media-dir", o->media.allowed_media_dirs,
                  "Images may be read from files (file:// URLs) inside this directory (repeatable)");
  cmd->add_option("--mmproj", o->mmproj,
                  "The model's vision projector (GGUF); default: the HF folder's tower, or an mmproj*.gguf beside the model");
  cmd->add_option("--max-image-pixels", o->max_image_pixels, "Largest decoded image (width x height) a request may send")
      ->default_val(o->max_image_pixels);
  cmd->add_flag("--allow-remote-media", o->media.allow_remote, "Images may be downloaded from http(s) URLs");
  cmd->add_option("--max-media-bytes", o->media.max_bytes, "Largest image (encoded bytes) a request may send or name")
      ->default_val(o->media.max_bytes);
  cmd->add_option("--media-timeout-ms", o->media.timeout_ms, "Time limit of one image download")
      ->default_val(o->media.timeout_ms);
  cmd->add_option("--max-images-per-request", o->media.max_images, "Images one request may carry (400 above)")
      ->default_val(o->media.max_images);
  // Hidden (empty group): tests only. KIND:MARKER[@N],... makes requests whose prompt
  // contains MARKER fail inside the engine (see engine/fault_inject.h).
  cmd->add_option("--test-fault-inject", o->test_fault_inject, "Test only: inject engine faults")->group("");
  cmd->callback([o]() { serve(*o); });
}

}  // namespace hearth::cli
