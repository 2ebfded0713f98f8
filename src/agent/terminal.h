// The agent's terminal: line input (libedit with history when stdin is a
// terminal, plain lines otherwise), streamed output with reasoning dimmed
// (ANSI on a terminal, a "thinking: " prefix otherwise), yes/no questions, and
// the Ctrl-C flag.
#pragma once

#include <atomic>
#include <optional>
#include <string>

namespace hearth::agent {

// Set by SIGINT (Ctrl-C); the agent polls and clears it.
std::atomic<bool>& interrupt_flag();

// Installs the handlers: SIGINT sets interrupt_flag(); SIGTERM, SIGHUP and
// SIGQUIT kill the supervised servers and end the agent.
void install_signal_handlers();

class Terminal {
 public:
  // `history_path`: where libedit keeps the input history ("" for none).
  explicit Terminal(std::string history_path);
  ~Terminal();

  // One line of input, without its newline; nullopt at end of input.
  std::optional<std::string> read_line(const std::string& prompt);
  // Asks `question` [y/N]; true only for y / yes. End of input is a no.
  bool confirm(const std::string& question);

  // Streamed pieces of an answer; switching between the two starts a new line.
  void reasoning(const std::string& text);
  void content(const std::string& text);
  // Ends the current streamed block (a newline when one is open).
  void end_block();
  // A line of its own: status lines and notices (dimmed on a terminal).
  void status(const std::string& line);
  void notice(const std::string& line);

  bool interactive() const { return in_tty_; }

 private:
  enum class Block { kNone, kReasoning, kContent };
  void begin(Block b);
  std::string history_path_;
  bool in_tty_, out_tty_;
  Block block_ = Block::kNone;
  bool at_line_start_ = true;
};

}  // namespace hearth::agent
