// Python semantics for template values: see value.h.
#include "template/value.h"

#include "core/utf8.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace hearth::tmpl {

void throw_render(std::string message) { throw RenderError{std::move(message)}; }

void throw_limit(std::string message) {
  RenderError e{std::move(message)};
  e.limit = true;
  throw e;
}

void throw_unsupported(std::string message) {
  RenderError e{std::move(message)};
  e.unsupported = true;
  throw e;
}

size_t checked_width(int64_t width, const char* what) {
  if (width <= 0) return 0;
  if (static_cast<uint64_t>(width) > kMaxValueBytes) {
    throw_limit(std::string(what) + " " + std::to_string(width) + " exceeds the limit of " +
                std::to_string(kMaxValueBytes));
  }
  return static_cast<size_t>(width);
}

[[noreturn]] static void int_overflow(int64_t a, const char* op, int64_t b) {
  throw_unsupported("integer overflow: " + std::to_string(a) + " " + op + " " + std::to_string(b) +
                    " does not fit in 64 bits");
}

int64_t int_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) int_overflow(a, "+", b);
  return r;
}

int64_t int_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) int_overflow(a, "-", b);
  return r;
}

int64_t int_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) int_overflow(a, "*", b);
  return r;
}

int64_t int_neg_abs(int64_t a, bool abs) {
  if (a == INT64_MIN) {
    throw_unsupported("integer overflow: " + std::string(abs ? "abs(" : "-(") + std::to_string(a) +
                      ") does not fit in 64 bits");
  }
  return abs ? (a < 0 ? -a : a) : -a;
}

int64_t int_pow(int64_t base, int64_t exp) {
  int64_t r = 1;
  // |base| >= 2 overflows within 63 steps, so the loop is short; 0, 1, -1 are cut short.
  if (base == 0) return exp == 0 ? 1 : 0;
  if (base == 1) return 1;
  if (base == -1) return exp % 2 == 0 ? 1 : -1;
  for (int64_t i = 0; i < exp; ++i) {
    if (__builtin_mul_overflow(r, base, &r)) int_overflow(base, "**", exp);
  }
  return r;
}

const Value* Args::get(size_t idx, std::string_view name) const {
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return idx < pos.size() ? &pos[idx] : nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  return const_cast<Value*>(static_cast<const Dict*>(this)->find(key));
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  if (!is_hashable(key)) return nullptr;
  for (const auto& [k, v] : items) {
    if (!k.is_string() && equals(k, key)) return &v;
  }
  return nullptr;
}

Value* Dict::find(const Value& key) { return const_cast<Value*>(static_cast<const Dict*>(this)->find(key)); }

void Dict::set(const std::string& key, Value v) {
  if (Value* slot = find(std::string_view(key))) {
    *slot = std::move(v);
  } else {
    items.emplace_back(Value(key), std::move(v));
  }
}

void Dict::set(const char* key, Value v) { set(std::string(key), std::move(v)); }

void Dict::set(const Value& key, Value v) {
  if (!is_hashable(key)) throw_render("unhashable type: '" + type_name(key) + "'");
  if (Value* slot = find(key)) {
    *slot = std::move(v);
  } else {
    items.emplace_back(key, std::move(v));
  }
}

