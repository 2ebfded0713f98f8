#include "bench/runner.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <latch>
#include <thread>

#include "bench/engine_steps.h"
#include "bench/image_payload.h"
#include "core/error.h"

namespace hearth::bench {

using nlohmann::json;

namespace {

// One step of the plan: run on one target.
struct Step {
  std::string scenario;
  double x = 0;
  int rep = 0;
  std::string label;
};

class Runner {
 public:
  // `image_url`: the data: URL of --image FILE ("" : generated pictures).
  Runner(BenchResults& res, const BenchOptions& o, std::string image_url)
      : res_(res), o_(o), epoch_(Clock::now()), image_url_(std::move(image_url)) {}

  void prepare(Target& t);
  void run_step(const Step& s, Target& t);
  double now() const { return std::chrono::duration<double>(Clock::now() - epoch_).count(); }

 private:
  StreamClient client(const Target& t) const { return StreamClient(t.endpoint, epoch_, o_.request_timeout_s); }
  json body(const Target& t, json messages, int max_tokens) const {
    json b{{"model", t.model}, {"messages", std::move(messages)}, {"max_tokens", max_tokens},
           {"temperature", o_.temperature}, {"seed", o_.seed}};
    if (o_.top_p < 1.0) b["top_p"] = o_.top_p;
    if (o_.top_k > 0) b["top_k"] = o_.top_k;
    if (o_.frequency_penalty != 0.0) b["frequency_penalty"] = o_.frequency_penalty;
    if (o_.presence_penalty != 0.0) b["presence_penalty"] = o_.presence_penalty;
    return b;
  }
  // The target's engine-step counters (GET /metrics); nullopt when it has none.
  std::optional<EngineSteps> engine_steps(const Target& t) const {
    std::string text, error;
    if (client(t).get("/metrics", text, error) != 200) return std::nullopt;
    return parse_engine_steps(text);
  }
  // Runs `bodies` at once (released by a latch) and records them as one group.
  GroupResult run_group(const Step& s, const Target& t, const std::vector<json>& bodies,
                        const std::vector<int64_t>& words, const std::string& role);
  uint64_t scenario_id(const std::string& name) const {
    return static_cast<uint64_t>(std::find(all_scenarios().begin(), all_scenarios().end(), name) -
                                 all_scenarios().begin()) + 1;
  }

  std::string data_url_of(const std::vector<uint8_t>& rgb) const {
    return image_data_url(encode_png(rgb, o_.image_size, o_.image_size));
  }

  BenchResults& res_;
  const BenchOptions& o_;
  Clock::time_point epoch_;
  int next_group_ = 0;
  std::string image_url_;
};

void Runner::prepare(Target& t) {
  const StreamClient c = client(t);
  try {
    if (t.model.empty()) {
      t.model = c.models().front();
    }
  } catch (const Error& e) {
    t.error = std::string(e.what()).substr(std::string(e.what()).find(']') + 2);
    return;
  }
  // Two prompts of known word counts; the server's prompt_tokens fits the model.
  const int64_t w0 = 32, w1 = 400;
  int64_t p[2] = {-1, -1};
  for (int i = 0; i < 2; ++i) {
    const RequestResult r = c.chat(body(t, prompt_messages(mix_seed(o_.seed, 99, i), i == 0 ? w0 : w1), 1));
    if (!r.ok) {
      t.error = r.error;
      if (r.http_status == 404) t.error += " (is model '" + t.model + "' served there? --model picks another)";
      return;
    }
    if (r.has_usage && r.prompt_tokens > 0) p[i] = r.prompt_tokens;
  }
  if (p[0] > 0 && p[1] > p[0]) {
    t.calibration = fit_calibration(w0, p[0], w1, p[1]);
    t.calibrated = true;
  } else {
    t.notes.push_back("no usage.prompt_tokens to calibrate prompt lengths: assumed 1.3 tokens per word");
  }
}

GroupResult Runner::run_group(const Step& s, const Target& t, const std::vector<json>& bodies,
                              const std::vector<int64_t>& words, const std::string& role) {
  const int group = next_group_++;
  std::vector<RequestResult> out(bodies.size());
  if (bodies.size() == 1) {
    out[0] = client(t).chat(bodies[0]);
  } else {
    std::latch start(static_cast<std::ptrdiff_t>(bodies.size()));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < bodies.size(); ++i) {
      threads.emplace_back([&, i] {
        const StreamClient c = client(t);
        start.arrive_and_wait();
        out[i] = c.chat(bodies[i]);
      });
    }
    for (auto& th : threads) th.join();
  }
  GroupResult g;
  g.scenario = s.scenario;
  g.target = t.name;
  g.x = s.x;
  g.rep = s.rep;
  g.group = group;
  g.n = static_cast<int>(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].ok) ++g.n_failed;
    Sample smp;
    smp.scenario = s.scenario;
    smp.target = t.name;
    smp.x = s.x;
    smp.rep = s.rep;
    smp.group = group;
    smp.role = role;
    smp.words = words[i];
    smp.r = out[i];
    res_.samples.push_back(std::move(smp));
  }
  if (const auto a = aggregate_tps(out)) g.aggregate_tps = *a;
  return g;
}

