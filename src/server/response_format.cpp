#include "server/response_format.h"

#include <string>

#include "server/openai_protocol.h"

namespace hearth::server {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& message, const std::string& param) {
  throw ApiException(invalid_request(message, param));
}

grammar::ConstraintSpec schema_spec(const json& schema, const std::string& path, bool strict) {
  if (!schema.is_object() && !schema.is_boolean()) {
    bad("'" + path + "' must be a JSON schema (an object or a boolean), got " + schema.type_name(),
        path);
  }
  grammar::ConstraintSpec spec;
  spec.kind = grammar::ConstraintKind::kJsonSchema;
  spec.text = schema.dump();
  spec.strict = strict;
  return spec;
}

}  // namespace

std::optional<grammar::ConstraintSpec> parse_response_format(const json& v) {
  if (!v.is_object())
    bad(std::string("'response_format' must be an object, got ") + v.type_name(),
        "response_format");
  auto type_it = v.find("type");
  if (type_it == v.end() || !type_it->is_string()) {
    bad("'response_format.type' must be one of \"text\", \"json_object\", \"json_schema\"",
        "response_format.type");
  }
  const std::string type = type_it->get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    auto schema = v.find("schema");  // llama.cpp's extension
    if (schema != v.end() && !schema->is_null())
      return schema_spec(*schema, "response_format.schema", true);
    grammar::ConstraintSpec spec;
    spec.kind = grammar::ConstraintKind::kJsonObject;
    return spec;
  }
  if (type == "json_schema") {
    auto js = v.find("json_schema");
    if (js == v.end() || !js->is_object()) {
      bad("'response_format.json_schema' must be an object with the schema in 'schema'",
          "response_format.json_schema");
    }
    if (auto name = js->find("name"); name != js->end() && !name->is_null() && !name->is_string()) {
      bad(std::string("'response_format.json_schema.name' must be a string, got ") +
              name->type_name(),
          "response_format.json_schema.name");
    }
    // Strict unless the request says otherwise: object schemas then allow only the
    // properties they name, so a small model cannot wander off into extra keys.
    bool strict = true;
    if (auto s = js->find("strict"); s != js->end() && !s->is_null()) {
      if (!s->is_boolean()) {
        bad(std::string("'response_format.json_schema.strict' must be a boolean, got ") +
                s->type_name(),
            "response_format.json_schema.strict");
      }
      strict = s->get<bool>();
    }
    auto schema = js->find("schema");
    if (schema == js->end() || schema->is_null()) {
      grammar::ConstraintSpec spec;  // no schema: any JSON object
      spec.kind = grammar::ConstraintKind::kJsonObject;
      return spec;
    }
    return schema_spec(*schema, "response_format.json_schema.schema", strict);
  }
  bad("'response_format.type' must be one of \"text\", \"json_object\", \"json_schema\", got \"" +
          type + "\"",
      "response_format.type");
}

}  // namespace hearth::server
