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
// 0.2.9 compiles length-bounded strings to "any byte but quote, backslash, CR, LF"
// repeated, which lets raw control characters (invalid JSON) through; its pattern path
// keeps to characters that need no escape. (Neither path generates escapes inside a
// length-bounded string.) Key order is kept. Call after check_schema_supported.
nlohmann::ordered_json enforceable_schema(nlohmann::ordered_json schema);

}  // namespace hearth::grammar
