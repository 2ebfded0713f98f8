// Tree-walking renderer. Scoping follows jinja2: a for loop and a macro call
// open a scope (assignments inside do not leak out), `if` does not; the root
// scope holds top-level assignments and sits above the caller's context.
#include "template/evaluator.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <optional>

#include "core/error.h"
#include "template/builtins.h"
#include "template/lexer.h"
#include "template/parser.h"

namespace hearth::tmpl {
namespace {

using ast::Expr;
using ast::ExprKind;
using ast::Stmt;
using ast::StmtKind;

struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;
  // Made when a macro defined here captures this scope; false once the scope has ended.
  std::shared_ptr<bool> alive;
  Scope(Scope* p, std::vector<std::pair<std::string, Value>> v) : parent(p), vars(std::move(v)) {}
  Scope() = default;
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  ~Scope() {
    if (alive) *alive = false;
  }
  Value* find(const std::string& name) {
    for (Scope* s = this; s; s = s->parent) {
      for (auto& [k, v] : s->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, val] : vars) {
      if (k == name) {
        val = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { kNormal, kBreak, kContinue };

// Key of the loop object's entry that makes `loop(items)` callable in a recursive for loop
// (no template name can spell it).
constexpr const char* kLoopCallKey = "\x01" "call";

// Marks a closure's frame dead when the block that made it ends (the closure may escape,
// e.g. into a namespace, and must not touch the frame afterwards).
struct AliveFlag {
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  ~AliveFlag() { *alive = false; }
};

constexpr int kMaxValueDepth = 256;  // nesting of lists / dicts / namespaces

[[noreturn]] void limit_error(const std::string& msg) {
  RenderError e{msg};
  e.limit = true;
  throw e;
}

Value arith(const std::string& op, const Value& a, const Value& b);

class Renderer {
 public:
  Renderer(const Value& context, const Limits& limits) : ctx_(context), lim_(limits) {}
  // A namespace may hold itself (ns.x = ns), a reference cycle: emptying every namespace of
  // the render frees it.
  ~Renderer() {
    for (Value& ns : namespaces_) ns.dict().items.clear();
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  void render(const ast::Body& body, std::string& out) {
    out_ = &out;
    scope_ = &root_;
    exec_body(body);
  }

 private:
  // ------------------------------------------------------------------ statements
  Flow exec_body(const ast::Body& body) {
    for (const auto& s : body) {
      Flow f = exec(*s);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  // A value that could never be output within the limit, or nests deeper than a render
  // can walk (repr, tojson and destruction recurse), ends the render.
  // The budget is the output limit, but at least 16 MiB (a small output limit should not
  // stop a template from building a moderately large list it only partly prints).
  void check_size(const Value& v) const {
    const size_t budget = std::max(lim_.max_output_bytes, size_t{16} << 20);
    if (v.is_string()) {
      if (v.str().size() > budget) {
        limit_error("string of " + std::to_string(v.str().size()) + " bytes exceeds the value size limit of " +
                    std::to_string(budget) + " bytes");
      }
      return;
    }
    if (!v.is_list() && !v.is_dict() && !v.is_namespace()) return;
    const ValueSize z = measure(v, budget, kMaxValueDepth);
    if (z.depth > kMaxValueDepth) limit_error("value nesting exceeds the limit of " + std::to_string(kMaxValueDepth));
    if (z.bytes > budget) limit_error("value exceeds the value size limit of " + std::to_string(budget) + " bytes");
  }

  void write(const std::string& s) {
    out_->append(s);
    if (out_->size() > lim_.max_output_bytes) {
      limit_error("output exceeds the limit of " + std::to_string(lim_.max_output_bytes) + " bytes");
    }
  }

  Flow exec(const Stmt& s) {
    try {
      return exec_inner(s);
    } catch (RenderError& e) {
      if (!e.located) {
        e.message = located(s.line, s.col, e.message);
        e.located = true;
      }
      throw;
    }
  }

  std::string capture(const ast::Body& body) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
      exec_body(body);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buf;
  }

  Flow exec_inner(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::kText: write(s.text); return Flow::kNormal;
      case StmtKind::kOutput: write(to_str(eval(*s.expr))); return Flow::kNormal;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conds.size(); ++i) {
          if (truthy(eval(*s.conds[i]))) return exec_body(s.bodies[i]);
        }
        return exec_body(s.else_body);
      case StmtKind::kFor: return exec_for(s);
      case StmtKind::kSet: {
        Value v = eval(*s.expr);
        if (!s.attr.empty()) {
          Value* ns = scope_->find(s.targets[0]);
          if (!ns || !ns->is_namespace()) throw_render("cannot assign attribute on non-namespace object");
          check_size(v);  // namespaces outlive loop iterations: growth across them stops here
          ns->dict().set(s.attr, std::move(v));
        } else {
          assign(s.targets, v);
        }
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock: {
        Value v(capture(s.body));
        if (s.expr) v = eval_over_block(*s.expr, std::move(v));
        scope_->set(s.targets[0], std::move(v));
        return Flow::kNormal;
      }
      case StmtKind::kFilter:
        write(to_str(eval_over_block(*s.expr, Value(capture(s.body)))));
        return Flow::kNormal;
      case StmtKind::kMacro: scope_->set(s.text, make_macro(s)); return Flow::kNormal;
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kScope: return exec_body(s.body);
      case StmtKind::kWith: {
        Scope with{scope_, {}};
        for (const auto& [name, expr] : s.params) with.vars.emplace_back(name, eval(*expr));  // outer scope
        Scope* saved = scope_;
        scope_ = &with;
        struct Restore {
          Scope** slot;
          Scope* value;
          ~Restore() { *slot = value; }
        } restore{&scope_, saved};
        return exec_body(s.body);
      }
      case StmtKind::kCallBlock: {
        AliveFlag flag;
        Scope* site = scope_;
        const Stmt* cs = &s;
        Value caller = Value::func("<Macro 'caller'>", [this, cs, site, alive = flag.alive](Args& a) -> Value {
          if (!*alive) throw_render("caller() used after its call block ended");
          return call_macro(*cs, a, site);
        });
        const Expr& call = *s.expr;
        Value f = eval(*call.args[0]);
        Args a = eval_args(call, 1);
        a.kw.emplace_back("caller", caller);
        if (!f.is_func()) {
          f.check_defined();
          throw_render("'" + type_name(f) + "' object is not callable");
        }
        Value v = f.func()(a);
        write(to_str(v));
        return Flow::kNormal;
      }
    }
    return Flow::kNormal;
  }

  Value eval_over_block(const Expr& chain, Value text) {
    Scope block{scope_, {}};
    block.vars.emplace_back(ast::kBlockVar, std::move(text));
    Scope* saved = scope_;
    scope_ = &block;
    try {
      Value v = eval(chain);
      scope_ = saved;
      return v;
    } catch (...) {
      scope_ = saved;
      throw;
    }
  }

  void assign(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      scope_->set(targets[0], v);
      return;
    }
    std::vector<Value> items = iterate(v);
    if (items.size() != targets.size()) {
      throw_render(items.size() > targets.size()
                       ? "too many values to unpack (expected " + std::to_string(targets.size()) + ")"
                       : "not enough values to unpack (expected " + std::to_string(targets.size()) +
                             ", got " + std::to_string(items.size()) + ")");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope_->set(targets[i], items[i]);
  }

  static std::vector<Value> loop_items(const Value& seq) {
    if (seq.is_none() || seq.is_number() || seq.is_func() || seq.is_namespace()) {
      throw_render("'" + type_name(seq) + "' object is not iterable");
    }
    return iterate(seq);
  }

  Flow exec_for(const Stmt& s) { return run_loop(s, loop_items(eval(*s.expr)), 0); }

  // One level of a for loop; a recursive loop's loop(items) runs the next level (depth0 + 1)
  // into a string.
  Flow run_loop(const Stmt& s, std::vector<Value> items, int64_t depth0) {
    AliveFlag flag;
    Scope loop_scope{scope_, {}};
    Scope* saved = scope_;
    scope_ = &loop_scope;
    struct Restore {
      Scope** slot;
      Scope* value;
      ~Restore() { *slot = value; }
    } restore{&scope_, saved};
    if (s.cond) {
      std::vector<Value> kept;
      for (auto& it : items) {
        assign(s.targets, it);
        if (truthy(eval(*s.cond))) kept.push_back(std::move(it));
      }
      items = std::move(kept);
    }
    const auto n = static_cast<int64_t>(items.size());
    auto last_changed = std::make_shared<std::optional<Value>>();  // loop.changed(*values) state
    for (int64_t i = 0; i < n; ++i) {
      if (++iterations_ > lim_.max_loop_iterations) {
        limit_error("loop iterations exceed the limit of " + std::to_string(lim_.max_loop_iterations));
      }
      const auto idx = static_cast<size_t>(i);
      assign(s.targets, items[idx]);
      Value loop = Value::make_dict();
      Dict& d = loop.dict();
      d.set("index", Value(i + 1));
      d.set("index0", Value(i));
      d.set("revindex", Value(n - i));
      d.set("revindex0", Value(n - i - 1));
      d.set("first", Value(i == 0));
      d.set("last", Value(i == n - 1));
      d.set("length", Value(n));
      d.set("depth", Value(depth0 + 1));
      d.set("depth0", Value(depth0));
      if (s.recursive) {
        d.set(kLoopCallKey, Value::func("loop", [this, &s, depth0, alive = flag.alive](Args& a) -> Value {
                if (!*alive) throw_render("loop() called after its loop ended");
                if (a.pos.size() != 1) throw_render("loop() takes exactly one argument");
                if (depth_ >= lim_.max_call_depth) {
                  limit_error("recursive loop depth exceeds the limit of " + std::to_string(lim_.max_call_depth));
                }
                std::vector<Value> sub = loop_items(a.pos[0]);
                ++depth_;
                std::string buf;
                std::string* saved = out_;
                out_ = &buf;
                struct Restore {
                  Renderer* r;
                  std::string* out;
                  ~Restore() {
                    r->out_ = out;
                    --r->depth_;
                  }
                } restore{this, saved};
                run_loop(s, std::move(sub), depth0 + 1);
                return Value(std::move(buf));
              }));
      }
      d.set("previtem", i > 0 ? items[idx - 1] : Value::undefined("there is no previous item"));
      d.set("nextitem", i + 1 < n ? items[idx + 1] : Value::undefined("there is no next item"));
      d.set("cycle", Value::func("loop.cycle", [i](Args& a) -> Value {
              if (a.pos.empty()) throw_render("no items for cycling given");
              return a.pos[static_cast<size_t>(i) % a.pos.size()];
            }));
      d.set("changed", Value::func("loop.changed", [last_changed](Args& a) -> Value {
              Value now = Value::make_tuple(a.pos);
              if (*last_changed && equals(**last_changed, now)) return Value(false);
              *last_changed = now;
              return Value(true);
            }));
      loop_scope.set("loop", loop);
      Flow f = exec_body(s.body);
      if (f == Flow::kBreak) break;
    }
    if (n == 0) {
      scope_ = saved;
      return exec_body(s.else_body);
    }
    return Flow::kNormal;
  }

  // A macro sees the scope it was defined in (a loop body, another macro's frame), as a
  // Python closure does; called after that scope ended, it falls back to the template's root.
  Value make_macro(const Stmt& s) {
    const Stmt* m = &s;
    Scope* home = scope_;
    if (!home->alive) home->alive = std::make_shared<bool>(true);
    return Value::func("<Macro '" + s.text + "'>", [this, m, home, alive = home->alive](Args& a) {
      return call_macro(*m, a, *alive ? home : &root_);
    });
  }

  // Runs macro `m` (or a call block's caller) in a new frame below `parent`: parameters from
  // `a`, extra ones into varargs / kwargs when the body reads them, `caller` when it reads it.
  Value call_macro(const Stmt& m, Args& a, Scope* parent) {
    if (depth_ >= lim_.max_call_depth) {
      limit_error("macro call depth exceeds the limit of " + std::to_string(lim_.max_call_depth));
    }
    if (a.pos.size() > m.params.size() && !m.uses_varargs) {
      throw_render("macro '" + m.text + "' takes not more than " + std::to_string(m.params.size()) +
                   " argument(s)");
    }
    Scope frame{parent, {}};
    Scope* saved_scope = scope_;
    scope_ = &frame;
    ++depth_;
    struct Restore {
      Renderer* r;
      Scope* scope;
      ~Restore() {
        r->scope_ = scope;
        --r->depth_;
      }
    } restore{this, saved_scope};
    Value extra_kw = Value::make_dict();
    Value caller = Value::undefined("No caller defined");
    for (const auto& [k, v] : a.kw) {
      bool known = false;
      for (const auto& p : m.params) known = known || p.first == k;
      if (known) continue;
      if (k == "caller" && m.uses_caller) {
        caller = v;
      } else if (m.uses_kwargs) {
        extra_kw.dict().set(k, v);
      } else {
        throw_render("macro '" + m.text + "' takes no keyword argument '" + k + "'");
      }
    }
    if (m.uses_caller) frame.set("caller", caller);
    if (m.uses_kwargs) frame.set("kwargs", extra_kw);
    if (m.uses_varargs) {
      std::vector<Value> rest;
      for (size_t i = m.params.size(); i < a.pos.size(); ++i) rest.push_back(a.pos[i]);
      frame.set("varargs", Value::make_tuple(std::move(rest)));
    }
    for (size_t i = 0; i < m.params.size(); ++i) {
      const auto& [pname, pdef] = m.params[i];
      const Value* given = a.get(i, pname);
      if (i < a.pos.size()) given = &a.pos[i];
      if (given) {
        frame.set(pname, *given);
      } else if (pdef) {
        frame.set(pname, eval(*pdef));
      } else {
        frame.set(pname, Value::undefined("parameter '" + pname + "' was not provided"));
      }
    }
    return Value(capture(m.body));
  }

  // ------------------------------------------------------------------ expressions
  Value eval(const Expr& e) {
    try {
      return eval_inner(e);
    } catch (RenderError& err) {
      if (!err.located) {
        err.message = located(e.line, e.col, err.message);
        err.located = true;
      }
      throw;
    }
  }

  Value lookup(const std::string& name) {
    if (Value* v = scope_->find(name)) return *v;
    if (ctx_.is_dict()) {
      if (const Value* v = ctx_.dict().find(name)) return *v;
    }
    if (name == "range") return builtin_range();
    if (name == "namespace") {
      return Value::func("namespace", [this](Args& a) {
        Value ns = Value::namespace_();
        namespaces_.push_back(ns);
        for (const auto& p : a.pos) {
          if (!p.is_dict()) throw_render("namespace() positional argument must be a dict");
          for (const auto& [k, v] : p.dict().items) ns.dict().set(k, v);
        }
        for (const auto& [k, v] : a.kw) ns.dict().set(k, v);
        return ns;
      });
    }
    if (name == "cycler") {
      return Value::func("cycler", [this](Args& a) {
        // A namespace holding next()/reset() and `current`; registered so the render end
        // breaks the reference cycle through the closures.
        Value c = Value::namespace_();
        namespaces_.push_back(c);
        if (a.pos.empty()) throw_render("cycler() needs at least one item");
        auto items = std::make_shared<std::vector<Value>>(a.pos);
        auto pos = std::make_shared<size_t>(0);
        Dict* d = &c.dict();
        d->set("current", (*items)[0]);
        d->set("next", Value::func("next", [items, pos, d](Args&) {
                 Value rv = (*items)[*pos];
                 *pos = (*pos + 1) % items->size();
                 d->set("current", (*items)[*pos]);
                 return rv;
               }));
        d->set("reset", Value::func("reset", [items, pos, d](Args&) {
                 *pos = 0;
                 d->set("current", (*items)[0]);
                 return Value::none();
               }));
        return c;
      });
    }
    if (name == "joiner") {
      return Value::func("joiner", [](Args& a) {
        std::string sep = a.pos.empty() ? ", " : to_str(a.pos[0]);
        auto used = std::make_shared<bool>(false);
        return Value::func("joiner", [sep, used](Args&) {
          if (!*used) {
            *used = true;
            return Value("");
          }
          return Value(sep);
        });
      });
    }
    if (name == "dict") {
      return Value::func("dict", [](Args& a) {
        Value d = Value::make_dict();
        for (const auto& p : a.pos) {
          if (!p.is_dict()) throw_render("dict() positional argument must be a dict");
          for (const auto& [k, v] : p.dict().items) d.dict().set(k, v);
        }
        for (const auto& [k, v] : a.kw) d.dict().set(k, v);
        return d;
      });
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  Value builtin_range() {
    return Value::func("range", [this](Args& a) {
      int64_t start = 0, stop = 0, step = 1;
      for (const auto& v : a.pos) {
        if (!v.is_int() && !v.is_bool()) throw_render("'" + type_name(v) + "' object cannot be interpreted as an integer");
      }
      if (a.pos.size() == 1) {
        stop = a.pos[0].as_int();
      } else if (a.pos.size() >= 2) {
        start = a.pos[0].as_int();
        stop = a.pos[1].as_int();
        if (a.pos.size() >= 3) step = a.pos[2].as_int();
      } else {
        throw_render("range expected at least 1 argument, got 0");
      }
      if (step == 0) throw_render("range() arg 3 must not be zero");
      std::vector<Value> out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (static_cast<int64_t>(out.size()) >= lim_.max_loop_iterations) {
          limit_error("range() exceeds the limit of " + std::to_string(lim_.max_loop_iterations) + " items");
        }
        out.emplace_back(i);
        if (__builtin_add_overflow(i, step, &i)) break;  // past INT64_MAX / MIN: past stop too
      }
      return Value::make_list(std::move(out));
    });
  }

  Args eval_args(const Expr& e, size_t first) {
    Args a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v));
    return a;
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.literal;
      case ExprKind::kName: return lookup(e.name);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        for (const auto& x : e.args) items.push_back(eval(*x));
        return e.kind == ExprKind::kTuple ? Value::make_tuple(std::move(items)) : Value::make_list(std::move(items));
      }
      case ExprKind::kDict: {
        Value d = Value::make_dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i]);
          d.dict().set(k, eval(*e.args[i + 1]));
        }
        return d;
      }
      case ExprKind::kGetAttr: return get_attr(eval(*e.args[0]), e.name);
      case ExprKind::kGetItem: return get_item(eval(*e.args[0]), eval(*e.args[1]));
      case ExprKind::kSlice: {
        Value obj = eval(*e.args[0]);
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.args[static_cast<size_t>(i) + 1]) parts[i] = eval(*e.args[static_cast<size_t>(i) + 1]);
        }
        return get_slice(obj, parts[0], parts[1], parts[2]);
      }
      case ExprKind::kCall: {
        Value f = eval(*e.args[0]);
        Args a = eval_args(e, 1);
        if (f.is_dict()) {  // a recursive loop's loop(items)
          if (const Value* c = f.dict().find(kLoopCallKey)) f = *c;
        }
        if (f.is_func()) {
          Value v = f.func()(a);
          check_size(v);
          return v;
        }
        f.check_defined();
        throw_render("'" + type_name(f) + "' object is not callable");
      }
      case ExprKind::kFilter: {
        Value v = eval(*e.args[0]);
        Args a = eval_args(e, 1);
        Value r = call_filter(e.name, v, a);
        check_size(r);
        return r;
      }
      case ExprKind::kTest: {
        Value v = eval(*e.args[0]);
        Args a = eval_args(e, 1);
        bool r = call_test(e.name, v, a);
        return Value(e.negated ? !r : r);
      }
      case ExprKind::kUnary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value(!truthy(v));
        v.check_defined();
        if (!v.is_number()) throw_render("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
        if (e.name == "+") return v.is_float() ? v : Value(v.as_int());
        return v.is_float() ? Value(-v.as_float()) : Value(int_neg_abs(v.as_int(), false));
      }
      case ExprKind::kBinary: {
        if (e.name == "and") {
          Value l = eval(*e.args[0]);
          return truthy(l) ? eval(*e.args[1]) : l;
        }
        if (e.name == "or") {
          Value l = eval(*e.args[0]);
          return truthy(l) ? l : eval(*e.args[1]);
        }
        Value l = eval(*e.args[0]);
        Value r = eval(*e.args[1]);
        if (e.name == "~") {
          std::string s = to_str(l);
          s += to_str(r);
          Value v(std::move(s));
          check_size(v);
          return v;
        }
        Value v = arith(e.name, l, r);
        check_size(v);
        return v;
      }
      case ExprKind::kCompare: {
        Value l = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value r = eval(*e.args[i + 1]);
          const std::string& op = e.ops[i];
          bool ok;
          if (op == "==") ok = equals(l, r);
          else if (op == "!=") ok = !equals(l, r);
          else if (op == "in") ok = contains(r, l);
          else if (op == "notin") ok = !contains(r, l);
          else {
            int c = compare(l, r);
            ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!ok) return Value(false);
          l = std::move(r);
        }
        return Value(true);
      }
      case ExprKind::kCond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        if (e.args[2]) return eval(*e.args[2]);
        return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    return Value();
  }

  const Value& ctx_;
  const Limits& lim_;
  Scope root_;
  Scope* scope_ = nullptr;
  std::string* out_ = nullptr;
  int64_t iterations_ = 0;
  int depth_ = 0;
  std::vector<Value> namespaces_;  // every namespace() made by this render
};

