// From a chat request to the prompt and the output rules, API-neutral (the OpenAI and
// Anthropic routes both build ChatInputs in OpenAI's message shape): tools given to the
// template when it renders them in a syntax the parser knows, else a Hermes-style tool
// list injected into the system message (and the history's calls / results written the
// Hermes way); tool_choice reflected in the prompt; chat_template_kwargs merged over the
// server default; later system messages folded into the first when the template refuses
// them; image parts kept in the content lists the template gets. Throws ApiException
// (400) when the template cannot render the conversation.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_prompt.h"
#include "engine/prompt_images.h"
#include "engine/reasoning_budget.h"
#include "server/chat_output.h"
#include "server/media_fetch.h"
#include "server/openai_protocol.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

struct PreparedChat;

// One image of a request, as read (data: URL decoded, file read, URL downloaded): the
// encoded bytes, not yet decoded. `where`: its content part, e.g. "messages[1].content[0]"
// (Responses: "input[0].content[1]"), for the errors about it.
struct MediaInput {
  std::string bytes;
  std::string where;
};

// Vision (issue 37), the hook the routes call for a request with images: `tokens` is
// prepared.prompt encoded, holding one <|image_pad|> token per image of prepared.images
// (in order); the hook decodes and encodes each image, expands its placeholder into the
// image's tokens (so the context checks, usage and count_tokens see them) and keeps what
// the engine needs with `prepared`. Throws ApiException (400) for an image that does not
// decode, naming its `where`. Called by expand_image_tokens (below) only.
using ImageTokensHook = std::function<void(PreparedChat& prepared, std::vector<int32_t>& tokens)>;

// Server-wide chat settings (flags and the template in use), fixed at start-up.
struct ChatSettings {
  TemplateCaps caps;  // of the template in use
  nlohmann::ordered_json default_kwargs =
      nlohmann::ordered_json::object();  // --chat-template-kwargs
  bool parse_reasoning = true;           // --reasoning-format auto
  int32_t reasoning_budget = -1;         // --reasoning-budget (< 0: off)
  MediaSettings media;                   // where images may come from (media_fetch.h)
  bool vision = false;  // the served model has a vision encoder (else images are a 400)
  ImageTokensHook image_tokens;  // set with `vision` (see ImageTokensHook)
};

// One request's conversation, in OpenAI's shape.
struct ChatInputs {
  nlohmann::ordered_json messages;  // as messages_for_template gives them
  nlohmann::ordered_json tools;     // [{type: "function", function: {...}}] or null
  ToolChoice tool_choice;
  // Unset: not sent. Calls may then come in parallel, except under a forced tool_choice
  // (required / named): one call unless the client asked for parallel calls.
  std::optional<bool> parallel_tool_calls;
  nlohmann::ordered_json kwargs;  // chat_template_kwargs of the request (object or null)
  std::optional<bool> parse_reasoning;  // this request's reasoning_format (unset: the server's)
  int32_t reasoning_budget = -1;  // this request's cap on reasoning tokens (e.g. Anthropic's
                                  //   thinking.budget_tokens); < 0: the server's --reasoning-budget
};

// What the request demands of the model's tool calls. This is the one place it is
// computed: constrained decoding enforces kRequired / kNamed from it (a call, in
// `format`, to one of `tools` / to `name`, arguments valid for its schema).
struct ToolConstraint {
  enum class Kind { kFree, kRequired, kNamed };
  Kind kind = Kind::kFree;       // kFree: free text, calls optional (or no tools)
  std::string name;              // kNamed
  nlohmann::ordered_json tools;  // the request's tools
  ToolFormat format = ToolFormat::kNone;
  bool parallel = true;  // more than one call allowed
};

struct PreparedChat {
  std::string prompt;    // the rendered prompt text
  OutputOptions output;  // how the model's answer is parsed
  ToolConstraint constraint;
  bool tools_injected = false;    // the Hermes tool list was written into the system message
  int32_t reasoning_budget = -1;  // the cap that applies (request, else server; < 0: none)
  // The request's images in prompt order (the prompt holds one kImagePlaceholder for each),
  // set by the route from load_images.
  std::vector<MediaInput> images;
  // Set by the vision hook (ChatSettings::image_tokens): the images decoded and
  // preprocessed, with the prompt rows they fill (for GenRequest::images).
  std::vector<engine::PromptImage> prompt_images;
};

// The text the chat template writes for an image (Qwen-VL's, between <|vision_start|> and
// <|vision_end|>).
inline constexpr std::string_view kImagePlaceholder = "<|image_pad|>";

ChatInputs chat_inputs(const ParsedRequest& request);

// The image parts (image_part() of openai_protocol.h) of `messages`, in conversation order.
std::vector<const nlohmann::ordered_json*> image_parts(const nlohmann::ordered_json& messages);

// The images of a request, read in conversation order (media_fetch: data: URLs, allowed
// files, remote URLs when allowed). Throws ApiException (400): more than
// settings.media.max_images images; an image that cannot be read (naming its field); any
// image when the model has no vision encoder (!settings.vision): "model '<model_id>' takes
// text only (no vision encoder): <where> is an image".
std::vector<MediaInput> load_images(const ChatInputs& in, const ChatSettings& settings,
                                    const std::string& model_id);

// The prompt of a chat request. Image parts reach the template as {"type": "image"}; the
// rendered prompt must hold exactly one kImagePlaceholder per image, else (or when the
// template raises on them) a 400 saying the model's chat template does not take images.
// Text-only conversations render as they always did. Leaves `images` empty (the route
// sets it from load_images).
PreparedChat prepare_chat(const ChatInputs& in, const engine::ChatPrompt& chat,
                          const ChatSettings& settings);

// What every chat route calls: load_images, then prepare_chat with `images` set. Then
// the route encodes the prompt and calls expand_image_tokens.
PreparedChat prepare_chat_with_images(const ChatInputs& in, const engine::ChatPrompt& chat,
                                      const ChatSettings& settings, const std::string& model_id);

// After encoding a prompt with images: settings.image_tokens expands their placeholders in
// `tokens` (nothing happens without images). Every route calls it right after
// chat.encode(prepared.prompt). Throws ApiException (500) when the server claims vision but
// no hook is set.
void expand_image_tokens(PreparedChat& prepared, std::vector<int32_t>& tokens,
                         const ChatSettings& settings);

// The engine's reasoning cut for a prepared chat: after `prepared.reasoning_budget`
// tokens inside <think>, the tokens of "\n</think>\n\n" (nothing when there is no
// budget, reasoning is not parsed, or the template knows no <think>).
engine::ReasoningLimit reasoning_limit(const PreparedChat& prepared, const ChatSettings& settings,
                                       const tokenizer::Tokenizer& tok);

// The system-message text listing `tools` in the Hermes style (for templates without
// tool support), with the tool_choice / parallel instruction.
std::string hermes_tools_text(const nlohmann::ordered_json& tools, const ToolChoice& choice,
                              bool parallel);

}  // namespace hearth::server