bool is_hashable(const Value& v) {
  switch (v.kind()) {
    case Kind::kNone:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kString: return true;
    case Kind::kList:
      if (!v.list().tuple) return false;
      for (const Value& x : v.list().items) {
        if (!is_hashable(x)) return false;
      }
      return true;
    default: return false;
  }
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::undefined(std::string message, bool security) {
  Value v;
  v.s_ = std::move(message);
  v.security_ = security;
  return v;
}

Value Value::make_list(std::vector<Value> items, bool generator) {
  Value v;
  v.kind_ = Kind::kList;
  v.l_ = std::make_shared<List>();
  v.l_->items = std::move(items);
  v.l_->generator = generator;
  return v;
}

Value Value::make_tuple(std::vector<Value> items) {
  Value v = make_list(std::move(items));
  v.l_->tuple = true;
  return v;
}

Value Value::make_dict() {
  Value v;
  v.kind_ = Kind::kDict;
  v.d_ = std::make_shared<Dict>();
  return v;
}

Value Value::namespace_() {
  Value v = make_dict();
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::func(std::string name, Func f) {
  Value v;
  v.kind_ = Kind::kFunc;
  v.s_ = std::move(name);
  v.fn_ = std::make_shared<Func>(std::move(f));
  return v;
}

double Value::as_float() const {
  switch (kind_) {
    case Kind::kFloat: return f_;
    case Kind::kInt: return static_cast<double>(i_);
    case Kind::kBool: return b_ ? 1.0 : 0.0;
    default: return 0.0;
  }
}

void Value::check_defined() const {
  if (kind_ == Kind::kUndefined) throw_render(s_.empty() ? "value is undefined" : s_);
}

Value make_safe(std::string s) { return Value(std::move(s), true); }

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// ---------------------------------------------------------------- UTF-8
void utf8_append(std::string& out, char32_t cp) { append_utf8(out, static_cast<uint32_t>(cp)); }

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {  // invalid byte: keep it as U+FFFD
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string utf8_encode(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end && i < cps.size(); ++i) utf8_append(out, cps[i]);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;  // bytes of the line break at i
    if (c == '\r') n = (i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
    else if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E)) n = 1;
    else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) n = 2;
    else if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
             (static_cast<unsigned char>(s[i + 2]) == 0xA8 || static_cast<unsigned char>(s[i + 2]) == 0xA9)) n = 3;
    if (n == 0) {
      ++i;
      continue;
    }
    out.push_back(s.substr(b, (keepends ? i + n : i) - b));
    i += n;
    b = i;
  }
  if (b < s.size()) out.push_back(s.substr(b));
  return out;
}

bool is_py_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

// ---------------------------------------------------------------- case
char32_t py_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c == 0xB5) return 0x39C;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (c == 0x130 || c == 0x138 || c == 0x149) return c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F)) return (c % 2 == 1) ? c - 1 : c;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

char32_t py_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';  // Python gives "i̇" (two code points); close enough for prompts
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F)) return (c % 2 == 0) ? c + 1 : c;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

bool py_cased(char32_t c) { return py_upper(c) != c || py_lower(c) != c || c == 0xDF || c == 0x138 || c == 0x149; }

std::string py_case(const std::string& s, CaseOp op) {
  std::string out;
  out.reserve(s.size());
  bool prev_cased = false;
  bool first = true;
  for (char32_t c : utf8_decode(s)) {
    bool up;
    switch (op) {
      case CaseOp::kUpper: up = true; break;
      case CaseOp::kLower: up = false; break;
      case CaseOp::kSwap: up = py_upper(c) != c || c == 0xDF; break;  // lower-case letters go up
      case CaseOp::kTitle: up = !prev_cased; break;
      default: up = first; break;
    }
    first = false;
    prev_cased = py_cased(c);
    if (up && c == 0xDF) {
      out += (op == CaseOp::kTitle || op == CaseOp::kCapitalize) ? "Ss" : "SS";
      continue;
    }
    utf8_append(out, up ? py_upper(c) : py_lower(c));
  }
  return out;
}

