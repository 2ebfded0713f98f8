// A model's chat formatting: its chat template (tokenizer.chat_template) with the
// special-token texts the templates expect, and the encoding rule that a template
// which already wrote the BOS text gets no second BOS. Shared by `hearth run` and
// `hearth serve`.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace hearth::engine {

class ChatPrompt {
 public:
  // Reads the template of `file` (none: has_template() is false), or uses
  // `template_source` instead when given (--chat-template). Throws Error when the
  // template does not parse.
  ChatPrompt(const gguf::File& file, const tokenizer::Tokenizer& tok,
             std::optional<std::string> template_source = std::nullopt);

  bool has_template() const { return tmpl_ != nullptr; }
  // The template's Jinja source ("" without a template).
  const std::string& source() const { return source_; }
  // Renders {"messages": messages, "add_generation_prompt": true, bos/eos texts,
  // plus `extra` keys}. Throws Error (kInvalidInput) with the template's message.
  std::string render(const nlohmann::ordered_json& messages,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  // Tokens of a rendered prompt (special tokens parsed; BOS added unless the text
  // already starts with it) or of raw text (BOS as the vocabulary asks).
  std::vector<int32_t> encode(const std::string& text) const;

 private:
  const tokenizer::Tokenizer& tok_;
  std::unique_ptr<tmpl::ChatTemplate> tmpl_;
  std::string source_;
  std::string bos_text_, eos_text_;
};

}  // namespace hearth::engine
