// Prompt building for chat requests; see chat_request.h.
#include "server/chat_request.h"

#include "core/error.h"

namespace hearth::server {
namespace {

using json = nlohmann::ordered_json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool is_system(const json& m) {
  const std::string role = m.value("role", "");
  return role == "system" || role == "developer";
}

// The instruction for tool_choice required / named and parallel_tool_calls false.
std::string choice_text(const ToolChoice& choice, bool parallel) {
  std::string out;
  if (choice.mode == ToolChoice::Mode::kRequired) {
    out += "You must answer with a call to one of the functions.";
  } else if (choice.mode == ToolChoice::Mode::kNamed) {
    out += "You must answer with a call to the function \"" + choice.name + "\".";
  }
  if (!parallel) {
    if (!out.empty()) out += ' ';
    out += "Call at most one function per answer.";
  }
  return out;
}

// Prepends `text` to the first system message, or adds one in front.
void add_to_system(json& messages, const std::string& text) {
  if (text.empty()) return;
  if (!messages.empty() && is_system(messages[0])) {
    std::string content = messages[0].value("content", "");
    messages[0]["content"] = content.empty() ? text : content + "\n\n" + text;
  } else {
    messages.insert(messages.begin(), json{{"role", "system"}, {"content", text}});
  }
}

// A message content as a list of parts (a string becomes one text part).
json as_parts(const json& content) {
  if (content.is_array()) return content;
  return json::array({json{{"type", "text"}, {"text", content.is_string() ? content.get<std::string>() : ""}}});
}

// For templates that know no tools: the history's calls become <tool_call> text in the
// assistant turn and tool results <tool_response> text in a user turn (consecutive
// results share one), as the injected instructions describe.
json hermes_history(const json& messages) {
  json out = json::array();
  for (const json& m : messages) {
    const std::string role = m.value("role", "");
    if (role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array()) {
      json a = m;
      std::string content = a.value("content", "");
      for (const json& c : m["tool_calls"]) {
        const json& fn = c.contains("function") ? c["function"] : c;
        json call = {{"name", fn.value("name", "")},
                     {"arguments", fn.contains("arguments") ? fn["arguments"] : json::object()}};
        if (!content.empty()) content += '\n';
        content += "<tool_call>\n" + dump(call) + "\n</tool_call>";
      }
      a["content"] = content;
      a.erase("tool_calls");
      out.push_back(std::move(a));
    } else if (role == "tool") {
      const json& content = m.contains("content") ? m["content"] : json("");
      const bool joins = !out.empty() && out.back().value("role", "") == "user" && out.back().value("_tool", false);
      if (content.is_array() || (joins && out.back()["content"].is_array())) {
        // A result with images: the same text around its parts, as a list of parts.
        json parts = joins ? as_parts(out.back()["content"]) : json::array();
        parts.push_back(json{{"type", "text"}, {"text", std::string(joins ? "\n" : "") + "<tool_response>\n"}});
        for (const json& p : as_parts(content)) parts.push_back(p);
        parts.push_back(json{{"type", "text"}, {"text", "\n</tool_response>"}});
        if (joins) {
          out.back()["content"] = std::move(parts);
        } else {
          out.push_back(json{{"role", "user"}, {"content", std::move(parts)}, {"_tool", true}});
        }
        continue;
      }
      const std::string text = "<tool_response>\n" + m.value("content", "") + "\n</tool_response>";
      if (joins) {
        out.back()["content"] = out.back()["content"].get<std::string>() + "\n" + text;
      } else {
        out.push_back(json{{"role", "user"}, {"content", text}, {"_tool", true}});
      }
    } else {
      out.push_back(m);
    }
  }
  for (json& m : out) m.erase("_tool");
  return out;
}

// All system (and developer) messages joined into one, first.
json fold_system(const json& messages) {
  std::string system;
  json rest = json::array();
  for (const json& m : messages) {
    if (is_system(m)) {
      const std::string c = m.value("content", "");
      if (!c.empty()) system += (system.empty() ? "" : "\n\n") + c;
    } else {
      rest.push_back(m);
    }
  }
  json out = json::array();
  out.push_back(json{{"role", "system"}, {"content", system}});
  for (json& m : rest) out.push_back(std::move(m));
  return out;
}

// True when a system message comes after another message, or there are several.
bool has_late_system(const json& messages) {
  for (size_t i = 1; i < messages.size(); ++i) {
    if (is_system(messages[i])) return true;
  }
  return false;
}

// The messages with each image part as the templates know it ({"type": "image"}); the
// number of images in `n`.
json template_images(json messages, size_t& n) {
  n = 0;
  for (json& m : messages) {
    auto c = m.find("content");
    if (c == m.end() || !c->is_array()) continue;
    for (json& part : *c) {
      if (is_image_part(part)) {
        part = json{{"type", "image"}};
        ++n;
      }
    }
  }
  return messages;
}

size_t count_placeholders(const std::string& prompt) {
  size_t n = 0;
  for (size_t at = prompt.find(kImagePlaceholder); at != std::string::npos;
       at = prompt.find(kImagePlaceholder, at + kImagePlaceholder.size())) {
    ++n;
  }
  return n;
}

}  // namespace

std::vector<const json*> image_parts(const json& messages) {
  std::vector<const json*> out;
  if (!messages.is_array()) return out;
  for (const json& m : messages) {
    auto c = m.find("content");
    if (c == m.end() || !c->is_array()) continue;
    for (const json& part : *c) {
      if (is_image_part(part)) out.push_back(&part);
    }
  }
  return out;
}

std::vector<MediaInput> load_images(const ChatInputs& in, const ChatSettings& settings,
                                    const std::string& model_id) {
  const std::vector<const json*> parts = image_parts(in.messages);
  std::vector<MediaInput> out;
  if (parts.empty()) return out;
  if (static_cast<int64_t>(parts.size()) > settings.media.max_images) {
    throw ApiException(invalid_request("the request holds " + std::to_string(parts.size()) +
                                           " images, more than the " + std::to_string(settings.media.max_images) +
                                           " allowed per request (--max-images-per-request)",
                                       "messages"));
  }
  // Read first, so a reference that cannot be read is named as such whatever the model.
  out.reserve(parts.size());
  for (const json* p : parts) {
    const std::string where = p->value("where", "");
    out.push_back(MediaInput{fetch_media(p->value("url", ""), p->value("param", where), settings.media), where});
  }
  if (!settings.vision) {
    throw ApiException(invalid_request(
        "model '" + model_id + "' takes text only (no vision encoder): " + out.front().where + " is an image",
        out.front().where));
  }
  return out;
}

PreparedChat prepare_chat_with_images(const ChatInputs& in, const engine::ChatPrompt& chat,
                                      const ChatSettings& settings, const std::string& model_id) {
  std::vector<MediaInput> images = load_images(in, settings, model_id);
  PreparedChat out = prepare_chat(in, chat, settings);
  out.images = std::move(images);
  return out;
}

void expand_image_tokens(PreparedChat& prepared, std::vector<int32_t>& tokens, const ChatSettings& settings) {
  if (prepared.images.empty()) return;
  if (!settings.image_tokens) {
    throw ApiException(server_error("the server has vision on but no image encoder is wired (ChatSettings::image_tokens)"));
  }
  settings.image_tokens(prepared, tokens);
}

std::string hermes_tools_text(const json& tools, const ToolChoice& choice, bool parallel) {
  std::string out =
      "# Tools\n\nYou may call functions to help with the user's request. The functions you can "
      "call "
      "are described by JSON schemas inside <tools></tools>:\n<tools>";
  for (const json& t : tools) out += "\n" + dump(t);
  out +=
      "\n</tools>\n\nTo call a function, answer with a JSON object holding its name and its "
      "arguments between <tool_call> and </tool_call> tags:\n<tool_call>\n{\"name\": "
      "<function-name>, \"arguments\": <arguments-json-object>}\n</tool_call>";
  const std::string extra = choice_text(choice, parallel);
  if (!extra.empty()) out += "\n\n" + extra;
  return out;
}

engine::ReasoningLimit reasoning_limit(const PreparedChat& prepared, const ChatSettings& settings,
                                       const tokenizer::Tokenizer& tok) {
  engine::ReasoningLimit limit;
  if (prepared.reasoning_budget < 0 || !prepared.output.parse_reasoning) return limit;
  if (!settings.caps.knows_reasoning && !prepared.output.starts_in_reasoning) return limit;
  limit.budget = prepared.reasoning_budget;
  limit.starts_inside = prepared.output.starts_in_reasoning;
  tokenizer::EncodeOptions enc;
  enc.parse_special = true;
  enc.add_special = false;
  limit.close_tokens = tok.encode("\n</think>\n\n", enc);
  return limit;
}

ChatInputs chat_inputs(const ParsedRequest& r) {
  ChatInputs in;
  in.messages = messages_for_template(r);
  in.tools = r.tools;
  in.tool_choice = r.tool_choice;
  in.parallel_tool_calls = r.parallel_tool_calls;
  in.kwargs = r.chat_template_kwargs;
  in.parse_reasoning = r.parse_reasoning;
  return in;
}

PreparedChat prepare_chat(const ChatInputs& in, const engine::ChatPrompt& chat,
                          const ChatSettings& settings) {
  PreparedChat out;
  json messages = in.messages.is_array() ? in.messages : json::array();
  // "developer" is OpenAI's newer name for a system message; templates know "system".
  for (json& m : messages) {
    if (m.value("role", "") == "developer") m["role"] = "system";
  }
  json extra = settings.default_kwargs.is_object() ? settings.default_kwargs : json::object();
  if (in.kwargs.is_object()) {
    for (const auto& [k, v] : in.kwargs.items()) extra[k] = v;
  }
  extra.erase("messages");

  const bool has_tools = in.tools.is_array() && !in.tools.empty();
  const bool use_tools = has_tools && in.tool_choice.mode != ToolChoice::Mode::kNone;
  // A forced choice is one call unless parallel calls were asked for (as the hosted APIs
  // behave: a small model under a grammar that allows more repeats its call until
  // max_tokens); otherwise calls may come in parallel unless the client said no.
  const bool forced = in.tool_choice.mode == ToolChoice::Mode::kRequired ||
                      in.tool_choice.mode == ToolChoice::Mode::kNamed;
  const bool parallel = in.parallel_tool_calls.value_or(!forced);
  const bool template_tools =
      settings.caps.renders_tools && settings.caps.tool_format != ToolFormat::kNone;
  // A template without tool support gets the history's calls and results as Hermes text
  // (with tools or not: the conversation may hold them from earlier turns).
  if (!template_tools) messages = hermes_history(messages);
  ToolFormat format = ToolFormat::kNone;
  if (use_tools) {
    if (template_tools) {
      format = settings.caps.tool_format;
      extra["tools"] = in.tools;
      add_to_system(messages, choice_text(in.tool_choice, parallel));
    } else {
      format = ToolFormat::kHermes;
      out.tools_injected = true;
      add_to_system(messages, hermes_tools_text(in.tools, in.tool_choice, parallel));
    }
  } else {
    extra.erase("tools");
  }

  size_t n_images = 0;
  messages = template_images(std::move(messages), n_images);
  const auto failed = [n_images](const Error& e) {
    if (n_images > 0) {
      return ApiException(invalid_request(
          std::string("the model's chat template does not take images (it failed on these messages: ") + e.what() +
              ")",
          "messages"));
    }
    return ApiException(
        invalid_request(std::string("the chat template failed on these messages: ") + e.what(), "messages"));
  };
  try {
    out.prompt = chat.render(messages, extra);
  } catch (const Error& first) {
    // Agents send system messages after the first turn; many templates raise on them.
    if (!has_late_system(messages)) throw failed(first);
    try {
      out.prompt = chat.render(fold_system(messages), extra);
    } catch (const Error& e) {
      throw failed(e);
    }
  }
  // Each image must have its one placeholder, in order (the images follow the
  // conversation); a template that drops image parts or prints them otherwise cannot
  // take images.
  if (n_images > 0) {
    const size_t placed = count_placeholders(out.prompt);
    if (placed != n_images) {
      throw ApiException(invalid_request("the model's chat template does not take images: the prompt holds " +
                                             std::to_string(placed) + " image placeholders (" +
                                             std::string(kImagePlaceholder) + ") for " + std::to_string(n_images) +
                                             " images",
                                         "messages"));
    }
  }

  out.output.tool_format = format;
  out.output.parse_tools = use_tools && format != ToolFormat::kNone;
  out.output.tools = use_tools ? in.tools : json(nullptr);
  const bool parse_reasoning = in.parse_reasoning.value_or(settings.parse_reasoning);
  out.output.parse_reasoning = parse_reasoning;
  out.output.starts_in_reasoning = parse_reasoning && prompt_opens_reasoning(out.prompt);

  out.reasoning_budget = in.reasoning_budget >= 0 ? in.reasoning_budget : settings.reasoning_budget;

  out.constraint.format = format;
  out.constraint.parallel = parallel;
  // A forced choice in a format with a grammar (tool_constraint_spec): calls are parsed as
  // the grammar writes them.
  out.output.strict_calls = forced && use_tools &&
                            (format == ToolFormat::kHermes || format == ToolFormat::kQwenXml ||
                             format == ToolFormat::kLlama3Json);
  if (use_tools) {
    out.constraint.tools = in.tools;
    if (in.tool_choice.mode == ToolChoice::Mode::kRequired)
      out.constraint.kind = ToolConstraint::Kind::kRequired;
    if (in.tool_choice.mode == ToolChoice::Mode::kNamed) {
      out.constraint.kind = ToolConstraint::Kind::kNamed;
      out.constraint.name = in.tool_choice.name;
    }
  }
  return out;
}

}  // namespace hearth::server
