#include "agent/terminal.h"

#include <editline/readline.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "agent/server_supervisor.h"

namespace hearth::agent {

namespace {

constexpr const char* kDim = "\033[2m";
constexpr const char* kReset = "\033[0m";

void on_sigint(int) { interrupt_flag().store(true); }

void on_fatal(int sig) {
  kill_supervised_servers();
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

std::atomic<bool>& interrupt_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

void install_signal_handlers() {
  interrupt_flag();  // constructed before any handler can run
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read returns EINTR
  sigaction(SIGINT, &sa, nullptr);
  struct sigaction fatal {};
  fatal.sa_handler = on_fatal;
  sigemptyset(&fatal.sa_mask);
  for (int s : {SIGTERM, SIGHUP, SIGQUIT}) sigaction(s, &fatal, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

Terminal::Terminal(std::string history_path)
    : history_path_(std::move(history_path)),
      in_tty_(isatty(STDIN_FILENO)),
      out_tty_(isatty(STDOUT_FILENO)) {
  if (in_tty_) {
    rl_catch_signals = 0;  // Ctrl-C stays ours (interrupt_flag)
    using_history();
    if (!history_path_.empty()) read_history(history_path_.c_str());
  }
}

Terminal::~Terminal() {
  if (in_tty_ && !history_path_.empty()) write_history(history_path_.c_str());
}

std::optional<std::string> Terminal::read_line(const std::string& prompt) {
  end_block();
  if (in_tty_) {
    for (;;) {
      interrupt_flag().store(false);
      char* line = readline(prompt.c_str());
      if (line == nullptr) {
        if (interrupt_flag().exchange(false)) {  // Ctrl-C at the prompt: a fresh prompt
          std::fputs("\n", stdout);
          continue;
        }
        return std::nullopt;
      }
      std::string s(line);
      std::free(line);
      if (s.find_first_not_of(" \t") != std::string::npos) add_history(s.c_str());
      return s;
    }
  }
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  std::string s;
  if (!std::getline(std::cin, s)) {
    std::fputs("\n", stdout);
    return std::nullopt;
  }
  if (!s.empty() && s.back() == '\r') s.pop_back();
  if (!out_tty_) std::fputs("\n", stdout);  // the echo a terminal would have shown
  return s;
}

bool Terminal::confirm(const std::string& question) {
  auto answer = read_line(question + " [y/N] ");
  if (!answer) return false;
  std::string a = *answer;
  for (char& c : a) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  a.erase(0, a.find_first_not_of(" \t"));
  while (!a.empty() && (a.back() == ' ' || a.back() == '\t')) a.pop_back();
  return a == "y" || a == "yes";
}

void Terminal::begin(Block b) {
  if (block_ == b) return;
  end_block();
  block_ = b;
  if (b == Block::kReasoning) {
    if (out_tty_)
      std::fputs(kDim, stdout);
    else
      std::fputs("thinking: ", stdout);
  }
  at_line_start_ = false;
}

void Terminal::reasoning(const std::string& text) {
  begin(Block::kReasoning);
  std::string shown = text;
  if (!out_tty_)  // every line of reasoning carries the prefix
    for (size_t pos = shown.find('\n'); pos != std::string::npos; pos = shown.find('\n', pos + 1))
      shown.insert(pos + 1, "thinking: "), pos += 10;
  std::fwrite(shown.data(), 1, shown.size(), stdout);
  if (!text.empty()) at_line_start_ = false;
  std::fflush(stdout);
}

void Terminal::content(const std::string& text) {
  begin(Block::kContent);
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!text.empty()) at_line_start_ = text.back() == '\n';
  std::fflush(stdout);
}

void Terminal::end_block() {
  if (block_ == Block::kReasoning && out_tty_) std::fputs(kReset, stdout);
  if (block_ != Block::kNone && !at_line_start_) std::fputs("\n", stdout);
  block_ = Block::kNone;
  at_line_start_ = true;
  std::fflush(stdout);
}

void Terminal::status(const std::string& line) {
  end_block();
  if (out_tty_)
    std::printf("%s%s%s\n", kDim, line.c_str(), kReset);
  else
    std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void Terminal::notice(const std::string& line) {
  end_block();
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace hearth::agent