int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value arith(const std::string& op, const Value& a, const Value& b) {
  a.check_defined();
  b.check_defined();
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.is_safe() || b.is_safe()) {
        return make_safe((a.is_safe() ? a.str() : html_escape(a.str())) + (b.is_safe() ? b.str() : html_escape(b.str())));
      }
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list()) {
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return Value::make_list(std::move(items));
    }
    if (a.is_string() || a.is_list()) {
      throw_render("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
    }
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
    const Value* n = seq == &a ? &b : &a;
    if (seq && (n->is_int() || n->is_bool())) {
      int64_t count = n->as_int();
      // An empty sequence repeated any number of times is empty (and must not loop count times).
      if (seq->is_string() && seq->str().empty()) return Value(std::string());
      if (seq->is_list() && seq->list().items.empty()) return Value::make_list({});
      // Bytes for a string; for a list, the size of what it prints as (its items are copied).
      const uint64_t unit = seq->is_string() ? seq->str().size() : measure(*seq, kMaxValueBytes, kMaxValueDepth).bytes;
      if (count > 0 && unit > 0 && static_cast<uint64_t>(count) > kMaxValueBytes / unit) {
        limit_error("sequence repetition result too large (" + std::to_string(unit) + " x " + std::to_string(count) +
                    ", limit " + std::to_string(kMaxValueBytes) + " bytes)");
      }
      if (seq->is_string()) {
        std::string out;
        for (int64_t i = 0; i < count; ++i) out += seq->str();
        return Value(std::move(out));
      }
      std::vector<Value> out;
      for (int64_t i = 0; i < count; ++i) out.insert(out.end(), seq->list().items.begin(), seq->list().items.end());
      return Value::make_list(std::move(out));
    }
  }
  if (op == "%" && a.is_string()) return Value(percent_format(a.str(), b));
  if (!a.is_number() || !b.is_number()) {
    throw_render("unsupported operand type(s) for " + (op == "**" ? std::string("** or pow()") : op) + ": '" +
                 type_name(a) + "' and '" + type_name(b) + "'");
  }
  bool ints = !a.is_float() && !b.is_float();
  if (op == "/") {
    if (b.as_float() == 0) throw_render("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (ints) {
    int64_t x = a.as_int(), y = b.as_int();
    if (op == "+") return Value(int_add(x, y));
    if (op == "-") return Value(int_sub(x, y));
    if (op == "*") return Value(int_mul(x, y));
    if (op == "//" || op == "%") {
      if (y == 0) throw_render(op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
      if (y == -1) return op == "//" ? Value(int_neg_abs(x, false)) : Value(0);  // INT64_MIN / -1 overflows
      return op == "//" ? Value(floordiv(x, y)) : Value(x - floordiv(x, y) * y);
    }
    if (op == "**") {
      if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      return Value(int_pow(x, y));
    }
  }
  double x = a.as_float(), y = b.as_float();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return Value(std::pow(x, y));
  if (y == 0) throw_render("float division by zero");
  double q = std::floor(x / y);
  if (op == "//") return Value(q);
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return Value(m);
}

}  // namespace

Template::Template(std::string_view source)
    : body_(std::make_shared<const ast::Body>(parse_template(source))) {}

std::string Template::render(const Value& context, const Limits& limits) const {
  std::string out;
  Renderer r(context, limits);
  try {
    r.render(*body_, out);
  } catch (const RenderError& e) {
    std::string msg = e.located ? e.message : "[template] " + e.message;
    throw Error(e.limit ? ErrorKind::kResource : e.unsupported ? ErrorKind::kUnsupported : ErrorKind::kInvalidInput, msg);
  } catch (const std::bad_alloc&) {
    // Sizes are checked before building big values; this is the backstop.
    throw Error(ErrorKind::kResource, "[template] out of memory while rendering");
  }
  return out;
}

}  // namespace hearth::tmpl
