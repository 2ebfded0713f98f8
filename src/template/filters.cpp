// Jinja filters with jinja2 3.1 semantics; `tojson` is the Hugging Face
// chat-template one: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False) (argument order as in transformers).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "template/builtins.h"

namespace hearth::tmpl {
namespace {

const Value* arg(const Args& a, size_t idx, const char* name) { return a.get(idx, name); }

bool arg_bool(const Args& a, size_t idx, const char* name, bool def) {
  const Value* v = arg(a, idx, name);
  return v ? truthy(*v) : def;
}

// soft_str: str() but Markup stays Markup.
Value soft_str(const Value& v) { return v.is_string() ? v : Value(to_str(v)); }

Value generator(std::vector<Value> items) { return Value::make_list(std::move(items), true); }

int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return 0;
    case Kind::kString: return static_cast<int64_t>(utf8_length(v.str()));
    case Kind::kList:
      if (!v.list().generator) return static_cast<int64_t>(v.list().items.size());
      break;
    case Kind::kDict: return static_cast<int64_t>(v.dict().items.size());
    default: break;
  }
  throw_render("object of type '" + type_name(v) + "' has no len()");
}

// make_attrgetter: dotted path, integer parts index, each step via getitem.
Value attr_path(Value item, const Value& attribute, const Value* default_value) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    const std::string& s = attribute.str();
    size_t b = 0;
    while (true) {
      size_t d = s.find('.', b);
      std::string p = s.substr(b, d == std::string::npos ? std::string::npos : d - b);
      bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
      // An index too large for int64 cannot match any item; keep it as a (missing) key.
      parts.push_back(digits && p.size() <= 18 ? Value(static_cast<int64_t>(std::stoll(p))) : Value(p));
      if (d == std::string::npos) break;
      b = d + 1;
    }
  } else {
    parts.push_back(attribute);
  }
  for (const auto& p : parts) {
    item = get_item(item, p);
    if (default_value && !default_value->is_none() && item.is_undefined()) item = *default_value;
  }
  return item;
}

Value lowered(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  std::string s = v.str();
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return Value(s);
}

Value filter_select(const Value& seq, const Args& a, bool attr_mode, bool keep_on) {
  size_t off = attr_mode ? 1 : 0;
  if (attr_mode && a.pos.empty()) throw_render("Missing parameter for attribute name");
  Args test_args;
  std::string test_name;
  if (a.pos.size() > off) {
    if (!a.pos[off].is_string()) throw_render("test name must be a string");
    test_name = a.pos[off].str();
    test_args.pos.assign(a.pos.begin() + static_cast<ptrdiff_t>(off) + 1, a.pos.end());
    test_args.kw = a.kw;
  }
  std::vector<Value> out;
  if (!truthy(seq)) return generator({});  // jinja2: `if value:` guards the loop
  for (const auto& item : iterate(seq)) {
    Value x = attr_mode ? attr_path(item, a.pos[0], nullptr) : item;
    bool r = test_name.empty() ? truthy(x) : call_test(test_name, x, test_args);
    if (r == keep_on) out.push_back(item);
  }
  return generator(std::move(out));
}

Value filter_map(const Value& seq, const Args& a) {
  std::vector<Value> out;
  if (!truthy(seq)) return generator({});  // jinja2: `if value:` guards the loop
  if (a.pos.empty()) {
    const Value* attribute = nullptr;
    const Value* def = nullptr;
    for (const auto& [k, v] : a.kw) {
      if (k == "attribute") attribute = &v;
      else if (k == "default") def = &v;
      else throw_render("Unexpected keyword argument '" + k + "'");
    }
    if (!attribute) throw_render("map requires a filter argument");
    for (const auto& item : iterate(seq)) out.push_back(attr_path(item, *attribute, def));
    return generator(std::move(out));
  }
  if (!a.pos[0].is_string()) throw_render("map filter name must be a string");
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const auto& item : iterate(seq)) out.push_back(call_filter(a.pos[0].str(), item, rest));
  return generator(std::move(out));
}

std::vector<Value> sorted_items(std::vector<Value> items, bool reverse, bool cs, const Value* attribute) {
  auto key = [&](const Value& v) { return lowered(attribute ? attr_path(v, *attribute, nullptr) : v, cs); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? compare(key(y), key(x)) < 0 : compare(key(x), key(y)) < 0;
  });
  return items;
}

