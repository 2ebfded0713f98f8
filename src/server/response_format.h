// The OpenAI `response_format` field: {"type": "text"}, {"type": "json_object"} and
// {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}
// (llama.cpp's {"type": "json_object", "schema": {...}} too), turned into the constraint
// the engine enforces while sampling.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "grammar/constraint.h"

namespace hearth::server {

// nullopt for "text"; throws ApiException (400, param "response_format...") when the
// value is malformed. The schema is kept as given (property order matters: the output
// follows it); whether xgrammar can enforce it is checked when it is compiled.
std::optional<grammar::ConstraintSpec> parse_response_format(const nlohmann::ordered_json& v);

}  // namespace hearth::server
