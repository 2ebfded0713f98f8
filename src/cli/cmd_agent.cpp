// `hearth agent`: a terminal agent over an OpenAI-compatible server, by default
// its own `hearth serve` (see src/agent/).
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>

#include "agent/agent_loop.h"
#include "agent/chat_client.h"
#include "agent/file_tools.h"
#include "agent/image_tool.h"
#include "agent/server_supervisor.h"
#include "agent/terminal.h"
#include "agent/tools.h"
#include "agent/transcript.h"
#include "bench/sse_client.h"
#include "cli/commands.h"
#include "cli/serve_specs.h"
#include "cli/common.h"
#include "core/error.h"

namespace hearth::cli {
namespace {

using agent::TurnEnd;
namespace fs = std::filesystem;

struct AgentCliOptions {
  std::vector<std::string> models;  // -m: REF, or NAME=REF (repeatable) for the server it starts
  std::string url, prompt, kv_cache_bytes, device, log_dir, resume, tool_choice = "auto",
                                                                           system_prompt, spec, draft_model;
  int spec_max = 0;
  bool no_server = false, think = false, no_think = false, yes = false;
  int max_steps = 15, threads = 0;
  int64_t ctx = 0, max_tokens = 0;
  size_t tool_output_chars = 8000;
  double shell_timeout = 120, temperature = -1;
  std::vector<std::string> allow;
  std::string vision = "auto";
  std::vector<std::string> images;
  size_t max_images = 4;
};

std::string default_log_dir() {
  if (const char* s = std::getenv("XDG_STATE_HOME"); s != nullptr && *s != '\0')
    return std::string(s) + "/hearth/agent";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
    return std::string(h) + "/.local/state/hearth/agent";
  return "/tmp/hearth-agent";
}

std::string stamp() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return std::string(buf) + "-" + std::to_string(getpid());
}

void check(const AgentCliOptions& o) {
  const auto bad = [](const std::string& m) { fail(ErrorKind::kInvalidInput, "agent", m); };
  if (o.max_steps < 1) bad("--max-steps must be at least 1");
  if (o.think && o.no_think) bad("--think and --no-think exclude each other");
  if (o.tool_choice != "auto" && o.tool_choice != "required" && o.tool_choice != "none" &&
      !agent::is_known_tool(o.tool_choice))
    bad("--tool-choice must be auto, required, none or a tool name (run_shell, read_file, "
        "write_file, edit_file, "
        "list_dir, search_files, view_image); got '" +
        o.tool_choice + "'");
  if (o.vision != "auto" && o.vision != "on" && o.vision != "off")
    bad("--vision must be auto, on or off; got '" + o.vision + "'");
  if (o.vision == "off" && !o.images.empty()) bad("--image needs a model that takes images; not with --vision off");
  if (o.vision == "off" && o.tool_choice == "view_image") bad("--tool-choice view_image: not with --vision off");
  if (o.max_images < 1) bad("--max-images must be at least 1");
  if (!o.url.empty() && o.no_server)
    bad("--url already means no server of our own; drop --no-server");
  if ((!o.url.empty() || o.no_server) && o.models.size() > 1)
    bad("several -m models apply to the server the agent starts; not with --url / --no-server");
  if (o.ctx < 0) bad("--ctx must be positive");
  if (o.max_tokens < 0) bad("--max-tokens must be positive");
  if (o.shell_timeout <= 0) bad("--shell-timeout must be positive");
  if (!o.url.empty() || o.no_server) {
    for (const auto& [flag, set] :
         {std::pair<const char*, bool>{"--kv-cache-bytes", !o.kv_cache_bytes.empty()},
          {"--device", !o.device.empty()},
          {"--threads", o.threads != 0},
          {"--spec", !o.spec.empty()},
          {"--spec-max", o.spec_max != 0},
          {"--draft-model", !o.draft_model.empty()}})
      if (set)
        bad(std::string(flag) +
            " applies to the server the agent starts; not with --url / --no-server");
  }
  if (!o.kv_cache_bytes.empty()) parse_byte_size(o.kv_cache_bytes, "--kv-cache-bytes");
}

// The images of --image / "/image FILE", checked as view_image checks them.
agent::ImageFile load_image(const std::string& path, const char* what) {
  try {
    return agent::read_image_file(path);
  } catch (const agent::ToolError& e) {
    fail(ErrorKind::kInvalidInput, "agent", std::string(what) + ": " + e.what());
  }
}

int run_agent(AgentCliOptions o) {
  check(o);
  std::vector<agent::ImageFile> attached;
  for (const std::string& path : o.images) attached.push_back(load_image(path, "--image"));
  if (o.log_dir.empty()) o.log_dir = default_log_dir();
  std::error_code ec;
  fs::create_directories(o.log_dir, ec);
  if (ec)
    fail(ErrorKind::kIo, "agent", "--log-dir: cannot create '" + o.log_dir + "': " + ec.message());
  agent::install_signal_handlers();
  const std::string id = stamp();

  std::unique_ptr<agent::ServerSupervisor> server;
  std::string url = o.url;
  if (url.empty() && o.no_server) url = "http://127.0.0.1:8080";
  if (url.empty()) {
    std::vector<std::string> args = {"--max-seqs", "2"};
    if (o.models.size() == 1 && !split_named_model(o.models[0])) {
      args.insert(args.end(), {"-m", o.models[0]});
    } else if (!o.models.empty()) {
      // Several models behind the server: the agent talks to the first, kept loaded.
      for (const auto& m : o.models) args.insert(args.end(), {"--model", m});
      args.insert(args.end(), {"--pin", model_value_name(o.models[0])});
    }
    if (!o.kv_cache_bytes.empty()) args.insert(args.end(), {"--kv-cache-bytes", o.kv_cache_bytes});
    if (o.ctx > 0) args.insert(args.end(), {"--ctx", std::to_string(o.ctx)});
    if (!o.device.empty()) args.insert(args.end(), {"--device", o.device});
    if (o.threads > 0) args.insert(args.end(), {"--threads", std::to_string(o.threads)});
    // Coding agents repeat spans of their context (file contents, diffs): prompt lookup
    // turns them into drafted tokens; the server checks the values.
    if (!o.spec.empty()) args.insert(args.end(), {"--spec", o.spec});
    if (o.spec_max > 0) args.insert(args.end(), {"--spec-max", std::to_string(o.spec_max)});
    if (!o.draft_model.empty()) args.insert(args.end(), {"--draft-model", o.draft_model});
    server = std::make_unique<agent::ServerSupervisor>(args, o.log_dir + "/server-" + id + ".log");
    std::fprintf(stderr, "hearth agent: starting the server (log: %s)\n",
                 server->log_path().c_str());
    server->start();
    url = server->url();
    std::fprintf(stderr, "hearth agent: server pid %d at %s\n", static_cast<int>(server->pid()),
                 url.c_str());
  }
  bench::Endpoint ep = bench::parse_endpoint(url, "--url");
  if (const char* key = std::getenv("HEARTH_API_KEY"); key != nullptr) ep.api_key = key;
  agent::ChatClient client(ep);
  const agent::ModelInfo info = client.model_info();

  // Whether to offer view_image: --vision on / off, or what the server says (auto).
  bool images = o.vision == "on";
  if (o.vision == "auto") {
    const std::optional<bool> says = client.takes_images();
    images = says.value_or(false);
    if (!says)
      std::fprintf(stderr,
                   "hearth agent: the server does not say whether the model takes images; view_image "
                   "is not offered (--vision on offers it)\n");
    if (!images && !o.images.empty())
      fail(ErrorKind::kInvalidInput, "agent",
           "--image: " + std::string(says ? "the model '" + info.id + "' takes text only (no vision encoder)"
                                          : "the server does not say that it takes images (--vision on to send anyway)"));
    if (!images && o.tool_choice == "view_image")
      fail(ErrorKind::kInvalidInput, "agent", "--tool-choice view_image: the model does not take images");
  }

  agent::AgentOptions ao;
  ao.model = !o.url.empty() && !o.models.empty() ? o.models[0] : info.id;
  ao.max_steps = o.max_steps;
  if (o.think) ao.think = true;
  if (o.no_think) ao.think = false;
  ao.tool_choice = o.tool_choice;
  ao.max_tokens = o.max_tokens;
  if (o.temperature >= 0) ao.temperature = o.temperature;
  ao.context_window = o.ctx > 0 ? o.ctx : info.context_window;
  ao.system_prompt = o.system_prompt;
  ao.tools.output_chars = o.tool_output_chars;
  ao.tools.shell_timeout_s = o.shell_timeout;
  ao.tools.yes = o.yes;
  ao.tools.allow = o.allow;
  ao.tools.images = images;
  ao.max_images = o.max_images;
  if (ao.context_window <= 0)
    std::fprintf(stderr,
                 "hearth agent: the server reports no context window; pass --ctx to trim the "
                 "conversation\n");

  agent::Terminal term(o.log_dir + "/history");
  const std::string transcript_path =
      o.resume.empty() ? o.log_dir + "/agent-" + id + ".jsonl" : o.resume;
  nlohmann::ordered_json resumed;
  if (!o.resume.empty()) resumed = agent::load_transcript(o.resume);
  agent::TranscriptWriter transcript(transcript_path);
  agent::Agent agent(ao, client, server.get(), term, &transcript);
  if (!resumed.empty())
    agent.load(resumed);
  else
    agent.begin();
  std::fprintf(stderr, "hearth agent: model %s, window %lld tokens, %s, transcript %s\n",
               ao.model.c_str(), static_cast<long long>(ao.context_window),
               images ? "takes images (view_image)" : "text only", transcript_path.c_str());

  int rc = 0;
  if (!o.prompt.empty()) {
    const TurnEnd end = agent.ask(o.prompt, std::nullopt, attached);
    rc = end == TurnEnd::kFailed ? 1 : (end == TurnEnd::kInterrupted ? 130 : 0);
  } else {
    if (term.interactive())
      term.notice(
          "hearth agent: type a message; commands: quit, clear, think, no_think, /think QUESTION, "
          "/image FILE (goes with the next message)");
    for (;;) {
      auto line = term.read_line("> ");
      if (!line) break;
      std::string s = *line;
      s.erase(0, s.find_first_not_of(" \t"));
      while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
      if (s.empty()) continue;
      if (s == "quit" || s == "exit" || s == "/quit") break;
      if (s == "clear" || s == "/clear") {
        agent.clear();
        term.notice("[conversation cleared]");
      } else if (s == "think" || s == "/think") {
        agent.set_think(true);
        term.notice("[thinking on]");
      } else if (s == "no_think" || s == "/no_think") {
        agent.set_think(false);
        term.notice("[thinking off]");
      } else if (s.rfind("/think ", 0) == 0) {
        agent.ask(s.substr(7), true, attached);
        attached.clear();
      } else if (s.rfind("/image ", 0) == 0) {
        const std::string path = s.substr(7);
        if (!images) {
          term.notice("[/image: the model does not take images]");
          continue;
        }
        try {
          attached.push_back(agent::read_image_file(path));
          term.notice("[image " + agent::describe_image(attached.back()) + " goes with the next message]");
        } catch (const agent::ToolError& e) {
          term.notice(std::string("[/image: ") + e.what() + "]");
        }
      } else {
        agent.ask(s, std::nullopt, attached);
        attached.clear();
      }
    }
  }
  if (server) {
    server->stop();
    std::fprintf(stderr, "hearth agent: server stopped\n");
  }
  return rc;
}

}  // namespace

