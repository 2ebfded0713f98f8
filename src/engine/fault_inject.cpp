#include "engine/fault_inject.h"

#include <charconv>

#include "core/error.h"

namespace hearth::engine {
namespace {

constexpr FaultKind kKinds[] = {FaultKind::kNan,  FaultKind::kSampler, FaultKind::kStop,
                                FaultKind::kMask, FaultKind::kAlloc,   FaultKind::kEngine};

[[noreturn]] void bad(std::string_view rule, const std::string& why) {
  fail(ErrorKind::kInvalidInput, "fault-inject", "rule '" + std::string(rule) + "': " + why);
}

}  // namespace

const char* fault_kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kNan:
      return "nan";
    case FaultKind::kSampler:
      return "sampler";
    case FaultKind::kStop:
      return "stop";
    case FaultKind::kMask:
      return "mask";
    case FaultKind::kAlloc:
      return "alloc";
    case FaultKind::kEngine:
      return "engine";
  }
  return "?";
}

std::vector<FaultRule> parse_fault_spec(std::string_view spec) {
  std::vector<FaultRule> rules;
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = spec.find(',', pos);
    const std::string_view rule =
        spec.substr(pos, comma == std::string_view::npos ? spec.npos : comma - pos);
    pos = comma == std::string_view::npos ? spec.size() + 1 : comma + 1;
    const size_t colon = rule.find(':');
    if (colon == std::string_view::npos) bad(rule, "expected KIND:MARKER[@N]");
    const std::string_view kind = rule.substr(0, colon);
    std::string_view marker = rule.substr(colon + 1);
    FaultRule r;
    bool known = false;
    for (FaultKind k : kKinds) {
      if (kind == fault_kind_name(k)) {
        r.kind = k;
        known = true;
      }
    }
    if (!known)
      bad(rule,
          "unknown kind '" + std::string(kind) + "' (nan, sampler, stop, mask, alloc, engine)");
    const size_t at = marker.rfind('@');
    if (at != std::string_view::npos) {
      const std::string_view n = marker.substr(at + 1);
      const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), r.at_token);
      if (ec != std::errc() || end != n.data() + n.size() || r.at_token < 0 || n.empty()) {
        bad(rule, "the token number after '@' must be an integer >= 0");
      }
      marker = marker.substr(0, at);
    }
    if (marker.empty()) bad(rule, "empty marker");
    r.marker = std::string(marker);
    rules.push_back(std::move(r));
  }
  return rules;
}

std::optional<FaultRule> match_fault(const std::vector<FaultRule>& rules, std::string_view text) {
  for (const FaultRule& r : rules) {
    if (text.find(r.marker) != std::string_view::npos) return r;
  }
  return std::nullopt;
}

}  // namespace hearth::engine
