// Stop strings for streamed text: text is released as soon as it can no longer be
// the start of a stop string, so a stop string split across tokens is still caught
// and never reaches the client.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hearth::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends generated text; returns what may be sent now. After a stop string
  // completes, returns the text before it and stopped() is true.
  std::string push(std::string_view piece);
  // The text still held back (the stream ended without a stop string).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that completed (the earliest in the text; on a tie the first
  // given); empty while none has.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace hearth::engine
