// The scenarios of `hearth bench` and the loop that runs them over every target,
// interleaved (each step runs on every target in turn, the order rotating with
// the repetition) so that drift on the machine hits all targets alike.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/metrics.h"
#include "bench/prompts.h"
#include "bench/sse_client.h"

namespace hearth::bench {

// Every scenario, in report order. "image" needs a server that takes images, so it
// runs only when named (--scenario image); default_scenarios() (and "all") are the rest.
inline const std::vector<std::string>& all_scenarios() {
  static const std::vector<std::string> s = {"single", "prefill", "decode-vs-input", "double", "concurrency", "agent",
                                             "image"};
  return s;
}
inline const std::vector<std::string>& default_scenarios() {
  static const std::vector<std::string> s = {"single", "prefill", "decode-vs-input", "double", "concurrency", "agent"};
  return s;
}

struct BenchOptions {
  std::vector<std::string> scenarios = default_scenarios();
  int reps = 5;
  int max_tokens = 128;
  std::vector<int64_t> lengths = {100, 500, 1000, 2000, 4000, 8000};
  std::vector<int> concurrency = {1, 2, 4, 8};
  std::string model;            // "" : the first id of each target's /v1/models
  uint64_t seed = 42;
  double temperature = 0.0;     // of every request (0: greedy, as the articles measured)
  double top_p = 1.0;           // sent when below 1 (nucleus sampling)
  int top_k = 0;                // sent when above 0 (not an OpenAI field; llama.cpp, vLLM and Hearth read it)
  double frequency_penalty = 0.0;  // sent when not 0
  double presence_penalty = 0.0;   // sent when not 0
  int agent_turns = 8;
  int64_t agent_system_tokens = 1500;
  int image_size = 1024;        // image scenario: side of the generated square PNG
  std::string image_file;       // image scenario: send this file instead (its bytes, as a data: URL)
  int64_t image_words = 50;     // image scenario: words of the question that goes with the image
  double request_timeout_s = 600;
  bool progress = true;         // a progress line on stderr
};

struct Target {
  std::string name;
  std::string url;
  Endpoint endpoint;
  std::string model;
  std::string launch_command;  // non-empty when we started it
  Calibration calibration;
  bool calibrated = false;     // from the server's usage (else a default guess)
  std::string error;           // why the target could not run at all ("" : it ran)
  std::vector<std::string> notes;
};

// One request as sent and observed.
struct Sample {
  std::string scenario, target;
  double x = 0;       // length asked for / concurrency / agent turn / image side (0: --image file)
  int rep = 0;
  int group = 0;      // requests released together share a group number
  std::string role;   // "" ; in `double`: "alone" or "pair"
  int64_t words = 0;  // prompt size in words
  RequestResult r;
};

// What a group of requests released together measured.
struct GroupResult {
  std::string scenario, target;
  double x = 0;
  int rep = 0;
  int group = 0;
  int n = 0, n_failed = 0;
  double aggregate_tps = -1;  // -1: not measurable
  double speedup = -1;        // `double` only: pair aggregate / alone wall tok/s
  // `concurrency` on a Hearth server: its engine steps during the group (/metrics read
  // before and after), in ms per step: the forward pass and the engine thread's host work
  // around it (phase by phase in host_phase_ms); steps 0: not reported.
  int64_t engine_steps = 0;
  double step_forward_ms = -1, step_host_ms = -1;
  std::map<std::string, double> host_phase_ms;
  // Its decode steps alone (no prompt chunk): how many, rows per step, ms per step, and
  // their rate rows / (forward + host) in tokens/s (the figure bench_step --batch ROWS
  // compares with); decode_steps 0: none.
  int64_t decode_steps = 0;
  double decode_rows = -1, decode_forward_ms = -1, decode_host_ms = -1, decode_tps = -1;
  // The group's wall time (first start to last end, the aggregate's denominator) split by
  // the engine's account: decode steps, prompt steps (the other steps), and the rest (no
  // step running: requests arriving and being parsed, the last streams' ends); seconds.
  double wall_s = -1, decode_s = -1, prompt_s = -1, idle_s = -1;
};

struct BenchResults {
  BenchOptions options;
  std::vector<Target> targets;
  std::vector<Sample> samples;
  std::vector<GroupResult> groups;
  double wall_s = 0;
};

// Resolves models, calibrates prompt lengths and runs the scenarios. Targets
// that fail to resolve or calibrate get `error` set and are skipped; failures of
// single requests are recorded in their samples. Never throws for a target's
// failure.
BenchResults run_bench(std::vector<Target> targets, const BenchOptions& o);

}  // namespace hearth::bench
