#include "agent/shell_tool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "agent/output_cap.h"
#include "core/error.h"

namespace hearth::agent {

ShellResult run_shell(const std::string& command, double timeout_s, const std::atomic<bool>* stop) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    fail(ErrorKind::kIo, "agent", std::string("shell: pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    fail(ErrorKind::kIo, "agent", std::string("shell: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so the group exists before we may signal it
  ::close(fds[1]);

  ShellResult r;
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  bool reaped = false, eof = false;
  int status = 0;
  auto exited_at = Clock::time_point{};
  char buf[65536];
  while (!eof) {
    if (stop != nullptr && stop->load()) {
      r.interrupted = true;
      break;
    }
    if (timeout_s > 0 && Clock::now() >= deadline) {
      r.timed_out = true;
      break;
    }
    if (!reaped && waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      exited_at = Clock::now();
    }
    // The shell is gone but something it started still holds the pipe: give it
    // a moment to finish writing, then stop waiting for it.
    if (reaped && Clock::now() - exited_at > std::chrono::milliseconds(500)) break;
    pollfd p{fds[0], POLLIN, 0};
    const int n = poll(&p, 1, 50);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    const ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      eof = true;
      break;
    }
    const size_t keep = std::min<size_t>(static_cast<size_t>(got),
                                         kMaxKeptBytes - std::min(kMaxKeptBytes, r.output.size()));
    r.output.append(buf, keep);
    r.dropped_bytes += static_cast<size_t>(got) - keep;
  }
  ::close(fds[0]);
  kill(-pid, SIGKILL);  // the group: what is left of it after an exit, or all of it on a stop
  if (!reaped) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (WIFEXITED(status)) r.exit_status = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

std::string format_shell_result(const ShellResult& r, size_t max_chars, double timeout_s) {
  std::string out = r.output;
  if (r.dropped_bytes > 0)
    out += "\n[... " + std::to_string(r.dropped_bytes) + " more bytes not kept ...]";
  out = cap_output(out, max_chars);
  if (!out.empty() && out.back() != '\n') out += '\n';
  if (r.interrupted) {
    out += "[interrupted by the user (Ctrl-C)]";
  } else if (r.timed_out) {
    out += "[killed: time limit of " + std::to_string(static_cast<int>(timeout_s)) + " s reached]";
  } else if (r.signal != 0) {
    out += "[killed by signal " + std::to_string(r.signal) + "]";
  } else {
    out += "[exit status " + std::to_string(r.exit_status) + "]";
  }
  return out;
}

std::string command_program(const std::string& command) {
  size_t pos = 0;
  for (;;) {
    while (pos < command.size() && std::isspace(static_cast<unsigned char>(command[pos]))) ++pos;
    size_t end = pos;
    while (end < command.size() && !std::isspace(static_cast<unsigned char>(command[end])) &&
           command[end] != ';' && command[end] != '|' && command[end] != '&')
      ++end;
    std::string word = command.substr(pos, end - pos);
    if (word.empty()) return "";
    const size_t eq = word.find('=');
    if (eq != std::string::npos && eq > 0 &&
        word.find('/') == std::string::npos) {  // VAR=value prefix
      pos = end;
      continue;
    }
    const size_t slash = word.rfind('/');
    return slash == std::string::npos ? word : word.substr(slash + 1);
  }
}

}  // namespace hearth::agent
