#include "tokenizer/vocab.h"

#include <algorithm>

#include "core/error.h"

namespace hearth::tokenizer {

TokenId Vocab::find(std::string_view text) const {
  const auto it = token_to_id.find(std::string(text));
  return it == token_to_id.end() ? kNoToken : it->second;
}

int32_t Vocab::merge_rank(std::string_view left, std::string_view right) const {
  std::string key;
  key.reserve(left.size() + right.size() + 1);
  key.append(left);
  key += '\0';
  key.append(right);
  const auto it = merge_ranks.find(key);
  return it == merge_ranks.end() ? -1 : it->second;
}

void Vocab::finalize() {
  token_to_id.clear();
  token_to_id.reserve(tokens.size());
  max_token_len = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto& t = tokens[i];
    if (t.text.empty()) t.text = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp does
    const auto [it, inserted] = token_to_id.emplace(t.text, static_cast<TokenId>(i));
    if (!inserted && decode_style == DecodeStyle::kHf) {
      // HF: an added token may repeat a model vocabulary entry. Look-ups by text are model
      // look-ups (BPE), so the model's own (normal) entry is kept; added tokens are found
      // through special_tokens.
      if (!(tokens[it->second].attr & kAttrNormal)) it->second = static_cast<TokenId>(i);
    } else if (!inserted) {
      fail(ErrorKind::kInvalidInput, "tokenizer",
           source + ": duplicate token '" + t.text + "' (ids " + std::to_string(it->second) + " and " +
               std::to_string(i) + ")");
    }
    max_token_len = std::max(max_token_len, t.text.size());
  }
  for (TokenId* id : {&bos, &eos, &unk, &sep, &pad, &cls, &mask, &eot}) {
    if (*id != kNoToken && !valid(*id)) *id = kNoToken;  // llama.cpp ignores out-of-range ids
  }
  special_tokens.clear();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      special_tokens.push_back(static_cast<TokenId>(i));
    }
  }
  std::stable_sort(special_tokens.begin(), special_tokens.end(), [&](TokenId a, TokenId b) {
    return tokens[a].text.size() > tokens[b].text.size();
  });
  special_first_byte.assign(256, 0);
  special_lengths.clear();
  special_index.clear();
  for (size_t k = 0; k < special_tokens.size(); ++k) {
    const std::string& t = tokens[static_cast<size_t>(special_tokens[k])].text;
    special_first_byte[static_cast<uint8_t>(t[0])] = 1;
    if (special_lengths.empty() || special_lengths.back() != t.size()) special_lengths.push_back(t.size());
    special_index.emplace(t, static_cast<uint32_t>(k));  // keeps the first (longest-first order)
  }
  if (add_bos && bos == kNoToken) {
    fail(ErrorKind::kInvalidInput, "tokenizer", source + ": add_bos_token is true but there is no BOS token");
  }
  if (add_eos && eos == kNoToken) {
    fail(ErrorKind::kInvalidInput, "tokenizer", source + ": add_eos_token is true but there is no EOS token");
  }
}

}  // namespace hearth::tokenizer
