#include "engine/chat_prompt.h"

#include "core/error.h"

namespace hearth::engine {
namespace {

std::string token_text(const gguf::File& file, const char* key, const tokenizer::Tokenizer& tok) {
  auto id = file.find_int(key);
  if (!id || *id < 0 || static_cast<size_t>(*id) >= tok.n_tokens()) return "";
  return tok.token_text(static_cast<int32_t>(*id));
}

}  // namespace

ChatPrompt::ChatPrompt(const gguf::File& file, const tokenizer::Tokenizer& tok,
                       std::optional<std::string> template_source)
    : tok_(tok),
      bos_text_(token_text(file, "tokenizer.ggml.bos_token_id", tok)),
      eos_text_(token_text(file, "tokenizer.ggml.eos_token_id", tok)) {
  if (template_source) {
    source_ = std::move(*template_source);
  } else if (auto source = file.find_string("tokenizer.chat_template")) {
    source_ = std::string(*source);
  } else {
    return;
  }
  tmpl_ = std::make_unique<tmpl::ChatTemplate>(source_);
}

std::string ChatPrompt::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& extra) const {
  if (!tmpl_) fail(ErrorKind::kInvalidInput, "chat", "the model has no chat template (tokenizer.chat_template)");
  nlohmann::ordered_json input = extra.is_object() ? extra : nlohmann::ordered_json::object();
  input["messages"] = messages;
  if (!input.contains("add_generation_prompt")) input["add_generation_prompt"] = true;
  input["bos_token"] = bos_text_;
  input["eos_token"] = eos_text_;
  return tmpl_->apply(input);
}

std::vector<int32_t> ChatPrompt::encode(const std::string& text) const {
  tokenizer::EncodeOptions enc;
  enc.parse_special = true;
  const tokenizer::Vocab& v = tok_.vocab();
  if (v.valid(v.bos) && text.rfind(tok_.token_text(v.bos), 0) == 0) enc.add_special = false;
  return tok_.encode(text, enc);
}

}  // namespace hearth::engine
