#include "agent/server_supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench/launcher.h"
#include "bench/sse_client.h"
#include "core/error.h"

namespace hearth::agent {
namespace {

std::string read_from(const std::string& path, std::streamoff offset) {
  std::ifstream f(path, std::ios::binary);
  f.seekg(offset);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::streamoff file_size(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  return f ? static_cast<std::streamoff>(f.tellg()) : 0;
}

}  // namespace

void kill_supervised_servers() { bench::kill_all_launched(); }

ServerSupervisor::ServerSupervisor(std::vector<std::string> serve_args, std::string log_path)
    : args_(std::move(serve_args)), log_path_(std::move(log_path)) {}

ServerSupervisor::~ServerSupervisor() { stop(3); }

void ServerSupervisor::start(double timeout_s) {
  const std::streamoff log_start = file_size(log_path_);
  const int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    fail(ErrorKind::kIo, "agent",
         "cannot write the server log " + log_path_ + ": " + std::strerror(errno));
  std::vector<std::string> argv_s = {"hearth", "serve", "--port", "0", "--host", "127.0.0.1"};
  argv_s.insert(argv_s.end(), args_.begin(), args_.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(fd);
    fail(ErrorKind::kIo, "agent",
         std::string("cannot start the server: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);  // its own group: the terminal's Ctrl-C is the agent's, not the server's
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // the agent died before the line above
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);  // the agent ignores it; an ignored signal survives exec
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  ::close(fd);
  pid_ = pid;
  exit_description_.clear();
  url_.clear();
  bench::track_process_group(pid_);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!alive())
      fail(ErrorKind::kIo, "agent",
           "the server exited (" + exit_description_ + ") before answering; end of " + log_path_ +
               ":\n" + log_tail(15));
    if (url_.empty()) url_ = bench::find_url(read_from(log_path_, log_start));
    if (!url_.empty()) {
      bench::StreamClient client(bench::parse_endpoint(url_, "server"), bench::Clock::now());
      std::string body, error;
      if (client.get("/health", body, error, 2) == 200) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop(1);
  fail(ErrorKind::kIo, "agent",
       "the server did not answer /health within " + std::to_string(static_cast<int>(timeout_s)) +
           " s; end of " + log_path_ + ":\n" + log_tail(15));
}

bool ServerSupervisor::alive() {
  if (pid_ <= 0) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    if (r == pid_ && WIFEXITED(status))
      exit_description_ = "exit status " + std::to_string(WEXITSTATUS(status));
    else if (r == pid_ && WIFSIGNALED(status))
      exit_description_ = "killed by signal " + std::to_string(WTERMSIG(status));
    else
      exit_description_ = "gone";
    kill(-pid_, SIGKILL);  // anything left in its group
    bench::untrack_process_group(pid_);
    pid_ = -1;
    return false;
  }
  return true;
}

void ServerSupervisor::stop(double grace_s) {
  if (!alive()) return;
  kill(-pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!alive()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(-pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exit_description_ = "killed";
  bench::untrack_process_group(pid_);
  pid_ = -1;
}

void ServerSupervisor::restart(double timeout_s) {
  stop();
  start(timeout_s);
}

std::string ServerSupervisor::log_tail(size_t n_lines) const {
  const std::streamoff size = file_size(log_path_);
  std::string text = read_from(log_path_, std::max<std::streamoff>(0, size - 16384));
  while (!text.empty() && text.back() == '\n') text.pop_back();
  size_t pos = text.size(), count = 0;
  while (pos > 0 && count < n_lines) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) {
      pos = 0;
      break;
    }
    ++count;
  }
  if (pos > 0 || (pos == 0 && text[0] == '\n')) ++pos;
  return text.substr(pos);
}

}  // namespace hearth::agent
