#include "convert/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace hearth::convert {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

enum TokenType : int32_t { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::kIo, "convert", path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_json(const std::string& path) {
  try {
    return json::parse(read_text(path));
  } catch (const json::exception& e) {
    fail(ErrorKind::kInvalidInput, "convert", path + ": not valid JSON: " + e.what());
  }
}

// tokenizer_config's "bos_token": a string, or {"content": ...}, or null.
std::string token_content(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// Sample text for choosing tokenizer.ggml.pre: letters, digits, spaces, newlines,
// punctuation, contractions and CJK, where the regex families differ.
const char* const kCheckText =
    "Hello World! I'm here, they'll see 12345 or 3.14159\n\n  \t tabs\r\nline  "
    "don't DON'T 'Re @user #tag $100 ... 你好世界 こんにちは Привет мир 🦙 x=a+b; "
    "   leading  and trailing   ";

}  // namespace

namespace {
bool write_tokenizer_checked(const std::string& dir, const HfConfig* cfg, int64_t vocab_size, gguf::Writer& w,
                             std::string* note);
}  // namespace

bool write_tokenizer(const std::string& dir, const HfConfig* cfg, int64_t vocab_size, gguf::Writer& w,
                     std::string* note) {
  // A field of an unexpected JSON type deep inside (e.g. "special": "yes") is the file's
  // error, named, not an exception escaping the converter.
  try {
    return write_tokenizer_checked(dir, cfg, vocab_size, w, note);
  } catch (const json::exception& e) {
    fail(ErrorKind::kInvalidInput, "convert", dir + "/tokenizer.json or tokenizer_config.json: " + e.what());
  }
}

namespace {
bool write_tokenizer_checked(const std::string& dir, const HfConfig* cfg, int64_t vocab_size, gguf::Writer& w,
                             std::string* note) {
  const std::string tj_path = dir + "/tokenizer.json";
  if (!fs::exists(tj_path)) return false;
  const std::string tj_text = read_text(tj_path);
  json tj;
  try {
    tj = json::parse(tj_text);
  } catch (const json::exception& e) {
    fail(ErrorKind::kInvalidInput, "convert", tj_path + ": not valid JSON: " + e.what());
  }
  if (!tj.contains("model") || !tj["model"].is_object() || tj["model"].value("type", "") != "BPE" ||
      !tj["model"].contains("vocab") || !tj["model"]["vocab"].is_object())
    fail(ErrorKind::kUnsupported, "convert", tj_path + ": field 'model': only byte-level BPE tokenizers can be converted");
  const json& m = tj["model"];
  if (m.value("byte_fallback", false))
    fail(ErrorKind::kUnsupported, "convert", tj_path + ": field 'model.byte_fallback': BPE with byte fallback (SentencePiece-style) is not supported");

  // id -> (text, type)
  // Ids beyond kMaxId, or so sparse that the vocabulary would be mostly placeholders, are an
  // error: one hostile id (2e9) would otherwise make a vocabulary of that many entries.
  constexpr int64_t kMaxId = int64_t{1} << 24;  // published vocabularies: up to ~262K
  const auto check_id = [&](const json& id, const char* field, const std::string& text) {
    if (!id.is_number_integer()) {
      fail(ErrorKind::kInvalidInput, "convert", tj_path + ": field '" + field + "': id of '" + text + "' is not an integer");
    }
    const int64_t v = id.get<int64_t>();
    if (v < 0 || v >= kMaxId) {
      fail(ErrorKind::kInvalidInput, "convert", tj_path + ": field '" + field + "': id " + std::to_string(v) + " of '" +
                                                    text + "' is out of range [0, " + std::to_string(kMaxId) + ")");
    }
    return v;
  };
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;
  for (auto& [text, id] : m["vocab"].items()) by_id[check_id(id, "model.vocab", text)] = {text, kNormal};
  for (const auto& at : tj.value("added_tokens", json::array())) {
    if (!at.is_object() || !at.contains("id") || !at.contains("content")) continue;
    if (!at["content"].is_string()) fail(ErrorKind::kInvalidInput, "convert", tj_path + ": field 'added_tokens': a 'content' is not a string");
    const std::string text = at["content"].get<std::string>();
    const bool special = at.value("special", false);
    by_id[check_id(at["id"], "added_tokens", text)] = {text, special ? kControl : kUserDefined};
  }
  int64_t n = by_id.empty() ? 0 : by_id.rbegin()->first + 1;
  if (vocab_size > n) n = vocab_size;
  const auto named = static_cast<int64_t>(by_id.size());
  if (n > kMaxId || n - named > std::max<int64_t>(named, 1 << 16)) {
    fail(ErrorKind::kInvalidInput, "convert",
         tj_path + ": a vocabulary of " + std::to_string(n) + " ids (the largest id + 1" +
             (vocab_size > 0 ? std::string(", or config.json's vocab_size ") + std::to_string(vocab_size) : std::string()) +
             ") for " + std::to_string(named) + " tokens: more unused ids than tokens");
  }
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int32_t> types(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = kUnused;
    } else {
      tokens[i] = it->second.first;
      types[i] = it->second.second;
    }
  }
  std::vector<std::string> merges;
  for (const auto& mg : m.value("merges", json::array())) {
    if (mg.is_string()) merges.push_back(mg.get<std::string>());
    else if (mg.is_array() && mg.size() == 2) merges.push_back(mg[0].get<std::string>() + " " + mg[1].get<std::string>());
    else fail(ErrorKind::kInvalidInput, "convert", tj_path + ": field 'model.merges': an entry is neither \"a b\" nor [a, b]");
  }
  auto find_id = [&](const std::string& text) -> int64_t {
    if (text.empty()) return -1;
    for (const auto& [id, tt] : by_id)
      if (tt.first == text) return id;
    return -1;
  };

  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "default");  // chosen below
  w.set_array("tokenizer.ggml.tokens", tokens);
  w.set_array("tokenizer.ggml.token_type", types);
  w.set_array("tokenizer.ggml.merges", merges);

