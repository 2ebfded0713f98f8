#include "server/tool_constraint.h"

#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/tool_call_constraint.h"
#include "server/openai_protocol.h"

namespace hearth::server {
namespace {

using json = nlohmann::ordered_json;

std::optional<grammar::ToolCallFormat> grammar_format(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes:
      return grammar::ToolCallFormat::kHermesJson;
    case ToolFormat::kQwenXml:
      return grammar::ToolCallFormat::kQwenXml;
    case ToolFormat::kLlama3Json:
      return grammar::ToolCallFormat::kLlama3Json;
    case ToolFormat::kMistral:
    case ToolFormat::kNone:
      break;
  }
  return std::nullopt;
}

// {type: "function", function: {name, parameters}} (or the function object alone).
grammar::ToolSchema tool_schema(const json& tool) {
  const json& fn = tool.contains("function") ? tool.at("function") : tool;
  grammar::ToolSchema s;
  if (fn.is_object()) {
    const auto name = fn.find("name");
    if (name != fn.end() && name->is_string()) s.name = name->get<std::string>();
    const auto params = fn.find("parameters");
    if (params != fn.end()) s.parameters = *params;
  }
  return s;
}

}  // namespace

std::optional<grammar::ConstraintSpec> tool_constraint_spec(const ToolConstraint& tc) {
  if (tc.kind == ToolConstraint::Kind::kFree) return std::nullopt;
  const std::optional<grammar::ToolCallFormat> format = grammar_format(tc.format);
  if (!format || !tc.tools.is_array()) return std::nullopt;
  std::vector<grammar::ToolSchema> tools;
  for (const json& t : tc.tools) {
    grammar::ToolSchema s = tool_schema(t);
    if (tc.kind == ToolConstraint::Kind::kNamed && s.name != tc.name) continue;
    tools.push_back(std::move(s));
  }
  if (tools.empty()) {
    throw ApiException(invalid_request(
        tc.kind == ToolConstraint::Kind::kNamed
            ? "'tool_choice' names function '" + tc.name + "', which is not among the tools"
            : std::string("'tool_choice' requires a tool call but no tools were given"),
        "tool_choice"));
  }
  try {
    return grammar::tool_call_constraint(tools, *format, tc.parallel);
  } catch (const Error& e) {
    throw ApiException(invalid_request(e.what(), "tools"));
  }
}

}  // namespace hearth::server
