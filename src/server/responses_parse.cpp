// Request parsing and validation of the Responses API, and the conversation items as chat
// messages; see responses_protocol.h.
#include <string>

#include "server/json_fields.h"
#include "server/response_format.h"
#include "server/responses_protocol.h"

namespace hearth::server {

using json = nlohmann::ordered_json;

namespace {

using namespace json_fields;

std::string idx(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

const json& required(const json& obj, const char* key, const std::string& path) {
  const json* v = field(obj, key);
  if (v == nullptr) bad("'" + path + "' is required", path);
  return *v;
}

void append_text(std::string& out, const std::string& text) {
  if (!out.empty()) out += '\n';
  out += text;
}

[[noreturn]] void unsupported_part(const std::string& type, const std::string& path, const char* allowed) {
  if (type == "input_image") bad("'" + path + "': images are allowed in user input and function call outputs only", path + ".type");
  if (type == "input_file") bad("'" + path + "': files are not supported (send the text as input_text)", path + ".type");
  if (type == "input_audio") bad("'" + path + "': audio is not supported", path + ".type");
  bad("'" + path + ".type' '" + type + "' is not supported here (allowed: " + allowed + ")", path + ".type");
}

// An input_image part {"type": "input_image", "image_url": URL, "detail"?} as an
// image_part (a file_id names an uploaded file, which this server does not keep).
json parse_input_image(const json& part, const std::string& path) {
  if (field(part, "file_id") != nullptr && field(part, "image_url") == nullptr) {
    bad("'" + path + ".file_id': uploaded files are not supported (send the image as image_url, e.g. a data: URL)",
        path + ".file_id");
  }
  const std::string url = get_string(required(part, "image_url", path + ".image_url"), path + ".image_url");
  if (const json* d = field(part, "detail")) {
    const std::string detail = get_string(*d, path + ".detail");
    if (detail != "auto" && detail != "low" && detail != "high") {
      bad("'" + path + ".detail' must be auto, low or high, got '" + detail + "'", path + ".detail");
    }
  }
  return image_part(url, path, path + ".image_url");
}

// A message's content (or a function_call_output's output): a string, or an array of text
// parts (input_text / output_text, an assistant's refusal), joined by "\n"; with
// `images`, input_image parts too, and then the parts in order ({"type": "text", "text"}
// and image_part()s) instead of the string.
json content_value(const json& v, const std::string& path, bool images) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad_type(path, "a string or an array of content parts", v);
  std::string out;
  json parts = json::array();
  bool has_image = false;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = idx(path, i);
    const json& part = v[i];
    if (!part.is_object()) bad_type(p, "a content part (an object)", part);
    const std::string type = get_string(required(part, "type", p + ".type"), p + ".type");
    std::string text;
    if (type == "input_text" || type == "output_text" || type == "text") {
      text = get_string(required(part, "text", p + ".text"), p + ".text");
    } else if (type == "refusal") {
      text = get_string(required(part, "refusal", p + ".refusal"), p + ".refusal");
    } else if (type == "input_image" && images) {
      parts.push_back(parse_input_image(part, p));
      has_image = true;
      continue;
    } else {
      unsupported_part(type, p, images ? "input_text, output_text, input_image" : "input_text, output_text");
    }
    append_text(out, text);
    parts.push_back(json{{"type", "text"}, {"text", text}});
  }
  return has_image ? parts : json(out);
}

// Reasoning passed back: its content texts, else its summary texts. Never an error (the
// shape varies between providers and hearth only needs the text); encrypted content is
// ignored.
std::string reasoning_text(const json& item) {
  auto texts = [](const json* parts) {
    std::string out;
    if (parts == nullptr || !parts->is_array()) return out;
    for (const json& p : *parts) {
      if (p.is_string()) append_text(out, p.get<std::string>());
      if (!p.is_object()) continue;
      if (auto t = p.find("text"); t != p.end() && t->is_string()) append_text(out, t->get<std::string>());
    }
    return out;
  };
  std::string text = texts(field(item, "content"));
  if (text.empty()) text = texts(field(item, "summary"));
  if (text.empty()) {
    if (const json* t = field(item, "text"); t != nullptr && t->is_string()) text = t->get<std::string>();
  }
  return text;
}

// One input item in the canonical form (see ResponsesRequest::items).
json parse_item(const json& item, const std::string& path) {
  if (!item.is_object()) bad_type(path, "an input item (an object)", item);
  std::string type = "message";  // {"role", "content"} without a type is a message
  if (const json* t = field(item, "type")) {
    type = get_string(*t, path + ".type");
  } else if (field(item, "role") == nullptr) {
    bad("'" + path + "' must have a 'type' (message, function_call, function_call_output, reasoning) or a 'role'",
        path + ".type");
  }
  if (type == "message") {
    const std::string role = get_string(required(item, "role", path + ".role"), path + ".role");
    if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
      bad("'" + path + ".role' must be one of user, system, developer, assistant, got '" + role + "'", path + ".role");
    }
    json content = content_value(required(item, "content", path + ".content"), path + ".content", role == "user");
    return json{{"type", "message"}, {"role", role}, {"content", std::move(content)}};
  }
  if (type == "function_call") {
    const std::string call_id = get_string(required(item, "call_id", path + ".call_id"), path + ".call_id");
    const std::string name = get_string(required(item, "name", path + ".name"), path + ".name");
    if (name.empty()) bad("'" + path + ".name' must not be empty", path + ".name");
    std::string arguments = "{}";
    if (const json* a = field(item, "arguments")) {
      if (a->is_object()) {
        arguments = dump_json(*a);
      } else {
        arguments = get_string(*a, path + ".arguments");
      }
    }
    return json{{"type", "function_call"}, {"call_id", call_id}, {"name", name}, {"arguments", arguments}};
  }
  if (type == "function_call_output") {
    const std::string call_id = get_string(required(item, "call_id", path + ".call_id"), path + ".call_id");
    json output = content_value(required(item, "output", path + ".output"), path + ".output", true);
    return json{{"type", "function_call_output"}, {"call_id", call_id}, {"output", std::move(output)}};
  }
  if (type == "reasoning") return json{{"type", "reasoning"}, {"text", reasoning_text(item)}};
  if (type == "item_reference") {
    bad("'" + path + ".type' 'item_reference' is not supported: hearth serve keeps no items by id (send the item "
        "itself, or use previous_response_id)",
        path + ".type");
  }
  bad("'" + path + ".type' '" + type +
          "' is not supported (allowed: message, function_call, function_call_output, reasoning)",
      path + ".type");
}

