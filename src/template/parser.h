// Jinja parser: tokens -> syntax tree (jinja2's grammar and operator precedence).
// Tags a chat template cannot use in the sandbox (include, import, extends,
// from, block) and tags Hearth does not implement (call, with, ...) are
// rejected at parse time with "[template] line L, column C: ...".
#pragma once

#include <string_view>

#include "template/ast.h"

namespace hearth::tmpl {

// Parses a whole template. Throws hearth::Error (kInvalidInput for syntax
// errors, kUnsupported for constructs outside the supported subset).
ast::Body parse_template(std::string_view source);

}  // namespace hearth::tmpl
