// Keeping the conversation inside the model's window: the messages are cut into
// units that can be dropped whole (a message, or an assistant message with
// tool_calls together with its tool results), and the oldest units after the
// leading system messages are dropped until the measured size fits.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace hearth::agent {

// [begin, end) message ranges that may be dropped, oldest first. Leading system
// messages, the last user message and the last unit are never listed.
std::vector<std::pair<size_t, size_t>> droppable_units(const nlohmann::ordered_json& messages);

// What trim_to_fit did.
struct TrimResult {
  size_t dropped = 0;  // messages removed
  int64_t tokens = 0;  // measured size afterwards
  bool fits = true;    // tokens <= limit
};

// Drops the oldest droppable units of `messages` until measure(messages) <=
// limit (estimating each unit's share by its JSON length, then measuring again).
// `measure` returns the conversation's size in tokens.
TrimResult trim_to_fit(nlohmann::ordered_json& messages,
                       const std::function<int64_t(const nlohmann::ordered_json&)>& measure, int64_t limit);

}  // namespace hearth::agent
