// Field access and validation for request bodies (JSON objects), shared by the request
// parsers of the OpenAI routes: every failure throws ApiException (400,
// invalid_request_error) whose message and `param` name the field by its full path
// ("messages[2].content", "input[0].call_id").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace hearth::server::json_fields {

// Throws the 400 with this message and param.
[[noreturn]] void bad(const std::string& message, const std::string& param);
// "'PATH' must be WANT, got TYPE" (param PATH).
[[noreturn]] void bad_type(const std::string& path, const char* want, const nlohmann::ordered_json& got);

// A number as %g.
std::string fmt_number(double v);

// The value of `key`, or nullptr when absent or null (null means unset).
const nlohmann::ordered_json* field(const nlohmann::ordered_json& obj, const char* key);

double get_number(const nlohmann::ordered_json& v, const std::string& path);
// An integer (a float with an integral value is accepted); above INT64_MAX up to
// UINT64_MAX saturates, anything beyond 64 bits is a 400.
int64_t get_integer(const nlohmann::ordered_json& v, const std::string& path);
bool get_bool(const nlohmann::ordered_json& v, const std::string& path);
std::string get_string(const nlohmann::ordered_json& v, const std::string& path);
// A number in [lo, hi] (lo excluded when lo_open).
float number_in(const nlohmann::ordered_json& v, const std::string& path, double lo, double hi, bool lo_open = false);
// An integer in [lo, hi].
int32_t int_in(const nlohmann::ordered_json& v, const std::string& path, int64_t lo, int64_t hi);
int32_t saturate_i32(int64_t v);

}  // namespace hearth::server::json_fields
