// Every chat template in shared/data/chat-templates and tests/data/templates/chat-templates-extra
// x every conversation in tests/data/templates/conversations, compared byte for byte with what Python
// jinja2 (set up as transformers does) rendered: tests/data/templates/expected/,
// written by scripts/gen_template_fixtures.py. Where jinja2 raised, Hearth must
// raise too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "template/chat_template.h"

namespace fs = std::filesystem;
using hearth::tmpl::ChatRenderOptions;
using hearth::tmpl::ChatTemplate;
using json = nlohmann::ordered_json;

namespace {

const fs::path kFixtures = fs::path(HEARTH_SOURCE_DIR) / "tests/data/templates";
const fs::path kTemplates = fs::path(HEARTH_SHARED_DIR) / "data/chat-templates";
const fs::path kExtraTemplates = kFixtures / "chat-templates-extra";

// Templates Hearth deliberately does not render, with the reason. Empty: all supported.
const std::map<std::string, std::string> kAllowedFailures = {};

std::map<std::string, json> load_conversations() {
  std::map<std::string, json> out;
  for (const auto& e : fs::directory_iterator(kFixtures / "conversations")) {
    if (e.path().extension() == ".json") {
      out[e.path().stem().string()] = json::parse(hearth::read_text_file(e.path().string()));
    }
  }
  return out;
}

TEST(TemplateRender, AllTemplatesMatchJinja2) {
  ASSERT_TRUE(fs::exists(kTemplates)) << kTemplates;
  auto convs = load_conversations();
  ASSERT_GE(convs.size(), 20u);
  std::vector<fs::path> templates;
  size_t shared_count = 0;
  for (const fs::path& dir : {kTemplates, kExtraTemplates}) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".jinja") templates.push_back(e.path());
    }
    if (dir == kTemplates) shared_count = templates.size();
  }
  std::sort(templates.begin(), templates.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  ASSERT_EQ(shared_count, 45u);
  ASSERT_EQ(templates.size(), 45u + 26u);

  int pairs = 0, pairs_ok = 0, templates_ok = 0, error_text_same = 0, errors = 0;
  std::vector<std::string> failures;
  for (const auto& tpath : templates) {
    const std::string stem = tpath.stem().string();
    fs::path fixture = kFixtures / "expected" / (stem + ".json");
    ASSERT_TRUE(fs::exists(fixture)) << "missing fixture " << fixture << " (run scripts/gen_template_fixtures.py)";
    json expected = json::parse(hearth::read_text_file(fixture.string()));
    ChatRenderOptions opts;
    opts.now = hearth::tmpl::parse_iso_datetime(expected["now"].get<std::string>());
    bool all_ok = true;
    std::unique_ptr<ChatTemplate> tmpl;
    std::string parse_error;
    try {
      tmpl = std::make_unique<ChatTemplate>(hearth::read_text_file(tpath.string()));
    } catch (const hearth::Error& e) {
      parse_error = e.what();
    }
    for (const auto& [name, conv] : convs) {
      ++pairs;
      ASSERT_TRUE(expected["results"].contains(name)) << stem << ": no expected result for " << name;
      const json& want = expected["results"][name];
      std::string got, err = parse_error;
      if (tmpl) {
        try {
          got = tmpl->apply(conv, opts);
        } catch (const hearth::Error& e) {
          err = e.what();
        }
      }
      bool ok;
      if (want.contains("error")) {
        ++errors;
        ok = !err.empty();
        if (ok && err.find(want["error"].get<std::string>()) != std::string::npos) {
          ++error_text_same;
        } else if (ok) {
          std::printf("error text differs: %s x %s: jinja2 '%s', hearth '%s'\n", stem.c_str(), name.c_str(),
                      want["error"].get<std::string>().c_str(), err.c_str());
        }
        if (!ok) failures.push_back(stem + " x " + name + ": jinja2 raised '" + want["error"].get<std::string>() + "' but hearth rendered");
      } else {
        ok = err.empty() && got == want["output"].get<std::string>();
        if (!ok) {
          std::string detail = err.empty() ? "output differs" : "hearth error: " + err;
          if (err.empty()) {
            const std::string& w = want["output"].get_ref<const std::string&>();
            size_t i = 0;
            while (i < w.size() && i < got.size() && w[i] == got[i]) ++i;
            detail += " at byte " + std::to_string(i) + ": want '" + w.substr(i, 60) + "' got '" + got.substr(i, 60) + "'";
          }
          failures.push_back(stem + " x " + name + ": " + detail);
        }
      }
      pairs_ok += ok;
      all_ok = all_ok && ok;
    }
    if (all_ok) {
      ++templates_ok;
    } else if (kAllowedFailures.count(stem)) {
      std::printf("allowed failure: %s (%s)\n", stem.c_str(), kAllowedFailures.at(stem).c_str());
    }
  }
  for (const auto& f : failures) std::printf("FAIL %s\n", f.c_str());
  std::printf("templates matched: %d / %d pairs, %d / %zu templates fully matched; "
              "%d / %d expected errors with the same message text\n",
              pairs_ok, pairs, templates_ok, templates.size(), error_text_same, errors);
  EXPECT_EQ(pairs_ok + 0, pairs) << failures.size() << " pairs differ";
  EXPECT_EQ(static_cast<size_t>(templates_ok) + kAllowedFailures.size(), templates.size());
}

// The default model's embedded template (its own bos/eos) and the Qwen3 tokenizer_config's
// template, over the same conversations (the end-to-end tests run these through `hearth template`).
TEST(TemplateRender, EmbeddedTemplatesMatchJinja2) {
  auto convs = load_conversations();
  json model = json::parse(hearth::read_text_file((kFixtures / "expected/_default_model.json").string()));
  json qwen = json::parse(hearth::read_text_file((kFixtures / "expected/_qwen3_tokenizer_config.json").string()));
  json cfg = json::parse(hearth::read_text_file(
      (fs::path(HEARTH_SHARED_DIR) / "data" / qwen["tokenizer_config"].get<std::string>()).string()));
  struct Case {
    const char* what;
    std::string source;
    const json* expected;
    bool own_tokens;
  } cases[] = {{"default model", model["chat_template"].get<std::string>(), &model, true},
               {"qwen3 tokenizer_config", cfg["chat_template"].get<std::string>(), &qwen, false}};
  int pairs = 0, ok = 0;
  for (const auto& c : cases) {
    ChatTemplate tmpl(c.source);
    ChatRenderOptions opts;
    opts.now = hearth::tmpl::parse_iso_datetime((*c.expected)["now"].get<std::string>());
    for (auto [name, conv] : convs) {
      SCOPED_TRACE(std::string(c.what) + " x " + name);
      if (c.own_tokens) {
        conv["bos_token"] = (*c.expected)["bos_token"];
        conv["eos_token"] = (*c.expected)["eos_token"];
      }
      const json& want = (*c.expected)["results"][name];
      std::string got, err;
      try {
        got = tmpl.apply(conv, opts);
      } catch (const hearth::Error& e) {
        err = e.what();
      }
      ++pairs;
      if (want.contains("error")) {
        EXPECT_NE(err, "") << "jinja2 raised " << want["error"];
        ok += !err.empty();
      } else {
        EXPECT_EQ(err, "");
        EXPECT_EQ(got, want["output"].get<std::string>());
        ok += err.empty() && got == want["output"].get<std::string>();
      }
    }
  }
  std::printf("embedded templates matched: %d / %d pairs\n", ok, pairs);
}

}  // namespace
