#include "grammar/tool_call_constraint.h"

#include <xgrammar/xgrammar.h>

#include "core/error.h"
#include "grammar/schema_check.h"

namespace hearth::grammar {
namespace {

using Json = nlohmann::ordered_json;

Json const_string(std::string value) {
  return Json{{"type", "const_string"}, {"value", std::move(value)}};
}

// The tool's arguments schema; a missing / null one is an object without arguments.
Json arguments_schema(const ToolSchema& tool) {
  if (tool.parameters.is_null()) return Json{{"type", "object"}, {"properties", Json::object()}};
  try {
    check_schema_supported(nlohmann::json(tool.parameters));
  } catch (const Error& e) {
    throw Error(e.kind(),
                std::string(e.what()) + " (in the parameters of tool '" + tool.name + "')");
  }
  return tool.parameters;
}

// Compact JSON for the arguments, as an EBNF grammar: structural tags' own json_schema
// format allows free whitespace, which a small model fills until max_tokens.
Json compact_json(const ToolSchema& tool) {
  const Json schema = enforceable_schema(arguments_schema(tool));
  std::string ebnf;
  try {
    ebnf = xgrammar::Grammar::FromJSONSchema(schema.dump(), /*any_whitespace=*/false,
                                             /*indent=*/std::nullopt,
                                             std::make_pair(std::string(","), std::string(":")),
                                             /*strict_mode=*/true)
               .ToString();
  } catch (const std::exception& e) {
    fail(ErrorKind::kInvalidInput, "tools",
         "the parameters schema of tool '" + tool.name + "' cannot be compiled: " + e.what());
  }
  return Json{{"type", "grammar"}, {"grammar", std::move(ebnf)}};
}

Json one_call(const ToolSchema& tool, ToolCallFormat format) {
  const std::string quoted_name = Json(tool.name).dump();  // a JSON string, escaped
  switch (format) {
    case ToolCallFormat::kHermesJson:
      return Json{{"type", "sequence"},
                  {"elements", Json::array({const_string("<tool_call>\n{\"name\": " + quoted_name +
                                                         ", \"arguments\": "),
                                            compact_json(tool), const_string("}\n</tool_call>")})}};
    case ToolCallFormat::kLlama3Json:
      return Json{{"type", "sequence"},
                  {"elements",
                   Json::array({const_string("{\"name\": " + quoted_name + ", \"parameters\": "),
                                compact_json(tool), const_string("}")})}};
    case ToolCallFormat::kQwenXml:
      return Json{{"type", "tag"},
                  {"begin", "<tool_call>\n<function=" + tool.name + ">\n"},
                  // One whitespace character at most where the XML allows any: the values
                  // are the model's to write, the layout is not.
                  {"content",
                   {{"type", "json_schema"},
                    {"json_schema", arguments_schema(tool)},
                    {"style", "qwen_xml"},
                    {"max_whitespace_cnt", 1}}},
                  {"end", "\n</function>\n</tool_call>"}};
  }
  fail(ErrorKind::kInternal, "tools", "unknown tool-call format");
}

}  // namespace

ConstraintSpec tool_call_constraint(std::span<const ToolSchema> tools, ToolCallFormat format,
                                    bool parallel) {
  if (tools.empty())
    fail(ErrorKind::kInvalidInput, "tools", "a tool-call constraint needs at least one tool");
  Json calls = Json::array();
  for (const ToolSchema& tool : tools) {
    if (tool.name.empty()) fail(ErrorKind::kInvalidInput, "tools", "a tool has an empty name");
    calls.push_back(one_call(tool, format));
  }
  Json call = calls.size() == 1 ? calls[0] : Json{{"type", "or"}, {"elements", calls}};
  Json root = call;
  if (parallel && format != ToolCallFormat::kLlama3Json) {
    const Json more{{"type", "sequence"}, {"elements", Json::array({const_string("\n"), call})}};
    root = Json{{"type", "sequence"},
                {"elements", Json::array({call, Json{{"type", "star"}, {"content", more}}})}};
  }
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kStructuralTag;
  spec.text = Json{{"type", "structural_tag"}, {"format", std::move(root)}}.dump();
  return spec;
}

}  // namespace hearth::grammar
