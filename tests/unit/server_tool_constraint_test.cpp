// tool_choice as a grammar: which ToolConstraints become a structural tag (Hermes, Qwen XML,
// Llama 3 JSON; only the named tool for a named choice; parallel or not), which stay free
// (auto, Mistral), and the 400s (a name not among the tools, an unenforceable schema).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/openai_protocol.h"
#include "server/tool_constraint.h"

using hearth::grammar::ConstraintKind;
using hearth::server::ApiException;
using hearth::server::tool_constraint_spec;
using hearth::server::ToolConstraint;
using hearth::server::ToolFormat;
using Json = nlohmann::ordered_json;

namespace {

Json tools() {
  return Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "list_dir"}}])");
}

ToolConstraint constraint(ToolConstraint::Kind kind, ToolFormat format, bool parallel = false) {
  ToolConstraint tc;
  tc.kind = kind;
  tc.tools = tools();
  tc.format = format;
  tc.parallel = parallel;
  return tc;
}

TEST(ToolConstraint, FreeAndMistralAreNotConstrained) {
  EXPECT_FALSE(tool_constraint_spec(constraint(ToolConstraint::Kind::kFree, ToolFormat::kHermes)));
  EXPECT_FALSE(
      tool_constraint_spec(constraint(ToolConstraint::Kind::kRequired, ToolFormat::kMistral)));
  EXPECT_FALSE(
      tool_constraint_spec(constraint(ToolConstraint::Kind::kRequired, ToolFormat::kNone)));
}

TEST(ToolConstraint, RequiredHermesOffersEveryTool) {
  auto s = tool_constraint_spec(constraint(ToolConstraint::Kind::kRequired, ToolFormat::kHermes));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, ConstraintKind::kStructuralTag);
  EXPECT_NE(s->text.find(R"(\"name\": \"get_weather\")"), std::string::npos) << s->text;
  EXPECT_NE(s->text.find(R"(\"name\": \"list_dir\")"), std::string::npos) << s->text;
  EXPECT_EQ(s->text.find("\"star\""), std::string::npos);  // one call only
  auto p = tool_constraint_spec(
      constraint(ToolConstraint::Kind::kRequired, ToolFormat::kHermes, /*parallel=*/true));
  ASSERT_TRUE(p);
  EXPECT_NE(p->text.find("\"star\""), std::string::npos);  // more calls may follow
}

TEST(ToolConstraint, NamedOffersOnlyThatTool) {
  for (ToolFormat f : {ToolFormat::kHermes, ToolFormat::kQwenXml, ToolFormat::kLlama3Json}) {
    ToolConstraint tc = constraint(ToolConstraint::Kind::kNamed, f);
    tc.name = "list_dir";
    auto s = tool_constraint_spec(tc);
    ASSERT_TRUE(s);
    EXPECT_NE(s->text.find("list_dir"), std::string::npos) << s->text;
    EXPECT_EQ(s->text.find("get_weather"), std::string::npos) << s->text;
  }
}

TEST(ToolConstraint, ErrorsAre400s) {
  ToolConstraint tc = constraint(ToolConstraint::Kind::kNamed, ToolFormat::kHermes);
  tc.name = "nope";
  try {
    tool_constraint_spec(tc);
    ADD_FAILURE() << "no error";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().status, 400);
    EXPECT_EQ(e.error().param, "tool_choice");
  }
  tc = constraint(ToolConstraint::Kind::kRequired, ToolFormat::kHermes);
  tc.tools[0]["function"]["parameters"]["properties"]["city"] = Json::parse(R"({"not": {}})");
  try {
    tool_constraint_spec(tc);
    ADD_FAILURE() << "no error";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().status, 400);
    EXPECT_EQ(e.error().param, "tools");
    EXPECT_NE(std::string(e.what()).find("get_weather"), std::string::npos) << e.what();
  }
}

}  // namespace
