// `hearth serve`: the OpenAI-compatible server. Loads the model (or, given several,
// the pinned ones, the others on demand: server/model_registry.h), starts its engine
// thread (continuous batching over a paged KV cache of a fixed byte budget) and the
// HTTP server, prints the URL, and stops cleanly on SIGINT / SIGTERM; under
// --drain-seconds, SIGTERM first drains (no new requests, those in flight finish).
#include <pthread.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/default_model.h"
#include "cli/serve_model.h"
#include "cli/serve_specs.h"
#include "core/error.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/model_metrics.h"
#include "server/model_registry.h"

namespace hearth::cli {
namespace {

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
  check_serve_options(o);
  const bool router = router_mode(o);
  if (!router && o.models.empty()) o.models.push_back(find_default_model());
  if (!router && !o.pin.empty()) fail(ErrorKind::kInvalidInput, "serve", "--pin names one of several models");
  if (router && (!o.model_id.empty() || !o.aliases.empty())) {
    fail(ErrorKind::kInvalidInput, "serve",
         "--model-id and --alias name the one model of -m; with several models, name them with --model NAME=REF "
         "and give aliases in --config");
  }

  // Signals go to the watcher thread only: block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGUSR1);  // internal: wakes the watcher when serving ends
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  server::ServerMetrics metrics;
  ServeModelFactory factory(o, metrics);
  server::HttpOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  ho.api_key = o.api_key;
  ho.router = router;
  std::vector<server::ModelSpec> specs;
  if (!router) {
    const std::string& ref = o.models.front();
    const store::ModelEntry entry = factory.resolve(ref);
    // models/default.gguf is a link: name the model by the file it points to.
    // A name from a store (ORG/NAME:Q4_K_M, qwen3:8b) is the model's id as typed.
    std::error_code ec_path;
    const std::filesystem::path real = std::filesystem::canonical(ref, ec_path);
    const bool from_store = entry.store != store::kStorePath;
    const std::string stem = from_store ? ref : (ec_path ? std::filesystem::path(ref) : real).stem().string();
    ho.model_id = o.model_id.empty() ? stem : o.model_id;
    ho.model_aliases = {stem, std::filesystem::path(ref).stem().string(),
                        std::filesystem::path(ref).filename().string(), ref};
    if (from_store) ho.model_aliases.push_back(entry.name);
    ho.aliases = o.aliases;
    server::ModelSpec one;
    one.name = ho.model_id;
    one.ref = ref;
    one.pinned = true;  // the one model is loaded at start and stays
    specs.push_back(std::move(one));
  } else {
    specs = router_specs(o);
    for (const auto& s : specs) factory.resolve(s.ref, true);  // a bad reference fails now, naming it
  }
  // Router mode: per-model series in /metrics.
  std::vector<std::unique_ptr<server::ModelMetrics>> model_metrics;
  std::vector<server::ModelMetrics*> model_metrics_view;
  if (router) {
    for (const auto& s : specs) {
      model_metrics.push_back(std::make_unique<server::ModelMetrics>(metrics.registry, s.name));
      model_metrics_view.push_back(model_metrics.back().get());
      factory.set_model_metrics(s.name, model_metrics_view.back());
    }
  }
  server::RegistryOptions ro;
  ro.max_loaded = o.max_loaded;
  if (!o.max_memory.empty()) ro.max_memory = parse_byte_size(o.max_memory, "--max-memory");
  if (!o.max_device_memory.empty()) ro.max_device_memory = parse_byte_size(o.max_device_memory, "--max-device-memory");
  ro.idle_unload_s = o.idle_unload;
  ro.load_timeout_s = o.load_timeout;
  if (!router) ro.log = [](const std::string&) {};  // one model: loaded once at start, as before
  server::ModelRegistry models(specs, factory, ro);
  for (size_t i = 0; i < models.size(); ++i) {
    if (models.spec(i).pinned) models.load_now(i);  // errors end the start, as with one model
  }
  models.start();

  ho.strict_model_names = o.strict_model_names;
  ho.max_connections = o.max_connections > 0 ? o.max_connections : std::max(256, o.max_seqs + o.max_queue + 64);
  ho.max_body_bytes = o.max_body_bytes;
  ho.max_header_bytes = o.max_header_bytes;
  ho.request_timeout_s = o.request_timeout;
  ho.log_file = o.log_file;
  ho.ui = !o.no_ui;
  server::HttpServer http(models, metrics, ho, model_metrics_view);
  const int port = http.bind();

