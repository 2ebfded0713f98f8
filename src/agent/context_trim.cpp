#include "agent/context_trim.h"

#include <algorithm>

#include "agent/image_tool.h"

namespace hearth::agent {

using json = nlohmann::ordered_json;

namespace {

std::string role_of(const json& m) {
  return m.is_object() && m.contains("role") && m["role"].is_string() ? m["role"].get<std::string>()
                                                                      : "";
}

bool has_tool_calls(const json& m) {
  return m.is_object() && m.contains("tool_calls") && m["tool_calls"].is_array() &&
         !m["tool_calls"].empty();
}

}  // namespace

std::vector<std::pair<size_t, size_t>> droppable_units(const json& messages) {
  const size_t n = messages.size();
  size_t i = 0;
  while (i < n && role_of(messages[i]) == "system") ++i;
  size_t last_user = n;
  for (size_t k = n; k-- > i;)
    if (role_of(messages[k]) == "user") {
      last_user = k;
      break;
    }
  std::vector<std::pair<size_t, size_t>> units;
  while (i < n) {
    size_t end = i + 1;
    if (role_of(messages[i]) == "assistant" && has_tool_calls(messages[i]))
      while (end < n && role_of(messages[end]) == "tool") ++end;
    if (!(i <= last_user && last_user < end)) units.emplace_back(i, end);
    i = end;
  }
  // The most recent unit is what the model answers now: never dropped.
  if (!units.empty() && units.back().second == n) units.pop_back();
  return units;
}

TrimResult trim_to_fit(json& messages, const std::function<int64_t(const json&)>& measure,
                       int64_t limit) {
  TrimResult r;
  r.tokens = measure(messages);
  while (r.tokens > limit) {
    const auto units = droppable_units(messages);
    if (units.empty()) break;
    // Each unit's share of the tokens, estimated from its share of the JSON text.
    size_t total_chars = 0;
    for (const json& m : messages) total_chars += message_chars(m);
    const double tokens_per_char =
        total_chars > 0 ? static_cast<double>(r.tokens) / total_chars : 0;
    const double need = static_cast<double>(r.tokens - limit);
    double freed = 0;
    size_t take = 0;
    while (take < units.size() && (take == 0 || freed < need)) {
      for (size_t k = units[take].first; k < units[take].second; ++k)
        freed += message_chars(messages[k]) * tokens_per_char;
      ++take;
    }
    // Erase the chosen units, latest first so earlier indices stay valid.
    for (size_t u = take; u-- > 0;) {
      messages.erase(messages.begin() + static_cast<long>(units[u].first),
                     messages.begin() + static_cast<long>(units[u].second));
      r.dropped += units[u].second - units[u].first;
    }
    r.tokens = measure(messages);
  }
  r.fits = r.tokens <= limit;
  return r;
}

}  // namespace hearth::agent
