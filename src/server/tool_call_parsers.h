// The tool-call parsers behind OutputParser (chat_output.h), one per syntax, each fed the
// bytes after its start marker one at a time. A parser is "committed" once it has
// reported a call's name: from then on it never fails, it closes what it has (a
// truncated argument object is healed into valid JSON) and hands back the bytes it
// cannot use, which become content. Before that, kFail sends everything since the
// marker back to the text it came from. Internal to the server layer.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/json_stream.h"

namespace hearth::server {

// What a call parser reports, in order: begin, args fragments (concatenated: one JSON
// object), end; several calls may follow one another.
class CallSink {
 public:
  virtual ~CallSink() = default;
  virtual void begin(const std::string& name) = 0;
  virtual void args(const std::string& fragment) = 0;
  virtual void end() = 0;
};

class CallParser {
 public:
  enum class Status {
    kMore,  // byte consumed
    kDone,  // the call (or calls) ended; give_back() holds bytes (the last one included,
            //   when it was not used) to parse again as text
    kFail,  // not a call (never after the name is reported)
  };
  virtual ~CallParser() = default;
  virtual Status push(char c, CallSink& sink) = 0;
  // End of a feed(): send argument text that is ready (once per feed, not per byte).
  virtual void flush(CallSink& sink) = 0;
  // End of output while the call is open: committed parsers close their call(s).
  virtual void finish(CallSink& sink) = 0;
  virtual bool committed() const = 0;
  std::string take_give_back() { return std::move(give_back_); }

 protected:
  std::string give_back_;
};

// The value types a tool's JSON schema gives its parameters (from the request's tools).
class ToolSchemas {
 public:
  explicit ToolSchemas(const nlohmann::ordered_json& tools) : tools_(tools) {}
  // The schema of parameter `param` of function `name`; nullptr when unknown.
  const nlohmann::ordered_json* param_schema(const std::string& name,
                                             const std::string& param) const;

 private:
  const nlohmann::ordered_json& tools_;
};

// XML parameter text -> JSON by the parameter's schema (Qwen3-Coder / Qwen3.5 rules):
// string-like types stay raw, integer / number / boolean / null / object / array are
// parsed; an unknown parameter or a failed conversion stays a string.
nlohmann::ordered_json convert_param_value(const std::string& raw,
                                           const nlohmann::ordered_json* schema);
// True when the parameter is a plain string, not an enum (its value may be streamed as it comes).
bool param_is_string(const nlohmann::ordered_json* schema);

// After "<tool_call>": a Hermes JSON object or a Qwen XML <function=...> block, then
// "</tool_call>".
// `strict`: see OutputOptions::strict_calls.
std::unique_ptr<CallParser> make_tagged_call_parser(const ToolSchemas& schemas, bool strict = false);
// A bare JSON call object {"name", "arguments" | "parameters"} (Llama 3.x; the first
// byte is its '{' or whitespace before it).
std::unique_ptr<CallParser> make_json_object_call_parser();
// After "[TOOL_CALLS]": a JSON array of call objects, or NAME[ARGS]{...}
// (NAME[CALL_ID]ID[ARGS]{...}).
std::unique_ptr<CallParser> make_mistral_call_parser();

}  // namespace hearth::server
