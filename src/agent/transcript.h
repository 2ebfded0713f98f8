// Conversation transcripts as JSONL: one message object per line ({"role": ...}),
// and {"event": "clear"} where the user cleared the conversation. Appended as
// the conversation grows, so a crash loses at most the answer in progress.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace hearth::agent {

class TranscriptWriter {
 public:
  // Opens `path` for appending (created when absent); throws Error when it cannot.
  explicit TranscriptWriter(std::string path);
  ~TranscriptWriter();
  TranscriptWriter(const TranscriptWriter&) = delete;
  TranscriptWriter& operator=(const TranscriptWriter&) = delete;

  // Appends one message and flushes.
  void message(const nlohmann::ordered_json& m);
  // Appends the clear marker and flushes.
  void clear();
  const std::string& path() const { return path_; }

 private:
  void line(const nlohmann::ordered_json& j);
  std::string path_;
  std::FILE* f_ = nullptr;
};

// The conversation a transcript ends with (messages after the last clear
// marker; blank lines skipped). Throws Error naming the file, line and offset
// of the first line that is not a message object or a known event.
nlohmann::ordered_json load_transcript(const std::string& path);

}  // namespace hearth::agent