void Runner::run_step(const Step& s, Target& t) {
  const uint64_t sid = scenario_id(s.scenario);
  const auto x = static_cast<int64_t>(s.x);
  const auto plain = [&](int64_t length, int idx) {
    const int64_t w = t.calibration.words_for(length);
    return std::pair{prompt_messages(mix_seed(o_.seed, sid, static_cast<uint64_t>(length),
                                              static_cast<uint64_t>(s.rep) * 1024 + static_cast<uint64_t>(idx)),
                                     w),
                     w};
  };
  if (s.scenario == "single" || s.scenario == "prefill" || s.scenario == "decode-vs-input") {
    auto [m, w] = plain(x, 0);
    const int max_tokens = s.scenario == "prefill" ? 1 : o_.max_tokens;
    res_.groups.push_back(run_group(s, t, {body(t, m, max_tokens)}, {w}, ""));
  } else if (s.scenario == "concurrency") {
    std::vector<json> bodies;
    std::vector<int64_t> words;
    for (int i = 0; i < x; ++i) {
      auto [m, w] = plain(o_.lengths.front(), i);
      bodies.push_back(body(t, m, o_.max_tokens));
      words.push_back(w);
    }
    // A Hearth server's account of its engine steps over the group (others have none).
    const std::optional<EngineSteps> before = engine_steps(t);
    GroupResult g = run_group(s, t, bodies, words, "");
    if (before) {
      const std::optional<EngineSteps> after = engine_steps(t);
      if (const auto a = after ? step_account(*before, *after) : std::nullopt) {
        g.engine_steps = a->steps;
        g.step_forward_ms = a->forward_ms;
        g.step_host_ms = a->host_ms;
        g.host_phase_ms = a->phase_ms;
        const std::vector<Sample>& all = res_.samples;
        double first = -1, last = -1;
        for (size_t k = all.size() - static_cast<size_t>(g.n); k < all.size(); ++k) {
          if (!all[k].r.ok) continue;
          first = first < 0 ? all[k].r.t_start : std::min(first, all[k].r.t_start);
          last = std::max(last, all[k].r.t_end);
        }
        if (first >= 0 && last > first) {
          g.wall_s = last - first;
          g.decode_s = a->decode_s;
          g.prompt_s = a->steps_s - a->decode_s;
          g.idle_s = g.wall_s - a->steps_s;
        }
        if (a->decode_steps > 0) {
          g.decode_steps = a->decode_steps;
          g.decode_rows = a->decode_rows;
          g.decode_forward_ms = a->decode_forward_ms;
          g.decode_host_ms = a->decode_host_ms;
          g.decode_tps = a->decode_tps();
        }
      }
    }
    res_.groups.push_back(std::move(g));
  } else if (s.scenario == "double") {
    const int64_t len = o_.lengths.front();
    auto [m0, w0] = plain(len, 0);
    GroupResult alone = run_group(s, t, {body(t, m0, o_.max_tokens)}, {w0}, "alone");
    const RequestResult& r0 = res_.samples.back().r;
    const double one = r0.ok ? wall_tps(r0).value_or(-1) : -1;
    auto [m1, w1] = plain(len, 1);
    auto [m2, w2] = plain(len, 2);
    GroupResult pair = run_group(s, t, {body(t, m1, o_.max_tokens), body(t, m2, o_.max_tokens)}, {w1, w2}, "pair");
    if (one > 0 && pair.aggregate_tps > 0 && pair.n_failed == 0) pair.speedup = pair.aggregate_tps / one;
    res_.groups.push_back(alone);
    res_.groups.push_back(pair);
  } else if (s.scenario == "image") {
    // A new picture per repetition (a repeated one could be served from a prefix cache);
    // encoding happens before the request starts, so it is not timed.
    const uint64_t seed = mix_seed(o_.seed, sid, static_cast<uint64_t>(s.rep));
    const std::string& url =
        image_url_.empty() ? data_url_of(synthetic_screenshot(seed, o_.image_size, o_.image_size)) : image_url_;
    res_.groups.push_back(
        run_group(s, t, {body(t, image_messages(seed, o_.image_words, url), o_.max_tokens)}, {o_.image_words}, ""));
  } else if (s.scenario == "agent") {
    const AgentScript script(mix_seed(o_.seed, sid, static_cast<uint64_t>(s.rep)), o_.agent_system_tokens,
                             t.calibration);
    res_.groups.push_back(run_group(s, t, {body(t, script.messages(static_cast<int>(x)), o_.max_tokens)},
                                    {0}, ""));
  }
}

