// Python string formatting for templates: format(value, spec) (the format-spec
// mini-language), str.format (as jinja2's sandboxed formatter runs it: field
// attributes and items go through the sandboxed getattr / getitem) and the
// printf-style `%` operator (also the `format` filter).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "template/builtins.h"

namespace hearth::tmpl {
namespace {

struct Spec {
  char32_t fill = ' ';
  char align = 0;  // '<' '>' '^' '=' or 0 (default)
  char sign = '-';
  bool alt = false;
  bool zero = false;
  size_t width = 0;
  char grouping = 0;  // ',' '_' or 0
  int precision = -1;
  char type = 0;
};

size_t parse_number(const std::string& s, size_t& i) {
  size_t n = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    n = n * 10 + static_cast<size_t>(s[i] - '0');
    if (n > kMaxValueBytes)
      throw_limit("format width exceeds the limit of " + std::to_string(kMaxValueBytes));
    ++i;
  }
  return n;
}

Spec parse_spec(const std::string& text) {
  Spec sp;
  std::vector<char32_t> cps = utf8_decode(text);
  size_t c = 0;
  auto is_align = [](char32_t ch) { return ch == '<' || ch == '>' || ch == '^' || ch == '='; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    sp.fill = cps[0];
    sp.align = static_cast<char>(cps[1]);
    c = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    sp.align = static_cast<char>(cps[0]);
    c = 1;
  }
  std::string rest = utf8_encode(cps, c, cps.size());
  size_t i = 0;
  if (i < rest.size() && (rest[i] == '+' || rest[i] == '-' || rest[i] == ' ')) sp.sign = rest[i++];
  if (i < rest.size() && rest[i] == 'z') ++i;
  if (i < rest.size() && rest[i] == '#') {
    sp.alt = true;
    ++i;
  }
  if (i < rest.size() && rest[i] == '0') {
    sp.zero = true;
    ++i;
  }
  sp.width = parse_number(rest, i);
  if (i < rest.size() && (rest[i] == ',' || rest[i] == '_')) sp.grouping = rest[i++];
  if (i < rest.size() && rest[i] == '.') {
    ++i;
    size_t b = i;
    sp.precision = static_cast<int>(std::min<size_t>(parse_number(rest, i), 1000));
    if (i == b) throw_render("Format specifier missing precision");
  }
  if (i < rest.size()) sp.type = rest[i++];
  if (i < rest.size()) throw_render("Invalid format specifier '" + text + "'");
  if (sp.zero && !sp.align) {
    sp.fill = '0';
    sp.align = '=';
  }
  return sp;
}

std::string pad(const std::string& body, const std::string& sign_prefix, const Spec& sp,
                char default_align) {
  size_t len = utf8_length(body) + sign_prefix.size();
  if (len >= sp.width) return sign_prefix + body;
  size_t total = sp.width - len;
  std::string fill;
  utf8_append(fill, sp.fill);
  auto rep = [&](size_t n) {
    std::string out;
    for (size_t k = 0; k < n; ++k) out += fill;
    return out;
  };
  char align = sp.align ? sp.align : default_align;
  switch (align) {
    case '<':
      return sign_prefix + body + rep(total);
    case '^':
      return rep(total / 2) + sign_prefix + body + rep(total - total / 2);
    case '=':
      return sign_prefix + rep(total) + body;
    default:
      return rep(total) + sign_prefix + body;
  }
}

std::string group_digits(const std::string& digits, char sep, size_t every) {
  if (!sep) return digits;
  std::string out;
  size_t n = digits.size();
  for (size_t k = 0; k < n; ++k) {
    if (k && (n - k) % every == 0) out += sep;
    out += digits[k];
  }
  return out;
}

std::string sign_of(bool neg, char sign) {
  if (neg) return "-";
  if (sign == '+') return "+";
  if (sign == ' ') return " ";
  return "";
}

std::string format_int(int64_t v, const Spec& sp) {
  if (sp.precision >= 0) throw_render("Precision not allowed in integer format specifier");
  bool neg = v < 0;
  uint64_t mag =
      neg ? static_cast<uint64_t>(0) - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  std::string digits, prefix;
  char t = sp.type ? sp.type : 'd';
  if (t == 'c') {
    if (neg || mag >= 0x110000) throw_render("%c arg not in range(0x110000)");
    std::string s;
    utf8_append(s, static_cast<char32_t>(mag));
    return pad(s, "", sp, '<');
  }
  int base = t == 'x' || t == 'X' ? 16 : t == 'o' ? 8 : t == 'b' ? 2 : 10;
  if (t != 'd' && t != 'n' && base == 10)
    throw_render(std::string("Unknown format code '") + t + "' for object of type 'int'");
  if (mag == 0) digits = "0";
  while (mag) {
    int d = static_cast<int>(mag % static_cast<uint64_t>(base));
    digits += static_cast<char>(d < 10 ? '0' + d : (t == 'X' ? 'A' : 'a') + d - 10);
    mag /= static_cast<uint64_t>(base);
  }
  std::reverse(digits.begin(), digits.end());
  digits = group_digits(digits, sp.grouping, base == 10 ? 3 : 4);
  if (sp.alt && base != 10)
    prefix = base == 16 ? (t == 'X' ? "0X" : "0x") : base == 8 ? "0o" : "0b";
  return pad(digits, sign_of(neg, sp.sign) + prefix, sp, '>');
}

std::string strip_g_zeros(std::string s) {
  size_t e = s.find_first_of("eE");
  std::string mant = e == std::string::npos ? s : s.substr(0, e);
  std::string exp = e == std::string::npos ? "" : s.substr(e);
  if (mant.find('.') != std::string::npos) {
    while (!mant.empty() && mant.back() == '0') mant.pop_back();
    if (!mant.empty() && mant.back() == '.') mant.pop_back();
  }
  return mant + exp;
}

// Python's exponent form: at least two exponent digits ("1e-05"), as C prints.
std::string format_float(double v, const Spec& sp) {
  char t = sp.type;
  bool neg = std::signbit(v);
  double a = std::fabs(v);
  std::string body;
  if (std::isnan(v) || std::isinf(v)) {
    body = std::isnan(v) ? "nan" : "inf";
    if (t == 'E' || t == 'F' || t == 'G') body = std::isnan(v) ? "NAN" : "INF";
    return pad(body, sign_of(neg && !std::isnan(v), sp.sign), sp, '>');
  }
  char buf[1100];
  int p = sp.precision;
  if (t == 0 && p < 0) {
    body = float_repr(a);
  } else if (t == 0 || t == 'g' || t == 'G' || t == 'n') {
    int prec = p < 0 ? 6 : (p == 0 ? 1 : p);
    if (t == 0) {
      // Like 'g', but fixed notation keeps one digit after the point, and the switch
      // to exponent form happens at exp >= prec - 1 ... as repr does with `prec` digits.
      std::snprintf(buf, sizeof buf, "%.*e", prec - 1, a);
      int exp10 = std::atoi(std::strchr(buf, 'e') + 1);
      if (exp10 >= -4 && exp10 < prec) {
        std::snprintf(buf, sizeof buf, "%.*f", std::max(prec - 1 - exp10, 0), a);
        body = strip_g_zeros(buf);
        if (body.find('.') == std::string::npos) body += ".0";
      } else {
        body = strip_g_zeros(buf);
      }
    } else {
      std::snprintf(buf, sizeof buf, sp.alt ? "%#.*g" : "%.*g", prec, a);
      body = buf;
      if (t == 'G') std::transform(body.begin(), body.end(), body.begin(), ::toupper);
    }
  } else if (t == 'e' || t == 'E') {
    std::snprintf(buf, sizeof buf, t == 'e' ? "%.*e" : "%.*E", p < 0 ? 6 : p, a);
    body = buf;
  } else if (t == 'f' || t == 'F' || t == '%') {
    std::snprintf(buf, sizeof buf, "%.*f", p < 0 ? 6 : p, t == '%' ? a * 100 : a);
    body = buf;
    if (t == '%') body += "%";
  } else {
    throw_render(std::string("Unknown format code '") + t + "' for object of type 'float'");
  }
  if (sp.grouping) {
    size_t end = body.find_first_not_of("0123456789");
    body = group_digits(body.substr(0, end), sp.grouping, 3) +
           (end == std::string::npos ? "" : body.substr(end));
  }
  return pad(body, sign_of(neg, sp.sign), sp, '>');
}

}  // namespace

