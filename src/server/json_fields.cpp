// Request-field validation shared by the OpenAI-shaped parsers; see json_fields.h.
#include "server/json_fields.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

#include "server/openai_protocol.h"

namespace hearth::server::json_fields {

using json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& message, const std::string& param) {
  throw ApiException(invalid_request(message, param));
}

[[noreturn]] void bad_type(const std::string& path, const char* want, const json& got) {
  bad("'" + path + "' must be " + want + ", got " + got.type_name(), path);
}

std::string fmt_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The value of `key`, or nullptr when absent or null (null means unset).
const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

double get_number(const json& v, const std::string& path) {
  if (!v.is_number()) bad_type(path, "a number", v);
  return v.get<double>();
}

// An integer (a float with an integral value is accepted); above INT64_MAX up to
// UINT64_MAX saturates, anything beyond 64 bits is a 400.
int64_t get_integer(const json& v, const std::string& path) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d)) {
      // A JSON integer too big for 64 bits arrives as a float: out of range, not saturated.
      if (d >= 9.2e18 || d <= -9.2e18) {
        bad("'" + path + "' is out of range: " + fmt_number(d) + " does not fit in a 64-bit integer", path);
      }
      return static_cast<int64_t>(d);
    }
    bad("'" + path + "' must be an integer, got " + fmt_number(d), path);
  }
  bad_type(path, "an integer", v);
}

bool get_bool(const json& v, const std::string& path) {
  if (!v.is_boolean()) bad_type(path, "a boolean", v);
  return v.get<bool>();
}

std::string get_string(const json& v, const std::string& path) {
  if (!v.is_string()) bad_type(path, "a string", v);
  return v.get<std::string>();
}

// A number in [lo, hi] (lo excluded when lo_open).
float number_in(const json& v, const std::string& path, double lo, double hi, bool lo_open) {
  const double d = get_number(v, path);
  if (!(lo_open ? d > lo : d >= lo) || !(d <= hi)) {
    bad("'" + path + "' must be " + (lo_open ? "> " : "between ") + fmt_number(lo) +
            (lo_open ? " and <= " : " and ") + fmt_number(hi) + ", got " + fmt_number(d),
        path);
  }
  return static_cast<float>(d);
}

int32_t int_in(const json& v, const std::string& path, int64_t lo, int64_t hi) {
  const int64_t i = get_integer(v, path);
  if (i < lo || i > hi) {
    bad("'" + path + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
            ", got " + std::to_string(i),
        path);
  }
  return static_cast<int32_t>(i);
}

int32_t saturate_i32(int64_t v) {
  return static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX));
}

}  // namespace hearth::server::json_fields