Value filter_tojson(const Value& v, const Args& a) {
  JsonOptions o;
  o.ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
  const Value* indent = arg(a, 1, "indent");
  if (indent && !indent->is_none()) {
    o.has_indent = true;
    if (indent->is_string()) {
      o.indent = indent->str();
    } else if (indent->is_int()) {
      o.indent = std::string(checked_width(indent->as_int(), "tojson indent"), ' ');
    } else {
      throw_render("tojson indent must be an int or a string");
    }
    o.item_sep = ",";
  }
  const Value* seps = arg(a, 2, "separators");
  if (seps && !seps->is_none()) {
    if (!seps->is_list() || seps->list().items.size() != 2 || !seps->list().items[0].is_string() ||
        !seps->list().items[1].is_string()) {
      throw_render("tojson separators must be a (item, key) pair of strings");
    }
    o.item_sep = seps->list().items[0].str();
    o.key_sep = seps->list().items[1].str();
  }
  o.sort_keys = arg_bool(a, 3, "sort_keys", false);
  return Value(to_json(v, o));
}

Value filter_indent(const Value& v, const Args& a) {
  const Value* w = arg(a, 0, "width");
  std::string ind = !w ? "    " : w->is_string() ? w->str() : std::string(checked_width(w->as_int(), "indent width"), ' ');
  bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
  std::string s = to_str(v) + "\n";
  std::vector<std::string> lines = py_splitlines(s);
  if (!ind.empty() && lines.size() > kMaxValueBytes / ind.size()) {
    throw_limit("indent result too large (" + std::to_string(lines.size()) + " lines x " + std::to_string(ind.size()) +
                " bytes of indentation)");
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
  }
  if (first) rv = ind + rv;
  return Value(rv, v.is_safe());
}

// jinja2 do_title: words split at runs of [-\s({[<], each word's first character upper-cased
// and the rest lower-cased; do_capitalize: str.capitalize().
Value filter_title(const std::string& s, bool title) {
  if (!title) return Value(py_case(s, CaseOp::kCapitalize));
  std::string out;
  bool start = true;
  for (char32_t c : utf8_decode(s)) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_py_space(c);
    if (sep) {
      utf8_append(out, c);
      start = true;
    } else {
      utf8_append(out, start ? py_upper(c) : py_lower(c));
      start = false;
    }
  }
  return Value(out);
}

// int(d) for a float; Python's int is unbounded, ours is int64: outside it, an error.
Value float_to_int(double d, const Value& fallback) {
  if (!std::isfinite(d)) return fallback;
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
    throw_unsupported("int(" + float_repr(d) + ") does not fit in 64 bits");
  }
  return Value(static_cast<int64_t>(d));
}

Value to_int(const Value& v, const Args& a) {
  const Value* def = arg(a, 0, "default");
  Value fallback = def ? *def : Value(0);
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return float_to_int(v.as_float(), fallback);
  if (!v.is_string()) return fallback;
  std::string s;
  for (char c : v.str()) {
    if (c != '_') s += c;
  }
  size_t b = s.find_first_not_of(" \t\n\r\f\v"), e = s.find_last_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return fallback;
  s = s.substr(b, e - b + 1);
  const Value* base = arg(a, 1, "base");
  char* end = nullptr;
  long long iv = std::strtoll(s.c_str(), &end, base ? static_cast<int>(base->as_int()) : 10);
  if (end && *end == '\0' && s.find('.') == std::string::npos) return Value(static_cast<int64_t>(iv));
  double d = std::strtod(s.c_str(), &end);
  if (end && *end == '\0') return float_to_int(d, fallback);
  return fallback;
}

Value to_float(const Value& v, const Args& a) {
  const Value* def = arg(a, 0, "default");
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    std::string s = v.str();
    size_t b = s.find_first_not_of(" \t\n\r\f\v"), e = s.find_last_not_of(" \t\n\r\f\v");
    if (b != std::string::npos) {
      s = s.substr(b, e - b + 1);
      char* end = nullptr;
      double d = std::strtod(s.c_str(), &end);
      if (end && *end == '\0') return Value(d);
    }
  }
  return def ? *def : Value(0.0);
}

