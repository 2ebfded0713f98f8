// Unit tests of the Jinja interpreter: small templates for each piece
// (expressions, filters, tests, whitespace control, loops, macros, namespace,
// ...) compared with Python jinja2 (tests/data/templates/expected/_snippets.json,
// from scripts/gen_template_fixtures.py), plus limits, error locations, the
// sandbox and concurrent rendering.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "template/chat_template.h"
#include "template/evaluator.h"
#include "template/value.h"

namespace fs = std::filesystem;
using hearth::Error;
using hearth::ErrorKind;
using hearth::tmpl::ChatRenderOptions;
using hearth::tmpl::ChatTemplate;
using hearth::tmpl::Limits;
using hearth::tmpl::Template;
using hearth::tmpl::Value;
using json = nlohmann::ordered_json;

namespace {

const fs::path kFixtures = fs::path(HEARTH_SOURCE_DIR) / "tests/data/templates";

std::string render(const std::string& src, const json& vars = json::object(), const Limits& limits = {}) {
  return ChatTemplate(src).apply(vars, ChatRenderOptions{std::nullopt, limits});
}

// Message of the Error thrown by rendering `src` ("" when none).
std::string error_of(const std::string& src, const json& vars = json::object(), const Limits& limits = {},
                     ErrorKind* kind = nullptr) {
  try {
    render(src, vars, limits);
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

TEST(TemplateInterpreter, SnippetsMatchJinja2) {
  json fx = json::parse(hearth::read_text_file((kFixtures / "expected/_snippets.json").string()));
  ChatRenderOptions opts;
  opts.now = hearth::tmpl::parse_iso_datetime(fx["now"].get<std::string>());
  int n = 0;
  for (const auto& [name, want] : fx["results"].items()) {
    SCOPED_TRACE(name);
    json vars = fx["variables"];
    std::string got, err;
    try {
      got = ChatTemplate(want["template"].get<std::string>()).apply(vars, opts);
    } catch (const Error& e) {
      err = e.what();
    }
    if (want.contains("error")) {
      EXPECT_NE(err, "") << "jinja2 raised: " << want["error"];
      EXPECT_NE(err.find(want["error"].get<std::string>()), std::string::npos) << err;
    } else {
      EXPECT_EQ(err, "");
      EXPECT_EQ(got, want["output"].get<std::string>());
    }
    ++n;
  }
  EXPECT_GE(n, 30);
}

TEST(TemplateInterpreter, FloatRepr) {
  using hearth::tmpl::float_repr;
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(0.1), "0.1");
  EXPECT_EQ(float_repr(-2.5), "-2.5");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(123456789.0), "123456789.0");
  EXPECT_EQ(float_repr(1e-5), "1e-05");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(1.5e300), "1.5e+300");
}

TEST(TemplateInterpreter, TrimAndLstripBlocks) {
  EXPECT_EQ(render("{% if true %}\nx\n{% endif %}\ny"), "x\ny");
  EXPECT_EQ(render("  {% if true %}x{% endif %}"), "x");
  EXPECT_EQ(render("  {{ 'v' }}"), "  v");  // lstrip does not apply to {{
  EXPECT_EQ(render("a  {%- if true %} b {% endif -%}  c"), "a b c");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("line\n"), "line");  // one trailing newline dropped
  EXPECT_EQ(render("a\r\nb"), "a\nb");
  EXPECT_EQ(render("{# c #}\nx"), "x");
}

TEST(TemplateInterpreter, UndefinedSemantics) {
  EXPECT_EQ(render("[{{ nope }}]{{ nope is defined }}{{ nope | length }}{{ 'x' in nope }}"), "[]False0False");
  EXPECT_EQ(render("{% for x in nope %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_NE(error_of("{{ nope.attr }}").find("'nope' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ nope + 1 }}").find("'nope' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ {'a': 1}.b.c }}").find("'dict object' has no attribute 'b'"), std::string::npos);
}

TEST(TemplateInterpreter, ChatGlobals) {
  json in = {{"messages", json::array()}};
  EXPECT_EQ(render("{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }}", in), "True True False");
  in["tools"] = json::array({1});
  EXPECT_EQ(render("{{ tools | length }}", in), "1");
  ChatRenderOptions opts;
  opts.now = hearth::tmpl::parse_iso_datetime("2024-02-29T23:59:01");
  EXPECT_EQ(ChatTemplate("{{ strftime_now('%d %b %Y %H:%M:%S %a') }}").apply(in, opts), "29 Feb 2024 23:59:01 Thu");
  EXPECT_THROW(hearth::tmpl::parse_iso_datetime("yesterday"), Error);
}