// ---------------------------------------------------------------- str / repr
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  int exp10 = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (size_t i = 0; i < epos; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  std::string out = neg ? "-" : "";
  if (exp10 < -4 || exp10 >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += eb;
  } else if (exp10 < 0) {
    out += "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
  } else {
    auto int_len = static_cast<size_t>(exp10 + 1);
    if (digits.size() <= int_len) {
      out += digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  return out;
}

static std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && c < 0xA0)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out += q;
  return out;
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Kind::kString: return v.is_safe() ? "Markup(" + repr_string(v.str()) + ")" : repr_string(v.str());
    case Kind::kList: {
      if (v.list().generator) return "<generator object>";
      if (v.list().group && v.list().items.size() == 2) {
        return "_GroupTuple(grouper=" + repr(v.list().items[0]) + ", list=" + repr(v.list().items[1]) + ")";
      }
      const bool tuple = v.list().tuple;
      std::string out = tuple ? "(" : "[";
      for (size_t i = 0; i < v.list().items.size(); ++i) {
        if (i) out += ", ";
        out += repr(v.list().items[i]);
      }
      if (tuple && v.list().items.size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(val);
      }
      return out + "}";
    }
    case Kind::kUndefined: return "Undefined";
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      if (v.is_security_undefined()) v.check_defined();
      return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.as_bool() ? "True" : "False";
    case Kind::kInt: return std::to_string(v.as_int());
    case Kind::kFloat: return float_repr(v.as_float());
    case Kind::kString: return v.str();
    case Kind::kList:
    case Kind::kDict: return repr(v);
    case Kind::kFunc: return v.func_name().rfind('<', 0) == 0 ? v.func_name() : "<function " + v.func_name() + ">";
    case Kind::kNamespace: {
      // A namespace can hold itself (ns.x = ns): like Python's reprlib guard, the inner
      // occurrence prints as {...}.
      thread_local std::vector<const Dict*> active;
      const Dict* d = &v.dict();
      if (std::find(active.begin(), active.end(), d) != active.end()) return "<Namespace {...}>";
      active.push_back(d);
      struct Pop {
        ~Pop() { active.pop_back(); }
      } pop;
      Value tmp = Value::make_dict();
      tmp.dict().items = v.dict().items;
      return "<Namespace " + repr(tmp) + ">";
    }
  }
  return "";
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return v.is_safe() ? "Markup" : "str";
    case Kind::kList: return v.list().generator ? "generator" : v.list().tuple ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kFunc: return "function";
    case Kind::kNamespace: return "Namespace";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      if (v.is_security_undefined()) v.check_defined();
      return false;
    case Kind::kNone: return false;
    case Kind::kBool: return v.as_bool();
    case Kind::kInt: return v.as_int() != 0;
    case Kind::kFloat: return v.as_float() != 0.0;
    case Kind::kString: return !v.str().empty();
    case Kind::kList: return v.list().generator || !v.list().items.empty();
    case Kind::kDict: return !v.dict().items.empty();
    default: return true;
  }
}

// ---------------------------------------------------------------- comparisons
bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool())) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  if (a.is_list() && (a.list().tuple != b.list().tuple || a.list().generator || b.list().generator)) {
    return a.is_list() && &a.list() == &b.list();  // a tuple never equals a list; generators by identity
  }
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.str() == b.str();
    case Kind::kList: {
      const auto& x = a.list().items;
      const auto& y = b.list().items;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* o = b.dict().find(k);  // any key type
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case Kind::kFunc: return &a.func() == &b.func();
    case Kind::kNamespace: return &a.dict() == &b.dict();
    default: return false;
  }
}

int compare(const Value& a, const Value& b) {
  a.check_defined();
  b.check_defined();
  if (a.is_number() && b.is_number()) {
    if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool())) {
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    double x = a.as_float(), y = b.as_float();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.str().compare(b.str()) < 0 ? -1 : a.str() == b.str() ? 0 : 1;
  if (a.is_list() && b.is_list()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw_render("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool contains(const Value& c, const Value& item) {
  switch (c.kind()) {
    case Kind::kUndefined:
      if (c.is_security_undefined()) c.check_defined();
      return false;
    case Kind::kString:
      if (!item.is_string()) {
        throw_render("'in <string>' requires string as left operand, not " + type_name(item));
      }
      return c.str().find(item.str()) != std::string::npos;
    case Kind::kList:
      for (const auto& x : c.list().items) {
        if (equals(x, item)) return true;
      }
      return false;
    case Kind::kDict:
      if (!is_hashable(item)) throw_render("unhashable type: '" + type_name(item) + "'");
      return c.dict().find(item) != nullptr;
    default: throw_render("argument of type '" + type_name(c) + "' is not iterable");
  }
}

// ---------------------------------------------------------------- JSON
static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  auto esc = [&](unsigned cp) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    out += buf;
  };
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            char32_t v = c - 0x10000;
            esc(0xD800 + static_cast<unsigned>(v >> 10));
            esc(0xDC00 + static_cast<unsigned>(v & 0x3FF));
          } else {
            esc(static_cast<unsigned>(c));
          }
        } else {
          utf8_append(out, c);
        }
    }
  }
  out += '"';
}

