// Request parsing and validation of the OpenAI protocol; see openai_protocol.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "server/json_fields.h"
#include "server/openai_protocol.h"
#include "server/response_format.h"
#include "template/chat_template.h"

namespace hearth::server {

using json = nlohmann::ordered_json;

namespace {

using namespace json_fields;  // bad, field, get_* (every error names the field's full path)

json parse_body(std::string_view body) {
  if (body.empty()) bad("the request body is empty (expected a JSON object)", "");
  // nlohmann's lexer takes a raw NUL byte for the end of input and would ignore what
  // follows; a raw NUL is never valid JSON (inside a string it is written \u0000).
  if (const size_t nul = body.find('\0'); nul != std::string_view::npos) {
    bad("the request body is not valid JSON (byte " + std::to_string(nul + 1) +
            "): a raw NUL byte (inside a string write it as \\u0000)",
        "");
  }
  // The callback sees each container open before it is filled: reject deep nesting
  // there, so neither this parse nor the chat template recurses without bound.
  std::string last_key;  // the key whose value is being parsed (for a number overflow's message)
  const json::parser_callback_t check_depth = [&last_key](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && parsed.is_string()) last_key = parsed.get<std::string>();
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth + 1 > tmpl::kMaxJsonDepth) {
      bad("the request body nests arrays/objects deeper than " +
              std::to_string(tmpl::kMaxJsonDepth) + " levels",
          "");
    }
    return true;
  };
  json j;
  try {
    j = json::parse(body.begin(), body.end(), check_depth);
  } catch (const json::parse_error& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line ..."
    const size_t cut = what.find("] ");
    if (cut != std::string::npos) what = what.substr(cut + 2);
    bad("the request body is not valid JSON (byte " + std::to_string(e.byte) + "): " + what, "");
  } catch (const json::out_of_range& e) {
    // A number beyond a double's range ("1e400"): nlohmann throws out_of_range.406,
    // naming the number but no offset; find it in the body for one.
    std::string what = e.what();
    const size_t q0 = what.find('\''), q1 = q0 == std::string::npos ? q0 : what.find('\'', q0 + 1);
    const std::string number = q1 == std::string::npos ? "" : what.substr(q0 + 1, q1 - q0 - 1);
    const size_t at = number.empty() ? std::string_view::npos : body.find(number);
    const std::string where = last_key.empty() ? std::string() : " in '" + last_key + "'";
    bad("the request body is not valid JSON" +
            (at == std::string_view::npos ? std::string() : " (byte " + std::to_string(at + 1) + ")") +
            ": the number " + number + where + " is out of range (beyond a 64-bit float)",
        last_key);
  }
  if (!j.is_object()) {
    bad(std::string("the request body must be a JSON object, got ") + j.type_name(), "");
  }
  return j;
}

// An image_url part's URL: {"image_url": {"url", "detail"?}} or {"image_url": "URL"}
// (some clients send the string form).
std::string image_url_of(const json& part, const std::string& part_path) {
  const std::string path = part_path + ".image_url";
  const json* v = field(part, "image_url");
  if (!v) bad("'" + path + "' is required", path);
  if (v->is_string()) return v->get<std::string>();
  if (!v->is_object()) bad_type(path, "an object {\"url\": ...} or a URL string", *v);
  const json* url = field(*v, "url");
  if (!url) bad("'" + path + ".url' is required", path + ".url");
  if (const json* d = field(*v, "detail")) {  // (the image is used at its own resolution)
    const std::string detail = get_string(*d, path + ".detail");
    if (detail != "auto" && detail != "low" && detail != "high") {
      bad("'" + path + ".detail' must be auto, low or high, got '" + detail + "'", path + ".detail");
    }
  }
  return get_string(*url, path + ".url");
}

