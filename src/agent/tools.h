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
};

// The `tools` array: run_shell, read_file, write_file, edit_file, list_dir, search_files.
nlohmann::ordered_json tool_schemas();

// True when `name` is one of tool_schemas().
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

}  // namespace hearth::agent
