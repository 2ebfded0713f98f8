// Request parsing and validation of the Anthropic Messages protocol; see
// anthropic_protocol.h.
#include <cmath>
#include <cstdio>
#include <set>
#include <stdexcept>

#include "server/anthropic_protocol.h"
#include "server/media_fetch.h"

namespace hearth::server {

using json = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& message, const std::string& path) {
  throw ApiException(invalid_request(message, path));
}

[[noreturn]] void bad_type(const std::string& path, const char* want, const json& got) {
  bad("'" + path + "' must be " + want + ", got " + got.type_name(), path);
}

std::string idx(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

std::string fmt_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The value of `key`, or nullptr when absent or null (null means absent).
const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

const json& required(const json& obj, const char* key, const std::string& path) {
  const json* v = field(obj, key);
  if (v == nullptr) bad("'" + path + "' is required", path);
  return *v;
}

std::string get_string(const json& v, const std::string& path) {
  if (!v.is_string()) bad_type(path, "a string", v);
  return v.get<std::string>();
}

bool get_bool(const json& v, const std::string& path) {
  if (!v.is_boolean()) bad_type(path, "a boolean", v);
  return v.get<bool>();
}

// An integer (a float with an integral value is accepted) in [lo, hi].
int64_t int_in(const json& v, const std::string& path, int64_t lo, int64_t hi) {
  int64_t i = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    i = u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    i = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d))
      bad("'" + path + "' must be an integer, got " + fmt_number(d), path);
    i = d >= 9.2e18 ? INT64_MAX : d <= -9.2e18 ? INT64_MIN : static_cast<int64_t>(d);
  } else {
    bad_type(path, "an integer", v);
  }
  if (i < lo || i > hi) {
    bad("'" + path + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
            ", got " + std::to_string(i),
        path);
  }
  return i;
}

// A number in [lo, hi] (lo excluded when lo_open).
float number_in(const json& v, const std::string& path, double lo, double hi,
                bool lo_open = false) {
  if (!v.is_number()) bad_type(path, "a number", v);
  const double d = v.get<double>();
  if (!(lo_open ? d > lo : d >= lo) || !(d <= hi)) {
    bad("'" + path + "' must be " + (lo_open ? "> " : "between ") + fmt_number(lo) +
            (lo_open ? " and <= " : " and ") + fmt_number(hi) + ", got " + fmt_number(d),
        path);
  }
  return static_cast<float>(d);
}

// The "type" of a content block at `path` (an object).
std::string block_type(const json& block, const std::string& path) {
  if (!block.is_object()) bad_type(path, "a content block (an object)", block);
  return get_string(required(block, "type", path + ".type"), path + ".type");
}

[[noreturn]] void unsupported_block(const std::string& type, const std::string& path,
                                    const char* where, const char* allowed) {
  if (type == "image") bad("'" + path + "': images are not allowed in " + where, path + ".type");
  if (type == "document") bad("'" + path + "': documents are not supported yet", path + ".type");
  bad("'" + path + ".type' '" + type + "' is not supported in " + where + " (allowed: " + allowed +
          ")",
      path + ".type");
}

void append_text(std::string& out, const std::string& text) {
  if (!out.empty()) out += '\n';
  out += text;
}

