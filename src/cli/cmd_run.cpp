// `hearth run`: one-shot generation with honest statistics. Text streams to
// stdout; then three lines on stderr (prompt speed, decode-only generation
// speed, peak resident memory), or one JSON object with --json.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "cli/model_ref.h"
#include "cli/common.h"
#include "cli/default_model.h"
#include "convert/hf_import.h"
#include "convert/hf_vision.h"
#include "core/error.h"
#include "core/tune.h"
#include "core/mapped_file.h"
#include "engine/chat_prompt.h"
#include "engine/generator.h"
#include "engine/model_drafter.h"
#include "engine/prompt_images.h"
#include "format/gguf.h"
#include "grammar/constraint.h"
#include "model/causal_lm.h"
#include "model/vision_encoder.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {
namespace {

using json = nlohmann::ordered_json;

struct RunOptions {
  bool no_warmup = false;
  int64_t prefill_chunk = 2048;
  bool deterministic = false;
  std::string model;
  std::string prompt;
  std::string prompt_file;
  std::string system;
  bool raw = false;
  int32_t max_tokens = 256;
  engine::SamplerParams sampler;
  std::optional<uint64_t> seed;
  int64_t ctx = 0;
  int threads = 0;
  int32_t logprobs = 0;
  bool json_out = false;
  std::string kv_type = "f16";
  std::string json_schema_file;  // constrained output: a JSON schema file
  bool json_object = false;      // constrained output: any JSON object
  std::string device = "auto";
  std::vector<std::string> images;  // --image FILE (repeatable)
  std::string mmproj;               // --mmproj FILE
  int64_t max_image_pixels = 64LL << 20;
  std::string spec = "off";  // --spec
  int32_t spec_max = 8;      // --spec-max
  std::string draft_model;   // --draft-model (--spec draft)
};

std::string build_prompt(const RunOptions& o, const gguf::File& file, const engine::ChatPrompt& chat) {
  std::string text = o.prompt;
  if (!o.prompt_file.empty()) text = read_text_file(o.prompt_file);
  if (o.raw) {
    // Raw prompts get each image's placeholder in front, as the chat template would write it.
    std::string pre;
    for (size_t i = 0; i < o.images.size(); ++i) pre += "<|vision_start|><|image_pad|><|vision_end|>";
    return pre + text;
  }
  if (!chat.has_template()) {
    fail(ErrorKind::kInvalidInput, "run",
         file.name() + ": the model has no chat template (tokenizer.chat_template); use --raw to send the prompt as is");
  }
  json messages = json::array();
  if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
  if (o.images.empty()) {
    messages.push_back({{"role", "user"}, {"content", text}});
  } else {
    // The images first, then the question (as mlx_vlm generate --image does).
    json content = json::array();
    for (size_t i = 0; i < o.images.size(); ++i) content.push_back({{"type", "image"}});
    content.push_back({{"type", "text"}, {"text", text}});
    messages.push_back({{"role", "user"}, {"content", content}});
  }
  return chat.render(messages);
}

void run(RunOptions o) {
  if (!o.prompt.empty() && !o.prompt_file.empty()) fail(ErrorKind::kInvalidInput, "run", "give -p or -f, not both");
  if (o.prompt.empty() && o.prompt_file.empty()) fail(ErrorKind::kInvalidInput, "run", "no prompt: give -p TEXT or -f FILE");
  if (o.max_tokens < 0) fail(ErrorKind::kInvalidInput, "run", "-n must be >= 0");
  if (o.logprobs < 0 || o.logprobs > 20) fail(ErrorKind::kInvalidInput, "run", "--logprobs must be in [0, 20]");
  if (o.model.empty()) o.model = find_default_model();
  if (o.seed) {
    o.sampler.seed = *o.seed;
  } else {
    o.sampler.seed = std::random_device{}();
  }
  engine::validate(o.sampler);
  const ops::KvType kv_type = parse_kv_type(o.kv_type);

  store::ModelEntry model_entry;
  gguf::File file = open_model_arg(o.model, &model_entry);
  const model::Hparams hp = model::read_hparams(file);
  model::KvPool::check_kv_type(hp, kv_type);
  const int64_t n_ctx = o.ctx > 0 ? o.ctx : std::min<int64_t>(hp.n_ctx_train, 4096);
  if (n_ctx < 8 || n_ctx > (int64_t{1} << 22)) fail(ErrorKind::kInvalidInput, "run", "--ctx must be in [8, 4194304]");
  const uint64_t kv_bytes = model::KvCache::bytes_needed(hp, n_ctx, kv_type);
  const backends::Device device = choose_device(o.device, file.file_size() + kv_bytes, "run");
  // Fail before loading when the machine cannot hold the model and its cache (on a GPU
  // the weights and cache live in device memory, checked by choose_device).
  const uint64_t need = device.cuda ? (uint64_t{1} << 30) : file.file_size() + kv_bytes + (uint64_t{100} << 20);
  if (const uint64_t avail = available_memory(); avail != 0 && need > avail) {
    fail(ErrorKind::kResource, "run",
         o.model + ": needs about " + std::to_string(need >> 20) + " MiB (model + KV cache for " +
             std::to_string(n_ctx) + " tokens) but only " + std::to_string(avail >> 20) +
             " MiB are available; lower --ctx or use a smaller model");
  }
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_gguf(file);
  const std::unique_ptr<ops::Backend> backend_ptr = backends::make_backend(device, o.threads);
  ops::Backend& backend = *backend_ptr;
  apply_deterministic(backend, o.deterministic);
  const std::unique_ptr<model::CausalLm> loaded = model::load_causal_lm(file, backend);
  model::CausalLm& model = *loaded;
  log_device_memory(backend, device);
  if (device.cuda && !o.no_warmup) log_warm_up(model, backend, n_ctx, kv_type);
  // Hybrid models with speculation: a state checkpoint per drafted row (generator.cpp).
  const engine::SpecMode spec_mode = engine::parse_spec_mode(o.spec);
  const bool spec_on = spec_mode != engine::SpecMode::kOff;
  if (spec_mode == engine::SpecMode::kMtp) {
    model.enable_mtp();  // before the KV cache: it holds the MTP block's attention too
  }
  model::KvCache cache(backend, model.hparams(), n_ctx, kv_type, spec_on ? std::max(0, o.spec_max) : 0);

  // Images: decoded, preprocessed and encoded by the model's vision tower, their rows in the prompt.
  std::optional<gguf::File> proj;
  std::unique_ptr<model::VisionEncoder> vision;
  std::vector<float> image_embd;
  model::SeqMedia media;
  if (!o.images.empty()) {
    proj = convert::open_projector(model_entry.path, o.mmproj.empty() ? model_entry.mmproj : o.mmproj);
    if (!proj || !model.takes_images())
      fail(ErrorKind::kInvalidInput, "run", o.model + " takes text only (no vision encoder: give its projector with --mmproj)");
  }
  const engine::ChatPrompt chat(file, tok);
  const std::string prompt_text = build_prompt(o, file, chat);
  std::vector<int32_t> prompt = chat.encode(prompt_text);

  if (!o.images.empty()) {
    vision = std::make_unique<model::VisionEncoder>(*proj, backend);
    model::check_projector_fits(*vision, model.hparams().n_embd, proj->name());
    if (device.cuda && !o.no_warmup) log_vision_warm_up(*vision);
    const int32_t pad = engine::image_pad_id(tok);
    if (pad < 0) fail(ErrorKind::kInvalidInput, "run", o.model + ": the vocabulary has no <|image_pad|> token");
    std::vector<engine::PromptImage> images;
    for (const std::string& path : o.images)
      images.push_back(engine::prepare_image(read_text_file(path), path, *vision, o.max_image_pixels));
    engine::expand_image_pads(prompt, pad, images, vision->hparams().merge);
    const auto t0 = std::chrono::steady_clock::now();
    engine::encode_prompt_images(*vision, static_cast<int64_t>(prompt.size()), images, image_embd, media);
    const double enc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t n_img_tokens = 0;
    for (const auto& im : images) n_img_tokens += im.n_tokens;
    std::fprintf(stderr, "Images: %zu, %lld tokens, encoded in %.3f s\n", images.size(),
                 static_cast<long long>(n_img_tokens), enc_s);
  }

  engine::GenerateOptions go;
  go.max_tokens = o.max_tokens;
  go.n_logprobs = o.logprobs;
  go.sampler = o.sampler;
  go.prefill_chunk = o.prefill_chunk;
  go.spec.mode = engine::parse_spec_mode(o.spec);
  go.spec.max_draft = o.spec_max;
  go.spec.adaptive = tune::get(tune::kSpecAdaptive) != 0;
  // --spec draft: the draft model, on the same back-end (it outlives generate below).
  std::optional<gguf::File> draft_file;
  std::unique_ptr<model::CausalLm> draft_model;
  if (go.spec.mode == engine::SpecMode::kDraft) {
    if (o.draft_model.empty()) fail(ErrorKind::kInvalidInput, "run", "--spec draft needs --draft-model");
    draft_file.emplace(open_model_arg(o.draft_model));
    draft_model = model::load_causal_lm(*draft_file, backend);
    if (const std::string why = engine::ModelDrafter::unsuitable(*draft_model, model.hparams().n_vocab); !why.empty())
      fail(ErrorKind::kInvalidInput, "run", o.draft_model + ": " + why);
    go.spec.draft = draft_model.get();
  } else if (!o.draft_model.empty()) {
    fail(ErrorKind::kInvalidInput, "run", "--draft-model is for --spec draft");
  }
  if (!media.pos3.empty()) go.media = &media;
  if (!o.json_schema_file.empty() || o.json_object) {
    if (!o.json_schema_file.empty() && o.json_object) {
      fail(ErrorKind::kInvalidInput, "run", "give --json-schema or --json-object, not both");
    }
    grammar::ConstraintSpec spec;
    if (!o.json_schema_file.empty()) {
      spec.kind = grammar::ConstraintKind::kJsonSchema;
      spec.text = read_text_file(o.json_schema_file);
    }
    grammar::ConstraintCompiler compiler(tok, static_cast<int32_t>(model.hparams().n_vocab),
                                         engine::end_of_generation_tokens(tok), 1);
    try {
      go.constraint = compiler.compile(spec);
    } catch (const Error& e) {
      throw Error(e.kind(), (o.json_schema_file.empty() ? std::string() : o.json_schema_file + ": ") + e.what());
    }
  }
  auto on_text = [&](const std::string& s) {
    if (o.json_out) return;
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  const engine::GenerateResult r = engine::generate(model, cache, tok, prompt, go, on_text);
  const double peak = peak_rss_gb();

  if (o.json_out) {
    json out;
    out["model"] = o.model;
    out["text"] = r.text;
    out["prompt_tokens"] = r.n_prompt;
    out["prompt_ids"] = prompt;
    out["tokens"] = r.tokens;
    out["generation_tokens"] = r.tokens.size();
    out["prompt_tps"] = r.prompt_tps();
    out["generation_tps"] = r.generation_tps();
    out["ttft_ms"] = r.ttft_s * 1000.0;
    out["prefill_ms"] = r.prefill_s * 1000.0;
    out["decode_ms"] = r.decode_s * 1000.0;
    out["peak_memory_gb"] = peak;
    out["stop_reason"] = r.stop_reason;
    out["seed"] = o.sampler.seed;
    const auto* cpu_be = dynamic_cast<const cpu::CpuBackend*>(&backend);
    out["threads"] = cpu_be != nullptr ? cpu_be->n_threads() : 0;
    out["device"] = device.str();
    out["peak_device_memory_gb"] = static_cast<double>(backend.device_memory_peak()) / 1e9;
    out["ctx"] = n_ctx;
    out["kv_type"] = ops::kv_type_name(kv_type);
    out["drafted_tokens"] = r.drafted;
    out["accepted_tokens"] = r.accepted;
    if (o.logprobs > 0) {
      json lp = json::array();
      for (const auto& s : r.logprobs) {
        json top = json::array();
        for (const auto& t : s.top) {
          top.push_back({{"token", t.token}, {"text", tok.token_to_piece(t.token)}, {"logprob", t.logprob}});
        }
        lp.push_back({{"token", s.token}, {"text", tok.token_to_piece(s.token)}, {"logprob", s.logprob},
                      {"top_logprobs", top}});
      }
      out["logprobs"] = lp;
    }
    // Invalid UTF-8 in token texts is replaced rather than aborting the dump.
    std::printf("%s\n", out.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    std::fflush(stdout);
  }
  if (r.stop_reason == "context") {
    std::fprintf(stderr, "hearth: stopped at the context limit (%lld tokens); raise --ctx for longer output\n",
                 static_cast<long long>(n_ctx));
  }
  if (!o.json_out) {
    std::fprintf(stderr, "Prompt: %d tokens, %.3f tokens-per-sec\n", r.n_prompt, r.prompt_tps());
    std::fprintf(stderr, "Generation: %zu tokens, %.3f tokens-per-sec\n", r.tokens.size(), r.generation_tps());
    if (r.drafted > 0) std::fprintf(stderr, "Speculative: %d tokens drafted, %d accepted\n", r.drafted, r.accepted);
    std::fprintf(stderr, "Peak memory: %.3f GB\n", peak);
    if (device.cuda) {
      std::fprintf(stderr, "Peak device memory: %.3f GB (%s)\n",
                   static_cast<double>(backend.device_memory_peak()) / 1e9, backend.name().c_str());
    }
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt and report measured speeds");
  cmd->add_option("-m,--model", o->model, "GGUF file, Hugging Face folder, or a name from the HF hub cache / LM Studio / Ollama (ORG/NAME[:QUANT], NAME:TAG; see `hearth list`; default: SmolLM2-135M-Instruct)");
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from this file");
  cmd->add_option("--system", o->system, "System message (chat template only)");
  cmd->add_option("--image", o->images, "An image file (PNG, JPEG, WebP, GIF) shown to the model before the prompt (repeatable; models with a vision tower)");
  cmd->add_option("--mmproj", o->mmproj, "The model's vision projector (GGUF); default: the HF folder's tower, or an mmproj*.gguf beside the model");
  cmd->add_option("--max-image-pixels", o->max_image_pixels, "Refuse decoded images larger than this (width x height)")->default_val(64LL << 20);
  cmd->add_flag("--deterministic", o->deterministic,
                "Batch-invariant kernels: a request's output does not depend on what else runs with it (the CPU "
                "back-end always is; on a GPU slower: docs/ARCHITECTURE.md)");
  cmd->add_flag("--no-warmup", o->no_warmup,
                "On a GPU, skip the warm-up prompt at load (kernels then load inside the first request)");
  cmd->add_flag("--raw", o->raw, "Send the prompt as is, without the chat template");
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Generate at most this many tokens")->default_val(256);
  cmd->add_option("--temp", o->sampler.temperature, "Temperature (0: greedy)")->default_val(0.0);
  cmd->add_option("--top-k", o->sampler.top_k, "Top-k (0: off)")->default_val(40);
  cmd->add_option("--top-p", o->sampler.top_p, "Top-p (1: off)")->default_val(0.95);
  cmd->add_option("--min-p", o->sampler.min_p, "Min-p (0: off)")->default_val(0.05);
  cmd->add_option("--repeat-penalty", o->sampler.repeat_penalty, "Repetition penalty (1: off)")->default_val(1.0);
  cmd->add_option("--presence-penalty", o->sampler.presence_penalty, "Presence penalty")->default_val(0.0);
  cmd->add_option("--frequency-penalty", o->sampler.frequency_penalty, "Frequency penalty")->default_val(0.0);
  cmd->add_option("--seed", o->seed, "Random seed (same seed, same output)");
  cmd->add_option("--prefill-chunk", o->prefill_chunk,
                  "Prompt tokens per model step (0: the whole prompt in one step; more needs more memory for activations)")
      ->default_val(2048)
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--ctx", o->ctx, "Context size in tokens (default: the model's, at most 4096)");
  cmd->add_option("-t,--threads", o->threads, "Threads (default: physical cores)");
  cmd->add_option("--logprobs", o->logprobs, "With --json: top-K log-probabilities per generated token");
  cmd->add_option("--kv-type", o->kv_type, "KV cache element type: f16, f32 or q8_0 (8-bit blocks)")->default_val("f16");
  cmd->add_option("--device", o->device,
                  "cpu, cuda, cuda:N or auto (the first GPU when one is visible and the model fits)")
      ->default_val("auto");
  cmd->add_option("--spec", o->spec,
                  "Speculative decoding: ngram (draft the next tokens from earlier text and verify them in one "
                  "step; the same output), draft (a draft model proposes them: --draft-model), mtp (the model's own "
                  "multi-token-prediction head: Qwen3.5 files that keep it; CPU for now) or off")
      ->default_val("off");
  cmd->add_option("--draft-model", o->draft_model,
                  "--spec draft: the draft model (path or store name; attention-only, the same vocabulary)");
  cmd->add_option("--spec-max", o->spec_max, "Drafted tokens per step at most")
      ->default_val(8)
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--json", o->json_out, "Print one JSON object instead of text and statistics");
  cmd->add_option("--json-schema", o->json_schema_file, "Constrain the output to JSON that follows this schema file");
  cmd->add_flag("--json-object", o->json_object, "Constrain the output to a JSON object");
  add_tune_option(*cmd);
  cmd->callback([o]() { run(*o); });
}

}  // namespace hearth::cli
