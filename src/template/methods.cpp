// Attribute / item access and the Python methods of str, list and dict that
// templates call, with the ImmutableSandboxedEnvironment rules: underscore
// attributes and mutating methods (list.append, dict.update, ...) are unsafe.
#include <algorithm>
#include <set>

#include "template/builtins.h"

namespace hearth::tmpl {
namespace {

const std::set<std::string>& str_methods() {
  static const std::set<std::string> m = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower",
      "title", "capitalize", "replace", "find", "rfind", "index", "rindex", "count", "join", "isdigit",
      "isalpha", "isalnum", "isspace", "isupper", "islower", "splitlines", "removeprefix", "removesuffix",
      "casefold", "partition", "rpartition", "format", "zfill", "center", "ljust", "rjust", "swapcase",
      "expandtabs", "istitle", "isnumeric", "isdecimal", "format_map"};
  return m;
}
const std::set<std::string> kListSafe = {"index", "count", "copy"};
const std::set<std::string> kListUnsafe = {"append", "pop", "insert", "extend", "remove", "clear", "sort", "reverse"};
const std::set<std::string> kDictSafe = {"items", "keys", "values", "get", "copy"};
const std::set<std::string> kDictUnsafe = {"pop", "popitem", "update", "setdefault", "clear"};

std::string arg_str(const Args& a, size_t i, const char* name, const std::string& method) {
  const Value* v = a.get(i, name);
  if (!v || !v->is_string()) {
    throw_render(method + "() argument must be str, not " + (v ? type_name(*v) : std::string("missing")));
  }
  return v->str();
}

// Python str.strip family on code points; chars null = whitespace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<char32_t> cps = utf8_decode(s);
  std::vector<char32_t> set;
  bool ws = !chars || chars->is_none() || chars->is_undefined();
  if (!ws) {
    if (!chars->is_string()) throw_render("strip arg must be None or str");
    set = utf8_decode(chars->str());
  }
  auto strip_it = [&](char32_t c) { return ws ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end(); };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  if (b == 0 && e == cps.size()) return s;
  return utf8_encode(cps, b, e);
}

std::vector<Value> py_split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (!sep || sep->is_none()) {
    std::vector<char32_t> cps = utf8_decode(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      size_t j = i;
      while (j < cps.size() && !is_py_space(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit) {
      // The remainder keeps its inner and far-side whitespace: ' a  b '.split(None, 1) is
      // ['a', 'b '], '  a b  '.rsplit(None, 1) is ['  a', 'b'].
      if (!from_right) {
        auto last_start = words[static_cast<size_t>(maxsplit)].first;
        words.resize(static_cast<size_t>(maxsplit) + 1);
        words.back() = {last_start, cps.size()};
      } else {
        size_t keep = static_cast<size_t>(maxsplit);
        size_t first_end = words[words.size() - keep - 1].second;
        std::vector<std::pair<size_t, size_t>> w2 = {{0, first_end}};
        w2.insert(w2.end(), words.end() - static_cast<ptrdiff_t>(keep), words.end());
        words = w2;
      }
    }
    std::vector<Value> out;
    for (auto [b, e] : words) out.emplace_back(utf8_encode(cps, b, e));
    return out;
  }
  if (!sep->is_string()) throw_render("must be str or None, not " + type_name(*sep));
  const std::string& d = sep->str();
  if (d.empty()) throw_render("empty separator");
  if (!from_right) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t f = s.find(d, pos);
      if (f == std::string::npos) break;
      parts.push_back(s.substr(pos, f - pos));
      pos = f + d.size();
    }
    parts.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    std::vector<std::string> rev;
    while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
      if (end < d.size()) break;
      size_t f = s.rfind(d, end - d.size());
      if (f == std::string::npos) break;
      rev.push_back(s.substr(f + d.size(), end - f - d.size()));
      end = f;
    }
    rev.push_back(s.substr(0, end));
    parts.assign(rev.rbegin(), rev.rend());
  }
  std::vector<Value> out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

