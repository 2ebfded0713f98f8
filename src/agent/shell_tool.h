// The agent's shell tool: `/bin/sh -c COMMAND` in its own process group, stdin
// from /dev/null, stdout and stderr combined, a time limit, and a stop flag
// (Ctrl-C) that kills the whole group.
#pragma once

#include <atomic>
#include <string>

namespace hearth::agent {

struct ShellResult {
  std::string output;        // combined stdout + stderr, uncapped (at most kMaxKeptBytes)
  size_t dropped_bytes = 0;  // bytes read past kMaxKeptBytes and not kept
  int exit_status = -1;      // exit code; -1 when killed by a signal
  int signal = 0;            // the signal that ended it, if any
  bool timed_out = false;
  bool interrupted = false;
};

// Output kept in memory before the rest is only counted.
constexpr size_t kMaxKeptBytes = size_t{8} << 20;

// Runs `command`; returns when it and every process of its group that holds the
// output pipe have finished, or when `timeout_s` passes or `*stop` becomes true
// (then the group is killed with SIGKILL). Throws Error when it cannot start.
ShellResult run_shell(const std::string& command, double timeout_s, const std::atomic<bool>* stop);

// The text sent back to the model: the output capped at `max_chars` plus a line
// with the exit status, the time limit or the interruption.
std::string format_shell_result(const ShellResult& r, size_t max_chars, double timeout_s);

// The program of a command line: its first word, without a leading path and
// after any VAR=value assignments ("" when there is none).
std::string command_program(const std::string& command);

}  // namespace hearth::agent