Value filter_round(const Value& v, const Args& a) {
  const Value* p = arg(a, 0, "precision");
  const Value* m = arg(a, 1, "method");
  std::string method = m && m->is_string() ? m->str() : "common";
  int64_t prec = p ? p->as_int() : 0;
  if (!v.is_number()) throw_render("type " + type_name(v) + " doesn't define __round__ method");
  prec = std::clamp<int64_t>(prec, -400, 400);
  double x = v.as_float(), scale = std::pow(10.0, static_cast<double>(prec));
  if (method == "ceil") return Value(std::ceil(x * scale) / scale);
  if (method == "floor") return Value(std::floor(x * scale) / scale);
  if (method != "common") throw_render("method must be 'common', 'ceil' or 'floor'");
  if (!v.is_float()) {  // Python round(int, n) stays an int; n < 0 rounds half to even at 10**-n
    int64_t i = v.as_int();
    if (prec >= 0) return Value(i);
    if (prec < -18) return Value(int64_t{0});
    int64_t unit = 1;
    for (int64_t k = 0; k < -prec; ++k) unit *= 10;
    int64_t q = i / unit, r = i % unit;
    if (r < 0) {
      r += unit;
      --q;
    }
    if (2 * r > unit || (2 * r == unit && (q % 2 != 0))) ++q;
    return Value(int_mul(q, unit));
  }
  if (prec < 0) {
    const double unit = std::pow(10.0, static_cast<double>(-prec));
    return Value(std::nearbyint(x / unit) * unit);
  }
  if (prec == 0) return Value(std::nearbyint(x));
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::clamp<int64_t>(prec, 0, 300)), x);
  return Value(std::strtod(buf, nullptr));
}

Value min_max(const Value& v, const Args& a, bool want_max) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  const Value* attribute = arg(a, 1, "attribute");
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) { return lowered(attribute ? attr_path(x, *attribute, nullptr) : x, cs); };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    int c = compare(key(items[i]), key(items[best]));
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