bool prefix_match(const std::string& s, const Value& p, bool suffix) {
  auto one = [&](const std::string& x) {
    if (x.size() > s.size()) return false;
    return suffix ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  if (p.is_string()) return one(p.str());
  if (p.is_list()) {
    for (const auto& x : p.list().items) {
      if (x.is_string() && one(x.str())) return true;
    }
    return false;
  }
  throw_render(std::string(suffix ? "endswith" : "startswith") + " first arg must be str or a tuple of str, not " + type_name(p));
}

Value str_method(const Value& self, const std::string& name, const Args& a) {
  const std::string& s = self.str();
  if (name == "strip") return Value(py_strip(s, a.get(0, "chars"), true, true));
  if (name == "lstrip") return Value(py_strip(s, a.get(0, "chars"), true, false));
  if (name == "rstrip") return Value(py_strip(s, a.get(0, "chars"), false, true));
  if (name == "split" || name == "rsplit") {
    const Value* mx = a.get(1, "maxsplit");
    return Value::make_list(py_split(s, a.get(0, "sep"), mx ? mx->as_int() : -1, name == "rsplit"));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* p = a.get(0, "prefix");
    if (!p) throw_render(name + "() takes at least 1 argument (0 given)");
    const Value* st = a.get(1, "start");
    const Value* en = a.get(2, "end");
    if ((st && !st->is_none()) || (en && !en->is_none())) {  // s[start:end].startswith(p)
      Value part = get_slice(self, st ? *st : Value(), en ? *en : Value(), Value());
      return Value(prefix_match(part.str(), *p, name == "endswith"));
    }
    return Value(prefix_match(s, *p, name == "endswith"));
  }
  if (name == "upper") return Value(py_case(s, CaseOp::kUpper));
  if (name == "lower" || name == "casefold") return Value(py_case(s, CaseOp::kLower));
  if (name == "title") return Value(py_case(s, CaseOp::kTitle));
  if (name == "capitalize") return Value(py_case(s, CaseOp::kCapitalize));
  if (name == "replace") {
    std::string from = arg_str(a, 0, "old", name), to = arg_str(a, 1, "new", name);
    const Value* cnt = a.get(2, "count");
    int64_t limit = cnt ? cnt->as_int() : -1;
    std::string out;
    size_t pos = 0;
    int64_t done = 0;
    if (from.empty()) {
      std::vector<char32_t> cps = utf8_decode(s);
      for (size_t i = 0; i <= cps.size(); ++i) {
        if (limit < 0 || done < limit) {
          out += to;
          ++done;
        }
        if (i < cps.size()) utf8_append(out, cps[i]);
        if (out.size() > kMaxValueBytes) throw_limit("replace() result exceeds " + std::to_string(kMaxValueBytes) + " bytes");
      }
      return Value(out);
    }
    while (limit < 0 || done < limit) {
      size_t f = s.find(from, pos);
      if (f == std::string::npos) break;
      out += s.substr(pos, f - pos) + to;
      if (out.size() > kMaxValueBytes) throw_limit("replace() result exceeds " + std::to_string(kMaxValueBytes) + " bytes");
      pos = f + from.size();
      ++done;
    }
    return Value(out + s.substr(pos));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    std::string sub = arg_str(a, 0, "sub", name);
    size_t f = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (f == std::string::npos) {
      if (name == "index" || name == "rindex") throw_render("substring not found");
      return Value(-1);
    }
    return Value(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, f))));
  }
  if (name == "count") {
    std::string sub = arg_str(a, 0, "sub", name);
    if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(s) + 1));
    int64_t n = 0;
    for (size_t f = s.find(sub); f != std::string::npos; f = s.find(sub, f + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    const Value* it = a.get(0, "iterable");
    if (!it) throw_render("join() takes exactly one argument (0 given)");
    std::string out;
    bool first = true;
    for (const auto& x : iterate(*it)) {
      if (!x.is_string()) throw_render("sequence item: expected str instance, " + type_name(x) + " found");
      if (!first) out += s;
      first = false;
      out += x.str();
    }
    return Value(out);
  }
  if (name == "splitlines") {
    const Value* keep = a.get(0, "keepends");
    std::vector<Value> out;
    for (auto& line : py_splitlines(s, keep && truthy(*keep))) out.emplace_back(std::move(line));
    return Value::make_list(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    std::string x = arg_str(a, 0, "prefix", name);
    bool suffix = name == "removesuffix";
    if (prefix_match(s, Value(x), suffix)) return Value(suffix ? s.substr(0, s.size() - x.size()) : s.substr(x.size()));
    return Value(s);
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
      name == "islower") {
    if (s.empty()) return Value(false);
    bool cased = false;
    for (char32_t c : utf8_decode(s)) {
      bool digit = c >= '0' && c <= '9', up = c >= 'A' && c <= 'Z', lo = c >= 'a' && c <= 'z';
      if (name == "isdigit" && !digit) return Value(false);
      if (name == "isalpha" && !(up || lo)) return Value(false);
      if (name == "isalnum" && !(up || lo || digit)) return Value(false);
      if (name == "isspace" && !is_py_space(c)) return Value(false);
      if (name == "isupper" && lo) return Value(false);
      if (name == "islower" && up) return Value(false);
      cased = cased || up || lo;
    }
    return Value(name == "isupper" || name == "islower" ? cased : true);
  }
  if (name == "partition" || name == "rpartition") {
    std::string sep = arg_str(a, 0, "sep", name);
    size_t f = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (f == std::string::npos) {
      return name == "partition" ? Value::make_tuple({Value(s), Value(""), Value("")}) : Value::make_tuple({Value(""), Value(""), Value(s)});
    }
    return Value::make_tuple({Value(s.substr(0, f)), Value(sep), Value(s.substr(f + sep.size()))});
  }
  if (name == "format") return Value(str_format(s, a));
  if (name == "format_map") {
    const Value* m = a.get(0, "mapping");
    if (!m || !m->is_dict()) throw_render("format_map() argument must be a mapping");
    Args kw;
    for (const auto& [k, v] : m->dict().items) {
      if (k.is_string()) kw.kw.emplace_back(k.str(), v);
    }
    return Value(str_format(s, kw));
  }
  if (name == "zfill" || name == "center" || name == "ljust" || name == "rjust") {
    const Value* w = a.get(0, "width");
    if (!w || !(w->is_int() || w->is_bool())) throw_render(name + "() argument must be an integer");
    const size_t width = checked_width(w->as_int(), "width");
    const size_t len = utf8_length(s);
    if (len >= width) return self.is_safe() ? Value(s) : self;
    const size_t total = width - len;
    if (name == "zfill") {
      size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
      return Value(s.substr(0, sign) + std::string(total, '0') + s.substr(sign));
    }
    std::string fill = " ";
    if (const Value* f = a.get(1, "fillchar")) {
      if (!f->is_string() || utf8_length(f->str()) != 1) throw_render("The fill character must be exactly one character long");
      fill = f->str();
    }
    auto rep = [&](size_t n) {
      std::string out;
      for (size_t k = 0; k < n; ++k) out += fill;
      return out;
    };
    if (name == "ljust") return Value(s + rep(total));
    if (name == "rjust") return Value(rep(total) + s);
    // Python's center puts the odd extra space on the left when the width is odd.
    size_t left = total / 2 + (total & width & 1);
    return Value(rep(left) + s + rep(total - left));
  }
  if (name == "swapcase") return Value(py_case(s, CaseOp::kSwap));
  if (name == "expandtabs") {
    const Value* t = a.get(0, "tabsize");
    const int64_t tab = t ? t->as_int() : 8;
    std::string out;
    size_t col = 0;
    for (char32_t c : utf8_decode(s)) {
      if (c == '\t') {
        if (tab > 0) {
          size_t n = static_cast<size_t>(tab) - col % static_cast<size_t>(tab);
          out.append(checked_width(static_cast<int64_t>(n), "expandtabs"), ' ');
          col += n;
        }
      } else {
        utf8_append(out, c);
        col = (c == '\n' || c == '\r') ? 0 : col + 1;
      }
      if (out.size() > kMaxValueBytes) throw_limit("expandtabs() result exceeds " + std::to_string(kMaxValueBytes) + " bytes");
    }
    return Value(out);
  }
  if (name == "isnumeric" || name == "isdecimal") {
    if (s.empty()) return Value(false);
    for (char c : s) {
      if (c < '0' || c > '9') return Value(false);
    }
    return Value(true);
  }
  if (name == "istitle") {
    bool any = false;
    for (char32_t c : utf8_decode(s)) any = any || py_cased(c);
    return Value(any && py_case(s, CaseOp::kTitle) == s);
  }
  throw_render("str method '" + name + "' is not supported");
}

Value list_method(const Value& self, const std::string& name, const Args& a) {
  const auto& items = self.list().items;
  if (name == "copy") return Value::make_list(items);
  const Value* x = a.get(0, "value");
  if (!x) throw_render(name + "() takes exactly one argument (0 given)");
  if (name == "count") {
    int64_t n = 0;
    for (const auto& it : items) n += equals(it, *x);
    return Value(n);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (equals(items[i], *x)) return Value(static_cast<int64_t>(i));
  }
  throw_render(repr(*x) + " is not in list");
}

Value dict_method(const Value& self, const std::string& name, const Args& a) {
  const Dict& d = self.dict();
  if (name == "get") {
    const Value* k = a.get(0, "key");
    if (!k) throw_render("get expected at least 1 argument, got 0");
    const Value* def = a.get(1, "default");
    if (!is_hashable(*k)) throw_render("unhashable type: '" + type_name(*k) + "'");
    if (const Value* v = d.find(*k)) return *v;
    return def ? *def : Value::none();
  }
  if (name == "copy") {
    Value c = Value::make_dict();
    c.dict().items = d.items;
    return c;
  }
  std::vector<Value> out;
  for (const auto& [k, v] : d.items) {
    if (name == "keys") out.emplace_back(k);
    else if (name == "values") out.push_back(v);
    else out.push_back(Value::make_tuple({k, v}));
  }
  return Value::make_list(std::move(out));
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.", true);
}

Value no_attr(const Value& obj, const std::string& name) {
  std::string t = object_type_repr(obj);
  return Value::undefined("'" + t + "' has no attribute '" + name + "'");  // jinja2 3.1 quotes 'None' too
}

Value bound(const Value& obj, const std::string& name) {
  return Value::func(name, [obj, name](Args& a) { return call_method(obj, name, a); });
}

}  // namespace

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_namespace()) return "jinja2.utils.Namespace object";
  if (v.is_string() && v.is_safe()) return "markupsafe.Markup object";
  return type_name(v) + " object";
}

