// Chat-template globals and JSON conversion; see chat_template.h.
#include "template/chat_template.h"

#include <cstdio>

#include "core/error.h"

namespace hearth::tmpl {

std::tm parse_iso_datetime(const std::string& text) {
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  char sep = 0;
  int n = std::sscanf(text.c_str(), "%4d-%2d-%2d%c%2d:%2d:%2d", &y, &mo, &d, &sep, &h, &mi, &s);
  if (n < 3 || (n > 3 && n < 6) || (n >= 4 && sep != 'T' && sep != ' ') || mo < 1 || mo > 12 || d < 1 || d > 31 ||
      h > 23 || mi > 59 || s > 60) {
    fail(ErrorKind::kInvalidInput, "template", "bad date-time '" + text + "' (expected YYYY-MM-DDTHH:MM:SS)");
  }
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  tm.tm_isdst = -1;
  std::tm copy = tm;
  std::time_t t = timegm(&copy);  // normalizes and fills tm_wday / tm_yday
  gmtime_r(&t, &tm);
  return tm;
}

namespace {

// `depth`: the level of the container about to be converted (the top level is 1).
void check_depth(int depth) {
  if (depth > kMaxJsonDepth) {
    fail(ErrorKind::kInvalidInput, "template",
         "input nests arrays/objects deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
}

Value to_value(const nlohmann::ordered_json& j, int depth) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      auto u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value(static_cast<int64_t>(u)) : Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      check_depth(depth);
      std::vector<Value> items;
      for (const auto& x : j) items.push_back(to_value(x, depth + 1));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      check_depth(depth);
      Value d = Value::make_dict();
      for (const auto& [k, v] : j.items()) d.dict().set(k, to_value(v, depth + 1));
      return d;
    }
    default: return Value::none();
  }
}

}  // namespace

Value json_to_value(const nlohmann::ordered_json& j) { return to_value(j, 1); }

std::string ChatTemplate::apply(const nlohmann::ordered_json& input, const ChatRenderOptions& options) const {
  if (!input.is_object()) fail(ErrorKind::kInvalidInput, "template", "input must be a JSON object");
  Value ctx = json_to_value(input);
  Dict& d = ctx.dict();
  if (!d.find("tools")) d.set("tools", Value::none());
  if (!d.find("documents")) d.set("documents", Value::none());
  if (!d.find("add_generation_prompt")) d.set("add_generation_prompt", Value(false));
  if (!d.find("raise_exception")) {
    d.set("raise_exception", Value::func("raise_exception", [](Args& a) -> Value {
            throw_render(a.pos.empty() ? std::string() : to_str(a.pos[0]));
          }));
  }
  if (!d.find("strftime_now")) {
    std::tm now{};
    if (options.now) {
      now = *options.now;
    } else {
      std::time_t t = std::time(nullptr);
      localtime_r(&t, &now);
    }
    d.set("strftime_now", Value::func("strftime_now", [now](Args& a) -> Value {
            if (a.pos.empty() || !a.pos[0].is_string()) throw_render("strftime_now() needs a format string");
            char buf[512];
            size_t n = std::strftime(buf, sizeof buf, a.pos[0].str().c_str(), &now);
            return Value(std::string(buf, n));
          }));
  }
  return template_.render(ctx, options.limits);
}

}  // namespace hearth::tmpl
