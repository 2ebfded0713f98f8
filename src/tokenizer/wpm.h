// WordPiece as llama.cpp runs it ("bert" vocabularies, whose word-initial tokens carry a
// U+2581 prefix instead of continuation tokens carrying "##"): BERT normalization
// (optional NFD + accent stripping, lower-casing, punctuation and CJK split off), then
// greedy longest-match per word; a word with no full match becomes [UNK].
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace hearth::tokenizer {

// Appends the tokens of `text` (a fragment with no special tokens) to `out`. Thread-safe.
void wpm_encode(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out);

}  // namespace hearth::tokenizer
