// Tokenizer from GGUF metadata (tokenizer.ggml.*), with the defaults and token-attribute
// fix-ups llama.cpp applies when it loads a vocabulary (src/llama-vocab.cpp), so that the
// same file tokenizes the same way.
#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace hearth::tokenizer {

namespace {

// Token texts llama.cpp treats as end-of-generation; they are forced to CONTROL.
const char* const kEogNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~[",
};

// Fill-in-the-middle token families: the first present member of each is forced to CONTROL
// unless the GGUF names that token explicitly.
struct FimGroup {
  const char* key;
  std::vector<const char*> names;
};
const FimGroup kFimGroups[] = {
    {"tokenizer.ggml.fim_pre_token_id",
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
      "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"}},
    {"tokenizer.ggml.fim_suf_token_id",
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
      "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"}},
    {"tokenizer.ggml.fim_mid_token_id",
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
      "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"}},
    {"tokenizer.ggml.fim_pad_token_id", {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
    {"tokenizer.ggml.fim_rep_token_id", {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
    {"tokenizer.ggml.fim_sep_token_id", {"<|file_sep|>"}},
};

// gpt-oss: always rendered, never control.
const char* const kAlwaysUserDefined[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

uint32_t attr_from_type(int64_t type) {
  switch (type) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return 0;  // undefined
  }
}

std::string lower_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void apply_fixups(Vocab& v, const gguf::File& f) {
  auto set = [&](const char* text, uint32_t add, uint32_t remove = 0) {
    const TokenId id = v.find(text);
    if (id != kNoToken) v.tokens[id].attr = (v.tokens[id].attr | add) & ~remove;
    return id;
  };
  for (const char* name : kEogNames) set(name, kAttrControl);
  for (const auto& g : kFimGroups) {
    if (f.find(g.key)) continue;
    for (const char* name : g.names) {
      if (set(name, kAttrControl) != kNoToken) break;
    }
  }
  for (const char* name : kAlwaysUserDefined) {
    const TokenId id = v.find(name);
    if (id != kNoToken) v.tokens[id].attr = kAttrUserDefined;
  }
  // o200k_harmony / solar-open: <|end|> is not end-of-generation there.
  const bool has = v.find("<|end|>") != kNoToken;
  auto present = [&](const char* t) { return v.find(t) != kNoToken; };
  if (has && ((present("<|return|>") && present("<|call|>")) || (present("<|calls|>") && present("<|flush|>")))) {
    v.tokens[v.find("<|end|>")].attr = kAttrUserDefined;
  }
  // gemma4 / paddleocr: </s> is an ordinary token when <|tool_response> exists.
  if (v.find("<|tool_response>") != kNoToken && v.find("</s>") != kNoToken) {
    v.tokens[v.find("</s>")].attr = kAttrNormal;
  }

  const std::string name = lower_ascii(f.find_string("general.name").value_or(""));
  const std::string pre = f.find_string("tokenizer.ggml.pre").value_or("");
  const std::string arch = f.find_string("general.architecture").value_or("");
  auto contains_any = [](const std::string& s, std::initializer_list<const char*> subs) {
    return std::any_of(subs.begin(), subs.end(), [&](const char* x) { return s.find(x) != std::string::npos; });
  };
  if (contains_any(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains_any(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set("<mask>", kAttrLstrip);
  } else if (contains_any(name, {"phi-3", "phi3"})) {
    for (auto& t : v.tokens) {
      if (t.attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) t.attr |= kAttrRstrip;
    }
    set("</s>", kAttrRstrip);
    for (const char* n : {"<unk>", "<s>", "<|endoftext|>"}) set(n, 0, kAttrRstrip);
  } else if (contains_any(name, {"modern-bert"})) {
    set("[MASK]", kAttrLstrip);
  }
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const gguf::File& f) {
  auto v = std::make_shared<Vocab>();
  v->source = f.name();
  auto bad = [&](const std::string& msg) { fail(ErrorKind::kInvalidInput, "tokenizer", f.name() + ": " + msg); };

  const auto model = f.find_string("tokenizer.ggml.model");
  if (!model) fail(ErrorKind::kNotFound, "tokenizer", f.name() + ": no tokenizer.ggml.model key (no vocabulary)");
  const std::string pre = f.find_string("tokenizer.ggml.pre").value_or("");
  if (*model == "llama") {
    v->kind = ModelKind::kSpm;
    v->bos = 1, v->eos = 2, v->unk = 0;
    v->add_space_prefix = true;
    v->add_bos = true;
  } else if (*model == "bert") {
    v->kind = ModelKind::kWpm;
    v->bos = 101, v->unk = 100, v->sep = 102, v->pad = 0, v->mask = 103;
    v->add_bos = true;
    v->add_sep = true;
  } else if (*model == "gpt2") {
    v->kind = ModelKind::kBpe;
    v->bos = 11, v->eos = 11;
    const std::string pre_name = pre.empty() ? "default" : pre;
    const PreTokenizerPreset* preset = find_pre_tokenizer_preset(pre_name);
    if (!preset) {
      fail(ErrorKind::kUnsupported, "tokenizer", f.name() + ": pre-tokenizer '" + pre + "' is not supported");
    }
    v->pre = PreTokenizer(preset->regexes, f.name());
    v->ignore_merges = preset->ignore_merges;
    v->add_bos = preset->add_bos;
  } else {
    fail(ErrorKind::kUnsupported, "tokenizer", f.name() + ": tokenizer.ggml.model '" + *model + "' is not supported");
  }

  const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
  if (!tokens) fail(ErrorKind::kNotFound, "tokenizer", f.name() + ": no tokenizer.ggml.tokens key");
  const auto& tok_arr = tokens->as_array("tokenizer.ggml.tokens");
  const size_t n = tok_arr.size();
  if (n == 0) bad("tokenizer.ggml.tokens is empty");
  v->tokens.resize(n);
  for (size_t i = 0; i < n; ++i) v->tokens[i].text = tok_arr[i].as_string("tokenizer.ggml.tokens");

  if (const gguf::Value* scores = f.find("tokenizer.ggml.scores")) {
    const auto& arr = scores->as_array("tokenizer.ggml.scores");
    if (arr.size() < n) bad("tokenizer.ggml.scores has " + std::to_string(arr.size()) + " entries for " + std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) v->tokens[i].score = static_cast<float>(arr[i].as_float("tokenizer.ggml.scores"));
  }
  if (const gguf::Value* types = f.find("tokenizer.ggml.token_type")) {
    const auto& arr = types->as_array("tokenizer.ggml.token_type");
    if (arr.size() < n) bad("tokenizer.ggml.token_type has " + std::to_string(arr.size()) + " entries for " + std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) v->tokens[i].attr = attr_from_type(arr[i].as_int("tokenizer.ggml.token_type"));
  }
  if (v->kind == ModelKind::kBpe) {
    const gguf::Value* merges = f.find("tokenizer.ggml.merges");
    if (!merges) fail(ErrorKind::kNotFound, "tokenizer", f.name() + ": no tokenizer.ggml.merges key (needed by gpt2 vocabularies)");
    const auto& arr = merges->as_array("tokenizer.ggml.merges");
    v->merge_ranks.reserve(arr.size());
    for (size_t i = 0; i < arr.size(); ++i) {
      const std::string& m = arr[i].as_string("tokenizer.ggml.merges");
      const size_t sp = m.find(' ', 1);
      std::string key = sp == std::string::npos ? std::string(1, '\0') : m.substr(0, sp) + '\0' + m.substr(sp + 1);
      v->merge_ranks.emplace(std::move(key), static_cast<int32_t>(i));
    }
  }

  auto read_id = [&](const char* key, TokenId& id) {
    if (auto x = f.find_int(key)) {
      if (*x >= 0 && static_cast<size_t>(*x) < n) id = static_cast<TokenId>(*x);  // else keep the default
    }
  };
  read_id("tokenizer.ggml.bos_token_id", v->bos);
  read_id("tokenizer.ggml.eos_token_id", v->eos);
  read_id("tokenizer.ggml.eot_token_id", v->eot);
  read_id("tokenizer.ggml.unknown_token_id", v->unk);
  read_id("tokenizer.ggml.seperator_token_id", v->sep);
  read_id("tokenizer.ggml.padding_token_id", v->pad);
  read_id("tokenizer.ggml.mask_token_id", v->mask);
  read_id("tokenizer.ggml.cls_token_id", v->cls);
  if (auto b = f.find_bool("tokenizer.ggml.add_space_prefix")) v->add_space_prefix = *b;
  if (auto b = f.find_bool("tokenizer.ggml.add_bos_token")) v->add_bos = *b;
  if (auto b = f.find_bool("tokenizer.ggml.add_eos_token")) v->add_eos = *b;
  if (auto b = f.find_bool("tokenizer.ggml.add_sep_token")) v->add_sep = *b;
  if (auto b = f.find_bool("tokenizer.ggml.normalizer.lowercase")) v->wpm_lowercase = v->wpm_strip_accents = *b;
  if (auto b = f.find_bool("tokenizer.ggml.normalizer.strip_accents")) v->wpm_strip_accents = *b;
  v->special_match = SpecialMatch::kLongestTokenFirst;
  v->decode_style = DecodeStyle::kLlama;

  v->finalize();  // token_to_id is needed by the fix-ups
  apply_fixups(*v, f);
  v->finalize();  // special-token list after the attribute changes
  return Tokenizer(std::move(v));
}

}  // namespace hearth::tokenizer
