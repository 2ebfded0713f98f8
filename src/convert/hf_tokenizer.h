// tokenizer.json / tokenizer_config.json of a Hugging Face folder -> llama.cpp's
// `tokenizer.ggml.*` keys (byte-level BPE as model "gpt2": tokens, token_type, merges,
// special ids, add_bos) and `tokenizer.chat_template`, as convert_hf_to_gguf.py's
// _set_vocab_gpt2 + SpecialVocab write them. `tokenizer.ggml.pre` is chosen so that
// Hearth's GGUF tokenizer encodes like the tokenizer.json (checked on a sample text).
#pragma once

#include <cstdint>
#include <string>

#include "convert/hf_config.h"
#include "format/gguf_writer.h"

namespace hearth::convert {

// Writes the tokenizer keys when DIR has tokenizer.json; returns false (nothing written)
// when it has none. `vocab_size` pads the token list (config.json vocab_size). Throws
// Error naming the file on malformed JSON or an unsupported tokenizer model.
bool write_tokenizer(const std::string& dir, const HfConfig* cfg, int64_t vocab_size, gguf::Writer& w,
                     std::string* note = nullptr);

}  // namespace hearth::convert
