// The JSON-schema features constrained decoding cannot enforce. xgrammar ignores some
// keywords (with a log line) and weakens others; a request using one would get output
// that may not validate, so it is refused up front with the keyword and its place named.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace hearth::grammar {

// Deepest schema nesting accepted (a deeper schema is refused, not recursed into).
inline constexpr int kMaxSchemaDepth = 64;

// Throws Error(kUnsupported) naming the first unenforceable keyword and its JSON pointer
// ("'uniqueItems' at /properties/tags is not supported"), and Error(kInvalidInput) when
// the schema is not an object or boolean, or nests deeper than kMaxSchemaDepth.
void check_schema_supported(const nlohmann::json& schema);

}  // namespace hearth::grammar
