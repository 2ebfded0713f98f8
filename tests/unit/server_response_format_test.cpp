// The OpenAI `response_format` field: each accepted shape and the constraint it becomes,
// and every malformed one refused with a 400 naming the field (`param`).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/openai_protocol.h"
#include "server/response_format.h"

using hearth::grammar::ConstraintKind;
using hearth::server::ApiException;
using hearth::server::parse_response_format;
using Json = nlohmann::ordered_json;

namespace {

std::string param_of_error(const Json& v) {
  try {
    parse_response_format(v);
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().status, 400);
    return e.error().param;
  }
  ADD_FAILURE() << "no error for " << v.dump();
  return "";
}

TEST(ResponseFormat, TextIsFree) {
  EXPECT_FALSE(parse_response_format(Json::parse(R"({"type":"text"})")).has_value());
}

TEST(ResponseFormat, JsonObject) {
  auto s = parse_response_format(Json::parse(R"({"type":"json_object"})"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, ConstraintKind::kJsonObject);
  // llama.cpp's form: a schema beside json_object.
  s = parse_response_format(Json::parse(R"({"type":"json_object","schema":{"type":"integer"}})"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, ConstraintKind::kJsonSchema);
  EXPECT_EQ(s->text, R"({"type":"integer"})");
}

TEST(ResponseFormat, JsonSchemaKeepsKeyOrderAndStrict) {
  auto s = parse_response_format(Json::parse(
      R"({"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}}}})"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, ConstraintKind::kJsonSchema);
  EXPECT_EQ(s->text,
            R"({"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}})");
  EXPECT_TRUE(s->strict);  // absent: strict
  s = parse_response_format(Json::parse(
      R"({"type":"json_schema","json_schema":{"name":"p","schema":{},"strict":false}})"));
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->strict);
  // No schema: any JSON object.
  s = parse_response_format(Json::parse(R"({"type":"json_schema","json_schema":{"name":"p"}})"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, ConstraintKind::kJsonObject);
}

TEST(ResponseFormat, MalformedIsRefusedNamingTheField) {
  EXPECT_EQ(param_of_error(Json("json")), "response_format");
  EXPECT_EQ(param_of_error(Json::parse(R"({})")), "response_format.type");
  EXPECT_EQ(param_of_error(Json::parse(R"({"type":"yaml"})")), "response_format.type");
  EXPECT_EQ(param_of_error(Json::parse(R"({"type":"json_schema"})")),
            "response_format.json_schema");
  EXPECT_EQ(
      param_of_error(Json::parse(R"({"type":"json_schema","json_schema":{"name":3,"schema":{}}})")),
      "response_format.json_schema.name");
  EXPECT_EQ(param_of_error(Json::parse(R"({"type":"json_schema","json_schema":{"schema":"{}"}})")),
            "response_format.json_schema.schema");
  EXPECT_EQ(param_of_error(
                Json::parse(R"({"type":"json_schema","json_schema":{"schema":{},"strict":1}})")),
            "response_format.json_schema.strict");
}

TEST(ResponseFormat, ParsedFromAChatRequest) {
  const auto r = hearth::server::parse_chat_request(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}})");
  ASSERT_TRUE(r.constraint);
  EXPECT_EQ(r.constraint->kind, ConstraintKind::kJsonObject);
  const auto free = hearth::server::parse_chat_request(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":null})");
  EXPECT_FALSE(free.constraint);
}

}  // namespace