  // Special ids: tokenizer_config.json first, config.json's *_token_id as the fallback
  // (llama.cpp's SpecialVocab order).
  json tc = json::object();
  if (fs::exists(dir + "/tokenizer_config.json")) tc = parse_json(dir + "/tokenizer_config.json");
  json top = json::object();
  if (cfg) top = cfg->text;
  for (const char* kind : {"bos", "eos", "unk", "pad"}) {
    int64_t id = find_id(token_content(tc.value(std::string(kind) + "_token", json())));
    const std::string id_key = std::string(kind) + "_token_id";
    if (id < 0 && top.contains(id_key) && top[id_key].is_number_integer()) id = top[id_key].get<int64_t>();
    if (id >= 0 && id < n) w.set_u32(std::string("tokenizer.ggml.") + (std::string(kind) == "unk" ? "unknown" : kind == std::string("pad") ? "padding" : kind) + "_token_id", static_cast<uint32_t>(id));
  }
  if (tc.contains("add_bos_token") && tc["add_bos_token"].is_boolean()) w.set_bool("tokenizer.ggml.add_bos_token", tc["add_bos_token"].get<bool>());
  if (tc.contains("add_eos_token") && tc["add_eos_token"].is_boolean()) w.set_bool("tokenizer.ggml.add_eos_token", tc["add_eos_token"].get<bool>());

  // Chat template: tokenizer_config.json's chat_template (a string, or a list of named
  // templates: the "default" one), else chat_template.jinja.
  std::string tmpl;
  if (tc.contains("chat_template")) {
    const json& ct = tc["chat_template"];
    if (ct.is_string()) tmpl = ct.get<std::string>();
    else if (ct.is_array())
      for (const auto& e : ct)
        if (e.value("name", "") == "default" && e.contains("template")) tmpl = e["template"].get<std::string>();
  }
  if (tmpl.empty() && fs::exists(dir + "/chat_template.jinja")) tmpl = read_text(dir + "/chat_template.jinja");
  if (!tmpl.empty()) w.set_string("tokenizer.chat_template", tmpl);

  // tokenizer.ggml.pre: the family's usual name first, then the others; keep the first
  // under which Hearth's GGUF tokenizer splits the sample text as tokenizer.json does.
  std::vector<std::string> candidates;
  const Family fam = cfg ? cfg->family : Family::kQwen2;
  if (fam == Family::kQwen35 || fam == Family::kQwen35Moe) candidates = {"qwen35", "qwen2", "llama-bpe"};
  else if (fam == Family::kLlama) candidates = {"llama-bpe", "qwen2", "qwen35"};
  else candidates = {"qwen2", "qwen35", "llama-bpe"};
  for (const char* extra : {"gpt-2", "default", "gpt-4o", "tekken", "deepseek-v3", "starcoder"}) candidates.push_back(extra);
  const tokenizer::Tokenizer ref = tokenizer::Tokenizer::from_hf_json(tj_text, tj_path);
  tokenizer::EncodeOptions eo;
  eo.add_special = false;
  const auto want = ref.encode(kCheckText, eo);
  std::string chosen;
  for (const auto& cand : candidates) {
    gguf::Writer probe;
    for (const auto& kv : w.metadata())
      if (kv.key.rfind("tokenizer.ggml.", 0) == 0) probe.set_value(kv.key, kv.value);
    probe.set_string("tokenizer.ggml.pre", cand);
    auto bytes = std::make_shared<const std::vector<uint8_t>>(probe.to_bytes());
    try {
      const auto tok = tokenizer::Tokenizer::from_gguf(gguf::File::parse_owned(bytes, "probe"));
      if (tok.encode(kCheckText, eo) == want) {
        chosen = cand;
        break;
      }
    } catch (const Error&) {
    }
  }
  if (chosen.empty()) {
    chosen = candidates.front();
    if (note) *note = "no known tokenizer.ggml.pre reproduces tokenizer.json's pre-tokenizer; wrote '" + chosen + "'";
  }
  w.set_string("tokenizer.ggml.pre", chosen);
  return true;
}
}  // namespace

}  // namespace hearth::convert