  std::mutex done_mu;
  std::condition_variable done_cv;
  bool served = false;
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig == SIGUSR1) return;  // serve() ended on its own
    if (sig == SIGTERM && o.drain_seconds > 0) {
      // Graceful drain (a replica behind a load balancer): new requests get 503 and
      // /health/ready turns 503, so the balancer routes around this server; the requests in
      // flight finish, until the deadline. Another SIGTERM or a SIGINT stops at once.
      http.drain();
      std::fprintf(stderr, "hearth: SIGTERM received, draining: no new requests, %d in flight, up to %g s\n",
                   http.in_flight(), o.drain_seconds);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                                   std::chrono::duration<double>(o.drain_seconds));
      for (;;) {
        const int n = http.in_flight();
        if (n == 0) {
          std::fprintf(stderr, "hearth: drained, stopping\n");
          break;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          std::fprintf(stderr, "hearth: drain deadline (%g s) passed with %d in flight, stopping them\n",
                       o.drain_seconds, n);
          break;
        }
        const timespec poll{0, 50 * 1000 * 1000};
        const int again = sigtimedwait(&sigs, nullptr, &poll);
        if (again == SIGUSR1) return;
        if (again == SIGINT || again == SIGTERM) {
          std::fprintf(stderr, "hearth: %s received while draining, stopping %d in flight now\n",
                       again == SIGINT ? "SIGINT" : "SIGTERM", n);
          break;
        }
      }
    } else {
      std::fprintf(stderr, "hearth: %s received, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    models.stop();  // in-flight requests end with an error chunk; no model loads after
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
  if (router) {
    std::string list;
    for (const auto& st : models.status()) {
      list += (list.empty() ? "" : ", ") + st.name + " (" + server::model_state_name(st.state) +
              (st.pinned ? ", pinned" : "") + ")";
    }
    std::printf("hearth: %zu models: %s\n", models.size(), list.c_str());
  }
  std::printf("hearth: listening on http://%s:%d (OpenAI API at http://%s:%d/v1%s)\n", o.host.c_str(), port,
              o.host.c_str(), port, o.no_ui ? "" : "; web page at /");
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
  cmd->add_option("-m,--model", o->models,
                  "GGUF file, Hugging Face folder, or a name from the HF hub cache / LM Studio / Ollama (ORG/NAME[:QUANT], "
                  "NAME:TAG; see `hearth list`; default: SmolLM2-135M-Instruct). Repeat it as NAME=REF to serve "
                  "several models, picked by the requests' \"model\"")
      ->allow_extra_args(false);
  cmd->add_option("--models-dir", o->models_dir,
                  "Serve every model in this folder (*.gguf files by stem, model folders by name), loaded on demand");
  cmd->add_option("--config", o->config,
                  "YAML file of models to serve, with per-model ctx, max_seqs, kv_cache_bytes, chat_template, device, "
                  "aliases, pinned, idle_unload (README: Serving several models)");
  cmd->add_option("--pin", o->pin, "Several models: load this one at start and never unload it (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--max-loaded", o->max_loaded,
                  "Several models: most loaded at once; the least recently used idle one is unloaded first (0: no limit)")
      ->default_val(0)
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--max-memory", o->max_memory,
                  "Several models: resident memory of the server (measured) that loading may not exceed, e.g. 24G; "
                  "least recently used models are unloaded to make room");
  cmd->add_option("--max-device-memory", o->max_device_memory,
                  "Several models: device memory the loaded models' back-ends may hold together, e.g. 70G");
  cmd->add_option("--idle-unload", o->idle_unload,
                  "Several models: unload a model unused for this many seconds (0: never; pinned models never)")
      ->default_val(0)
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--load-timeout", o->load_timeout,
                  "Seconds a request waits for its model to load before 503 with Retry-After")
      ->default_val(120)
      ->check(CLI::Range(0.001, 86400.0));
  cmd->add_option("--drain-seconds", o->drain_seconds,
                  "On SIGTERM, drain first: answer new requests 503 and /health/ready 503 while the requests in "
                  "flight finish, for at most this many seconds, then stop (0: SIGTERM stops at once, ending "
                  "requests in flight with an error; SIGINT always does)")
      ->default_val(0)
      ->check(CLI::Range(0.0, 86400.0));
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
  cmd->add_option("--kv-disk", o->kv_disk,
                  "Folder for a KV disk tier: prefix blocks (and hybrid models' state snapshots) evicted from "
                  "memory are kept there and read back on a prefix hit, also after a restart");
  cmd->add_option("--kv-disk-bytes", o->kv_disk_bytes,
                  "Disk budget of --kv-disk per model, e.g. 20G (least recently used files go first)")
      ->default_val("16G");
  cmd->add_option("--kv-swap-bytes", o->kv_swap_bytes,
                  "Host memory for the KV blocks of preempted sequences, e.g. 1G: a sequence preempted for want "
                  "of KV blocks is swapped out and back instead of recomputed when the measured copy is cheaper "
                  "(0: always recompute; default: a quarter of the KV pool, and of the running sequences' recurrent "
                  "states on hybrid models)");
  cmd->add_option("--kv-swap-disk-bytes", o->kv_swap_disk_bytes,
                  "With --kv-disk: the share of --kv-disk-bytes for preempted sequences that --kv-swap-bytes has no "
                  "room for, swapped to the folder and read back instead of recomputed when the measured read is "
                  "cheaper (0: off; default: a quarter of --kv-disk-bytes; prefix files get the rest)");
  cmd->add_option("--spec", o->spec,
                  "Speculative decoding: ngram (draft the next tokens from earlier text of the same sequence and "
                  "verify them in one step; the same output), draft (a draft model proposes them: --draft-model), "
                  "mtp (the model's own multi-token-prediction head: Qwen3.5 files that keep it; CPU for now) or off")
      ->default_val("off");
  cmd->add_option("--draft-model", o->draft_model,
                  "--spec draft: the draft model (path or store name; attention-only, the served model's "
                  "vocabulary), loaded beside each served model on its back-end");
  cmd->add_option("--spec-max", o->spec_max,
                  "Drafted tokens per step at most (fewer where the measured step times and acceptance say so)")
      ->default_val(8);
  cmd->add_option("--max-queue", o->max_queue, "Requests waiting beyond --max-seqs before 429")->default_val(64);
  cmd->add_option("--max-connections", o->max_connections,
                  "HTTP connections served at once (one thread each); more are answered 503 (default: 256, or "
                  "--max-seqs + --max-queue + 64 when that is more)")
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
  cmd->add_option("--api-key", o->api_key,
                  "Require 'Authorization: Bearer KEY' or 'x-api-key: KEY' on every route but /health, /api/hello and the web "
                  "page's static shell (the page asks for the key and sends it; its data routes need it)");
  cmd->add_flag("--no-ui", o->no_ui,
                "No web page: GET / and /ui answer 404 (the page: a live view of /v1/status and a chat panel)");
  cmd->add_option("-t,--threads", o->threads, "Compute threads (default: physical cores)");
  cmd->add_option("--log-file", o->log_file, "Append the request log here (default: stderr)");
  cmd->add_option("--kv-type", o->kv_type, "KV cache element type: f16, f32 or q8_0 (8-bit blocks)")->default_val("f16");
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
  // Hidden (empty group): tests only. KIND:MARKER[@N],... makes requests whose prompt
  // contains MARKER fail inside the engine (see engine/fault_inject.h).
  cmd->add_option("--allowed-media-dir", o->media.allowed_media_dirs,
                  "Images may be read from file:// URLs inside this directory (repeatable; default: none)");
  cmd->add_flag("--allow-remote-media", o->media.allow_remote, "Images may be downloaded from http(s) URLs");
  cmd->add_option("--max-media-bytes", o->media.max_bytes, "Largest image (encoded bytes) a request may send or name")
      ->default_val(o->media.max_bytes);
  cmd->add_option("--media-timeout-ms", o->media.timeout_ms, "Time limit of one image download")
      ->default_val(o->media.timeout_ms);
  cmd->add_option("--max-images-per-request", o->media.max_images, "Images one request may carry (400 above)")
      ->default_val(o->media.max_images);
  cmd->add_option("--mmproj", o->mmproj,
                  "The model's vision projector (GGUF); default: the HF folder's tower, or an mmproj*.gguf beside the model");
  cmd->add_option("--max-image-pixels", o->max_image_pixels, "Largest decoded image (width x height) a request may send")
      ->default_val(o->max_image_pixels);
  cmd->add_option("--test-fault-inject", o->test_fault_inject, "Test only: inject engine faults")->group("");
  add_tune_option(*cmd);
  cmd->callback([o]() { serve(*o); });
}

}  // namespace hearth::cli
