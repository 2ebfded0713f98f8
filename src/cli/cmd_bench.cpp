// `hearth bench`: measures OpenAI-compatible servers (ours or anyone's) the same
// way, side by side; see docs/BENCH.md. The work lives in src/bench/.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/image_payload.h"
#include "bench/launcher.h"
#include "bench/report.h"
#include "bench/runner.h"
#include "cli/commands.h"
#include "core/error.h"

namespace hearth::cli {
namespace {

struct BenchCli {
  std::vector<std::string> targets, launches;
  std::string model, scenarios, lengths, concurrency, api_key, out = "bench-results";
  int reps = 5, max_tokens = 128, agent_turns = 8;
  int64_t agent_system_tokens = 1500;
  int image_size = 1024;
  int64_t image_words = 50;
  std::string image_file;
  uint64_t seed = 42;
  double temperature = 0.0;
  double top_p = 1.0;
  int top_k = 0;
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  double launch_timeout = 300, request_timeout = 600;
  bool quick = false;
};

[[noreturn]] void bad(const std::string& msg) { fail(ErrorKind::kInvalidInput, "bench", msg); }

std::pair<std::string, std::string> split_named(const std::string& s, const char* opt) {
  const size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    bad(std::string(opt) + " '" + s + "': expected NAME=" + (std::string(opt) == "--launch" ? "COMMAND" : "URL"));
  return {s.substr(0, eq), s.substr(eq + 1)};
}

template <typename T>
std::vector<T> parse_list(const std::string& text, const char* opt, long long lo, long long hi) {
  std::vector<T> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < lo || v > hi)
      bad(std::string(opt) + ": '" + item + "' is not a whole number in [" + std::to_string(lo) + ", " +
          std::to_string(hi) + "]");
    out.push_back(static_cast<T>(v));
  }
  if (out.empty()) bad(std::string(opt) + ": empty list");
  return out;
}

std::string command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), out;
  std::stringstream ss(raw);
  std::string arg;
  bool first = true;
  while (std::getline(ss, arg, '\0')) {
    if (first) {
      arg = "hearth";
      first = false;
    } else {
      out += ' ';
    }
    const bool quote = arg.find_first_of(" \t'\"$&|;<>()*?") != std::string::npos;
    if (quote) {
      std::string q = "'";
      for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
      arg = q + "'";
    }
    out += arg;
  }
  return out;
}

void on_signal(int sig) {
  bench::kill_all_launched();
  signal(sig, SIG_DFL);
  raise(sig);
}

