// Byte-level BPE (GPT-2 style): pre-tokenize with the vocabulary's regexes, map bytes to
// the GPT-2 alphabet, then merge adjacent symbols by lowest merge rank (ties: leftmost)
// using a priority queue over adjacent pairs, as llama.cpp and Hugging Face do.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace hearth::tokenizer {

// Appends the tokens of `text` (a fragment with no special tokens) to `out`. Thread-safe.
void bpe_encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out);

// Tokens of one pre-token `word` (already byte-level mapped when vocab.byte_level).
void bpe_encode_word(const Vocab& vocab, std::string_view word, std::vector<TokenId>& out);

}  // namespace hearth::tokenizer