std::string format_value(const Value& v, const std::string& spec_text) {
  if (spec_text.empty()) return to_str(v);
  Spec sp = parse_spec(spec_text);
  if (v.is_int() || v.is_bool()) {
    if (sp.type && std::string("eEfFgG%").find(sp.type) != std::string::npos)
      return format_float(v.as_float(), sp);
    return format_int(v.as_int(), sp);
  }
  if (v.is_float()) {
    if (sp.type && std::string("eEfFgGn%").find(sp.type) == std::string::npos) {
      throw_render(std::string("Unknown format code '") + sp.type + "' for object of type 'float'");
    }
    return format_float(v.as_float(), sp);
  }
  if (v.is_string()) {
    if (sp.type && sp.type != 's')
      throw_render(std::string("Unknown format code '") + sp.type + "' for object of type 'str'");
    if (sp.sign != '-') throw_render("Sign not allowed in string format specifier");
    if (sp.align == '=') throw_render("'=' alignment not allowed in string format specifier");
    std::string s = v.str();
    if (sp.precision >= 0) {
      std::vector<char32_t> cps = utf8_decode(s);
      s = utf8_encode(cps, 0, std::min(cps.size(), static_cast<size_t>(sp.precision)));
    }
    return pad(s, "", sp, '<');
  }
  v.check_defined();
  throw_render("unsupported format string passed to " + type_name(v) + ".__format__");
}