// A function tool {"type": "function", "name", "description"?, "parameters"?, "strict"?}:
// returns it in the chat shape; `echo` gets it as the Response repeats it.
json parse_tool(const json& t, const std::string& path, json& echo) {
  if (!t.is_object()) bad_type(path, "a tool (an object)", t);
  const std::string type = get_string(required(t, "type", path + ".type"), path + ".type");
  if (type != "function") {
    bad("'" + path + ".type' '" + type + "' is not supported: hearth serve runs only function tools " +
            "(no hosted tools such as web_search or file_search)",
        path + ".type");
  }
  const std::string name = get_string(required(t, "name", path + ".name"), path + ".name");
  if (name.empty() || name.size() > 256) bad("'" + path + ".name' must be 1 to 256 characters", path + ".name");
  json fn = {{"name", name}};
  json e = {{"type", "function"}, {"name", name}, {"description", nullptr}, {"parameters", nullptr}, {"strict", nullptr}};
  if (const json* d = field(t, "description")) {
    fn["description"] = get_string(*d, path + ".description");
    e["description"] = *d;
  }
  if (const json* p = field(t, "parameters")) {
    if (!p->is_object()) bad_type(path + ".parameters", "an object (a JSON schema)", *p);
    fn["parameters"] = *p;
    e["parameters"] = *p;
  }
  if (const json* s = field(t, "strict")) e["strict"] = get_bool(*s, path + ".strict");
  echo.push_back(std::move(e));
  return json{{"type", "function"}, {"function", std::move(fn)}};
}

void parse_tool_choice(const json& v, ResponsesRequest& r) {
  ToolChoice& tc = r.tool_choice;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "auto") {
      tc.mode = ToolChoice::Mode::kAuto;
    } else if (s == "none") {
      tc.mode = ToolChoice::Mode::kNone;
    } else if (s == "required") {
      tc.mode = ToolChoice::Mode::kRequired;
    } else {
      bad("'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": ...}, got '" + s +
              "'",
          "tool_choice");
    }
    r.tool_choice_echo = s;
  } else if (v.is_object()) {
    const std::string type = get_string(required(v, "type", "tool_choice.type"), "tool_choice.type");
    if (type != "function") {
      bad("'tool_choice.type' '" + type + "' is not supported (only 'function': hearth serve runs function tools)",
          "tool_choice.type");
    }
    tc.mode = ToolChoice::Mode::kNamed;
    tc.name = get_string(required(v, "name", "tool_choice.name"), "tool_choice.name");
    r.tool_choice_echo = json{{"type", "function"}, {"name", tc.name}};
  } else {
    bad_type("tool_choice", "a string or an object", v);
  }
  if (tc.mode == ToolChoice::Mode::kRequired || tc.mode == ToolChoice::Mode::kNamed) {
    if (!r.tools.is_array() || r.tools.empty()) {
      bad(std::string("'tool_choice' '") + (tc.mode == ToolChoice::Mode::kNamed ? "function" : "required") +
              "' needs a non-empty 'tools' array",
          "tool_choice");
    }
  }
  if (tc.mode == ToolChoice::Mode::kNamed) {
    bool found = false;
    for (const json& t : r.tools) found = found || t["function"]["name"] == tc.name;
    if (!found) bad("'tool_choice' names function '" + tc.name + "', which is not in 'tools'", "tool_choice.name");
  }
}

