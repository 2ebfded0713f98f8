// Regression tests for inputs the template fuzzer (tests/fuzz/fuzz_template.cpp) and the
// review around it found: each used to crash, hang, overflow a signed integer or make a
// huge allocation, and now ends the render with a precise hearth::Error (or renders as
// Python jinja2 does). The same inputs are kept in tests/fuzz/corpus/template/regress-*.
#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "template/chat_template.h"

using hearth::Error;
using hearth::ErrorKind;
using hearth::tmpl::ChatTemplate;

namespace {

struct Outcome {
  bool ok = false;
  std::string text;  // output, or the error message
  ErrorKind kind = ErrorKind::kInternal;
};

Outcome run(const std::string& src) {
  Outcome o;
  try {
    o.text = ChatTemplate(src).apply(nlohmann::ordered_json::object());
    o.ok = true;
  } catch (const Error& e) {
    o.text = e.what();
    o.kind = e.kind();
  }
  return o;
}

// This thread's CPU time in seconds: the bound below is on the work a template can make
// the renderer do, not on how busy the machine is (wall time doubled under a parallel build).
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void expect_error(const std::string& src, ErrorKind kind, const std::string& part) {
  const double t0 = thread_cpu_s();
  Outcome o = run(src);
  const double s = thread_cpu_s() - t0;
  EXPECT_FALSE(o.ok) << src << " rendered: " << o.text.substr(0, 200);
  EXPECT_EQ(o.kind, kind) << src << ": " << o.text;
  EXPECT_NE(o.text.find(part), std::string::npos) << src << ": " << o.text;
  EXPECT_LT(s, 5.0) << src << " took " << s << " s";
}

}  // namespace

TEST(TemplateFuzz, NamespaceHoldingItselfPrintsLikePython) {
  // Used to recurse until the stack overflowed.
  Outcome o = run("{% set ns = namespace(a=1) %}{% set ns.x = ns %}{{ ns }}");
  ASSERT_TRUE(o.ok) << o.text;
  EXPECT_EQ(o.text, "<Namespace {'a': 1, 'x': <Namespace {...}>}>");
  o = run("{% set ns = namespace() %}{% set ns.l = [ns] %}{{ ns }}");
  ASSERT_TRUE(o.ok) << o.text;
  EXPECT_EQ(o.text, "<Namespace {'l': [<Namespace {...}>]}>");
}

TEST(TemplateFuzz, HugePaddingWidthsAreLimits) {
  // Used to throw std::bad_alloc (or abort under ASan) instead of an Error.
  expect_error("{{ 'x' | center(1000000000000) }}", ErrorKind::kResource, "center width 1000000000000 exceeds");
  expect_error("{{ 'a\\nb' | indent(1000000000000) }}", ErrorKind::kResource, "indent width");
  expect_error("{{ [1] | tojson(indent=1000000000000) }}", ErrorKind::kResource, "tojson indent");
  expect_error("{{ ('\\n' * 10000) | indent('x' * 10000) }}", ErrorKind::kResource, "indent result too large");
  expect_error("{{ [[[[[[[[1]]]]]]]] | tojson(indent=20000000) }}", ErrorKind::kResource, "tojson result exceeds");
}

TEST(TemplateFuzz, RepetitionCountOverflowIsALimit) {
  // 4 * 2^62 wrapped to 0 in the size check, then the loop ran for 2^62 rounds.
  expect_error("{{ 'abcd' * 4611686018427387904 }}", ErrorKind::kResource, "sequence repetition result too large");
  // A list's items are copied: the check counts what they hold, not just how many.
  expect_error("{{ ['x' * 1000000] * 100 }}", ErrorKind::kResource, "sequence repetition result too large");
}