// Content: a string, or an array of {"type": "text", "text": ...} parts (joined by "\n")
// and, in user and tool messages, {"type": "image_url", ...} parts: then `parts` gets
// every part in order (text parts as {"type": "text", "text"}, images as image_part()).
std::string parse_content(const json& v, const std::string& path, const std::string& role, json& parts) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad_type(path, "a string or an array of content parts", v);
  std::string out;
  json all = json::array();
  bool images = false;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string part_path = path + "[" + std::to_string(i) + "]";
    const json& part = v[i];
    if (!part.is_object()) bad_type(part_path, "an object", part);
    const json* type = field(part, "type");
    if (!type) bad("'" + part_path + ".type' is required", part_path + ".type");
    const std::string t = get_string(*type, part_path + ".type");
    if (t == "image_url") {
      if (role != "user" && role != "tool") {
        bad("'" + part_path + "': images are allowed in user and tool messages only, not in a " + role + " message",
            part_path + ".type");
      }
      all.push_back(image_part(image_url_of(part, part_path), part_path, part_path + ".image_url"));
      images = true;
      continue;
    }
    if (t != "text") {
      bad("'" + part_path + ".type' '" + t + "' is not supported (only 'text' and 'image_url' parts)",
          part_path + ".type");
    }
    const json* text = field(part, "text");
    if (!text) bad("'" + part_path + ".text' is required", part_path + ".text");
    if (i > 0) out += '\n';
    const std::string s = get_string(*text, part_path + ".text");
    out += s;
    all.push_back(json{{"type", "text"}, {"text", s}});
  }
  if (images) parts = std::move(all);
  return out;
}

// An assistant tool call in the history, normalized for the templates: `arguments`
// parsed into an object when the string holds one (a string that is not JSON stays a
// string: the template may print it; it must not turn into a 500).
json parse_history_call(const json& c, const std::string& path) {
  if (!c.is_object()) bad_type(path, "an object", c);
  json call = c;
  const json* fn = field(c, "function");
  if (!fn) bad("'" + path + ".function' is required", path + ".function");
  if (!fn->is_object()) bad_type(path + ".function", "an object", *fn);
  const json* name = field(*fn, "name");
  if (!name) bad("'" + path + ".function.name' is required", path + ".function.name");
  get_string(*name, path + ".function.name");
  if (!call.contains("type")) call["type"] = "function";
  json& args = call["function"]["arguments"];
  if (args.is_null()) {
    args = json::object();
  } else if (args.is_string()) {
    try {
      json parsed = json::parse(args.get<std::string>());
      if (parsed.is_object()) args = std::move(parsed);
    } catch (const json::exception&) {
    }
  } else if (!args.is_object()) {
    bad_type(path + ".function.arguments", "a JSON string or an object", args);
  }
  return call;
}

ChatMessage parse_message(const json& m, const std::string& path) {
  if (!m.is_object()) bad_type(path, "an object", m);
  ChatMessage msg;
  const json* role = field(m, "role");
  if (!role) bad("'" + path + ".role' is required", path + ".role");
  msg.role = get_string(*role, path + ".role");
  if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool" &&
      msg.role != "developer") {
    bad("'" + path + ".role' must be one of system, user, assistant, tool, developer, got '" +
            msg.role + "'",
        path + ".role");
  }
  if (const json* content = field(m, "content")) {
    msg.content = parse_content(*content, path + ".content", msg.role, msg.parts);
  } else if (msg.role != "assistant") {
    bad("'" + path + ".content' is required for role '" + msg.role + "'", path + ".content");
  }
  if (const json* name = field(m, "name")) msg.name = get_string(*name, path + ".name");
  if (const json* calls = field(m, "tool_calls")) {
    if (!calls->is_array()) bad_type(path + ".tool_calls", "an array", *calls);
    msg.tool_calls = json::array();
    for (size_t i = 0; i < calls->size(); ++i) {
      msg.tool_calls.push_back(parse_history_call((*calls)[i], path + ".tool_calls[" + std::to_string(i) + "]"));
    }
  }
  if (const json* id = field(m, "tool_call_id"))
    msg.tool_call_id = get_string(*id, path + ".tool_call_id");
  // Reasoning echoed back by agents: either name (llama.cpp / DeepSeek, vLLM).
  for (const char* key : {"reasoning", "reasoning_content"}) {
    if (const json* r = field(m, key)) msg.reasoning_content = get_string(*r, path + "." + key);
  }
  return msg;
}