// jinja2 do_truncate (leeway: the default policy, 5).
Value filter_truncate(const Value& v, const Args& a) {
  std::string s = to_str(v);
  const Value* len_v = arg(a, 0, "length");
  int64_t length = len_v ? len_v->as_int() : 255;
  bool killwords = arg_bool(a, 1, "killwords", false);
  const Value* end_v = arg(a, 2, "end");
  std::string end = end_v ? to_str(*end_v) : "...";
  const Value* lw = arg(a, 3, "leeway");
  int64_t leeway = lw && !lw->is_none() ? lw->as_int() : 5;
  const auto end_len = static_cast<int64_t>(utf8_length(end));
  if (length < end_len) throw_render("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) throw_render("expected leeway >= 0, got " + std::to_string(leeway));
  std::vector<char32_t> cps = utf8_decode(s);
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return Value(s);
  std::string head = utf8_encode(cps, 0, static_cast<size_t>(length - end_len));
  if (killwords) return Value(head + end);
  size_t sp = head.rfind(' ');
  return Value((sp == std::string::npos ? head : head.substr(0, sp)) + end);
}

// markupsafe Markup.striptags: drop <!-- comments --> and <tags>, collapse whitespace,
// unescape the common HTML entities.
Value filter_striptags(const Value& v) {
  std::string s = to_str(v);
  for (size_t b; (b = s.find("<!--")) != std::string::npos;) {
    size_t e = s.find("-->", b);
    if (e == std::string::npos) break;
    s.erase(b, e + 3 - b);
  }
  for (size_t b; (b = s.find('<')) != std::string::npos;) {
    size_t e = s.find('>', b);
    if (e == std::string::npos) break;
    s.erase(b, e + 1 - b);
  }
  std::vector<Value> words = call_method(Value(s), "split", Args{}).list().items;
  std::string joined;
  for (size_t i = 0; i < words.size(); ++i) joined += (i ? " " : "") + words[i].str();
  std::string out;
  for (size_t i = 0; i < joined.size(); ++i) {
    if (joined[i] == '&') {
      size_t e = joined.find(';', i);
      if (e != std::string::npos && e - i <= 10) {
        std::string ent = joined.substr(i + 1, e - i - 1);
        static const std::pair<const char*, const char*> kNamed[] = {
            {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}, {"nbsp", "\xc2\xa0"}};
        bool done = false;
        for (const auto& [n, r] : kNamed) {
          if (ent == n) {
            out += r;
            done = true;
          }
        }
        if (!done && ent.size() > 1 && ent[0] == '#') {
          bool hex = ent[1] == 'x' || ent[1] == 'X';
          char* endp = nullptr;
          long cp = std::strtol(ent.c_str() + (hex ? 2 : 1), &endp, hex ? 16 : 10);
          if (endp && *endp == '\0' && cp > 0 && cp < 0x110000) {
            utf8_append(out, static_cast<char32_t>(cp));
            done = true;
          }
        }
        if (done) {
          i = e;
          continue;
        }
      }
    }
    out += joined[i];
  }
  return Value(out);
}

// werkzeug-style url_quote as jinja2 uses it: UTF-8 bytes, unreserved A-Za-z0-9_.-~ kept,
// '/' kept unless for a query string (where %20 becomes '+').
std::string url_quote(const Value& v, bool for_qs) {
  std::string s = to_str(v), out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-' ||
        c == '~' || (c == '/' && !for_qs)) {
      out += static_cast<char>(c);
    } else if (c == ' ' && for_qs) {
      out += '+';
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

Value filter_urlencode(const Value& v) {
  if (v.is_string()) return Value(url_quote(v, false));
  std::vector<Value> pairs = v.is_dict() ? call_method(v, "items", Args{}).list().items : iterate(v);
  std::string out;
  for (size_t i = 0; i < pairs.size(); ++i) {
    std::vector<Value> kv = iterate(pairs[i]);
    if (kv.size() != 2) throw_render("urlencode needs (key, value) pairs");
    out += (i ? "&" : "") + url_quote(kv[0], true) + "=" + url_quote(kv[1], true);
  }
  return Value(out);
}

Value filter_slice(const Value& v, const Args& a) {
  const Value* n = arg(a, 0, "slices");
  if (!n || !n->is_int() || n->as_int() <= 0) throw_render("slice count must be a positive integer");
  const Value* fill = arg(a, 1, "fill_with");
  std::vector<Value> seq = iterate(v);
  const auto slices = static_cast<size_t>(std::min<int64_t>(n->as_int(), static_cast<int64_t>(kMaxValueBytes)));
  const size_t per = seq.size() / slices, extra = seq.size() % slices;
  size_t offset = 0;
  std::vector<Value> out;
  for (size_t k = 0; k < slices; ++k) {
    size_t start = offset + k * per;
    if (k < extra) ++offset;
    size_t end = offset + (k + 1) * per;
    std::vector<Value> part(seq.begin() + static_cast<ptrdiff_t>(start), seq.begin() + static_cast<ptrdiff_t>(end));
    if (fill && !fill->is_none() && k >= extra) part.push_back(*fill);
    out.push_back(Value::make_list(std::move(part)));
  }
  return generator(std::move(out));
}

Value filter_groupby(const Value& v, const Args& a) {
  const Value* attribute = arg(a, 0, "attribute");
  if (!attribute) throw_render("groupby() missing required argument 'attribute'");
  const Value* def = arg(a, 1, "default");
  bool cs = arg_bool(a, 2, "case_sensitive", false);
  auto key = [&](const Value& x) { return lowered(attr_path(x, *attribute, def), cs); };
  std::vector<Value> items = sorted_items(iterate(v), false, cs, attribute);
  std::vector<Value> out;
  for (size_t i = 0; i < items.size();) {
    Value k = key(items[i]);
    std::vector<Value> group;
    size_t j = i;
    while (j < items.size() && equals(key(items[j]), k)) group.push_back(items[j++]);
    Value grouper = attr_path(group[0], *attribute, def);
    Value t = Value::make_tuple({grouper, Value::make_list(std::move(group))});
    t.list().group = true;
    out.push_back(t);
    i = j;
  }
  return Value::make_list(std::move(out));
}

Value filter_filesizeformat(const Value& v, const Args& a) {
  bool binary = arg_bool(a, 0, "binary", false);
  double bytes = to_float(v, Args{}).as_float();
  const double base = binary ? 1024 : 1000;
  static const char* const kDec[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static const char* const kBin[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  if (bytes == 1) return Value("1 Byte");
  if (bytes < base) return Value(std::to_string(static_cast<int64_t>(bytes)) + " Bytes");
  double unit = base;
  for (int i = 0; i < 8; ++i) {
    unit *= base;
    if (bytes < unit || i == 7) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f %s", base * bytes / unit, binary ? kBin[i] : kDec[i]);
      return Value(std::string(buf));
    }
  }
  return Value("");
}

[[noreturn]] void unsupported_filter(const std::string& name) {
  RenderError e{"unknown filter '" + name + "'"};
  e.unsupported = true;
  throw e;
}

}  // namespace

bool is_filter_name(const std::string& name) {
  static const char* const kNames[] = {
      "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
      "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent", "int", "items", "join",
      "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round",
      "safe", "select", "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
      "truncate", "unique", "upper", "urlencode", "wordcount"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

Value call_filter(const std::string& name, const Value& v, const Args& a) {
  if (name == "tojson") return filter_tojson(v, a);
  if (name == "truncate") return filter_truncate(v, a);
  if (name == "striptags") return filter_striptags(v);
  if (name == "urlencode") return filter_urlencode(v);
  if (name == "slice") return filter_slice(v, a);
  if (name == "groupby") return filter_groupby(v, a);
  if (name == "filesizeformat") return filter_filesizeformat(v, a);
  if (name == "format") {  // jinja2 do_format: soft_str(value) % (kwargs or args)
    if (!a.pos.empty() && !a.kw.empty()) throw_render("can't handle positional and keyword arguments at the same time");
    Value rhs;
    if (!a.kw.empty()) {
      rhs = Value::make_dict();
      for (const auto& [k, x] : a.kw) rhs.dict().set(k, x);
    } else {
      rhs = Value::make_tuple(a.pos);
    }
    return Value(percent_format(to_str(v), rhs));
  }
  if (name == "length" || name == "count") return Value(py_len(v));
  if (name == "default" || name == "d") {
    const Value* def = arg(a, 0, "default_value");
    bool boolean = arg_bool(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !truthy(v))) return def ? *def : Value("");
    return v;
  }
  if (name == "trim") {
    Value s = soft_str(v);
    Value r = call_method(s, "strip", Args{{arg(a, 0, "chars") ? *arg(a, 0, "chars") : Value::none()}, {}});
    return Value(r.str(), s.is_safe());
  }
  if (name == "string") return soft_str(v);
  if (name == "upper" || name == "lower") {
    Value s = soft_str(v);
    return Value(call_method(s, name, Args{}).str(), s.is_safe());
  }
  if (name == "safe") return v.is_safe() ? v : make_safe(to_str(v));
  if (name == "escape" || name == "e" || name == "forceescape") {
    if (v.is_safe() && name != "forceescape") return v;
    return make_safe(html_escape(to_str(v)));
  }
  if (name == "items") {
    if (v.is_undefined()) return generator({});
    if (!v.is_dict()) throw_render("Can only get item pairs from a mapping.");
    return generator(call_method(v, "items", Args{}).list().items);
  }
  if (name == "dictsort") {
    if (!v.is_dict()) throw_render("You can only sort by either \"key\" or \"value\"");
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    const Value* by = arg(a, 1, "by");
    bool by_value = by && by->is_string() && by->str() == "value";
    bool rev = arg_bool(a, 2, "reverse", false);
    Value idx(by_value ? 1 : 0);
    return Value::make_list(sorted_items(call_method(v, "items", Args{}).list().items, rev, cs, &idx));
  }
  if (name == "join") {
    const Value* d = arg(a, 0, "d");
    const Value* attribute = arg(a, 1, "attribute");
    std::string sep = d ? to_str(*d) : "", out;
    bool first = true;
    for (const auto& item : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += to_str(attribute ? attr_path(item, *attribute, nullptr) : item);
    }
    return Value(out);
  }
  if (name == "list") return Value::make_list(iterate(v));
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "map") return filter_map(v, a);
  if (name == "select" || name == "reject") return filter_select(v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return filter_select(v, a, true, name == "selectattr");
  if (name == "indent") return filter_indent(v, a);
  if (name == "int") return to_int(v, a);
  if (name == "float") return to_float(v, a);
  if (name == "abs") {
    if (!v.is_number()) throw_render("bad operand type for abs(): '" + type_name(v) + "'");
    return v.is_float() ? Value(std::fabs(v.as_float())) : Value(int_neg_abs(v.as_int(), true));
  }
  if (name == "round") return filter_round(v, a);
  if (name == "title" || name == "capitalize") return filter_title(to_str(v), name == "title");
  if (name == "replace") {
    Value s = soft_str(v);
    Args r;
    for (size_t i = 0; i < 3; ++i) {
      static const char* const kNames[] = {"old", "new", "count"};
      if (const Value* x = arg(a, i, kNames[i])) r.pos.push_back(x->is_string() || i == 2 ? *x : Value(to_str(*x)));
    }
    return call_method(s, "replace", r);
  }
  if (name == "unique") {
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    const Value* attribute = arg(a, 1, "attribute");
    std::vector<Value> out, seen;
    for (const auto& item : iterate(v)) {
      Value key = lowered(attribute ? attr_path(item, *attribute, nullptr) : item, cs);
      bool dup = false;
      for (const auto& s : seen) dup = dup || equals(s, key);
      if (!dup) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return generator(std::move(out));
  }
  if (name == "sort") {
    return Value::make_list(sorted_items(iterate(v), arg_bool(a, 0, "reverse", false), arg_bool(a, 1, "case_sensitive", false),
                                    arg(a, 2, "attribute")));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<char32_t> cps = utf8_decode(v.str());
      std::reverse(cps.begin(), cps.end());
      return Value(utf8_encode(cps, 0, cps.size()));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return generator(std::move(items));
  }
  if (name == "min" || name == "max") return min_max(v, a, name == "max");
  if (name == "sum") {
    const Value* attribute = arg(a, 0, "attribute");
    const Value* start = arg(a, 1, "start");
    Value total = start ? *start : Value(0);
    for (const auto& item : iterate(v)) {
      Value x = attribute ? attr_path(item, *attribute, nullptr) : item;
      if (x.is_list() && total.is_list()) {  // sum(lists, start=[]) concatenates
        std::vector<Value> joined = total.list().items;
        joined.insert(joined.end(), x.list().items.begin(), x.list().items.end());
        total = Value::make_list(std::move(joined));
        continue;
      }
      if (!x.is_number() || !total.is_number()) {
        throw_render("unsupported operand type(s) for +: '" + type_name(total) + "' and '" + type_name(x) + "'");
      }
      total = (x.is_float() || total.is_float()) ? Value(total.as_float() + x.as_float()) : Value(total.as_int() + x.as_int());
    }
    return total;
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : utf8_decode(to_str(v))) {
      bool w = c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value(n);
  }
  if (name == "batch") {
    const Value* cnt = arg(a, 0, "linecount");
    if (!cnt || !cnt->is_int() || cnt->as_int() <= 0) throw_render("batch linecount must be a positive integer");
    const Value* fill = arg(a, 1, "fill_with");
    auto n = static_cast<size_t>(cnt->as_int());
    std::vector<Value> out, cur;
    for (const auto& item : iterate(v)) {
      cur.push_back(item);
      if (cur.size() == n) {
        out.push_back(Value::make_list(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (fill && !fill->is_none()) {
        while (cur.size() < n) cur.push_back(*fill);
      }
      out.push_back(Value::make_list(std::move(cur)));
    }
    return generator(std::move(out));
  }
  if (name == "center") {
    const Value* w = arg(a, 0, "width");
    std::string s = to_str(v);
    const size_t width = w ? checked_width(w->as_int(), "center width") : 80;
    size_t len = utf8_length(s);
    if (len >= width) return Value(s);
    size_t total = width - len, left = total / 2 + (total & width & 1);
    return Value(std::string(left, ' ') + s + std::string(total - left, ' '));
  }
  if (name == "attr") {
    const Value* n = arg(a, 0, "name");
    if (!n || !n->is_string()) throw_render("attr filter needs an attribute name");
    if (v.is_dict() && !has_method(v, n->str())) return Value::undefined("'dict object' has no attribute '" + n->str() + "'");
    return get_attr(v, n->str());
  }
  unsupported_filter(name);
}

}  // namespace hearth::tmpl
