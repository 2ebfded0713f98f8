// Recursive-descent Jinja parser following jinja2's precedence:
// condexpr > or > and > not > compare > + - > ~ > * / // % > ** > unary/postfix/filters.
#include "template/parser.h"

#include <cstdlib>
#include <set>

#include "core/error.h"
#include "template/lexer.h"

namespace hearth::tmpl {
namespace {

using ast::Body;
using ast::Expr;
using ast::ExprKind;
using ast::ExprPtr;
using ast::Stmt;
using ast::StmtKind;
using ast::StmtPtr;

constexpr int kMaxNesting = 200;  // expression / block nesting (protects the C++ stack)

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_all() {
    std::string found;
    Body body = subparse({}, &found);
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kText: return "text";
      case Tok::kVarBegin: return "'{{'";
      case Tok::kVarEnd: return "'}}'";
      case Tok::kBlockBegin: return "'{%'";
      case Tok::kBlockEnd: return "'%}'";
      case Tok::kEof: return "end of template";
      case Tok::kString: return "string";
      default: return "'" + t.value + "'";
    }
  }
  [[noreturn]] void fail_at(const Token& t, const std::string& msg, ErrorKind kind = ErrorKind::kInvalidInput) const {
    throw Error(kind, located(t.line, t.col, msg));
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail_at(cur(), std::string("expected '") + op + "', got " + describe(cur()));
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail_at(cur(), std::string("expected ") + what + ", got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) fail_at(cur(), "expected a name, got " + describe(cur()));
    std::string n = cur().value;
    next();
    return n;
  }

  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser) : p(parser) {
      if (++p->depth_ > kMaxNesting) p->fail_at(p->cur(), "template nesting too deep (limit 200)", ErrorKind::kResource);
    }
    ~DepthGuard() { --p->depth_; }
  };

  ExprPtr node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  // ------------------------------------------------------------ statements
  Body subparse(const std::set<std::string>& end_tags, std::string* found) {
    DepthGuard guard(this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = t.line;
        s->col = t.col;
        s->text = t.value;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = t.line;
        s->col = t.col;
        next();
        s->expr = parse_tuple(true);
        expect(Tok::kVarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (t.type == Tok::kBlockBegin) {
        next();
        const Token& name_tok = cur();
        if (name_tok.type != Tok::kName) fail_at(name_tok, "expected a tag name, got " + describe(name_tok));
        if (end_tags.count(name_tok.value)) {
          *found = name_tok.value;
          next();
          return body;
        }
        body.push_back(parse_statement(end_tags));
      } else if (t.type == Tok::kEof) {
        if (!end_tags.empty()) {
          std::string want;
          for (const auto& e : end_tags) want += (want.empty() ? "'" : " or '") + e + "'";
          fail_at(t, "unexpected end of template, expected " + want);
        }
        return body;
      } else {
        fail_at(t, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr new_stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  StmtPtr parse_statement(const std::set<std::string>& outer_end) {
    const Token tag = cur();
    const std::string& n = tag.value;
    next();
    if (n == "if") return parse_if(tag);
    if (n == "for") return parse_for(tag);
    if (n == "set") return parse_set(tag);
    if (n == "macro") return parse_macro(tag);
    if (n == "filter") return parse_filter_block(tag);
    if (n == "break" || n == "continue") {
      auto s = new_stmt(n == "break" ? StmtKind::kBreak : StmtKind::kContinue, tag);
      expect(Tok::kBlockEnd, "'%}'");
      return s;
    }
    if (n == "generation") {
      auto s = new_stmt(StmtKind::kScope, tag);
      expect(Tok::kBlockEnd, "'%}'");
      std::string found;
      s->body = subparse({"endgeneration"}, &found);
      expect(Tok::kBlockEnd, "'%}'");
      return s;
    }
    if (n == "include" || n == "import" || n == "extends" || n == "from" || n == "block") {
      fail_at(tag, "'" + n + "' is not allowed: chat templates are sandboxed (no file or module access)",
              ErrorKind::kUnsupported);
    }
    if (n == "with") return parse_with(tag);
    if (n == "call") return parse_call_block(tag);
    if (n == "do" || n == "autoescape" || n == "trans") {
      fail_at(tag, "unsupported tag '" + n + "'", ErrorKind::kUnsupported);
    }
    std::string hint;
    for (const auto& e : outer_end) hint += (hint.empty() ? " (expected '" : " or '") + e + "'";
    if (!hint.empty()) hint += ")";
    fail_at(tag, "unknown tag '" + n + "'" + hint);
  }

  StmtPtr parse_if(const Token& tag) {
    auto s = new_stmt(StmtKind::kIf, tag);
    while (true) {
      s->conds.push_back(parse_tuple(false));
      expect(Tok::kBlockEnd, "'%}'");
      std::string found;
      s->bodies.push_back(subparse({"elif", "else", "endif"}, &found));
      if (found == "elif") continue;
      if (found == "else") {
        expect(Tok::kBlockEnd, "'%}'");
        s->else_body = subparse({"endif"}, &found);
      }
      expect(Tok::kBlockEnd, "'%}'");
      return s;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = skip_op("(");
    names.push_back(expect_name());
    while (skip_op(",")) {
      if (cur().type != Tok::kName || is_name("in")) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  StmtPtr parse_for(const Token& tag) {
    auto s = new_stmt(StmtKind::kFor, tag);
    s->targets = parse_targets();
    if (!skip_name("in")) fail_at(cur(), "expected 'in' in for loop, got " + describe(cur()));
    s->expr = parse_tuple(false, true);
    if (skip_name("if")) s->cond = parse_expression();
    if (skip_name("recursive")) s->recursive = true;
    expect(Tok::kBlockEnd, "'%}'");
    std::string found;
    s->body = subparse({"endfor", "else"}, &found);
    if (found == "else") {
      expect(Tok::kBlockEnd, "'%}'");
      s->else_body = subparse({"endfor"}, &found);
    }
    expect(Tok::kBlockEnd, "'%}'");
    return s;
  }

  StmtPtr parse_set(const Token& tag) {
    auto s = new_stmt(StmtKind::kSet, tag);
    std::string first = expect_name();
    if (skip_op(".")) {
      s->targets.push_back(first);
      s->attr = expect_name();
    } else {
      s->targets.push_back(first);
      while (skip_op(",")) s->targets.push_back(expect_name());
    }
    if (skip_op("=")) {
      s->expr = parse_tuple(true);
      expect(Tok::kBlockEnd, "'%}'");
      return s;
    }
    if (!s->attr.empty() || s->targets.size() != 1) fail_at(cur(), "expected '='");
    s->kind = StmtKind::kSetBlock;
    if (is_op("|")) s->expr = parse_filter_chain(tag);
    expect(Tok::kBlockEnd, "'%}'");
    std::string found;
    s->body = subparse({"endset"}, &found);
    expect(Tok::kBlockEnd, "'%}'");
    return s;
  }

  // A filter chain applied to the block body (`{% filter a|b %}`, `{% set x | a %}`).
  ExprPtr parse_filter_chain(const Token& tag) {
    ExprPtr e = node(ExprKind::kName, tag);
    e->name = ast::kBlockVar;
    if (is_op("|")) return parse_filter_expr(std::move(e));
    ExprPtr f = node(ExprKind::kFilter, cur());
    f->name = expect_name();
    f->args.push_back(std::move(e));
    if (is_op("(")) parse_call_args(f.get());
    return parse_filter_expr(std::move(f));
  }

  StmtPtr parse_filter_block(const Token& tag) {
    auto s = new_stmt(StmtKind::kFilter, tag);
    s->expr = parse_filter_chain(tag);
    expect(Tok::kBlockEnd, "'%}'");
    std::string found;
    s->body = subparse({"endfilter"}, &found);
    expect(Tok::kBlockEnd, "'%}'");
    return s;
  }

  void parse_params(Stmt* s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string p = expect_name();
      ExprPtr def;
      if (skip_op("=")) def = parse_expression();
      s->params.emplace_back(p, std::move(def));
    }
    expect_op(")");
  }

  // Which of varargs / kwargs / caller the macro body reads (jinja2 accepts extra arguments,
  // and a caller, only then).
  static void mark_uses(Stmt* m) {
    for (const auto& st : m->body) scan_stmt(*st, m);
    for (const auto& p : m->params) {
      if (p.second) scan_expr(*p.second, m);
    }
  }
  static void scan_expr(const Expr& e, Stmt* m) {
    if (e.kind == ExprKind::kName) {
      m->uses_varargs = m->uses_varargs || e.name == "varargs";
      m->uses_kwargs = m->uses_kwargs || e.name == "kwargs";
      m->uses_caller = m->uses_caller || e.name == "caller";
    }
    for (const auto& a : e.args) {
      if (a) scan_expr(*a, m);
    }
    for (const auto& kw : e.kwargs) scan_expr(*kw.second, m);
  }
  static void scan_stmt(const Stmt& s, Stmt* m) {
    for (const Expr* e : {s.expr.get(), s.cond.get()}) {
      if (e) scan_expr(*e, m);
    }
    for (const auto& c : s.conds) scan_expr(*c, m);
    for (const auto& p : s.params) {
      if (p.second) scan_expr(*p.second, m);
    }
    for (const auto& b : s.bodies) {
      for (const auto& x : b) scan_stmt(*x, m);
    }
    for (const ast::Body* b : {&s.body, &s.else_body}) {
      for (const auto& x : *b) scan_stmt(*x, m);
    }
  }

  StmtPtr parse_macro(const Token& tag) {
    auto s = new_stmt(StmtKind::kMacro, tag);
    s->text = expect_name();
    parse_params(s.get());
    expect(Tok::kBlockEnd, "'%}'");
    std::string found;
    s->body = subparse({"endmacro"}, &found);
    if (cur().type == Tok::kName && cur().value == s->text) next();
    expect(Tok::kBlockEnd, "'%}'");
    mark_uses(s.get());
    return s;
  }

  // {% call[(params)] macro(args) %}body{% endcall %}
  StmtPtr parse_call_block(const Token& tag) {
    auto s = new_stmt(StmtKind::kCallBlock, tag);
    s->text = "caller";
    if (is_op("(")) parse_params(s.get());
    s->expr = parse_expression();
    if (s->expr->kind != ExprKind::kCall) fail_at(tag, "expected a call after 'call'");
    expect(Tok::kBlockEnd, "'%}'");
    std::string found;
    s->body = subparse({"endcall"}, &found);
    expect(Tok::kBlockEnd, "'%}'");
    mark_uses(s.get());
    return s;
  }

  // {% with a = x, b = y %}body{% endwith %}
  StmtPtr parse_with(const Token& tag) {
    auto s = new_stmt(StmtKind::kWith, tag);
    while (cur().type != Tok::kBlockEnd) {
      if (!s->params.empty()) expect_op(",");
      std::string name = expect_name();
      expect_op("=");
      s->params.emplace_back(name, parse_expression());
    }
    expect(Tok::kBlockEnd, "'%}'");
    std::string found;
    s->body = subparse({"endwith"}, &found);
    expect(Tok::kBlockEnd, "'%}'");
    return s;
  }

  // ------------------------------------------------------------ expressions
  bool tuple_end() const {
    const Token& t = cur();
    if (t.type == Tok::kVarEnd || t.type == Tok::kBlockEnd || t.type == Tok::kEof) return true;
    if (t.type == Tok::kOp && (t.value == ")" || t.value == "]" || t.value == "}")) return true;
    return t.type == Tok::kName && (t.value == "recursive" || t.value == "if");
  }

  ExprPtr parse_tuple(bool with_condexpr, bool for_iter = false) {
    const Token start = cur();
    auto one = [&] { return with_condexpr ? parse_expression() : parse_or(); };
    ExprPtr first = one();
    if (!is_op(",")) return first;
    ExprPtr t = node(ExprKind::kTuple, start);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (tuple_end() || (for_iter && is_name("if"))) break;
      t->args.push_back(one());
    }
    return t;
  }

  ExprPtr parse_expression() {
    DepthGuard guard(this);
    return parse_condexpr();
  }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const Token at = cur();
      next();
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (skip_name("else")) otherwise = parse_condexpr();
      ExprPtr c = node(ExprKind::kCond, at);
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const Token& at, const std::string& op, ExprPtr l, ExprPtr r) {
    ExprPtr b = node(ExprKind::kBinary, at);
    b->name = op;
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token at = cur();
      next();
      e = binary(at, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token at = cur();
      next();
      e = binary(at, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this);
      const Token at = cur();
      next();
      ExprPtr u = node(ExprKind::kUnary, at);
      u->name = "not";
      u->args.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token start = cur();
    ExprPtr e = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::kOp && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                     cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = cur().value;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == Tok::kName && peek().value == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::kCompare, start);
        cmp->args.push_back(std::move(e));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token at = cur();
      next();
      e = binary(at, at.value, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token at = cur();
      next();
      e = binary(at, "~", std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token at = cur();
      next();
      e = binary(at, at.value, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token at = cur();
      next();
      e = binary(at, "**", std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token at = cur();
      next();
      e = node(ExprKind::kUnary, at);
      e->name = at.value;
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token t = cur();
    switch (t.type) {
      case Tok::kName: {
        next();
        ExprPtr e = node(ExprKind::kLiteral, t);
        if (t.value == "true" || t.value == "True") {
          e->literal = Value(true);
        } else if (t.value == "false" || t.value == "False") {
          e->literal = Value(false);
        } else if (t.value == "none" || t.value == "None") {
          e->literal = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.value;
        }
        return e;
      }
      case Tok::kString: {
        std::string s;
        while (cur().type == Tok::kString) {
          s += cur().value;
          next();
        }
        ExprPtr e = node(ExprKind::kLiteral, t);
        e->literal = Value(std::move(s));
        return e;
      }
      case Tok::kInt: {
        next();
        ExprPtr e = node(ExprKind::kLiteral, t);
        try {
          e->literal = Value(static_cast<int64_t>(std::stoll(t.value)));
        } catch (const std::exception&) {
          fail_at(t, "integer literal out of range: " + t.value, ErrorKind::kUnsupported);
        }
        return e;
      }
      case Tok::kFloat: {
        next();
        ExprPtr e = node(ExprKind::kLiteral, t);
        // strtod, not stod: out of range is inf / 0.0 as in Python, not std::out_of_range.
        e->literal = Value(std::strtod(t.value.c_str(), nullptr));
        return e;
      }
      case Tok::kOp:
        if (t.value == "(") {
          next();
          if (skip_op(")")) return node(ExprKind::kTuple, t);
          ExprPtr e = parse_tuple(true);
          expect_op(")");
          return e;
        }
        if (t.value == "[") {
          next();
          ExprPtr e = node(ExprKind::kList, t);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(parse_expression());
          }
          expect_op("]");
          return e;
        }
        if (t.value == "{") {
          next();
          ExprPtr e = node(ExprKind::kDict, t);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            e->args.push_back(parse_expression());
            expect_op(":");
            e->args.push_back(parse_expression());
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    fail_at(t, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token at = cur();
      if (is_op(".")) {
        next();
        if (cur().type == Tok::kInt) {
          ExprPtr g = node(ExprKind::kGetItem, at);
          ExprPtr idx = node(ExprKind::kLiteral, cur());
          try {
            idx->literal = Value(static_cast<int64_t>(std::stoll(cur().value)));
          } catch (const std::exception&) {
            fail_at(cur(), "integer literal out of range: " + cur().value, ErrorKind::kUnsupported);
          }
          next();
          g->args.push_back(std::move(e));
          g->args.push_back(std::move(idx));
          e = std::move(g);
        } else {
          ExprPtr g = node(ExprKind::kGetAttr, at);
          g->name = expect_name();
          g->args.push_back(std::move(e));
          e = std::move(g);
        }
      } else if (is_op("[")) {
        next();
        e = parse_subscript(at, std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(const Token& at, ExprPtr obj) {
    ExprPtr parts[3];
    bool slice = false;
    if (!is_op(":")) parts[0] = parse_expression();
    if (skip_op(":")) {
      slice = true;
      if (!is_op("]") && !is_op(":")) parts[1] = parse_expression();
      if (skip_op(":")) {
        if (!is_op("]")) parts[2] = parse_expression();
      }
    }
    expect_op("]");
    ExprPtr g = node(slice ? ExprKind::kSlice : ExprKind::kGetItem, at);
    g->args.push_back(std::move(obj));
    if (slice) {
      for (auto& p : parts) g->args.push_back(std::move(p));
    } else {
      g->args.push_back(std::move(parts[0]));
    }
    return g;
  }

  void parse_call_args(Expr* call) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail_at(cur(), "*args / **kwargs in calls are not supported", ErrorKind::kUnsupported);
      if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().value == "=") {
        std::string k = cur().value;
        next();
        next();
        call->kwargs.emplace_back(k, parse_expression());
      } else {
        if (!call->kwargs.empty()) fail_at(cur(), "positional argument follows keyword argument");
        call->args.push_back(parse_expression());
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr c = std::make_unique<Expr>();
    c->kind = ExprKind::kCall;
    c->line = callee->line;  // errors point at the start of the call
    c->col = callee->col;
    c->args.push_back(std::move(callee));
    parse_call_args(c.get());
    return c;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        next();
        ExprPtr f = node(ExprKind::kFilter, cur());
        f->name = expect_name();
        while (is_op(".") && peek().type == Tok::kName) {
          next();
          f->name += "." + cur().value;
          next();
        }
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_call_args(f.get());
        e = std::move(f);
      } else if (is_name("is")) {
        next();
        bool negated = skip_name("not");
        ExprPtr t = node(ExprKind::kTest, cur());
        t->negated = negated;
        t->name = expect_name();
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(t.get());
        } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
                    cur().type == Tok::kFloat || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          ExprPtr arg = parse_postfix(parse_primary());
          t->args.push_back(std::move(arg));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

ast::Body parse_template(std::string_view source) { return Parser(lex(source)).parse_all(); }

}  // namespace hearth::tmpl
