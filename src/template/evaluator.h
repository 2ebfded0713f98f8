// A parsed Jinja template and its sandboxed renderer (jinja2's
// ImmutableSandboxedEnvironment semantics: no file/module access, no mutation
// of lists/dicts except namespace attributes, no underscore attributes).
// Every failure is a hearth::Error "[template] line L, column C: ...":
// kInvalidInput for template/data errors (including raise_exception),
// kUnsupported for constructs outside the subset, kResource for limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "template/ast.h"
#include "template/value.h"

namespace hearth::tmpl {

// Resource limits of one render; exceeding one is an Error(kResource).
struct Limits {
  size_t max_output_bytes = 32u << 20;     // rendered text, including captured blocks
  int64_t max_loop_iterations = 1'000'000;  // for-loop iterations over the whole render
  int max_call_depth = 64;                  // nested macro calls
};

class Template {
 public:
  // Parses `source` once. Throws hearth::Error on a syntax error or unsupported tag.
  explicit Template(std::string_view source);

  // Renders with `context` (a dict Value of variables). Thread-safe: the parsed
  // tree is immutable; each call has its own state. Throws hearth::Error.
  std::string render(const Value& context, const Limits& limits = {}) const;

 private:
  std::shared_ptr<const ast::Body> body_;
};

}  // namespace hearth::tmpl
