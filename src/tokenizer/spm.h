// SentencePiece BPE as llama.cpp runs it ("llama" vocabularies): start from UTF-8
// characters, repeatedly merge the adjacent pair whose concatenation is the vocabulary
// token with the highest score (ties: leftmost); pieces that are not tokens fall back to
// <0xNN> byte tokens.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace hearth::tokenizer {

// Appends the tokens of `text` (spaces already replaced by U+2581) to `out`. Thread-safe.
void spm_encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out);

// The <0xNN> token for byte `b` (or the one-byte token), kNoToken when neither exists.
TokenId spm_byte_token(const Vocab& vocab, uint8_t b);

}  // namespace hearth::tokenizer