std::vector<Step> plan(const BenchOptions& o) {
  std::vector<Step> steps;
  const auto has = [&](const char* s) { return std::find(o.scenarios.begin(), o.scenarios.end(), s) != o.scenarios.end(); };
  const auto add = [&](const std::string& sc, double x, int rep, const std::string& label) {
    steps.push_back({sc, x, rep, label});
  };
  for (const char* sc : {"single", "prefill", "decode-vs-input"}) {
    if (!has(sc)) continue;
    for (int r = 0; r < o.reps; ++r)
      for (int64_t len : o.lengths) add(sc, static_cast<double>(len), r, "len " + std::to_string(len));
  }
  if (has("double"))
    for (int r = 0; r < o.reps; ++r) add("double", static_cast<double>(o.lengths.front()), r, "pair");
  if (has("concurrency"))
    for (int r = 0; r < o.reps; ++r)
      for (int c : o.concurrency) add("concurrency", c, r, std::to_string(c) + " streams");
  if (has("agent"))
    for (int r = 0; r < o.reps; ++r)
      for (int turn = 0; turn < o.agent_turns; ++turn) add("agent", turn, r, "turn " + std::to_string(turn + 1));
  if (has("image"))
    for (int r = 0; r < o.reps; ++r)
      add("image", o.image_file.empty() ? o.image_size : 0, r,
          o.image_file.empty() ? std::to_string(o.image_size) + " px" : "file");
  return steps;
}

}  // namespace

BenchResults run_bench(std::vector<Target> targets, const BenchOptions& o) {
  BenchResults res;
  res.options = o;
  res.targets = std::move(targets);
  std::string image_url;
  if (!o.image_file.empty()) {
    std::ifstream f(o.image_file, std::ios::binary);
    if (!f) fail(ErrorKind::kNotFound, "bench", "--image: cannot open '" + o.image_file + "'");
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    image_url = image_data_url(bytes);
    if (image_url.empty())
      fail(ErrorKind::kInvalidInput, "bench", "--image: '" + o.image_file + "' is not a PNG, JPEG, WebP or GIF image");
  }
  Runner runner(res, o, std::move(image_url));
  const bool tty = o.progress && isatty(STDERR_FILENO);
  std::vector<Target*> live;
  for (Target& t : res.targets) {
    if (o.progress) std::fprintf(stderr, "hearth bench: %s: preparing %s\n", t.name.c_str(), t.url.c_str());
    if (t.error.empty()) runner.prepare(t);
    if (!t.error.empty()) {
      std::fprintf(stderr, "hearth bench: target '%s' (%s): %s; skipping it\n", t.name.c_str(), t.url.c_str(),
                   t.error.c_str());
      continue;
    }
    if (o.progress)
      std::fprintf(stderr, "hearth bench: %s: model %s, %.2f prompt tokens per word + %.0f\n", t.name.c_str(),
                   t.model.c_str(), t.calibration.tokens_per_word, t.calibration.overhead);
    live.push_back(&t);
  }
  const std::vector<Step> steps = plan(o);
  const size_t total = steps.size() * live.size();
  size_t done = 0;
  std::string last_scenario;
  for (const Step& s : steps) {
    if (o.progress && !tty && s.scenario != last_scenario)
      std::fprintf(stderr, "hearth bench: scenario %s\n", s.scenario.c_str());
    last_scenario = s.scenario;
    for (size_t k = 0; k < live.size(); ++k) {
      Target& t = *live[(k + static_cast<size_t>(s.rep)) % live.size()];
      if (tty) {
        const int width = 30;
        const int filled = total ? static_cast<int>(static_cast<double>(done) / static_cast<double>(total) * width) : 0;
        std::fprintf(stderr, "\r[%s%s] %zu/%zu %-15s %-10s rep %d/%d  %-12s\033[K", std::string(filled, '#').c_str(),
                     std::string(width - filled, '.').c_str(), done, total, s.scenario.c_str(), s.label.c_str(),
                     s.rep + 1, o.reps, t.name.c_str());
        std::fflush(stderr);
      }
      runner.run_step(s, t);
      ++done;
    }
  }
  if (tty) std::fprintf(stderr, "\r[%s] %zu/%zu done\033[K\n", std::string(30, '#').c_str(), done, total);
  res.wall_s = runner.now();
  return res;
}

}  // namespace hearth::bench
