#include "agent/output_cap.h"

#include <vector>

namespace hearth::agent {
namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

size_t count_chars(const std::string& text) {
  // A code point starts at every byte that is not a continuation byte (and at 0).
  size_t n = 0;
  for (size_t i = 0; i < text.size(); ++i)
    if (i == 0 || !is_continuation(static_cast<unsigned char>(text[i]))) ++n;
  return n;
}

std::string cap_output(const std::string& text, size_t max_chars) {
  if (max_chars == 0) return text;
  // Byte offset where each code point starts.
  std::vector<size_t> starts;
  starts.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i)
    if (i == 0 || !is_continuation(static_cast<unsigned char>(text[i]))) starts.push_back(i);
  const size_t n = starts.size();
  if (n <= max_chars) return text;
  const size_t head = (max_chars + 1) / 2, tail = max_chars - head;
  const size_t cut = n - head - tail;
  const size_t head_end = starts[head];
  std::string out = text.substr(0, head_end);
  out += "\n[... " + std::to_string(cut) + " characters cut ...]\n";
  if (tail > 0) out += text.substr(starts[n - tail]);
  return out;
}

}  // namespace hearth::agent