// An image block {"type": "image", "source": {"type": "base64", "media_type", "data"} |
// {"type": "url", "url"}} as an image_part (base64 data checked here, so its errors name
// the offset in "data"; it travels on as a data: URL).
json parse_image(const json& b, const std::string& path) {
  const std::string sp = path + ".source";
  const json& source = required(b, "source", sp);
  if (!source.is_object()) bad_type(sp, "an object", source);
  const std::string type = get_string(required(source, "type", sp + ".type"), sp + ".type");
  if (type == "url") {
    return image_part(get_string(required(source, "url", sp + ".url"), sp + ".url"), path, sp + ".url");
  }
  if (type != "base64") {
    bad("'" + sp + ".type' '" + type + "' is not supported (base64, url)", sp + ".type");
  }
  const std::string media_type = get_string(required(source, "media_type", sp + ".media_type"), sp + ".media_type");
  if (media_type.rfind("image/", 0) != 0) {
    bad("'" + sp + ".media_type' must be an image type (image/png, image/jpeg, image/gif, image/webp), got '" +
            media_type + "'",
        sp + ".media_type");
  }
  const std::string data = get_string(required(source, "data", sp + ".data"), sp + ".data");
  if (data.empty()) bad("'" + sp + ".data' is empty", sp + ".data");
  try {
    decode_base64(data);
  } catch (const std::invalid_argument& e) {
    bad(sp + ".data: invalid base64: " + e.what(), sp + ".data");
  }
  return image_part("data:" + media_type + ";base64," + data, path, sp);
}

// Text and image blocks gathered into one message content: a string while there is only
// text (blocks joined by "\n"), else the parts in order.
struct ContentBuilder {
  std::string text;
  json parts = json::array();
  bool images = false;
  void add_text(const std::string& t) {
    append_text(text, t);
    parts.push_back(json{{"type", "text"}, {"text", t}});
  }
  void add_image(json part) {
    parts.push_back(std::move(part));
    images = true;
  }
  bool empty() const { return parts.empty(); }
  json content() const { return images ? parts : json(text); }
};

// System text: a string or an array of text blocks (joined by "\n").
std::string parse_system(const json& v, const std::string& path) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad_type(path, "a string or an array of text blocks", v);
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = idx(path, i);
    const std::string type = block_type(v[i], p);
    if (type != "text") unsupported_block(type, p, "system content", "text");
    append_text(out, get_string(required(v[i], "text", p + ".text"), p + ".text"));
  }
  return out;
}

// A tool_result's content: a string, or text and image blocks (text joined by "\n"; the
// parts in order when there is an image).
void parse_tool_result_content(const json& v, const std::string& path, ContentBuilder& out) {
  if (v.is_string()) {
    out.add_text(v.get<std::string>());
    return;
  }
  if (!v.is_array()) bad_type(path, "a string or an array of content blocks", v);
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = idx(path, i);
    const std::string type = block_type(v[i], p);
    if (type == "image") {
      out.add_image(parse_image(v[i], p));
    } else if (type == "text") {
      out.add_text(get_string(required(v[i], "text", p + ".text"), p + ".text"));
    } else {
      unsupported_block(type, p, "tool_result content", "text, image");
    }
  }
}

// A user message: text and image blocks gather into user messages, each tool_result block
// becomes a tool message, in the order written.
void parse_user(const json& content, const std::string& path, json& out) {
  if (content.is_string()) {
    out.push_back(json{{"role", "user"}, {"content", content.get<std::string>()}});
    return;
  }
  if (!content.is_array()) bad_type(path, "a string or an array of content blocks", content);
  ContentBuilder user;
  auto flush = [&] {
    if (!user.empty()) out.push_back(json{{"role", "user"}, {"content", user.content()}});
    user = ContentBuilder();
  };
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string p = idx(path, i);
    const json& b = content[i];
    const std::string type = block_type(b, p);
    if (type == "text") {
      user.add_text(get_string(required(b, "text", p + ".text"), p + ".text"));
    } else if (type == "image") {
      user.add_image(parse_image(b, p));
    } else if (type == "tool_result") {
      flush();
      const std::string id =
          get_string(required(b, "tool_use_id", p + ".tool_use_id"), p + ".tool_use_id");
      ContentBuilder result;
      if (const json* c = field(b, "content")) parse_tool_result_content(*c, p + ".content", result);
      json body = result.content();
      if (const json* e = field(b, "is_error"); e != nullptr && get_bool(*e, p + ".is_error")) {
        if (body.is_string()) {
          const std::string text = body.get<std::string>();
          body = text.empty() ? "Error" : "Error: " + text;
        } else {
          body.insert(body.begin(), json{{"type", "text"}, {"text", "Error: "}});
        }
      }
      out.push_back(json{{"role", "tool"}, {"tool_call_id", id}, {"content", std::move(body)}});
    } else {
      unsupported_block(type, p, "a user message", "text, image, tool_result");
    }
  }
  if (!user.empty() || content.empty()) {
    if (user.empty()) user.add_text("");
    flush();
  }
}