// A tool definition: {"type": "function", "function": {"name", "description"?, "parameters"?}}.
json parse_tool(const json& t, const std::string& path) {
  if (!t.is_object()) bad_type(path, "an object", t);
  const json* type = field(t, "type");
  if (!type) bad("'" + path + ".type' is required", path + ".type");
  if (get_string(*type, path + ".type") != "function") {
    bad("'" + path + ".type' must be 'function', got '" + type->get<std::string>() + "'", path + ".type");
  }
  const json* fn = field(t, "function");
  if (!fn) bad("'" + path + ".function' is required", path + ".function");
  if (!fn->is_object()) bad_type(path + ".function", "an object", *fn);
  const json* name = field(*fn, "name");
  if (!name) bad("'" + path + ".function.name' is required", path + ".function.name");
  const std::string n = get_string(*name, path + ".function.name");
  if (n.empty() || n.size() > 256) {
    bad("'" + path + ".function.name' must be 1 to 256 characters", path + ".function.name");
  }
  if (const json* d = field(*fn, "description")) get_string(*d, path + ".function.description");
  if (const json* p = field(*fn, "parameters")) {
    if (!p->is_object()) bad_type(path + ".function.parameters", "an object (a JSON schema)", *p);
  }
  return t;
}

ToolChoice parse_tool_choice(const json& v, const json& tools) {
  ToolChoice tc;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "auto") {
      tc.mode = ToolChoice::Mode::kAuto;
    } else if (s == "none") {
      tc.mode = ToolChoice::Mode::kNone;
    } else if (s == "required") {
      tc.mode = ToolChoice::Mode::kRequired;
    } else {
      bad("'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", "
          "\"function\": {\"name\": ...}}, got '" + s + "'",
          "tool_choice");
    }
  } else if (v.is_object()) {
    const json* type = field(v, "type");
    if (!type || !type->is_string() || type->get<std::string>() != "function") {
      bad("'tool_choice.type' must be 'function'", "tool_choice.type");
    }
    const json* fn = field(v, "function");
    if (!fn || !fn->is_object()) bad("'tool_choice.function' must be an object with a name", "tool_choice.function");
    const json* name = field(*fn, "name");
    if (!name) bad("'tool_choice.function.name' is required", "tool_choice.function.name");
    tc.mode = ToolChoice::Mode::kNamed;
    tc.name = get_string(*name, "tool_choice.function.name");
  } else {
    bad_type("tool_choice", "a string or an object", v);
  }
  if (tc.mode == ToolChoice::Mode::kRequired || tc.mode == ToolChoice::Mode::kNamed) {
    if (!tools.is_array() || tools.empty()) {
      bad("'tool_choice' '" + std::string(tc.mode == ToolChoice::Mode::kNamed ? "function" : "required") +
              "' needs a non-empty 'tools' array",
          "tool_choice");
    }
  }
  if (tc.mode == ToolChoice::Mode::kNamed) {
    bool found = false;
    for (const json& t : tools) found = found || t["function"]["name"] == tc.name;
    if (!found) bad("'tool_choice' names function '" + tc.name + "', which is not in 'tools'", "tool_choice.function.name");
  }
  return tc;
}

