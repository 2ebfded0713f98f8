// Syntax tree of a parsed Jinja template. Built once by the parser, then only
// read: a tree may be rendered from many threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace hearth::tmpl::ast {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,   // literal
  kName,      // name
  kList,      // args: elements
  kTuple,     // args: elements
  kDict,      // args: key0, value0, key1, value1, ...
  kGetAttr,   // args[0].name
  kGetItem,   // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts allowed)
  kCall,      // args[0](args[1..], kwargs)
  kFilter,    // args[0] | name(args[1..], kwargs)
  kTest,      // args[0] is [not] name(args[1..], kwargs)
  kUnary,     // op args[0]: "-", "+", "not"
  kBinary,    // args[0] op args[1]: + - * / // % ** ~ and or
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
  kCond,      // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int col = 0;
  Value literal;
  std::string name;  // name / attribute / filter / test / operator
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // conds[i] -> bodies[i]; else_body
  kFor,       // for targets in expr [if cond] body [else else_body]
  kSet,       // set targets = expr  |  set ns.attr = expr (attr non-empty)
  kSetBlock,  // set targets[0] [| filter] body endset (expr: filter chain over kBlockVar, may be null)
  kMacro,     // macro name(params = defaults) body
  kFilter,    // filter chain (expr over kBlockVar) body
  kBreak,
  kContinue,
  kScope,     // body rendered as is ({% generation %})
  kWith,      // with params (name = expr, evaluated outside) body, in its own scope
  kCallBlock, // call[(params)] expr (a kCall): body is the `caller` macro passed to it
};

// Name the filter chain of a filter block / set block reads the body text from.
inline constexpr const char* kBlockVar = "\x01block";

struct Stmt {
  StmtKind kind;
  int line = 0;
  int col = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters; default may be null
  bool recursive = false;     // for: `recursive` (the body may call loop(items))
  bool uses_varargs = false;  // macro: the body reads `varargs` (extra positional args allowed)
  bool uses_kwargs = false;   // macro: the body reads `kwargs` (extra keyword args allowed)
  bool uses_caller = false;   // macro: the body reads `caller`
};

}  // namespace hearth::tmpl::ast
