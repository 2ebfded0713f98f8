// `--launch NAME='COMMAND'`: starts a server with `sh -c` in its own process
// group (output to a log file), finds its URL, waits until it answers, and
// stops it (SIGTERM to the group, SIGKILL after a timeout).
#pragma once

#include <sys/types.h>

#include <string>

namespace hearth::bench {

class LaunchedServer {
 public:
  // Starts `command`; its stdout and stderr go to `log_path`.
  LaunchedServer(std::string name, std::string command, std::string log_path);
  ~LaunchedServer();
  LaunchedServer(const LaunchedServer&) = delete;
  LaunchedServer& operator=(const LaunchedServer&) = delete;

  // Waits until GET /v1/models or /health on `url` answers 200. An empty `url`
  // is taken from the first "http://HOST:PORT" the server prints. Throws Error
  // naming the server when it exits or `timeout_s` passes first. Returns the URL.
  std::string wait_ready(std::string url, double timeout_s);
  // SIGTERM, then SIGKILL after `grace_s`; idempotent.
  void stop(double grace_s = 10);
  bool running();

  const std::string& name() const { return name_; }
  const std::string& log_path() const { return log_path_; }

 private:
  std::string name_, command_, log_path_;
  pid_t pid_ = -1;
  int status_ = 0;
};

// The first "http://HOST:PORT" (or https) in `text`, with 0.0.0.0 / [::] read as
// 127.0.0.1; "" when none.
std::string find_url(const std::string& text);

// Registers / unregisters the process group of a child server so that kill_all_launched
// (signal-safe) ends it too; the agent's supervised servers use the same registry.
void track_process_group(pid_t pid);
void untrack_process_group(pid_t pid);

// Stops every live launched server (kill to their process groups); safe in a
// signal handler.
void kill_all_launched();

}  // namespace hearth::bench
