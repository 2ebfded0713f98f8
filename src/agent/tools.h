// The agent's tool set as sent in `tools` (JSON schemas), and the dispatch of a
// model's tool call to its implementation with the confirmation policy.
#pragma once

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hearth::agent {

// How tools run: output cap, shell time limit, who may run without asking.
struct ToolPolicy {
  size_t output_chars = 8000;      // cap on what goes back to the model (0: none)
  double shell_timeout_s = 120;    // shell time limit
  bool yes = false;                // never ask
  std::vector<std::string> allow;  // programs the shell tool runs without asking
  size_t max_search_results = 100;
  bool images = false;                     // the model takes images: view_image is offered
  size_t max_image_bytes = size_t{20} << 20;  // view_image's size limit
};

// The `tools` array: run_shell, read_file, write_file, edit_file, list_dir, search_files,
// and with `images` view_image.
nlohmann::ordered_json tool_schemas(bool images = false);

// True when `name` is one of the tools (view_image included).
bool is_known_tool(const std::string& name);

// True when the shell command may run without asking: its program is on
// `allow` and it has no shell operator (; | & ` $ < > newline) that could run
// another program.
bool shell_command_allowed(const std::string& command, const std::vector<std::string>& allow);

// Asks the user a yes/no question; true means go ahead.
using ConfirmFn = std::function<bool(const std::string& question)>;

// Runs one tool call (`arguments` is the JSON text the model produced) and
// returns the `tool` message content; errors (bad JSON, missing field, failed
// tool, refusal) come back as text starting with "error:" so the model can react.
// `stop` (Ctrl-C) interrupts a running shell command.
std::string run_tool(const std::string& name, const std::string& arguments,
                     const ToolPolicy& policy, const ConfirmFn& confirm,
                     const std::atomic<bool>* stop);

// What a tool call gives back: text, and for view_image the image's content part.
struct ToolResult {
  std::string text;
  nlohmann::ordered_json image;  // {"type": "image_url", ...}; null when none
  // The `tool` message's content: the text, or [text part, image part].
  nlohmann::ordered_json content() const;
};

// run_tool with view_image: the image comes back as a part for the tool message
// (text: "image PATH (TYPE, N bytes) attached"); errors as in run_tool. view_image
// without policy.images is an error saying the model takes text only.
ToolResult run_tool_call(const std::string& name, const std::string& arguments,
                         const ToolPolicy& policy, const ConfirmFn& confirm,
                         const std::atomic<bool>* stop);

}  // namespace hearth::agent
