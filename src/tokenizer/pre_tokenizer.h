// Regex pre-tokenization (PCRE2, UTF + UCP): a list of regexes applied in turn; each one
// splits every current piece into its matches and the gaps between them (Hugging Face
// Split "Isolated", llama.cpp unicode_regex_split). Regexes see one piece at a time, so
// look-arounds and `$` stop at piece boundaries. Invalid UTF-8 bytes are split off as
// single-byte pieces before matching. Immutable; split() is thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::tokenizer {

// llama.cpp's pre-tokenizer for one `tokenizer.ggml.pre` family.
struct PreTokenizerPreset {
  std::vector<std::string> regexes;
  bool ignore_merges = false;  // llama.cpp ignore_merges for this family
  bool add_bos = false;        // llama.cpp default add_bos (the GGUF key overrides it)
};

// The preset for a `tokenizer.ggml.pre` name (table lookup); nullptr when unknown.
const PreTokenizerPreset* find_pre_tokenizer_preset(std::string_view name);

// The GPT-2 split regex (Hugging Face ByteLevel use_regex=true).
extern const char* const kGpt2SplitRegex;

class PreTokenizer {
 public:
  PreTokenizer() = default;  // splits nothing
  // Compiles `regexes`; throws Error(kInvalidInput) naming `source` and the regex on failure.
  PreTokenizer(const std::vector<std::string>& regexes, const std::string& source);

  // Pieces of `text` (views into it), in order, covering all of it.
  std::vector<std::string_view> split(std::string_view text) const;
  bool empty() const { return regexes_.empty(); }
  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  struct Regex;
  std::vector<std::shared_ptr<const Regex>> regexes_;
  std::vector<std::string> patterns_;
};

}  // namespace hearth::tokenizer
