// The agent's loop: for one user message, request (trimmed to the window,
// retried on failures, the server restarted when it died), stream the answer,
// run the tool calls, send their results back, until an answer without tool
// calls or --max-steps. The conversation lives here; every message is also
// appended to the transcript.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/chat_client.h"
#include "agent/image_tool.h"
#include "agent/server_supervisor.h"
#include "agent/terminal.h"
#include "agent/tools.h"
#include "agent/transcript.h"

namespace hearth::agent {

struct AgentOptions {
  std::string model;   // the model id sent in requests
  int max_steps = 15;  // requests per user message
  std::optional<bool>
      think;  // enable_thinking for the conversation (nullopt: the template's default)
  std::string tool_choice = "auto";   // auto | required | a tool name (first step of each message)
  int64_t max_tokens = 0;             // per request (0: the server's choice)
  std::optional<double> temperature;  // sampling temperature (nullopt: the server's)
  int64_t context_window = 0;         // tokens (0: unknown, no trimming)
  double trim_ratio = 0.8;            // trim when the conversation passes this share of the window
  int max_failures = 3;               // failed requests in a row before giving up
  double backoff_s = 0.5;             // first retry delay (doubles each time)
  std::string system_prompt;          // "" for none
  size_t max_images = 4;              // image parts per request (older ones are left out)
  ToolPolicy tools;
};

// How a user message ended.
enum class TurnEnd { kAnswered, kMaxSteps, kInterrupted, kFailed };

class Agent {
 public:
  // `server` may be null (--url / --no-server); `transcript` may be null.
  Agent(AgentOptions o, ChatClient& client, ServerSupervisor* server, Terminal& term,
        TranscriptWriter* transcript);

  // Starts a new conversation: the system prompt, written to the transcript.
  void begin();
  // Replaces the conversation (from --resume); not written to the transcript again.
  void load(nlohmann::ordered_json messages);
  // Runs one user message; `think_once` overrides the thinking mode for it; `images`
  // go with the text as image parts (text first).
  TurnEnd ask(const std::string& text, std::optional<bool> think_once = std::nullopt,
              const std::vector<ImageFile>& images = {});
  // Forgets the conversation (keeps the system prompt); marks the transcript.
  void clear();
  void set_think(std::optional<bool> think) { o_.think = think; }
  std::optional<bool> think() const { return o_.think; }
  const nlohmann::ordered_json& messages() const { return messages_; }

 private:
  void append(nlohmann::ordered_json m);
  nlohmann::ordered_json request_body(int step, std::optional<bool> think) const;
  // The messages as sent: at most max_images image parts, the most recent ones.
  nlohmann::ordered_json outgoing(const nlohmann::ordered_json& messages) const;
  // After a "takes text only" refusal: every image replaced by a note, view_image withdrawn.
  void drop_images();
  int64_t measure(const nlohmann::ordered_json& body);
  void fit_context(nlohmann::ordered_json& body);
  std::optional<ChatResult> request_with_retries(const nlohmann::ordered_json& body);
  void sleep_interruptibly(double seconds);

  AgentOptions o_;
  ChatClient& client_;
  ServerSupervisor* server_;
  Terminal& term_;
  TranscriptWriter* transcript_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools_;
  bool tokenize_works_ = true;
  int last_status_ = 0;     // the HTTP status of the last failed request
  std::string last_error_;  // and its message
  // For servers without /tokenize: the usage total of the last answer and the
  // number of messages it covered (-1: none yet).
  int64_t usage_total_ = -1;
  size_t usage_messages_ = 0;
};

// The status line of a step: "step 2/15 | context 812/8192 (10%) | 57 tokens | 1.4 s | 40.7 tok/s",
// and "| 31 of 40 drafted accepted" when the server drafted tokens (speculative decoding).
std::string status_line(int step, int max_steps, int64_t context_used, int64_t window,
                        int64_t tokens, double seconds, double first_token_s, int64_t drafted = -1,
                        int64_t accepted = -1);

}  // namespace hearth::agent