void add_agent_command(CLI::App& app) {
  auto o = std::make_shared<AgentCliOptions>();
  auto* cmd =
      app.add_subcommand("agent", "A terminal agent with tools over its own server (or --url)");
  cmd->add_option("-m,--model", o->models,
                  "Model for the server it starts: a path or a store name, see `hearth list`; repeat it as NAME=REF "
                  "to start the server with several (the agent uses the first) (with --url: the model name to ask for)")
      ->allow_extra_args(false);
  cmd->add_option("--url", o->url, "Use this OpenAI-compatible server instead of starting one");
  cmd->add_flag("--no-server", o->no_server, "Do not start a server; use http://127.0.0.1:8080");
  cmd->add_option("-p,--prompt", o->prompt, "Run this one message and exit");
  cmd->add_flag("--think", o->think, "Ask for reasoning (chat_template_kwargs enable_thinking)");
  cmd->add_flag("--no-think", o->no_think, "Ask for no reasoning");
  cmd->add_option("--max-steps", o->max_steps, "Requests per message before stopping")
      ->default_val(15);
  cmd->add_option("--kv-cache-bytes", o->kv_cache_bytes,
                  "KV cache budget of the server it starts, e.g. 512M");
  cmd->add_option("--ctx", o->ctx,
                  "Context window in tokens (for the server it starts, and for trimming)");
  cmd->add_option("--device", o->device, "Device of the server it starts: cpu, cuda, cuda:N, auto");
  cmd->add_option("-t,--threads", o->threads, "Compute threads of the server it starts");
  cmd->add_option("--spec", o->spec,
                  "Speculative decoding of the server it starts: ngram, draft, mtp or off (see hearth serve)");
  cmd->add_option("--draft-model", o->draft_model, "--spec draft: the draft model of the server it starts");
  cmd->add_option("--spec-max", o->spec_max, "Drafted tokens per step at most, for the server it starts");
  cmd->add_option("--tool-output-chars", o->tool_output_chars,
                  "Cap on each tool result sent to the model")
      ->default_val(8000);
  cmd->add_option("--tool-choice", o->tool_choice,
                  "auto, required, none or a tool name (forced on the first step of each message)")
      ->default_val("auto");
  cmd->add_option("--allow", o->allow,
                  "A program the shell tool may run without asking (repeatable)");
  cmd->add_option("--log-dir", o->log_dir,
                  "Where the server log, transcripts and history go (default: "
                  "~/.local/state/hearth/agent)");
  cmd->add_option("--resume", o->resume,
                  "Continue the conversation of this transcript (JSONL), appending to it");
  cmd->add_option("--vision", o->vision,
                  "Offer view_image (show an image file to the model): auto (when the server says the model "
                  "takes images), on, off")
      ->default_val("auto");
  cmd->add_option("--image", o->images,
                  "An image (PNG, JPEG, WebP, GIF) sent with the -p message, or the first typed one (repeatable)");
  cmd->add_option("--max-images", o->max_images,
                  "Images per request; older ones are left out of what is sent")
      ->default_val(4);
  cmd->add_flag("-y,--yes", o->yes, "Run shell commands and write files without asking");
  cmd->add_option("--max-tokens", o->max_tokens,
                  "Tokens per answer (default: the server's choice)");
  cmd->add_option("--temperature", o->temperature, "Sampling temperature (default: the server's)");
  cmd->add_option("--shell-timeout", o->shell_timeout, "Time limit of a shell command in seconds")
      ->default_val(120);
  cmd->add_option("--system", o->system_prompt, "System prompt")
      ->default_val(
          "You are a helpful assistant in a terminal. Use the tools to look at and change files "
          "and to "
          "run commands when that helps; answer briefly.");
  cmd->callback([o]() {
    const int rc = run_agent(*o);
    if (rc != 0) std::exit(rc);
  });
}

}  // namespace hearth::cli