// The fields both endpoints share.
void parse_common(const json& j, ParsedRequest& r) {
  if (const json* v = field(j, "model")) r.model = get_string(*v, "model");

  // max_completion_tokens (the newer name) wins over max_tokens.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (const json* v = field(j, key)) {
      const int64_t n = get_integer(*v, key);
      if (n < 1) bad(std::string("'") + key + "' must be >= 1, got " + std::to_string(n), key);
      r.max_tokens = saturate_i32(n);
    }
  }
  engine::SamplerParams& s = r.sampler;
  if (const json* v = field(j, "temperature")) s.temperature = number_in(*v, "temperature", 0, 2);
  if (const json* v = field(j, "top_p")) s.top_p = number_in(*v, "top_p", 0, 1, true);
  if (const json* v = field(j, "top_k")) {
    s.top_k = std::max<int32_t>(0, saturate_i32(get_integer(*v, "top_k")));  // <= 0: off
  }
  if (const json* v = field(j, "min_p")) s.min_p = number_in(*v, "min_p", 0, 1);
  if (const json* v = field(j, "presence_penalty")) {
    s.presence_penalty = number_in(*v, "presence_penalty", -2, 2);
  }
  if (const json* v = field(j, "frequency_penalty")) {
    s.frequency_penalty = number_in(*v, "frequency_penalty", -2, 2);
  }
  if (const json* v = field(j, "repetition_penalty")) {
    const double d = get_number(*v, "repetition_penalty");
    if (!(d > 0) || d > std::numeric_limits<float>::max()) {  // (a float must hold it)
      bad("'repetition_penalty' must be > 0, got " + fmt_number(d), "repetition_penalty");
    }
    s.repeat_penalty = static_cast<float>(d);
  }
  if (const json* v = field(j, "seed")) r.seed = static_cast<uint64_t>(get_integer(*v, "seed"));

  if (const json* v = field(j, "stop")) {
    if (v->is_string()) {
      if (!v->get_ref<const std::string&>().empty()) r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > 4) {
        bad("'stop' may hold at most 4 strings, got " + std::to_string(v->size()), "stop");
      }
      for (size_t i = 0; i < v->size(); ++i) {
        std::string s_i = get_string((*v)[i], "stop[" + std::to_string(i) + "]");
        if (!s_i.empty()) r.stop.push_back(std::move(s_i));
      }
    } else {
      bad_type("stop", "a string or an array of strings", *v);
    }
  }

  if (const json* v = field(j, "n")) {
    const int64_t n = get_integer(*v, "n");
    if (n != 1) {
      bad("'n' must be 1 (hearth serve returns one choice per request), got " + std::to_string(n),
          "n");
    }
  }
  if (const json* v = field(j, "stream")) r.stream = get_bool(*v, "stream");
  if (const json* v = field(j, "speculative")) r.speculative = get_bool(*v, "speculative");
  if (const json* v = field(j, "response_format")) r.constraint = parse_response_format(*v);
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) bad_type("stream_options", "an object", *v);
    if (const json* u = field(*v, "include_usage")) {
      r.include_usage = get_bool(*u, "stream_options.include_usage");
    }
  }
  // Fields that would silently change the result if ignored.
  if (const json* v = field(j, "logit_bias")) {
    if (!v->is_object()) bad_type("logit_bias", "an object", *v);
    if (!v->empty()) bad("'logit_bias' is not supported by hearth serve", "logit_bias");
  }
}

}  // namespace

engine::SamplerParams server_sampler_defaults() {
  engine::SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.0f;
  p.seed = 0;
  return p;
}

json parse_json_object(std::string_view body) { return parse_body(body); }

ParsedRequest parse_chat_request(std::string_view body) {
  const json j = parse_body(body);
  ParsedRequest r;
  r.chat = true;

  const json* messages = field(j, "messages");
  if (!messages) bad("'messages' is required", "messages");
  if (!messages->is_array()) bad_type("messages", "an array", *messages);
  if (messages->empty()) bad("'messages' must contain at least one message", "messages");
  r.messages.reserve(messages->size());
  for (size_t i = 0; i < messages->size(); ++i) {
    r.messages.push_back(parse_message((*messages)[i], "messages[" + std::to_string(i) + "]"));
  }
  if (const json* tools = field(j, "tools")) {
    if (!tools->is_array()) bad_type("tools", "an array", *tools);
    r.tools = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      r.tools.push_back(parse_tool((*tools)[i], "tools[" + std::to_string(i) + "]"));
    }
    if (r.tools.empty()) r.tools = nullptr;  // [] is no tools
  }
  if (const json* tc = field(j, "tool_choice")) r.tool_choice = parse_tool_choice(*tc, r.tools);
  if (const json* v = field(j, "parallel_tool_calls")) r.parallel_tool_calls = get_bool(*v, "parallel_tool_calls");
  if (const json* v = field(j, "reasoning_format")) {  // llama.cpp's per-request override
    const std::string f = get_string(*v, "reasoning_format");
    if (f == "none") {
      r.parse_reasoning = false;
    } else if (f == "auto" || f == "deepseek" || f == "deepseek-legacy") {
      r.parse_reasoning = true;
    } else {
      bad("'reasoning_format' must be 'none' or 'auto', got '" + f + "'", "reasoning_format");
    }
  }
  if (const json* v = field(j, "chat_template_kwargs")) {
    if (!v->is_object()) bad_type("chat_template_kwargs", "an object", *v);
    r.chat_template_kwargs = *v;
  }

  parse_common(j, r);

  if (const json* v = field(j, "logprobs")) r.logprobs = get_bool(*v, "logprobs");
  if (const json* v = field(j, "top_logprobs")) {
    r.top_logprobs = int_in(*v, "top_logprobs", 0, 20);
    if (!r.logprobs) bad("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
  }
  return r;
}