TEST(TemplateFuzz, EmptySequenceRepeatedHugeTimesIsEmptyAtOnce) {
  // Found by fuzz_template: '' * 2e13 passed the size check (0 bytes) and looped 2e13 times.
  for (const char* src : {"[{{ 'abcd' * 0 * 19811981716894 }}]", "[{{ '' * 9000000000000000 }}]",
                          "[{{ ([] * 9000000000000000) | length }}]"}) {
    const double t0 = thread_cpu_s();
    Outcome o = run(src);
    const double s = thread_cpu_s() - t0;
    EXPECT_TRUE(o.ok) << src << ": " << o.text;
    EXPECT_TRUE(o.text == "[]" || o.text == "[0]") << src << " rendered " << o.text;
    EXPECT_LT(s, 1.0) << src << " took " << s << " s";
  }
}

TEST(TemplateFuzz, IntegerOverflowIsAnErrorNotUndefinedBehaviour) {
  expect_error("{{ 9223372036854775807 + 1 }}", ErrorKind::kUnsupported, "integer overflow: 9223372036854775807 + 1");
  expect_error("{{ -9223372036854775807 - 2 }}", ErrorKind::kUnsupported, "integer overflow");
  expect_error("{{ 3037000500 * 3037000500 }}", ErrorKind::kUnsupported, "integer overflow");
  expect_error("{{ 2 ** 64 }}", ErrorKind::kUnsupported, "integer overflow: 2 ** 64");
  expect_error("{{ -(-9223372036854775807 - 1) }}", ErrorKind::kUnsupported, "integer overflow");
  expect_error("{{ (-9223372036854775807 - 1) // -1 }}", ErrorKind::kUnsupported, "integer overflow");
  expect_error("{{ (-9223372036854775807 - 1) | abs }}", ErrorKind::kUnsupported, "integer overflow");
  expect_error("{{ 1e300 | int }}", ErrorKind::kUnsupported, "does not fit in 64 bits");
  expect_error("{{ x.99999999999999999999 }}", ErrorKind::kUnsupported, "integer literal out of range");
  // Results that fit are unchanged (and (-1) ** 65 is -1: the old loop stopped after 64 rounds).
  Outcome o = run("{{ 2 ** 62 }} {{ (-1) ** 65 }} {{ 0 ** 0 }} {{ (-9223372036854775807 - 1) % -1 }} {{ -7 // 2 }}");
  ASSERT_TRUE(o.ok) << o.text;
  EXPECT_EQ(o.text, "4611686018427387904 -1 1 0 -4");
  o = run("{{ range(9223372036854775800, 9223372036854775807, 5) | list }}");
  ASSERT_TRUE(o.ok) << o.text;
  EXPECT_EQ(o.text, "[9223372036854775800, 9223372036854775805]");
}

TEST(TemplateFuzz, FloatLiteralOutOfRangeIsInfOrZeroAsInPython) {
  // std::stod threw std::out_of_range, which is not a hearth::Error (found by the fuzzer).
  Outcome o = run("{{ 1e30064 }} {{ -1e400 }} {{ 1e-400 }}");
  ASSERT_TRUE(o.ok) << o.text;
  EXPECT_EQ(o.text, "inf -inf 0.0");
}

TEST(TemplateFuzz, AttributePathWithHugeIndexIsAMissingKey) {
  // std::stoll threw std::out_of_range, which is not a hearth::Error.
  Outcome o = run("{{ [[1]] | map(attribute='99999999999999999999') | list }}");
  EXPECT_TRUE(o.ok || o.kind == ErrorKind::kInvalidInput) << o.text;
}

TEST(TemplateFuzz, GrowthThroughANamespaceStopsAtTheOutputLimit) {
  // Doubling a string (or list) kept in a namespace: 2^40 bytes without a check.
  expect_error("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               ErrorKind::kResource, "exceeds the value size limit");
  expect_error("{% set ns = namespace(l=['ab']) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
               ErrorKind::kResource, "exceeds the value size limit");
  expect_error("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s.replace('a', ns.s) %}{% endfor %}",
               ErrorKind::kResource, "");
  // Nesting built one level per iteration would overflow the stack in repr / destruction.
  expect_error("{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
               ErrorKind::kResource, "value nesting exceeds the limit of 256");
  expect_error("{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = namespace(y=ns.x) %}{% endfor %}{{ ns.x }}",
               ErrorKind::kResource, "value nesting exceeds the limit of 256");
}
