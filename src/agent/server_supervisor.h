// Runs the agent's own `hearth serve`: this executable started with fork/exec on
// a free port (--port 0, the URL read from its log), in its own process group,
// killed with the agent (PR_SET_PDEATHSIG), its output appended to a log file;
// waits for /health, notices its death, restarts it with the same flags.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace hearth::agent {

class ServerSupervisor {
 public:
  // `serve_args`: the arguments after `serve` (model, cache, ctx, device,
  // threads); `log_path`: where the server's stdout and stderr go (appended).
  ServerSupervisor(std::vector<std::string> serve_args, std::string log_path);
  ~ServerSupervisor();
  ServerSupervisor(const ServerSupervisor&) = delete;
  ServerSupervisor& operator=(const ServerSupervisor&) = delete;

  // Starts the server and waits until /health answers 200; throws Error with
  // the log's tail when it exits first or `timeout_s` passes.
  void start(double timeout_s = 180);
  // True while the server process lives (reaps it when it has exited).
  bool alive();
  // SIGTERM to the group, SIGKILL after `grace_s`; idempotent.
  void stop(double grace_s = 5);
  // stop() then start().
  void restart(double timeout_s = 180);
  // The last `n_lines` lines of the log.
  std::string log_tail(size_t n_lines) const;
  // How the last run ended ("exit status N", "killed by signal N"), "" while running.
  const std::string& exit_description() const { return exit_description_; }

  const std::string& url() const { return url_; }
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

 private:
  std::vector<std::string> args_;
  std::string log_path_, url_, exit_description_;
  pid_t pid_ = -1;
};

// SIGKILL to every supervised server's process group; safe in a signal handler.
void kill_supervised_servers();

}  // namespace hearth::agent