static void json_dump(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  if (depth > 512) throw_render("maximum recursion depth exceeded while encoding a JSON object");
  if (out.size() > kMaxValueBytes) throw_limit("tojson result exceeds " + std::to_string(kMaxValueBytes) + " bytes");
  auto newline = [&](int level) {
    if (!o.has_indent) return;
    if (!o.indent.empty() && static_cast<size_t>(level) > (kMaxValueBytes - std::min(out.size(), kMaxValueBytes)) / o.indent.size()) {
      throw_limit("tojson result exceeds " + std::to_string(kMaxValueBytes) + " bytes");
    }
    out += '\n';
    for (int i = 0; i < level; ++i) out += o.indent;
  };
  switch (v.kind()) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: {
      double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d);
      return;
    }
    case Kind::kString: json_string(out, v.str(), o.ensure_ascii); return;
    case Kind::kList: {
      if (v.list().generator) break;
      const auto& items = v.list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        newline(depth + 1);
        json_dump(out, items[i], o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Kind::kDict: {
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys) {  // Python sorts the keys before converting them
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return compare(a->first, b->first) < 0; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        newline(depth + 1);
        const Value& k = items[i]->first;
        if (k.is_string()) {
          json_string(out, k.str(), o.ensure_ascii);
        } else if (k.is_none() || k.is_bool() || k.is_int() || k.is_float()) {
          // json.dumps turns these keys into strings: None -> "null", True -> "true", 1.5 -> "1.5"
          std::string ks;
          json_dump(ks, k, JsonOptions{}, depth + 1);
          json_string(out, ks, o.ensure_ascii);
        } else {
          throw_render("keys must be str, int, float, bool or None, not " + type_name(k));
        }
        out += o.key_sep;
        json_dump(out, items[i]->second, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default: break;
  }
  if (v.is_security_undefined()) v.check_defined();
  throw_render("Object of type " + type_name(v) + " is not JSON serializable");
}

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  json_dump(out, v, opts, 0);
  return out;
}

// ---------------------------------------------------------------- measure
namespace {

struct Measurer {
  size_t max_bytes;
  int max_depth;
  ValueSize r;
  std::vector<const Dict*> path;  // namespaces being walked (a namespace may hold itself)

  bool over() const { return r.bytes > max_bytes || r.depth > max_depth; }

  void walk(const Value& v, int depth) {
    if (over()) return;
    if (depth > r.depth) r.depth = depth;
    if (depth > max_depth) return;
    switch (v.kind()) {
      case Kind::kString: r.bytes += v.str().size(); break;
      case Kind::kList:
        for (const Value& x : v.list().items) {
          r.bytes += 16;  // an item costs more to hold than to print
          walk(x, depth + 1);
          if (over()) return;
        }
        break;
      case Kind::kNamespace:
      case Kind::kDict: {
        const Dict* d = &v.dict();
        if (v.is_namespace()) {
          for (const Dict* p : path) {
            if (p == d) return;
          }
          path.push_back(d);
        }
        for (const auto& [k, x] : d->items) {
          r.bytes += 16 + (k.is_string() ? k.str().size() : 8);
          walk(x, depth + 1);
          if (over()) break;
        }
        if (v.is_namespace()) path.pop_back();
        break;
      }
      default: r.bytes += 1; break;
    }
  }
};

}  // namespace

ValueSize measure(const Value& v, size_t max_bytes, int max_depth) {
  Measurer m{max_bytes, max_depth, {}, {}};
  m.walk(v, 0);
  return m.r;
}

}  // namespace hearth::tmpl