namespace {

// Field numbering state shared by a format string and the fields nested in its specs.
struct Numbering {
  size_t next = 0;
  bool used_auto = false;
  bool used_manual = false;
};

std::string format_fields(const std::string& fmt, const Args& a, Numbering& num, int depth) {
  if (depth > 2) throw_render("Max string recursion exceeded");
  std::string out;
  size_t& auto_idx = num.next;
  bool& used_auto = num.used_auto;
  bool& used_manual = num.used_manual;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      throw_render("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    // Find the matching '}' (a spec may hold one level of nested {fields}).
    size_t j = i + 1;
    int depth = 1;
    while (j < fmt.size() && depth > 0) {
      if (fmt[j] == '{')
        ++depth;
      else if (fmt[j] == '}')
        --depth;
      if (depth > 0) ++j;
    }
    if (j >= fmt.size()) throw_render("expected '}' before end of string");
    std::string field = fmt.substr(i + 1, j - i - 1);
    i = j;
    std::string spec, conv;
    size_t colon = std::string::npos, bang = std::string::npos;
    for (size_t k = 0, br = 0; k < field.size(); ++k) {
      if (field[k] == '[')
        ++br;
      else if (field[k] == ']' && br)
        --br;
      else if (!br && field[k] == '!' && bang == std::string::npos && colon == std::string::npos)
        bang = k;
      else if (!br && field[k] == ':' && colon == std::string::npos)
        colon = k;
    }
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
      if (conv != "r" && conv != "s" && conv != "a")
        throw_render("Unknown conversion specifier " + conv);
    }
    size_t k = 0;
    while (k < field.size() && field[k] != '.' && field[k] != '[') ++k;
    std::string head = field.substr(0, k);
    Value v;
    if (head.empty()) {
      if (used_manual)
        throw_render("cannot switch from manual field specification to automatic field numbering");
      used_auto = true;
      if (auto_idx >= a.pos.size()) throw_render("tuple index out of range");
      v = a.pos[auto_idx++];
    } else if (std::all_of(head.begin(), head.end(),
                           [](char ch) { return ch >= '0' && ch <= '9'; })) {
      if (used_auto)
        throw_render("cannot switch from automatic field numbering to manual field specification");
      used_manual = true;
      size_t idx = head.size() > 6 ? SIZE_MAX : std::stoul(head);
      if (idx >= a.pos.size()) throw_render("tuple index out of range");
      v = a.pos[idx];
    } else {
      const Value* kv = nullptr;
      for (const auto& [name, val] : a.kw) {
        if (name == head) kv = &val;
      }
      if (!kv) throw_render("'" + head + "'");  // Python: KeyError: 'name'
      v = *kv;
    }
    while (k < field.size()) {
      if (field[k] == '.') {
        size_t e = k + 1;
        while (e < field.size() && field[e] != '.' && field[e] != '[') ++e;
        if (e == k + 1) throw_render("Empty attribute in format string");
        v = get_attr(v, field.substr(k + 1, e - k - 1));
        k = e;
      } else {
        size_t e = field.find(']', k);
        if (e == std::string::npos) throw_render("Missing ']' in format string");
        std::string key = field.substr(k + 1, e - k - 1);
        bool digits =
            !key.empty() && key.size() < 18 &&
            std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        v = get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(key))) : Value(key));
        k = e + 1;
      }
    }
    if (spec.find('{') != std::string::npos) spec = format_fields(spec, a, num, depth + 1);
    if (conv == "r" || conv == "a")
      v = Value(repr(v));
    else if (conv == "s")
      v = Value(to_str(v));
    if (v.is_undefined() && !spec.empty()) v.check_defined();
    out += format_value(v, spec);
    if (out.size() > kMaxValueBytes)
      throw_limit("format() result exceeds " + std::to_string(kMaxValueBytes) + " bytes");
  }
  return out;
}

}  // namespace

