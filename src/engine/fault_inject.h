// Test-only fault injection for `hearth serve` (hidden flag --test-fault-inject SPEC):
// lets the tests make one request fail inside the engine (poisoned logits, a throwing
// sampler, stop matcher or grammar mask, a failed allocation) or make the engine
// itself fail, to check that a fault stays with the request that caused it. A request
// is chosen by a marker string in its prompt text. Never enable it in production:
// anyone who can send a prompt can trigger the faults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::engine {

enum class FaultKind {
  kNan,      // the sequence's logits row becomes NaN (a non-finite model output)
  kSampler,  // its sampler throws
  kStop,     // its stop matcher throws
  kMask,     // its grammar-mask computation throws (constrained requests only)
  kAlloc,    // its admission fails with std::bad_alloc (after its KV blocks were taken)
  kEngine,   // the forward pass of a batch holding it (from token at_token on) throws: a fault of
             // the engine itself
};

// One rule: requests whose prompt text contains `marker` get `kind` when they are about
// to sample their token number `at_token` (0 = the first; kAlloc ignores it).
struct FaultRule {
  FaultKind kind = FaultKind::kNan;
  std::string marker;
  int32_t at_token = 0;
};

// Parses "KIND:MARKER[@N][,KIND:MARKER[@N]...]" with KIND one of nan, sampler, stop,
// mask, alloc, engine. Throws Error (kInvalidInput) naming the faulty rule.
std::vector<FaultRule> parse_fault_spec(std::string_view spec);

// The first rule whose marker occurs in `text`, if any.
std::optional<FaultRule> match_fault(const std::vector<FaultRule>& rules, std::string_view text);

// "nan", "sampler", ... (the spelling parse_fault_spec accepts).
const char* fault_kind_name(FaultKind kind);

}  // namespace hearth::engine
