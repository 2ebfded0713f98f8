// Tokenizer from a Hugging Face tokenizer.json: model BPE (vocab + merges), normalizer
// NFC (or none), pre-tokenizer Split(Isolated) / ByteLevel / Digits (or a Sequence of them),
// decoder ByteLevel, post-processor ByteLevel / TemplateProcessing, and added_tokens.
// Anything else is rejected with Error(kUnsupported) naming the component, so a tokenizer
// we would get wrong is never used silently.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace hearth::tokenizer {

namespace {

using nlohmann::json;

struct Ctx {
  const std::string& source;
  [[noreturn]] void bad(const std::string& msg) const {
    fail(ErrorKind::kInvalidInput, "tokenizer", source + ": " + msg);
  }
  [[noreturn]] void unsupported(const std::string& msg) const {
    fail(ErrorKind::kUnsupported, "tokenizer", source + ": " + msg);
  }
};

std::string type_of(const Ctx& c, const json& node, const std::string& where) {
  if (!node.is_object() || !node.contains("type") || !node["type"].is_string()) {
    c.bad(where + " has no \"type\" string");
  }
  return node["type"].get<std::string>();
}

std::string quote_regex(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(ch) != std::string_view::npos) out += '\\';
    out += ch;
  }
  return out;
}

void add_pre_tokenizer(const Ctx& c, const json& node, Vocab& v, std::vector<std::string>& regexes) {
  if (node.is_null()) return;
  const std::string type = type_of(c, node, "pre_tokenizer");
  if (type == "Sequence") {
    if (!node.contains("pretokenizers") || !node["pretokenizers"].is_array()) c.bad("pre_tokenizer Sequence has no \"pretokenizers\" array");
    for (const auto& sub : node["pretokenizers"]) add_pre_tokenizer(c, sub, v, regexes);
  } else if (type == "Split") {
    const std::string behavior = node.value("behavior", "");
    if (behavior != "Isolated" || node.value("invert", false)) {
      c.unsupported("pre_tokenizer Split with behavior '" + behavior + "'" + (node.value("invert", false) ? " (inverted)" : "") + " is not supported");
    }
    const json& pat = node.contains("pattern") ? node["pattern"] : json();
    if (pat.contains("Regex") && pat["Regex"].is_string()) {
      regexes.push_back(pat["Regex"].get<std::string>());
    } else if (pat.contains("String") && pat["String"].is_string()) {
      regexes.push_back(quote_regex(pat["String"].get<std::string>()));
    } else {
      c.bad("pre_tokenizer Split has no Regex or String pattern");
    }
  } else if (type == "ByteLevel") {
    v.byte_level = true;
    v.prefix_space = node.value("add_prefix_space", false);
    if (node.value("use_regex", true)) regexes.push_back(kGpt2SplitRegex);
  } else if (type == "Digits") {
    regexes.push_back(node.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
  } else {
    c.unsupported("pre_tokenizer '" + type + "' is not supported");
  }
}

void set_normalizer(const Ctx& c, const json& node, Vocab& v) {
  if (node.is_null()) return;
  const std::string type = type_of(c, node, "normalizer");
  if (type == "NFC") {
    v.nfc = true;
  } else if (type == "Sequence") {
    for (const auto& sub : node.value("normalizers", json::array())) set_normalizer(c, sub, v);
  } else {
    c.unsupported("normalizer '" + type + "' is not supported");
  }
}

void set_post_processor(const Ctx& c, const json& node, Vocab& v) {
  if (node.is_null()) return;
  const std::string type = type_of(c, node, "post_processor");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const auto& sub : node.value("processors", json::array())) set_post_processor(c, sub, v);
    return;
  }
  if (type != "TemplateProcessing") c.unsupported("post_processor '" + type + "' is not supported");
  const json single = node.value("single", json::array());
  auto special_id = [&](const json& item) -> TokenId {
    if (!item.contains("SpecialToken")) return kNoToken;
    const std::string name = item["SpecialToken"].value("id", "");
    const TokenId id = v.find(name);
    if (id == kNoToken) c.bad("post_processor names special token '" + name + "' that is not in the vocabulary");
    return id;
  };
  if (!single.is_array() || single.empty()) return;
  if (TokenId id = special_id(single.front()); id != kNoToken) v.bos = id, v.add_bos = true;
  if (single.size() > 1) {
    if (TokenId id = special_id(single.back()); id != kNoToken) v.eos = id, v.add_eos = true;
  }
}

}  // namespace