TEST(TemplateInterpreter, RaiseExceptionCarriesMessageAndLocation) {
  ErrorKind kind{};
  std::string e = error_of("ok\n  {{ raise_exception('Only user and assistant roles are supported!') }}", json::object(),
                           {}, &kind);
  EXPECT_EQ(kind, ErrorKind::kInvalidInput);
  EXPECT_EQ(e, "[template] line 2, column 6: Only user and assistant roles are supported!");
}

TEST(TemplateInterpreter, ErrorsHaveLineAndColumn) {
  ErrorKind kind{};
  std::string e = error_of("a\nb\n{{ x | nosuch }}", json::object(), {}, &kind);
  EXPECT_EQ(e, "[template] line 3, column 8: unknown filter 'nosuch'");
  EXPECT_EQ(kind, ErrorKind::kUnsupported);
  EXPECT_EQ(error_of("{{ 1 is nosuchtest }}"), "[template] line 1, column 9: unknown test 'nosuchtest'");
  // Syntax errors are found at parse time, even in branches never taken.
  try {
    Template t("{% if false %}\n  {{ (1 + }}\n{% endif %}");
    FAIL() << "no syntax error";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kInvalidInput);
    EXPECT_EQ(std::string(err.what()).rfind("[template] line 2, column ", 0), 0u) << err.what();
  }
  EXPECT_THROW(Template("{% for x in y %}no end"), Error);
  EXPECT_THROW(Template("{{ 'unterminated }}"), Error);
  EXPECT_THROW(Template("{% endif %}"), Error);
  EXPECT_THROW(Template("{{ x "), Error);
}

TEST(TemplateInterpreter, SandboxRefusesFileAndModuleAccess) {
  for (const char* src : {"{% include 'x.jinja' %}", "{% import 'm' as m %}", "{% extends 'base' %}",
                          "{% from 'm' import f %}"}) {
    try {
      Template t(src);
      FAIL() << src;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("sandboxed"), std::string::npos) << e.what();
    }
  }
  EXPECT_NE(error_of("{{ ''.__class__ }}").find("unsafe"), std::string::npos);
  EXPECT_NE(error_of("{% set d = {} %}{{ d.update({'a': 1}) }}").find("unsafe"), std::string::npos);
  EXPECT_NE(error_of("{% set l = [1] %}{{ l.pop() }}").find("unsafe"), std::string::npos);
}

TEST(TemplateInterpreter, LoopIterationLimit) {
  Limits lim;
  lim.max_loop_iterations = 1000;
  ErrorKind kind{};
  std::string e = error_of("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}",
                           json::object(), lim, &kind);
  EXPECT_EQ(kind, ErrorKind::kResource);
  EXPECT_NE(e.find("loop iterations exceed the limit of 1000"), std::string::npos) << e;
  EXPECT_NE(error_of("{{ range(5000) | length }}", json::object(), lim).find("limit"), std::string::npos);
}

TEST(TemplateInterpreter, RecursionDepthLimit) {
  ErrorKind kind{};
  std::string e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", json::object(), {}, &kind);
  EXPECT_EQ(kind, ErrorKind::kResource);
  EXPECT_NE(e.find("macro call depth exceeds the limit"), std::string::npos) << e;
  // Deeply nested source is refused by the parser instead of overflowing the stack.
  std::string deep(5000, '(');
  EXPECT_THROW(Template("{{ " + deep + "1" + std::string(5000, ')') + " }}"), Error);
  std::string nested;
  for (int i = 0; i < 1000; ++i) nested += "{% if true %}";
  EXPECT_THROW(Template{nested}, Error);
}

TEST(TemplateInterpreter, OutputSizeLimit) {
  Limits lim;
  lim.max_output_bytes = 1000;
  ErrorKind kind{};
  std::string e = error_of("{% for i in range(200) %}0123456789{% endfor %}", json::object(), lim, &kind);
  EXPECT_EQ(kind, ErrorKind::kResource);
  EXPECT_NE(e.find("output exceeds the limit of 1000 bytes"), std::string::npos) << e;
  EXPECT_THROW(render("{{ 'x' * 100000000 }}"), Error);
}

