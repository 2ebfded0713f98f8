// Tokenizer facade: text <-> token ids for GGUF vocabularies (byte-level BPE, SentencePiece,
// WordPiece) and Hugging Face tokenizer.json files (byte-level BPE). Special and added
// tokens are matched before pre-tokenization. A Tokenizer is immutable after construction;
// copies share the vocabulary, and encode/decode may run concurrently from many threads.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace hearth::gguf {
class File;
}

namespace hearth::tokenizer {

struct EncodeOptions {
  bool add_special = true;    // add BOS/EOS/SEP as the vocabulary's flags ask
  bool parse_special = true;  // special (control) token text in the input becomes that token
};

struct DecodeOptions {
  bool skip_special = false;        // control/unknown tokens (HF: special added tokens) render as ""
  // SPM: drop the space add_space_prefix put before the text (on the first token after an
  // optional leading BOS)
  bool strip_space_prefix = true;
};

class Tokenizer {
 public:
  // From the tokenizer.ggml.* metadata of an opened GGUF file. Throws Error naming the file.
  static Tokenizer from_gguf(const gguf::File& file);
  // From a Hugging Face tokenizer.json text; `source` names it in messages.
  static Tokenizer from_hf_json(std::string_view json_text, const std::string& source);
  // Loads a path: a GGUF file, or a tokenizer.json (by content). Throws Error naming the path.
  static Tokenizer load(const std::string& path);

  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Bytes of the ids, concatenated (may end inside a UTF-8 character when the ids do).
  // Throws Error(kInvalidInput) naming the id when one is out of range.
  std::string decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;
  // Bytes one token stands for; `special` false renders control/unknown tokens as "".
  std::string token_to_piece(TokenId id, bool special = true) const;

  const Vocab& vocab() const { return *vocab_; }
  size_t n_tokens() const { return vocab_->tokens.size(); }
  const std::string& token_text(TokenId id) const;  // the raw vocabulary entry; throws when out of range

 private:
  explicit Tokenizer(std::shared_ptr<const Vocab> vocab) : vocab_(std::move(vocab)) {}
  friend class StreamDecoder;
  void check_id(TokenId id) const;
  std::string piece(TokenId id, bool special) const;

  std::shared_ptr<const Vocab> vocab_;
};

// Incremental decoder for streaming output: push ids one at a time, get back only text that
// ends on a UTF-8 character boundary (incomplete sequences are held until completed); flush()
// returns what is left. One per stream; not thread-safe itself (the Tokenizer it uses is).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options = {});
  // Appends the token's bytes; returns the complete characters now available (maybe "").
  std::string push(TokenId id);
  // Returns any buffered bytes (an incomplete sequence at the end of the stream) and resets.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::string pending_;
  bool first_ = true;      // the next piece may carry the add_space_prefix space
  bool seen_any_ = false;  // a token was pushed since construction / flush
};

}  // namespace hearth::tokenizer