void bench_main(const BenchCli& c, CLI::App* cmd) {
  const auto given = [&](const char* name) { return cmd->get_option(name)->count() > 0; };
  bench::BenchOptions o;
  o.reps = c.reps;
  o.max_tokens = c.max_tokens;
  o.agent_turns = c.agent_turns;
  o.agent_system_tokens = c.agent_system_tokens;
  o.seed = c.seed;
  o.temperature = c.temperature;
  if (!(c.temperature >= 0.0 && c.temperature <= 2.0)) bad("--temperature must be in [0, 2]");
  o.top_p = c.top_p;
  if (!(c.top_p > 0.0 && c.top_p <= 1.0)) bad("--top-p must be in (0, 1]");
  o.top_k = c.top_k;
  if (c.top_k < 0) bad("--top-k must be >= 0");
  o.frequency_penalty = c.frequency_penalty;
  o.presence_penalty = c.presence_penalty;
  if (!(std::fabs(c.frequency_penalty) <= 2.0)) bad("--frequency-penalty must be in [-2, 2]");
  if (!(std::fabs(c.presence_penalty) <= 2.0)) bad("--presence-penalty must be in [-2, 2]");
  o.model = c.model;
  o.request_timeout_s = c.request_timeout;
  if (c.quick) {
    if (!given("--reps")) o.reps = 2;
    if (!given("--max-tokens")) o.max_tokens = 16;
    if (!given("--lengths")) o.lengths = {64, 256};
    if (!given("--concurrency")) o.concurrency = {1, 2};
    if (!given("--agent-turns")) o.agent_turns = 3;
    if (!given("--agent-system-tokens")) o.agent_system_tokens = 160;
  }
  if (!c.lengths.empty()) o.lengths = parse_list<int64_t>(c.lengths, "--lengths", 1, 10'000'000);
  if (!c.concurrency.empty()) o.concurrency = parse_list<int>(c.concurrency, "--concurrency", 1, 1024);
  std::sort(o.lengths.begin(), o.lengths.end());
  o.lengths.erase(std::unique(o.lengths.begin(), o.lengths.end()), o.lengths.end());
  std::sort(o.concurrency.begin(), o.concurrency.end());
  o.concurrency.erase(std::unique(o.concurrency.begin(), o.concurrency.end()), o.concurrency.end());
  if (o.reps < 1 || o.reps > 1000) bad("--reps must be in [1, 1000]");
  if (o.max_tokens < 1) bad("--max-tokens must be >= 1");
  if (o.agent_turns < 1 || o.agent_turns > 200) bad("--agent-turns must be in [1, 200]");
  if (!c.scenarios.empty()) {
    o.scenarios.clear();
    std::stringstream ss(c.scenarios);
    std::string s;
    while (std::getline(ss, s, ',')) {
      if (s == "all") {  // every scenario a text-only server can run (not "image")
        for (const std::string& d : bench::default_scenarios())
          if (std::find(o.scenarios.begin(), o.scenarios.end(), d) == o.scenarios.end()) o.scenarios.push_back(d);
        continue;
      }
      const auto& all = bench::all_scenarios();
      if (std::find(all.begin(), all.end(), s) == all.end()) {
        std::string names;
        for (const auto& n : all) names += (names.empty() ? "" : ", ") + n;
        bad("--scenario: unknown scenario '" + s + "' (known: " + names + ", all)");
      }
      if (std::find(o.scenarios.begin(), o.scenarios.end(), s) == o.scenarios.end()) o.scenarios.push_back(s);
    }
  }

  if (c.image_size < 16 || c.image_size > 8192) bad("--image-size must be in [16, 8192]");
  if (c.image_words < 1 || c.image_words > 100000) bad("--image-words must be in [1, 100000]");
  o.image_size = c.image_size;
  o.image_words = c.image_words;
  o.image_file = c.image_file;
  if (!c.image_file.empty()) {
    std::ifstream f(c.image_file, std::ios::binary);
    if (!f) bad("--image: cannot open '" + c.image_file + "'");
    char head[16] = {};
    f.read(head, sizeof head);
    if (bench::image_media_type(std::string_view(head, static_cast<size_t>(f.gcount()))).empty())
      bad("--image: '" + c.image_file + "' is not a PNG, JPEG, WebP or GIF image");
    if (std::find(o.scenarios.begin(), o.scenarios.end(), "image") == o.scenarios.end())
      bad("--image applies to the image scenario; add --scenario image");
  }

  std::vector<bench::Target> targets;
  const auto find_target = [&](const std::string& name) -> bench::Target* {
    for (auto& t : targets)
      if (t.name == name) return &t;
    return nullptr;
  };
  for (const std::string& spec : c.targets) {
    auto [name, url] = split_named(spec, "--target");
    if (find_target(name)) bad("--target: the name '" + name + "' is used twice");
    bench::Target t;
    t.name = name;
    t.url = url;
    t.endpoint = bench::parse_endpoint(url, "--target " + name);
    t.endpoint.api_key = c.api_key;
    t.model = c.model;
    targets.push_back(std::move(t));
  }
  std::vector<std::pair<std::string, std::string>> launches;
  for (const std::string& spec : c.launches) {
    auto [name, command] = split_named(spec, "--launch");
    for (const auto& l : launches)
      if (l.first == name) bad("--launch: the name '" + name + "' is used twice");
    launches.emplace_back(name, command);
  }
  if (targets.empty() && launches.empty()) bad("give at least one --target NAME=URL or --launch NAME='COMMAND'");

  std::error_code ec;
  std::filesystem::create_directories(c.out, ec);
  if (ec) bad("--out: cannot create " + c.out + ": " + ec.message());

  // Start every server first (each in its own process group), then wait for each.
  std::vector<std::unique_ptr<bench::LaunchedServer>> servers;
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  for (const auto& [name, command] : launches) {
    servers.push_back(std::make_unique<bench::LaunchedServer>(
        name, command, (std::filesystem::path(c.out) / ("launch-" + name + ".log")).string()));
    std::fprintf(stderr, "hearth bench: %s: started '%s' (log %s)\n", name.c_str(), command.c_str(),
                 servers.back()->log_path().c_str());
  }
  for (size_t i = 0; i < launches.size(); ++i) {
    const auto& [name, command] = launches[i];
    bench::Target* existing = find_target(name);
    bench::Target t;
    if (existing) t = *existing;
    t.name = name;
    t.launch_command = command;
    t.model = c.model;
    try {
      t.url = servers[i]->wait_ready(existing ? existing->url : "", c.launch_timeout);
      t.endpoint = bench::parse_endpoint(t.url, "--launch " + name);
      t.endpoint.api_key = c.api_key;
    } catch (const Error& e) {
      t.error = std::string(e.what()).substr(std::string(e.what()).find(']') + 2);
      servers[i]->stop();
    }
    if (existing) *existing = t;
    else targets.push_back(t);
  }

  const bench::BenchResults res = bench::run_bench(targets, o);
  for (auto& s : servers) s->stop();
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);

  const std::vector<std::string> files = bench::write_outputs(res, c.out, command_line());
  std::printf("%s", bench::summary_table(res).c_str());
  std::printf("hearth bench: wrote %zu files to %s (report.md, results.json, charts)\n", files.size(), c.out.c_str());
  std::fflush(stdout);
  const bool any_ran = std::any_of(res.targets.begin(), res.targets.end(), [](const auto& t) { return t.error.empty(); });
  if (!any_ran) bad("no target could be measured (see the messages above)");
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto c = std::make_shared<BenchCli>();
  auto* cmd = app.add_subcommand("bench", "Benchmark OpenAI-compatible servers side by side (docs/BENCH.md)");
  cmd->add_option("--target", c->targets, "NAME=URL of a running server (repeatable)");
  cmd->add_option("--launch", c->launches,
                  "NAME='COMMAND': start a server with sh -c, wait until it answers, stop it at the end "
                  "(URL: a --target of the same NAME, else the first http://HOST:PORT it prints)");
  cmd->add_option("--model", c->model, "Model id to request (default: each target's first /v1/models id)");
  cmd->add_option("--scenario", c->scenarios,
                  "Comma list of single, prefill, decode-vs-input, double, concurrency, agent, image; all = every one "
                  "but image (the default; image needs a server that takes images)");
  cmd->add_option("--reps", c->reps, "Repetitions of every measurement")->default_val(5);
  cmd->add_option("--max-tokens", c->max_tokens, "Completion tokens per request")->default_val(128);
  cmd->add_option("--lengths", c->lengths, "Prompt lengths in tokens (default 100,500,1000,2000,4000,8000)");
  cmd->add_option("--concurrency", c->concurrency, "Simultaneous streams (default 1,2,4,8)");
  cmd->add_option("--agent-turns", c->agent_turns, "Turns of the agent conversation")->default_val(8);
  cmd->add_option("--agent-system-tokens", c->agent_system_tokens,
                  "Size of the agent's system prompt with its tool definitions")->default_val(1500);
  cmd->add_option("--image-size", c->image_size,
                  "Image scenario: side in pixels of the generated square PNG")->default_val(1024);
  cmd->add_option("--image", c->image_file, "Image scenario: send this PNG/JPEG/WebP/GIF instead of generated ones");
  cmd->add_option("--image-words", c->image_words, "Image scenario: words of the question sent with the image")
      ->default_val(50);
  cmd->add_option("--api-key", c->api_key, "Send 'Authorization: Bearer KEY'");
  cmd->add_option("--out", c->out, "Directory for results.json, report.md and the charts")->default_val("bench-results");
  cmd->add_option("--seed", c->seed, "Seed of the generated prompts (and of sampled requests)")->default_val(42);
  cmd->add_option("--temperature", c->temperature,
                  "Temperature of every request (default 0: greedy; e.g. 1 to measure sampled decoding, the OpenAI default)")
      ->default_val(0.0);
  cmd->add_option("--top-p", c->top_p, "top_p of every request (sent when below 1)")->default_val(1.0);
  cmd->add_option("--top-k", c->top_k, "top_k of every request (sent when above 0; not an OpenAI field)")->default_val(0);
  cmd->add_option("--frequency-penalty", c->frequency_penalty, "frequency_penalty of every request (sent when not 0)")
      ->default_val(0.0);
  cmd->add_option("--presence-penalty", c->presence_penalty, "presence_penalty of every request (sent when not 0)")
      ->default_val(0.0);
  cmd->add_option("--launch-timeout", c->launch_timeout, "Seconds to wait for a launched server")->default_val(300);
  cmd->add_option("--request-timeout", c->request_timeout, "Seconds before a request is abandoned")->default_val(600);
  cmd->add_flag("--quick", c->quick,
                "Small run: reps 2, max-tokens 16, lengths 64,256, concurrency 1,2, 3 agent turns of a 160-token system prompt (explicit options win)");
  cmd->callback([c, cmd]() { bench_main(*c, cmd); });
}

}  // namespace hearth::cli
