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

// The schema as handed to xgrammar: every string schema with minLength / maxLength (and
// no pattern or format) gets the same bounds as an equivalent "pattern" instead. xgrammar
// 0.2.9 compiles length-bounded strings to "any byte but \" \\ \r \n" repeated, which
// lets raw control characters into the JSON (invalid) and forbids escapes; its pattern
// path uses the proper JSON string characters. Key order is kept (the output follows it).
// Call after check_schema_supported.
nlohmann::ordered_json enforceable_schema(nlohmann::ordered_json schema);

}  // namespace hearth::grammar