// An assistant message: text blocks -> content, tool_use blocks -> tool_calls (arguments
// as an object), thinking blocks -> reasoning_content; redacted thinking is dropped.
json parse_assistant(const json& content, const std::string& path) {
  json msg = json::object();
  msg["role"] = "assistant";
  if (content.is_string()) {
    msg["content"] = content.get<std::string>();
    return msg;
  }
  if (!content.is_array()) bad_type(path, "a string or an array of content blocks", content);
  std::string text, reasoning;
  json calls = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string p = idx(path, i);
    const json& b = content[i];
    const std::string type = block_type(b, p);
    if (type == "text") {
      append_text(text, get_string(required(b, "text", p + ".text"), p + ".text"));
    } else if (type == "tool_use") {
      const std::string id = get_string(required(b, "id", p + ".id"), p + ".id");
      const std::string name = get_string(required(b, "name", p + ".name"), p + ".name");
      json input = json::object();
      if (const json* in = field(b, "input")) {
        if (!in->is_object()) bad_type(p + ".input", "an object", *in);
        input = *in;
      }
      calls.push_back(json{
          {"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", input}}}});
    } else if (type == "thinking") {
      append_text(reasoning, get_string(required(b, "thinking", p + ".thinking"), p + ".thinking"));
    } else if (type != "redacted_thinking") {
      unsupported_block(type, p, "an assistant message",
                        "text, tool_use, thinking, redacted_thinking");
    }
  }
  msg["content"] = text;
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  return msg;
}

void parse_messages(const json& j, AnthropicRequest& r) {
  std::string system;
  if (const json* s = field(j, "system")) system = parse_system(*s, "system");
  const json& messages = required(j, "messages", "messages");
  if (!messages.is_array()) bad_type("messages", "an array", messages);
  json turns = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string p = idx("messages", i);
    const json& m = messages[i];
    if (!m.is_object()) bad_type(p, "an object", m);
    const std::string role = get_string(required(m, "role", p + ".role"), p + ".role");
    const json& content = required(m, "content", p + ".content");
    if (role == "user") {
      parse_user(content, p + ".content", turns);
    } else if (role == "assistant") {
      turns.push_back(parse_assistant(content, p + ".content"));
    } else if (role == "system") {  // agents send these; templates want one system message first
      const std::string text = parse_system(content, p + ".content");
      if (!system.empty() && !text.empty()) system += "\n\n";
      system += text;
    } else {
      bad("'" + p + ".role' must be 'user' or 'assistant' (or 'system'), got '" + role + "'",
          p + ".role");
    }
  }
  if (turns.empty())
    bad("'messages' must contain at least one user or assistant message", "messages");
  const json& last = turns.back();
  if (turns.size() > 1 && last["role"] == "assistant" && !last.contains("tool_calls") &&
      !last.contains("reasoning_content")) {
    r.prefill = last["content"].get<std::string>();
    turns.erase(turns.size() - 1);
  }
  if (!system.empty()) r.messages.push_back(json{{"role", "system"}, {"content", system}});
  for (auto& t : turns) r.messages.push_back(std::move(t));
}

