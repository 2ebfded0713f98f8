#include "bench/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench/sse_client.h"
#include "core/error.h"

namespace hearth::bench {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string tail(const std::string& text, size_t n) {
  std::string t = text.size() > n ? text.substr(text.size() - n) : text;
  for (char& c : t)
    if (c == '\n' || c == '\r') c = ' ';
  return t;
}

}  // namespace

namespace {
// Process groups of live servers, for kill_all_launched (signal-safe: plain atomics).
std::array<std::atomic<pid_t>, 64> g_groups{};
}  // namespace

void track_process_group(pid_t pid) {
  for (auto& g : g_groups) {
    pid_t expected = 0;
    if (g.compare_exchange_strong(expected, pid)) return;
  }
}

void untrack_process_group(pid_t pid) {
  for (auto& g : g_groups) {
    pid_t expected = pid;
    g.compare_exchange_strong(expected, 0);
  }
}

void kill_all_launched() {
  for (auto& g : g_groups)
    if (const pid_t p = g.load(); p > 0) kill(-p, SIGKILL);
}

std::string find_url(const std::string& text) {
  for (const char* scheme : {"http://", "https://"}) {
    size_t pos = 0;
    while ((pos = text.find(scheme, pos)) != std::string::npos) {
      size_t end = pos + std::string(scheme).size();
      while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '.' ||
                                   text[end] == ':' || text[end] == '-' || text[end] == '[' || text[end] == ']'))
        ++end;
      std::string url = text.substr(pos, end - pos);
      const size_t host = url.find("://") + 3;
      const size_t colon = url.rfind(':');
      if (colon > host && colon + 1 < url.size()) {
        for (const char* any : {"0.0.0.0", "[::]"}) {
          if (url.compare(host, colon - host, any) == 0) url.replace(host, colon - host, "127.0.0.1");
        }
        return url;
      }
      pos = end;
    }
  }
  return "";
}

LaunchedServer::LaunchedServer(std::string name, std::string command, std::string log_path)
    : name_(std::move(name)), command_(std::move(command)), log_path_(std::move(log_path)) {
  const int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(ErrorKind::kIo, "bench", "launch '" + name_ + "': cannot write " + log_path_);
  pid_ = fork();
  if (pid_ < 0) {
    ::close(fd);
    fail(ErrorKind::kIo, "bench", "launch '" + name_ + "': fork failed");
  }
  if (pid_ == 0) {
    setpgid(0, 0);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execl("/bin/sh", "sh", "-c", command_.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid_, pid_);  // also here, so the group exists before we ever signal it
  ::close(fd);
  track_process_group(pid_);
}

LaunchedServer::~LaunchedServer() { stop(5); }

bool LaunchedServer::running() {
  if (pid_ <= 0) return false;
  const pid_t r = waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) {
    untrack_process_group(pid_);
    kill(-pid_, SIGKILL);  // anything the shell left behind
    pid_ = -1;
    return false;
  }
  return true;
}

std::string LaunchedServer::wait_ready(std::string url, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    if (!running()) {
      fail(ErrorKind::kIo, "bench",
           "launch '" + name_ + "': the server exited (status " + std::to_string(WEXITSTATUS(status_)) +
               ") before answering; log " + log_path_ + ": " + tail(read_file(log_path_), 300));
    }
    if (url.empty()) url = find_url(read_file(log_path_));
    if (!url.empty()) {
      StreamClient client(parse_endpoint(url, "launch '" + name_ + "'"), Clock::now());
      std::string body, error;
      if (client.get("/v1/models", body, error, 2) == 200 || client.get("/health", body, error, 2) == 200)
        return url;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  fail(ErrorKind::kIo, "bench",
       "launch '" + name_ + "': no answer from " + (url.empty() ? std::string("(no URL printed)") : url) +
           "/v1/models or /health within " + std::to_string(static_cast<int>(timeout_s)) + " s; log " + log_path_);
}

void LaunchedServer::stop(double grace_s) {
  if (!running()) return;
  kill(-pid_, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::duration<double>(grace_s);
  while (Clock::now() < deadline) {
    if (!running()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(-pid_, SIGKILL);
  waitpid(pid_, &status_, 0);
  untrack_process_group(pid_);
  pid_ = -1;
}

}  // namespace hearth::bench
