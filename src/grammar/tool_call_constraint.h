// Constraints that make a model's output one tool call (or several, for parallel calls)
// in the format its chat template uses, the arguments satisfying the tool's schema:
// what `tool_choice` "required" / a named function and Anthropic's "any" / "tool" need.
// Built as xgrammar structural tags; the arguments' JSON is compact.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "grammar/constraint.h"

namespace hearth::grammar {

enum class ToolCallFormat {
  // Hermes / Qwen2.5 / Qwen3: <tool_call>\n{"name": "X", "arguments": {...}}\n</tool_call>,
  // parallel calls separated by "\n".
  kHermesJson,
  // Qwen3.5 / Qwen3-Coder: <tool_call>\n<function=X>\n<parameter=K>\nV\n</parameter>\n
  // </function>\n</tool_call>, parallel calls separated by "\n".
  kQwenXml,
  // Llama 3.x: {"name": "X", "parameters": {...}} (one call; parallel is not part of it).
  kLlama3Json,
};

// One callable tool: its name and the JSON schema of its arguments (null: an object with
// no arguments). Ordered: the arguments are generated in the schema's property order.
struct ToolSchema {
  std::string name;
  nlohmann::ordered_json parameters;
};

// A kStructuralTag spec whose output is exactly one call to one of `tools` (with
// `parallel`: one or more calls) in `format`. Throws Error(kInvalidInput) when `tools` is
// empty or a name is empty, and the errors of check_schema_supported for a parameters
// schema that cannot be enforced (the message names the tool).
ConstraintSpec tool_call_constraint(std::span<const ToolSchema> tools, ToolCallFormat format,
                                    bool parallel);

}  // namespace hearth::grammar
