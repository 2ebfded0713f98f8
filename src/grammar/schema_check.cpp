#include "grammar/schema_check.h"

#include <cmath>
#include <string_view>

#include "core/error.h"

namespace hearth::grammar {
namespace {

using Json = nlohmann::json;

// RFC 6901: '~' -> "~0", '/' -> "~1".
std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

[[noreturn]] void unsupported(const std::string& keyword, const std::string& where,
                              const std::string& why) {
  fail(ErrorKind::kUnsupported, "json_schema",
       "'" + keyword + "' at " + (where.empty() ? "/" : where) + " is not supported: " + why);
}

bool has_type(const Json& schema, std::string_view type) {
  auto it = schema.find("type");
  if (it == schema.end()) return false;
  if (it->is_string()) return it->get<std::string>() == type;
  if (it->is_array()) {
    for (const Json& t : *it) {
      if (t.is_string() && t.get<std::string>() == type) return true;
    }
  }
  return false;
}

void check(const Json& schema, const std::string& where, int depth);

void check_each(const Json& container, const std::string& where, int depth) {
  if (container.is_object()) {
    for (auto it = container.begin(); it != container.end(); ++it) {
      check(it.value(), where + "/" + pointer_token(it.key()), depth + 1);
    }
  } else if (container.is_array()) {
    for (size_t i = 0; i < container.size(); ++i)
      check(container[i], where + "/" + std::to_string(i), depth + 1);
  }
}

void check(const Json& schema, const std::string& where, int depth) {
  if (depth > kMaxSchemaDepth) {
    fail(ErrorKind::kInvalidInput, "json_schema",
         "the schema nests deeper than " + std::to_string(kMaxSchemaDepth) + " levels at " + where);
  }
  if (schema.is_boolean()) return;
  if (!schema.is_object()) {
    fail(ErrorKind::kInvalidInput, "json_schema",
         "the schema at " + (where.empty() ? std::string("/") : where) +
             " must be an object or a boolean, not " + schema.type_name());
  }
  // Keywords xgrammar does not enforce (it would drop them and accept output they reject).
  for (const char* keyword : {"not", "if", "then", "else", "dependentRequired", "dependentSchemas",
                              "dependencies", "contains", "minContains", "maxContains"}) {
    if (schema.contains(keyword))
      unsupported(keyword, where, "constrained decoding cannot enforce it");
  }
  if (auto it = schema.find("uniqueItems");
      it != schema.end() && it->is_boolean() && it->get<bool>()) {
    unsupported("uniqueItems", where, "constrained decoding cannot enforce unique array items");
  }
  if (auto it = schema.find("allOf"); it != schema.end() && it->is_array() && it->size() > 1) {
    unsupported("allOf", where,
                "only an allOf with a single schema can be enforced (merge the schemas)");
  }
  if (auto it = schema.find("$ref"); it != schema.end() && it->is_string()) {
    const std::string& ref = it->get_ref<const std::string&>();
    if (ref != "#" && ref.rfind("#/", 0) != 0) {
      unsupported(
          "$ref", where,
          "only references inside the schema ('#' or '#/...') are resolved, not '" + ref + "'");
    }
  }
  if (auto it = schema.find("multipleOf"); it != schema.end()) {
    const bool integral =
        it->is_number_integer() || it->is_number_unsigned() ||
        (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>());
    if (!has_type(schema, "integer") || has_type(schema, "number") || !integral) {
      unsupported("multipleOf", where,
                  "only an integer multipleOf on \"type\": \"integer\" can be enforced");
    }
  }
  if ((schema.contains("pattern") || schema.contains("format")) &&
      (schema.contains("minLength") || schema.contains("maxLength"))) {
    unsupported(schema.contains("minLength") ? "minLength" : "maxLength", where,
                "string lengths cannot be enforced together with 'pattern' or 'format'");
  }
  // Subschemas.
  for (const char* keyword : {"additionalProperties", "unevaluatedProperties", "propertyNames",
                              "additionalItems", "unevaluatedItems"}) {
    if (auto it = schema.find(keyword); it != schema.end())
      check(*it, where + "/" + keyword, depth + 1);
  }
  if (auto it = schema.find("items"); it != schema.end()) {
    if (it->is_array()) {
      check_each(*it, where + "/items", depth);
    } else {
      check(*it, where + "/items", depth + 1);
    }
  }
  for (const char* keyword : {"properties", "patternProperties", "$defs", "definitions",
                              "prefixItems", "anyOf", "oneOf", "allOf"}) {
    if (auto it = schema.find(keyword); it != schema.end())
      check_each(*it, where + "/" + keyword, depth);
  }
}

}  // namespace

void check_schema_supported(const Json& schema) { check(schema, "", 0); }

namespace {

using OJson = nlohmann::ordered_json;

// One character of a JSON string that needs no escape: anything but '"', '\\' and the
// control characters (xgrammar's pattern path excludes those three anyway; it has no
// escapes, so a length-bounded string never holds a quote or a backslash).
constexpr const char* kJsonChar = R"([^"\\\x00-\x1f])";

void rewrite(OJson& schema) {
  if (!schema.is_object()) return;
  const bool bounded = schema.contains("minLength") || schema.contains("maxLength");
  if (bounded && !schema.contains("pattern") && !schema.contains("format")) {
    auto bound = [&](const char* key) -> std::string {
      auto it = schema.find(key);
      if (it == schema.end() || !it->is_number()) return "";
      const double d = it->get<double>();
      if (!(d >= 0) || d > 1e6) return "";
      return std::to_string(static_cast<int64_t>(d));
    };
    const std::string lo = bound("minLength"), hi = bound("maxLength");
    schema["pattern"] = std::string(kJsonChar) + "{" + (lo.empty() ? "0" : lo) + "," + hi + "}";
    schema.erase("minLength");
    schema.erase("maxLength");
  }
  for (const char* keyword : {"additionalProperties", "unevaluatedProperties", "propertyNames",
                              "additionalItems", "unevaluatedItems", "items"}) {
    if (auto it = schema.find(keyword); it != schema.end()) {
      if (it->is_array()) {
        for (OJson& s : *it) rewrite(s);
      } else {
        rewrite(*it);
      }
    }
  }
  for (const char* keyword : {"properties", "patternProperties", "$defs", "definitions",
                              "prefixItems", "anyOf", "oneOf", "allOf"}) {
    auto it = schema.find(keyword);
    if (it == schema.end()) continue;
    if (it->is_object()) {
      for (auto& el : it->items()) rewrite(el.value());
    } else if (it->is_array()) {
      for (OJson& s : *it) rewrite(s);
    }
  }
}

}  // namespace

OJson enforceable_schema(OJson schema) {
  rewrite(schema);
  return schema;
}

}  // namespace hearth::grammar
