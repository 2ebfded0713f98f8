// Caps tool output for the model: text longer than the limit keeps its head and
// tail with a marker in between that says how many characters were cut.
#pragma once

#include <cstddef>
#include <string>

namespace hearth::agent {

// Number of UTF-8 code points in `text` (a stray continuation byte counts as one).
size_t count_chars(const std::string& text);

// `text` when it holds at most `max_chars` code points; otherwise its first and
// last parts (about max_chars in all, cut on code-point boundaries) joined by
// "\n[... N characters cut ...]\n". max_chars 0 means no cap.
std::string cap_output(const std::string& text, size_t max_chars);

}  // namespace hearth::agent