// Every limit error names where in the template it happened.
void expect_limit_at(const std::string& src, const std::string& where, const std::string& what, const Limits& lim = {}) {
  ErrorKind kind{};
  std::string e = error_of(src, json::object(), lim, &kind);
  EXPECT_EQ(kind, ErrorKind::kResource) << src << " -> " << e;
  EXPECT_EQ(e.rfind("[template] " + where + ": ", 0), 0u) << src << " -> " << e;
  EXPECT_NE(e.find(what), std::string::npos) << src << " -> " << e;
}

TEST(TemplateInterpreter, LimitsCoverRecursiveLoopsCallersAndFormatting) {
  // A recursive loop that never stops recursing.
  expect_limit_at("{% for x in [1] recursive %}\n  {{ loop([x]) }}{% endfor %}", "line 2, column 6",
                  "recursive loop depth exceeds the limit of 64");
  // A macro and its call block calling each other forever.
  expect_limit_at("{% macro m() %}{{ caller() }}{% endmacro %}\n{% macro again() %}{% call m() %}{{ again() }}{% endcall %}"
                  "{% endmacro %}{{ again() }}",
                  "line 2, column 23", "macro call depth exceeds the limit");
  // Nested loops over the iteration budget, in a with block and a call block.
  Limits lim;
  lim.max_loop_iterations = 500;
  expect_limit_at("{% with r = range(30) %}{% for a in r %}{% for b in r %}{% endfor %}{% endfor %}{% endwith %}",
                  "line 1, column 44", "loop iterations exceed the limit of 500", lim);
  // Huge values built by formatting are refused before they are allocated.
  expect_limit_at("{{ '{:>999999999}'.format(1) }}", "line 1, column 19", "exceeds the limit");
  expect_limit_at("{{ '%*d' % (999999999, 1) }}", "line 1, column 10", "exceeds the limit");
  expect_limit_at("{{ 'x'.center(999999999) }}", "line 1, column 7", "exceeds the limit");
  expect_limit_at("{{ 'x'.zfill(999999999) }}", "line 1, column 7", "exceeds the limit");
  // Output that grows past the output limit through a recursive loop.
  Limits out;
  out.max_output_bytes = 4096;
  expect_limit_at("{% set t = [[[[[1]]]]] %}{% for n in range(100) %}{% for x in t recursive %}{{ '0123456789' * 10 }}"
                  "{% if x is iterable %}{{ loop(x) }}{% endif %}{% endfor %}{% endfor %}",
                  "line 1, column 77", "exceeds the limit of 4096 bytes", out);
}

TEST(TemplateInterpreter, ClosuresDoNotOutliveTheirBlock) {
  // loop / caller kept past the block that made them: an error, not a dangling frame.
  EXPECT_NE(error_of("{% set ns = namespace(f=none) %}{% for x in [1] recursive %}{% set ns.f = loop %}{% endfor %}"
                     "{{ ns.f([2]) }}")
                .find("loop() called after its loop ended"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(f=none) %}{% macro keep() %}{% set ns.f = caller %}{% endmacro %}"
                     "{% call keep() %}x{% endcall %}{{ ns.f() }}")
                .find("caller() used after its call block ended"),
            std::string::npos);
}

TEST(TemplateInterpreter, NamespaceAndSharedMutation) {
  EXPECT_EQ(render("{% set ns = namespace(items=[], n=0) %}{% for m in [1, 2] %}{% set ns.n = ns.n + m %}"
                   "{% set ns.items = ns.items + [m] %}{% endfor %}{{ ns.n }} {{ ns.items }}"),
            "3 [1, 2]");
  EXPECT_NE(error_of("{% set x = 1 %}{% set x.a = 2 %}").find("non-namespace"), std::string::npos);
}

TEST(TemplateInterpreter, ParseOnceRenderConcurrently) {
  ChatTemplate t(
      "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% if not loop.last %}\n{% endif %}{% endfor %}");
  json in = {{"messages", {{{"role", "user"}, {"content", " a "}}, {{"role", "assistant"}, {"content", "b"}}}}};
  const std::string want = "<user>a<assistant>b";  // trim_blocks eats the newline
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) bad += t.apply(in) != want;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(TemplateInterpreter, JsonInputKeepsKeyOrder) {
  json in = json::parse(R"({"messages": [], "tools": [{"z": 1, "a": {"y": 2.50, "b": "\u00e9"}}]})");
  EXPECT_EQ(render("{{ tools[0] | tojson }}", in), "{\"z\": 1, \"a\": {\"y\": 2.5, \"b\": \"\u00e9\"}}");
}

}  // namespace