Tokenizer Tokenizer::from_hf_json(std::string_view text, const std::string& source) {
  const Ctx c{source};
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    c.bad(std::string("malformed tokenizer.json: ") + e.what());
  }
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) c.bad("not a tokenizer.json (no \"model\" object)");
  try {
    auto v = std::make_shared<Vocab>();
    v->source = source;
    v->kind = ModelKind::kBpe;
    v->byte_level = false;
    v->special_match = SpecialMatch::kLeftmostLongest;
    v->decode_style = DecodeStyle::kHf;
    const json& m = j["model"];
    const std::string mtype = m.value("type", "");
    if (mtype != "BPE") c.unsupported("model type '" + mtype + "' is not supported (only BPE)");
    if (m.value("byte_fallback", false)) c.unsupported("BPE with byte_fallback is not supported");
    if (!m.contains("vocab") || !m["vocab"].is_object()) c.bad("model has no \"vocab\" object");
    v->ignore_merges = m.value("ignore_merges", false);

    // Token table: the model vocabulary plus added tokens, indexed by id.
    int64_t max_id = -1;
    for (const auto& [tok, id] : m["vocab"].items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) c.bad("vocab entry '" + tok + "' has no valid id");
      max_id = std::max(max_id, id.get<int64_t>());
    }
    const json added = j.value("added_tokens", json::array());
    if (!added.is_array()) c.bad("\"added_tokens\" is not an array");
    for (const auto& a : added) {
      if (!a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 || !a.contains("content") ||
          !a["content"].is_string()) {
        c.bad("added_tokens entry without a valid id and content");
      }
      max_id = std::max(max_id, a["id"].get<int64_t>());
    }
    if (max_id < 0) c.bad("empty vocabulary");
    if (max_id > 16'000'000) c.bad("token id " + std::to_string(max_id) + " is implausibly large");
    v->tokens.resize(static_cast<size_t>(max_id) + 1);
    for (auto& t : v->tokens) t.attr = kAttrUnused;  // holes stay unused
    for (const auto& [tok, id] : m["vocab"].items()) {
      auto& t = v->tokens[id.get<size_t>()];
      t.text = tok;
      t.attr = kAttrNormal;
    }
    for (const auto& a : added) {
      auto& t = v->tokens[a["id"].get<size_t>()];
      t.text = a["content"].get<std::string>();
      t.attr = a.value("special", false) ? kAttrControl : kAttrUserDefined;
      if (a.value("lstrip", false)) t.attr |= kAttrLstrip;
      if (a.value("rstrip", false)) t.attr |= kAttrRstrip;
    }
    for (size_t i = 0; i < v->tokens.size(); ++i) {
      if (v->tokens[i].text.empty()) v->tokens[i].text = "[EMPTY_" + std::to_string(i) + "]";
    }

    const json merges = m.value("merges", json::array());
    if (!merges.is_array()) c.bad("model \"merges\" is not an array");
    v->merge_ranks.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const json& e = merges[i];
      std::string key;
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) c.bad("merge #" + std::to_string(i) + " '" + s + "' is not 'LEFT RIGHT'");
        key = s.substr(0, sp) + '\0' + s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        key = e[0].get<std::string>() + '\0' + e[1].get<std::string>();
      } else {
        c.bad("merge #" + std::to_string(i) + " is neither \"LEFT RIGHT\" nor [LEFT, RIGHT]");
      }
      v->merge_ranks.emplace(std::move(key), static_cast<int32_t>(i));
    }

    set_normalizer(c, j.value("normalizer", json()), *v);
    std::vector<std::string> regexes;
    add_pre_tokenizer(c, j.value("pre_tokenizer", json()), *v, regexes);
    const json dec = j.value("decoder", json());
    if (!dec.is_null()) {
      const std::string dtype = type_of(c, dec, "decoder");
      if (dtype != "ByteLevel") c.unsupported("decoder '" + dtype + "' is not supported");
      v->byte_level = true;
    }
    v->pre = PreTokenizer(regexes, source);
    v->finalize();
    set_post_processor(c, j.value("post_processor", json()), *v);
    return Tokenizer(std::move(v));
  } catch (const json::exception& e) {
    c.bad(std::string("unexpected tokenizer.json structure: ") + e.what());
  }
}

}  // namespace hearth::tokenizer