ParsedRequest parse_completion_request(std::string_view body) {
  const json j = parse_body(body);
  ParsedRequest r;
  r.chat = false;

  const json* prompt = field(j, "prompt");
  if (!prompt) bad("'prompt' is required", "prompt");
  auto token_ids = [&](const json& arr, const std::string& path) {
    for (size_t i = 0; i < arr.size(); ++i) {
      const std::string p = path + "[" + std::to_string(i) + "]";
      const json& t = arr[i];
      if (!t.is_number_integer()) bad_type(p, "a token id (an integer)", t);
      const int64_t id = get_integer(t, p);
      if (id < 0 || id > INT32_MAX) {
        bad("'" + p + "' must be a token id >= 0, got " + std::to_string(id), p);
      }
      r.prompt_tokens.push_back(static_cast<int32_t>(id));
    }
    r.prompt_is_tokens = true;
  };
  if (prompt->is_string()) {
    r.prompt_text = prompt->get<std::string>();
  } else if (prompt->is_array()) {
    if (prompt->empty()) bad("'prompt' must not be an empty array", "prompt");
    const json& first = (*prompt)[0];
    if (first.is_string() || first.is_array()) {
      // A list of prompts: one is allowed (a string or a list of token ids).
      if (prompt->size() > 1) {
        bad("'prompt' holds " + std::to_string(prompt->size()) +
                " prompts; hearth serve takes one prompt per request",
            "prompt");
      }
      if (first.is_string()) {
        r.prompt_text = first.get<std::string>();
      } else {
        if (first.empty()) bad("'prompt[0]' must not be an empty array", "prompt[0]");
        token_ids(first, "prompt[0]");
      }
    } else {
      token_ids(*prompt, "prompt");
    }
  } else {
    bad_type("prompt", "a string or an array of token ids", *prompt);
  }

  parse_common(j, r);

  // Completions: logprobs is the top count (0: the sampled token's logprob only).
  if (const json* v = field(j, "logprobs")) {
    r.logprobs = true;
    r.top_logprobs = int_in(*v, "logprobs", 0, 20);
  }
  if (const json* v = field(j, "echo")) {
    if (get_bool(*v, "echo")) bad("'echo' is not supported by hearth serve", "echo");
  }
  if (const json* v = field(j, "suffix")) {
    if (!get_string(*v, "suffix").empty())
      bad("'suffix' is not supported by hearth serve", "suffix");
  }
  return r;
}

json messages_for_template(const ParsedRequest& request) {
  json out = json::array();
  for (const ChatMessage& m : request.messages) {
    json msg = json::object();
    msg["role"] = m.role;
    if (!m.parts.is_null()) {
      msg["content"] = m.parts;
    } else {
      msg["content"] = m.content ? *m.content : std::string();
    }
    if (m.name) msg["name"] = *m.name;
    if (!m.tool_calls.is_null()) msg["tool_calls"] = m.tool_calls;
    if (m.tool_call_id) msg["tool_call_id"] = *m.tool_call_id;
    if (m.reasoning_content) msg["reasoning_content"] = *m.reasoning_content;
    out.push_back(std::move(msg));
  }
  return out;
}

json image_part(std::string url, std::string where, std::string param) {
  return json{{"type", "image"}, {"url", std::move(url)}, {"where", std::move(where)}, {"param", std::move(param)}};
}

bool is_image_part(const json& part) {
  return part.is_object() && part.contains("url") && part.contains("where") && part.value("type", "") == "image";
}

}  // namespace hearth::server