// `s` with every "response_format.json_schema" / "response_format" replaced by "text.format"
// (parse_response_format names its fields in the chat shape).
std::string text_format_path(std::string s) {
  for (const std::string from : {"response_format.json_schema", "response_format"}) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at)) {
      s.replace(at, from.size(), "text.format");
      at += 11;
    }
  }
  return s;
}

// text: {"format": {"type": "text" | "json_object" | "json_schema", "name"?, "schema"?,
// "strict"?, "description"?}, "verbosity"?}: the same constraint as the chat route's
// response_format.
void parse_text(const json& v, ResponsesRequest& r) {
  if (!v.is_object()) bad_type("text", "an object", v);
  r.text_echo = json::object();
  const json* format = field(v, "format");
  if (format == nullptr) {
    r.text_echo["format"] = json{{"type", "text"}};
  } else {
    if (!format->is_object()) bad_type("text.format", "an object", *format);
    json rf = json::object();
    if (const json* t = field(*format, "type")) rf["type"] = *t;
    if (rf.contains("type") && rf["type"] == "json_schema") {
      json js = json::object();
      for (const char* key : {"name", "description", "schema", "strict"}) {
        if (const json* x = field(*format, key)) js[key] = *x;
      }
      rf["json_schema"] = std::move(js);
    }
    try {
      r.constraint = parse_response_format(rf);
    } catch (const ApiException& e) {
      ApiError err = e.error();
      err.message = text_format_path(err.message);
      err.param = text_format_path(err.param);
      throw ApiException(std::move(err));
    }
    r.text_echo["format"] = *format;
  }
  if (const json* verbosity = field(v, "verbosity")) r.text_echo["verbosity"] = get_string(*verbosity, "text.verbosity");
}

// reasoning: {"effort"?, "summary"?}: effort none / minimal turns thinking off, low / medium
// caps it, high / xhigh leaves the server's cap.
void parse_reasoning(const json& v, ResponsesRequest& r) {
  if (!v.is_object()) bad_type("reasoning", "an object", v);
  r.reasoning_echo = json{{"effort", nullptr}, {"summary", nullptr}};
  if (const json* e = field(v, "effort")) {
    const std::string effort = get_string(*e, "reasoning.effort");
    if (effort == "none" || effort == "minimal") {
      r.enable_thinking = false;
    } else if (effort == "low") {
      r.enable_thinking = true;
      r.reasoning_budget = kReasoningBudgetLow;
    } else if (effort == "medium") {
      r.enable_thinking = true;
      r.reasoning_budget = kReasoningBudgetMedium;
    } else if (effort == "high" || effort == "xhigh") {
      r.enable_thinking = true;
    } else {
      bad("'reasoning.effort' must be one of none, minimal, low, medium, high, got '" + effort + "'",
          "reasoning.effort");
    }
    r.reasoning_echo["effort"] = effort;
  }
  for (const char* key : {"summary", "generate_summary"}) {
    if (const json* s = field(v, key)) r.reasoning_echo["summary"] = get_string(*s, std::string("reasoning.") + key);
  }
}

void parse_input(const json& input, ResponsesRequest& r) {
  if (input.is_string()) {
    r.items.push_back(json{{"type", "message"}, {"role", "user"}, {"content", input.get<std::string>()}});
    return;
  }
  if (!input.is_array()) bad_type("input", "a string or an array of input items", input);
  for (size_t i = 0; i < input.size(); ++i) r.items.push_back(parse_item(input[i], idx("input", i)));
}

}  // namespace