// Tools marked defer_loading (loaded on demand by a tool search, e.g. Claude Code's
// DeferredToolPlaceholder) are checked and then left out: not in the prompt, not callable,
// not nameable by tool_choice.
void parse_tools(const json& j, AnthropicRequest& r) {
  std::set<std::string> names, deferred;
  if (const json* tools = field(j, "tools")) {
    if (!tools->is_array()) bad_type("tools", "an array", *tools);
    r.tools = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string p = idx("tools", i);
      const json& t = (*tools)[i];
      if (!t.is_object()) bad_type(p, "an object", t);
      if (const json* type = field(t, "type")) {
        const std::string ty = get_string(*type, p + ".type");
        if (ty != "custom") {
          bad("'" + p + ".type' '" + ty +
                  "' is one of Anthropic's server or client tools; hearth serve takes custom tools "
                  "(name, "
                  "description, input_schema) only",
              p + ".type");
        }
      }
      const std::string name = get_string(required(t, "name", p + ".name"), p + ".name");
      if (name.empty()) bad("'" + p + ".name' must not be empty", p + ".name");
      if (names.count(name) != 0 || deferred.count(name) != 0)
        bad("'" + p + ".name' '" + name + "' is used by an earlier tool", p + ".name");
      const json& schema = required(t, "input_schema", p + ".input_schema");
      if (!schema.is_object()) bad_type(p + ".input_schema", "an object (a JSON schema)", schema);
      if (const json* st = field(schema, "type"); st != nullptr && *st != "object") {
        bad("'" + p + ".input_schema.type' must be 'object'", p + ".input_schema.type");
      }
      if (const json* d = field(t, "defer_loading"); d != nullptr && get_bool(*d, p + ".defer_loading")) {
        deferred.insert(name);
        continue;
      }
      names.insert(name);
      json fn = json::object();
      fn["name"] = name;
      if (const json* d = field(t, "description"))
        fn["description"] = get_string(*d, p + ".description");
      fn["parameters"] = schema;
      r.tools.push_back(json{{"type", "function"}, {"function", std::move(fn)}});
    }
  }
  if (const json* tc = field(j, "tool_choice")) {
    if (!tc->is_object()) bad_type("tool_choice", "an object", *tc);
    const std::string type =
        get_string(required(*tc, "type", "tool_choice.type"), "tool_choice.type");
    if (type == "auto") {
      r.tool_choice = "auto";
    } else if (type == "none") {
      r.tool_choice = "none";
    } else if (type == "any" || type == "tool") {
      if (names.empty()) {
        bad("'tool_choice.type' '" + type + "' needs 'tools'" +
                (deferred.empty() ? "" : " that are loaded (all have defer_loading)"),
            "tool_choice.type");
      }
      if (type == "any") {
        r.tool_choice = "required";
      } else {
        const std::string name =
            get_string(required(*tc, "name", "tool_choice.name"), "tool_choice.name");
        if (deferred.count(name) != 0)
          bad("'tool_choice.name' '" + name + "' is a tool with defer_loading: it is not loaded",
              "tool_choice.name");
        if (names.count(name) == 0)
          bad("'tool_choice.name' '" + name + "' is not one of 'tools'", "tool_choice.name");
        r.tool_choice = json{{"type", "function"}, {"function", {{"name", name}}}};
      }
    } else {
      bad("'tool_choice.type' must be one of auto, any, tool, none, got '" + type + "'",
          "tool_choice.type");
    }
    if (const json* d = field(*tc, "disable_parallel_tool_use")) {
      r.parallel_tool_calls = !get_bool(*d, "tool_choice.disable_parallel_tool_use");
    }
  }
}

