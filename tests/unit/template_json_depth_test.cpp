// json_to_value's nesting limit: a request body with deeply nested arrays must end in
// an Error naming the limit, never in a stack overflow.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "template/chat_template.h"

using hearth::Error;
using hearth::ErrorKind;
using hearth::tmpl::ChatTemplate;
using hearth::tmpl::json_to_value;
using hearth::tmpl::kMaxJsonDepth;
using json = nlohmann::ordered_json;

namespace {

// `levels` nested arrays around 1 (nlohmann parses iteratively, so any depth is fine).
json nested_arrays(int levels) {
  return json::parse(std::string(static_cast<size_t>(levels), '[') + "1" +
                     std::string(static_cast<size_t>(levels), ']'));
}

TEST(TemplateJsonDepth, AcceptsTheLimit) {
  EXPECT_NO_THROW(json_to_value(nested_arrays(kMaxJsonDepth)));
  // Objects count the same as arrays.
  json j = 1;
  for (int i = 0; i < kMaxJsonDepth; ++i) j = json{{"k", j}};
  EXPECT_NO_THROW(json_to_value(j));
}

TEST(TemplateJsonDepth, RejectsOneLevelMore) {
  try {
    json_to_value(nested_arrays(kMaxJsonDepth + 1));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("deeper than 128 levels"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[template]", 0), 0u) << e.what();
  }
}

TEST(TemplateJsonDepth, HostileNestingThroughApplyIsAnError) {
  json input = {{"messages", nested_arrays(100000)}};
  ChatTemplate t("{{ messages }}");
  EXPECT_THROW(t.apply(input), Error);
  // Scalars and shallow input are unaffected.
  EXPECT_EQ(ChatTemplate("{{ messages[0] }}").apply(json{{"messages", {"hi"}}}), "hi");
}

}  // namespace
