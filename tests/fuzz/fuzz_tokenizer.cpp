// libFuzzer target for the tokenizers: byte-level BPE (GPT-2 GGUF), SentencePiece
// (Llama SPM GGUF), WordPiece (BERT GGUF) and a Hugging Face tokenizer.json (Qwen3),
// loaded once. Each input is encoded with special-token parsing on and off, the ids
// are decoded back, and the streaming decoder is run over id sequences made from
// the input bytes: in range (its output must equal decode()) and out of range (it
// must throw hearth::Error). A hearth::Error is the expected way to reject bad
// input; anything else (crash, sanitizer report, other exception, time-out, huge
// allocation, a broken invariant) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using hearth::tokenizer::DecodeOptions;
using hearth::tokenizer::EncodeOptions;
using hearth::tokenizer::StreamDecoder;
using hearth::tokenizer::TokenId;
using hearth::tokenizer::Tokenizer;

struct Entry {
  const char* name;
  Tokenizer tok;
  bool byte_exact;  // decode(encode(valid UTF-8)) gives the text back
};

std::vector<Entry> load_all() {
  const std::string shared = HEARTH_SHARED_DIR;
  std::vector<Entry> v;
  try {
    v.push_back({"gpt-2", Tokenizer::load(shared + "/data/tokenizer-test/ggml-vocab-gpt-2.gguf"), true});
    v.push_back({"llama-spm", Tokenizer::load(shared + "/data/tokenizer-test/ggml-vocab-llama-spm.gguf"), false});
    v.push_back({"bert-bge", Tokenizer::load(shared + "/data/tokenizer-test/ggml-vocab-bert-bge.gguf"), false});
    v.push_back({"qwen3", Tokenizer::load(shared + "/data/tokenizers/qwen3/tokenizer.json"), false});
  } catch (const hearth::Error& e) {
    std::fprintf(stderr, "fuzz_tokenizer: cannot load the tokenizers: %s\n", e.what());
    __builtin_trap();
  }
  return v;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = hearth::tokenizer::unicode::valid_utf8_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Streams `ids` through a StreamDecoder; the concatenated output must equal decode().
void check_stream(const Tokenizer& tok, const std::vector<TokenId>& ids, const DecodeOptions& o) {
  StreamDecoder sd(tok, o);
  std::string streamed;
  for (TokenId id : ids) streamed += sd.push(id);
  streamed += sd.flush();
  if (streamed != tok.decode(ids, o)) {
    std::fprintf(stderr, "stream decode differs from decode (%zu ids)\n", ids.size());
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Entry> toks = load_all();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool utf8 = valid_utf8(text);
  for (const Entry& e : toks) {
    const Tokenizer& tok = e.tok;
    const auto n = static_cast<uint32_t>(tok.n_tokens());
    try {
      for (bool parse_special : {true, false}) {
        EncodeOptions eo;
        eo.parse_special = parse_special;
        eo.add_special = parse_special;
        std::vector<TokenId> ids = tok.encode(text, eo);
        for (TokenId id : ids) {
          if (id < 0 || static_cast<uint32_t>(id) >= n) {
            std::fprintf(stderr, "%s: encode produced id %d out of range\n", e.name, id);
            __builtin_trap();
          }
        }
        std::string back = tok.decode(ids);
        if (e.byte_exact && utf8 && !parse_special && back != text) {
          std::fprintf(stderr, "%s: decode(encode(text)) != text\n", e.name);
          __builtin_trap();
        }
        DecodeOptions skip;
        skip.skip_special = true;
        (void)tok.decode(ids, skip);
        check_stream(tok, ids, {});
      }
      // Ids straight from the input bytes (2 bytes each), in range.
      std::vector<TokenId> ids;
      for (size_t i = 0; i + 1 < size && ids.size() < 512; i += 2) {
        ids.push_back(static_cast<TokenId>((static_cast<uint32_t>(data[i]) << 8 | data[i + 1]) * 7919u % n));
      }
      check_stream(tok, ids, {});
      DecodeOptions o;
      o.skip_special = size % 2 == 1;
      o.strip_space_prefix = size % 3 == 0;
      check_stream(tok, ids, o);
      for (TokenId id : ids) (void)tok.token_to_piece(id, id % 2 == 0);
      // One out-of-range id in the middle: decode, push, token_to_piece and token_text throw.
      if (!ids.empty()) {
        const TokenId bad = (data[0] & 1) ? static_cast<TokenId>(n + data[0]) : -1 - data[0];
        std::vector<TokenId> with_bad = ids;
        with_bad[with_bad.size() / 2] = bad;
        bool threw = false;
        try {
          (void)tok.decode(with_bad);
        } catch (const hearth::Error&) {
          threw = true;
        }
        StreamDecoder sd(tok);
        for (TokenId id : with_bad) {
          try {
            (void)sd.push(id);
          } catch (const hearth::Error&) {
            if (id != bad) __builtin_trap();
            continue;
          }
          if (id == bad) __builtin_trap();
        }
        (void)sd.flush();
        if (!threw) __builtin_trap();
        try {
          (void)tok.token_to_piece(bad);
          __builtin_trap();
        } catch (const hearth::Error&) {
        }
        try {
          (void)tok.token_text(bad);
          __builtin_trap();
        } catch (const hearth::Error&) {
        }
      }
    } catch (const hearth::Error& err) {
      // Encoding and decoding in-range ids must not fail.
      std::fprintf(stderr, "%s: unexpected error: %s\n", e.name, err.what());
      __builtin_trap();
    }
  }
  return 0;
}