void parse_sampling(const json& j, AnthropicRequest& r, AnthropicEndpoint endpoint) {
  if (endpoint == AnthropicEndpoint::kMessages) {
    r.max_tokens = static_cast<int32_t>(
        int_in(required(j, "max_tokens", "max_tokens"), "max_tokens", 1, INT32_MAX));
  } else {
    return;  // count_tokens: nothing is generated
  }
  engine::SamplerParams& s = r.sampler;
  if (const json* v = field(j, "temperature")) s.temperature = number_in(*v, "temperature", 0, 1);
  if (const json* v = field(j, "top_p")) s.top_p = number_in(*v, "top_p", 0, 1, true);
  if (const json* v = field(j, "top_k"))
    s.top_k = static_cast<int32_t>(int_in(*v, "top_k", 0, INT32_MAX));
  if (const json* v = field(j, "stop_sequences")) {
    if (!v->is_array()) bad_type("stop_sequences", "an array of strings", *v);
    constexpr size_t kMaxStops = 64;
    if (v->size() > kMaxStops) {
      bad("'stop_sequences' may hold at most " + std::to_string(kMaxStops) + " strings, got " +
              std::to_string(v->size()),
          "stop_sequences");
    }
    for (size_t i = 0; i < v->size(); ++i) {
      std::string s_i = get_string((*v)[i], idx("stop_sequences", i));
      if (s_i.empty())
        bad("'" + idx("stop_sequences", i) + "' must not be empty", idx("stop_sequences", i));
      r.stop_sequences.push_back(std::move(s_i));
    }
  }
  if (const json* v = field(j, "stream")) r.stream = get_bool(*v, "stream");
  if (const json* v = field(j, "speculative")) r.speculative = get_bool(*v, "speculative");
}

// Anthropic's rule: no `thinking` field is no thinking (a template that thinks by default,
// like Qwen3.5's, is told not to).
void parse_thinking(const json& j, AnthropicRequest& r) {
  const json* t = field(j, "thinking");
  if (t == nullptr) {
    r.chat_template_kwargs["enable_thinking"] = false;
    return;
  }
  if (!t->is_object()) bad_type("thinking", "an object", *t);
  const std::string type = get_string(required(*t, "type", "thinking.type"), "thinking.type");
  if (type == "enabled") {
    r.chat_template_kwargs["enable_thinking"] = true;
    r.thinking_budget =
        static_cast<int32_t>(int_in(required(*t, "budget_tokens", "thinking.budget_tokens"),
                                    "thinking.budget_tokens", 1, INT32_MAX));
  } else if (type == "adaptive") {
    r.chat_template_kwargs["enable_thinking"] = true;
  } else if (type == "disabled") {
    r.chat_template_kwargs["enable_thinking"] = false;
  } else {
    bad("'thinking.type' must be one of enabled, adaptive, disabled, got '" + type + "'",
        "thinking.type");
  }
}

// output_config.format (and the older top-level output_format): a JSON schema the answer
// must follow, kept as an OpenAI response_format.
void parse_output_format(const json& j, AnthropicRequest& r) {
  const json* format = nullptr;
  std::string path;
  if (const json* oc = field(j, "output_config")) {
    if (!oc->is_object()) bad_type("output_config", "an object", *oc);
    format = field(*oc, "format");
    path = "output_config.format";
  }
  if (format == nullptr) {
    format = field(j, "output_format");
    path = "output_format";
  }
  if (format == nullptr) return;
  if (!format->is_object()) bad_type(path, "an object", *format);
  const std::string type = get_string(required(*format, "type", path + ".type"), path + ".type");
  if (type != "json_schema")
    bad("'" + path + ".type' must be 'json_schema', got '" + type + "'", path + ".type");
  const json& schema = required(*format, "schema", path + ".schema");
  if (!schema.is_object()) bad_type(path + ".schema", "an object (a JSON schema)", schema);
  r.response_format =
      json{{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", schema}}}};
}

}  // namespace

AnthropicRequest parse_anthropic_request(std::string_view body, AnthropicEndpoint endpoint) {
  const json j = parse_json_object(body);  // the OpenAI parser's: same limits and messages
  AnthropicRequest r;
  if (const json* v = field(j, "model")) r.model = get_string(*v, "model");
  parse_messages(j, r);
  parse_tools(j, r);
  parse_sampling(j, r, endpoint);
  parse_thinking(j, r);
  parse_output_format(j, r);
  return r;
}

json anthropic_template_extra(const AnthropicRequest& r) {
  json extra = json::object();
  if (!r.tools.is_null() && !r.tools.empty()) extra["tools"] = r.tools;
  for (const auto& [k, v] : r.chat_template_kwargs.items()) extra[k] = v;
  return extra;
}

}  // namespace hearth::server
