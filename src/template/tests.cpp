// Jinja tests (`x is name`), with jinja2's definitions (e.g. `number` is true
// for booleans, an Undefined is iterable and a sequence).
#include <cmath>

#include "template/builtins.h"

namespace hearth::tmpl {

namespace {
const Value& arg0(const std::string& name, const Args& a) {
  const Value* v = a.get(0, "other");
  if (!v) v = a.get(0, "value");
  if (!v) v = a.get(0, "num");
  if (!v) throw_render("test '" + name + "' takes 1 argument (0 given)");
  return *v;
}
}  // namespace

bool call_test(const std::string& name, const Value& v, const Args& a) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_undefined() || v.is_string() || (v.is_list() && !v.list().generator) || v.is_dict();
  if (name == "callable") return v.is_func();
  if (name == "escaped") return v.is_safe();
  if (name == "lower" || name == "upper") {
    std::string s = to_str(v);
    bool ok = true;
    for (char c : s) ok = ok && !(name == "lower" ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z'));
    return ok;
  }
  if (name == "odd" || name == "even") {
    v.check_defined();
    if (!v.is_int() && !v.is_bool()) throw_render("not all arguments converted during string formatting");
    int64_t r = v.as_int() % 2;
    return name == "odd" ? r != 0 : r == 0;
  }
  if (name == "divisibleby") {
    const Value& n = arg0(name, a);
    if (!n.is_number() || !v.is_number()) throw_render("unsupported operand type(s) for %");
    if (n.as_float() == 0) throw_render("integer division or modulo by zero");
    if (v.is_float() || n.is_float()) return std::fmod(v.as_float(), n.as_float()) == 0;
    return v.as_int() % n.as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg0(name, a));
  if (name == "ne" || name == "!=") return !equals(v, arg0(name, a));
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, arg0(name, a)) < 0;
  if (name == "le" || name == "<=") return compare(v, arg0(name, a)) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, arg0(name, a)) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg0(name, a)) >= 0;
  if (name == "in") return contains(arg0(name, a), v);
  if (name == "sameas") {
    const Value& o = arg0(name, a);
    if (v.kind() != o.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.as_bool() == o.as_bool();
    if (v.is_list()) return &v.list() == &o.list();
    if (v.is_dict() || v.is_namespace()) return &v.dict() == &o.dict();
    return equals(v, o);
  }
  if (name == "filter") return v.is_string() && is_filter_name(v.str());
  if (name == "test") {
    static const char* const kTests[] = {
        "odd", "even", "divisibleby", "defined", "undefined", "filter", "test", "none", "boolean", "false", "true",
        "integer", "float", "lower", "upper", "string", "mapping", "number", "sequence", "iterable", "callable",
        "sameas", "escaped", "in", "==", "eq", "equalto", "!=", "ne", ">", "gt", "greaterthan", "ge", ">=", "<", "lt",
        "lessthan", "<=", "le"};
    if (!v.is_string()) return false;
    for (const char* t : kTests) {
      if (v.str() == t) return true;
    }
    return false;
  }
  if (name == "startingwith") {
    const Value& p = arg0(name, a);
    return v.is_string() && p.is_string() && v.str().compare(0, p.str().size(), p.str()) == 0;
  }
  RenderError e{"unknown test '" + name + "'"};
  e.unsupported = true;
  throw e;
}

}  // namespace hearth::tmpl