std::string str_format(const std::string& fmt, const Args& a) {
  Numbering num;
  return format_fields(fmt, a, num, 0);
}

std::string percent_format(const std::string& fmt, const Value& rhs) {
  std::vector<Value> args;
  const bool mapping = rhs.is_dict();
  if (rhs.is_list() && rhs.list().tuple) {
    args = rhs.list().items;
  } else {
    args.push_back(rhs);
  }
  size_t next = 0;
  bool used_mapping = false;
  auto take = [&]() -> Value {
    if (mapping && used_mapping) throw_render("format requires a mapping");
    if (next >= args.size()) throw_render("not enough arguments for format string");
    return args[next++];
  };
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) throw_render("incomplete format");
    Value v;
    bool have = false;
    if (fmt[i] == '(') {
      size_t e = fmt.find(')', i);
      if (e == std::string::npos) throw_render("incomplete format key");
      if (!mapping) throw_render("format requires a mapping");
      const Value* x = rhs.dict().find(std::string_view(fmt).substr(i + 1, e - i - 1));
      if (!x) throw_render("'" + fmt.substr(i + 1, e - i - 1) + "'");
      v = *x;
      have = true;
      used_mapping = true;
      i = e + 1;
    }
    Spec sp;
    sp.align = '>';
    for (; i < fmt.size(); ++i) {
      char f = fmt[i];
      if (f == '-')
        sp.align = '<';
      else if (f == '+')
        sp.sign = '+';
      else if (f == ' ')
        sp.sign = sp.sign == '+' ? '+' : ' ';
      else if (f == '#')
        sp.alt = true;
      else if (f == '0')
        sp.zero = true;
      else
        break;
    }
    if (i < fmt.size() && fmt[i] == '*') {
      Value w = take();
      if (!w.is_int()) throw_render("* wants int");
      sp.width = checked_width(w.as_int(), "format width");
      ++i;
    } else {
      sp.width = parse_number(fmt, i);
    }
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      if (i < fmt.size() && fmt[i] == '*') {
        Value w = take();
        if (!w.is_int()) throw_render("* wants int");
        sp.precision = static_cast<int>(std::clamp<int64_t>(w.as_int(), 0, 1000));
        ++i;
      } else {
        sp.precision = static_cast<int>(std::min<size_t>(parse_number(fmt, i), 1000));
      }
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) throw_render("incomplete format");
    char t = fmt[i];
    if (t == '%') {
      out += '%';
      continue;
    }
    if (!have) v = take();
    if (sp.zero && sp.align == '>') {
      sp.fill = '0';
      sp.align = '=';
    }
    std::string piece;
    if (t == 's' || t == 'r' || t == 'a') {
      std::string s = t == 's' ? to_str(v) : repr(v);
      if (sp.precision >= 0) {
        std::vector<char32_t> cps = utf8_decode(s);
        s = utf8_encode(cps, 0, std::min(cps.size(), static_cast<size_t>(sp.precision)));
      }
      Spec ps = sp;
      ps.fill = ' ';
      if (ps.align == '=') ps.align = '>';
      piece = pad(s, "", ps, '>');
    } else if (t == 'd' || t == 'i' || t == 'u' || t == 'x' || t == 'X' || t == 'o') {
      if (!v.is_number()) {
        throw_render(std::string("%") + t + " format: " +
                     (t == 'd' || t == 'i' || t == 'u' ? "a real number" : "an integer") +
                     " is required, not " + type_name(v));
      }
      if (v.is_float() && t != 'd' && t != 'i' && t != 'u') {
        throw_render(std::string("%") + t + " format: an integer is required, not float");
      }
      int64_t n = v.is_float() ? static_cast<int64_t>(std::trunc(v.as_float())) : v.as_int();
      Spec is = sp;
      is.type = t == 'i' || t == 'u' ? 'd' : t;
      int prec = is.precision;
      is.precision = -1;
      if (prec > 0) {  // %.3d pads the digits with zeros
        std::string digits =
            format_int(n < 0 ? -n : n, Spec{' ', 0, '-', false, false, 0, 0, -1, is.type});
        if (static_cast<int>(digits.size()) < prec)
          digits = std::string(static_cast<size_t>(prec) - digits.size(), '0') + digits;
        std::string prefix = sign_of(n < 0, is.sign);
        if (is.alt && is.type != 'd')
          prefix += is.type == 'o' ? "0o" : is.type == 'X' ? "0X" : "0x";
        piece = pad(digits, prefix, is, '>');
      } else {
        piece = format_int(n, is);
      }
    } else if (t == 'e' || t == 'E' || t == 'f' || t == 'F' || t == 'g' || t == 'G') {
      if (!v.is_number()) throw_render("must be real number, not " + type_name(v));
      Spec fs = sp;
      fs.type = t;
      if (fs.precision < 0) fs.precision = 6;
      piece = format_float(v.as_float(), fs);
    } else if (t == 'c') {
      std::string s;
      if (v.is_int()) {
        if (v.as_int() < 0 || v.as_int() >= 0x110000) throw_render("%c arg not in range(0x110000)");
        utf8_append(s, static_cast<char32_t>(v.as_int()));
      } else if (v.is_string() && utf8_length(v.str()) == 1)
        s = v.str();
      else
        throw_render("%c requires int or char");
      piece = pad(s, "", sp, '>');
    } else {
      throw_render(std::string("unsupported format character '") + t + "'");
    }
    out += piece;
    if (out.size() > kMaxValueBytes)
      throw_limit("% format result exceeds " + std::to_string(kMaxValueBytes) + " bytes");
  }
  if (!mapping && next < args.size())
    throw_render("not all arguments converted during string formatting");
  return out;
}

}  // namespace hearth::tmpl