bool has_method(const Value& self, const std::string& name) {
  if (self.is_string()) return str_methods().count(name) > 0;
  if (self.is_list()) return kListSafe.count(name) > 0;
  if (self.is_dict()) return kDictSafe.count(name) > 0;
  return false;
}

Value call_method(const Value& self, const std::string& name, const Args& args) {
  if (self.is_string()) return str_method(self, name, args);
  if (self.is_list()) return list_method(self, name, args);
  if (self.is_dict()) return dict_method(self, name, args);
  throw_render("'" + type_name(self) + "' object has no attribute '" + name + "'");
}

Value get_attr(const Value& obj, const std::string& name) {
  obj.check_defined();
  if (!name.empty() && name[0] == '_') {
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.", true);
  }
  if (obj.is_namespace()) {
    if (const Value* v = obj.dict().find(name)) return *v;
    return no_attr(obj, name);
  }
  if (obj.is_list() && obj.list().group && (name == "grouper" || name == "list")) {
    return obj.list().items[name == "grouper" ? 0 : 1];
  }
  if (has_method(obj, name)) return bound(obj, name);
  if ((obj.is_list() && kListUnsafe.count(name)) || (obj.is_dict() && kDictUnsafe.count(name))) return unsafe(obj, name);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
  }
  return no_attr(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  obj.check_defined();
  if (key.is_security_undefined()) key.check_defined();
  if (obj.is_dict()) {  // an unhashable key is a TypeError, which jinja2's getitem turns into undefined
    if (const Value* v = obj.dict().find(key)) return *v;
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list().items.size()) : static_cast<int64_t>(utf8_length(obj.str()));
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_list()) {
        if (obj.list().generator) throw_render("'generator' object is not subscriptable");
        return obj.list().items[static_cast<size_t>(i)];
      }
      std::vector<char32_t> cps = utf8_decode(obj.str());
      return Value(utf8_encode(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
    }
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined(object_type_repr(obj) + " has no element " + repr(key));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  obj.check_defined();
  if (!obj.is_list() && !obj.is_string()) {
    return Value::undefined(object_type_repr(obj) + " has no element slice");
  }
  std::vector<char32_t> cps;
  if (obj.is_string()) cps = utf8_decode(obj.str());
  const auto n = static_cast<int64_t>(obj.is_list() ? obj.list().items.size() : cps.size());
  auto part = [](const Value& v, const char* what) -> const Value* {
    if (v.is_undefined() || v.is_none()) return nullptr;
    if (!v.is_int() && !v.is_bool()) throw_render(std::string("slice ") + what + " must be an integer or None");
    return &v;
  };
  const Value* pst = part(step, "step");
  int64_t st = pst ? pst->as_int() : 1;
  if (st == 0) throw_render("slice step cannot be zero");
  auto norm = [&](const Value* v, int64_t def) {
    if (!v) return def;
    int64_t i = v->as_int();
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t b = norm(part(start, "start"), st > 0 ? 0 : n - 1);
  int64_t e = norm(part(stop, "stop"), st > 0 ? n : -1);
  std::vector<Value> items;
  std::string s;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.is_list()) {
      items.push_back(obj.list().items[static_cast<size_t>(i)]);
    } else {
      utf8_append(s, cps[static_cast<size_t>(i)]);
    }
  }
  if (obj.is_list()) return obj.list().tuple ? Value::make_tuple(std::move(items)) : Value::make_list(std::move(items));
  return Value(std::move(s));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      if (v.is_security_undefined()) v.check_defined();
      return {};
    case Kind::kList: return v.list().items;
    case Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> out;
      std::vector<char32_t> cps = utf8_decode(v.str());
      for (size_t i = 0; i < cps.size(); ++i) out.emplace_back(utf8_encode(cps, i, i + 1));
      return out;
    }
    default: throw_render("'" + type_name(v) + "' object is not iterable");
  }
}

}  // namespace hearth::tmpl