ResponsesRequest parse_responses_request(std::string_view body) {
  const json j = parse_json_object(body);
  ResponsesRequest r;
  if (const json* v = field(j, "model")) r.model = get_string(*v, "model");
  if (const json* v = field(j, "instructions")) r.instructions = get_string(*v, "instructions");
  if (const json* v = field(j, "previous_response_id")) {
    r.previous_response_id = get_string(*v, "previous_response_id");
    if (r.previous_response_id->empty()) bad("'previous_response_id' must not be empty", "previous_response_id");
  }
  if (const json* v = field(j, "input")) {
    parse_input(*v, r);
  } else if (!r.previous_response_id) {
    bad("'input' is required", "input");
  }
  if (r.items.empty() && !r.previous_response_id) bad("'input' must contain at least one item", "input");

  if (const json* tools = field(j, "tools")) {
    if (!tools->is_array()) bad_type("tools", "an array", *tools);
    r.tools = json::array();
    for (size_t i = 0; i < tools->size(); ++i) r.tools.push_back(parse_tool((*tools)[i], idx("tools", i), r.tools_echo));
    if (r.tools.empty()) r.tools = nullptr;  // [] is no tools
  }
  if (const json* v = field(j, "tool_choice")) parse_tool_choice(*v, r);
  if (const json* v = field(j, "parallel_tool_calls")) r.parallel_tool_calls = get_bool(*v, "parallel_tool_calls");

  if (const json* v = field(j, "max_output_tokens")) {
    const int64_t n = get_integer(*v, "max_output_tokens");
    if (n < 1) bad("'max_output_tokens' must be >= 1, got " + std::to_string(n), "max_output_tokens");
    r.max_output_tokens = saturate_i32(n);
  }
  if (const json* v = field(j, "temperature")) {
    r.sampler.temperature = number_in(*v, "temperature", 0, 2);
    r.temperature = v->get<double>();
  }
  if (const json* v = field(j, "top_p")) {
    r.sampler.top_p = number_in(*v, "top_p", 0, 1, true);
    r.top_p = v->get<double>();
  }
  if (const json* v = field(j, "text")) parse_text(*v, r);
  if (const json* v = field(j, "reasoning")) parse_reasoning(*v, r);
  if (const json* v = field(j, "stream")) r.stream = get_bool(*v, "stream");
  if (const json* v = field(j, "speculative")) r.speculative = get_bool(*v, "speculative");
  if (const json* v = field(j, "store")) r.store = get_bool(*v, "store");
  if (const json* v = field(j, "metadata")) {
    if (!v->is_object()) bad_type("metadata", "an object of strings", *v);
    for (const auto& [key, value] : v->items()) get_string(value, "metadata." + key);
    r.metadata = *v;
  }
  if (const json* v = field(j, "user")) r.user = get_string(*v, "user");
  // Fields that would silently change the result if ignored.
  if (const json* v = field(j, "background"); v != nullptr && get_bool(*v, "background")) {
    bad("'background' mode is not supported by hearth serve (send the request and wait, or stream it)", "background");
  }
  if (field(j, "conversation") != nullptr) {
    bad("'conversation' is not supported by hearth serve (use previous_response_id with store: true)", "conversation");
  }
  if (field(j, "prompt") != nullptr) bad("'prompt' (stored prompt templates) is not supported by hearth serve", "prompt");
  return r;
}

json conversation_messages(const std::optional<std::string>& instructions, const json& items) {
  json out = json::array();
  if (instructions && !instructions->empty()) out.push_back(json{{"role", "system"}, {"content", *instructions}});
  std::string reasoning;       // passed-back reasoning waiting for its assistant turn
  bool calls_may_join = false;  // the last message is an assistant turn function calls belong to
  for (const json& item : items) {
    const std::string type = item.value("type", "");
    if (type == "reasoning") {
      append_text(reasoning, item.value("text", ""));
      continue;
    }
    if (type == "function_call") {
      if (!calls_may_join) {
        json m = {{"role", "assistant"}, {"content", ""}};
        if (!reasoning.empty()) m["reasoning_content"] = reasoning;
        out.push_back(std::move(m));
        reasoning.clear();
        calls_may_join = true;
      }
      json& m = out.back();
      if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
      // Arguments as an object when they hold one (the templates iterate over it).
      json args = item.value("arguments", "{}");
      try {
        json parsed = json::parse(args.get<std::string>());
        if (parsed.is_object()) args = std::move(parsed);
      } catch (const json::exception&) {
      }
      m["tool_calls"].push_back(json{{"id", item.value("call_id", "")},
                                     {"type", "function"},
                                     {"function", {{"name", item.value("name", "")}, {"arguments", std::move(args)}}}});
      continue;
    }
    if (type == "function_call_output") {
      out.push_back(json{{"role", "tool"}, {"tool_call_id", item.value("call_id", "")}, {"content", item.contains("output") ? item["output"] : json("")}});
    } else {  // message (content: a string, or parts with images)
      const std::string role = item.value("role", "user");
      json m = {{"role", role}, {"content", item.contains("content") ? item["content"] : json("")}};
      if (role == "assistant" && !reasoning.empty()) m["reasoning_content"] = reasoning;
      out.push_back(std::move(m));
      calls_may_join = role == "assistant";
      reasoning.clear();
      continue;
    }
    calls_may_join = false;
    reasoning.clear();
  }
  return out;
}

json canonical_items(const json& output) {
  json out = json::array();
  if (!output.is_array()) return out;
  for (size_t i = 0; i < output.size(); ++i) {
    try {
      out.push_back(parse_item(output[i], idx("output", i)));
    } catch (const ApiException&) {  // (never: the items are this server's own)
    }
  }
  return out;
}

}  // namespace hearth::server
