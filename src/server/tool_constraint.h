// A chat request's tool_choice ("required" / a named function on the OpenAI route, "any" /
// "tool" on the Anthropic one) as a grammar constraint: the output is one call (or, with
// parallel calls allowed, one or more) in the format the template's output is parsed in,
// the arguments valid for the tool's schema.
#pragma once

#include <optional>

#include "grammar/constraint.h"
#include "server/chat_request.h"

namespace hearth::server {

// The constraint that enforces `tc`; nullopt when nothing is to be enforced (kFree) or the
// format has no grammar (Mistral: the prompt's instruction is all there is). Throws
// ApiException (400, param "tool_choice" / "tools") for a named tool that is not among
// the tools or a parameters schema that cannot be enforced.
std::optional<grammar::ConstraintSpec> tool_constraint_spec(const ToolConstraint& tc);

}  // namespace hearth::server
