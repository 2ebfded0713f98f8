#include "store/model_info.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "format/gguf.h"
#include "format/safetensors.h"

namespace hearth::store {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

uint64_t file_size_or_zero(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);  // follows symbolic links (the cache's blobs)
  return ec ? 0 : static_cast<uint64_t>(n);
}

// The type holding most bytes among the matrices (2-D and up).
std::string dominant_type(const gguf::File& f) {
  std::map<std::string, uint64_t> bytes;
  for (const auto& t : f.tensors()) {
    if (t.shape.size() >= 2) bytes[std::string(ggml_type_name(t.type))] += t.n_bytes;
  }
  auto best = std::max_element(bytes.begin(), bytes.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  return best == bytes.end() ? "" : best->first;
}

void describe_gguf(ModelInfo& info) {
  const std::vector<std::string> files =
      info.entry.shards.empty() ? std::vector<std::string>{info.entry.path} : info.entry.shards;
  for (size_t i = 0; i < files.size(); ++i) {
    const gguf::File f = gguf::File::open(files[i]);
    info.size_bytes += f.file_size();
    for (const auto& t : f.tensors()) info.parameters += t.n_elements();
    if (i != 0) continue;
    info.architecture = f.find_string("general.architecture").value_or("");
    if (const auto ft = f.find_int("general.file_type")) info.quantization = file_type_name(*ft);
    if (info.quantization.empty()) info.quantization = dominant_type(f);
    if (!info.architecture.empty()) {
      info.context_length = f.find_int(info.architecture + ".context_length").value_or(0);
    }
  }
}

json read_json(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail(ErrorKind::kIo, "models", p.string() + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(ErrorKind::kInvalidInput, "models", p.string() + ": not valid JSON: " + e.what());
  }
}

// config.json's field, or its text_config's (multimodal configs nest the text model).
json config_field(const json& cfg, const char* key) {
  if (cfg.contains(key)) return cfg[key];
  if (cfg.contains("text_config") && cfg["text_config"].is_object() &&
      cfg["text_config"].contains(key)) {
    return cfg["text_config"][key];
  }
  return nullptr;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string hf_quantization(const json& cfg) {
  const json q = config_field(cfg, "quantization_config");
  if (q.is_object()) {
    std::string s = q.value("quant_method", std::string("quantized"));
    if (q.contains("bits") && q["bits"].is_number_integer())
      s += " " + std::to_string(q["bits"].get<int>()) + "-bit";
    return s;
  }
  for (const char* key : {"torch_dtype", "dtype"}) {
    const json d = config_field(cfg, key);
    if (d.is_string()) {
      std::string s = d.get<std::string>();
      if (s == "bfloat16") return "BF16";
      if (s == "float16") return "F16";
      if (s == "float32") return "F32";
      return upper(s);
    }
  }
  return "";
}

void describe_hf_folder(ModelInfo& info) {
  const fs::path dir = info.entry.path;
  const json cfg = read_json(dir / "config.json");
  if (!cfg.is_object())
    fail(ErrorKind::kInvalidInput, "models",
         (dir / "config.json").string() + ": not a JSON object");
  const json arch = config_field(cfg, "model_type");
  info.architecture = arch.is_string() ? arch.get<std::string>() : "";
  const json ctx = config_field(cfg, "max_position_embeddings");
  info.context_length = ctx.is_number_integer() ? ctx.get<int64_t>() : 0;
  info.quantization = hf_quantization(cfg);
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    info.size_bytes += file_size_or_zero(it->path());
    if (it->path().extension() != ".safetensors" || it->path().parent_path() != dir) continue;
    const safetensors::File st = safetensors::File::open(it->path().string());
    for (const auto& t : st.tensors()) {
      uint64_t n = 1;
      for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
      info.parameters += n;
    }
  }
}

}  // namespace

std::string file_type_name(int64_t ft) {
  static const std::map<int64_t, const char*> kNames = {
      {0, "F32"},      {1, "F16"},      {2, "Q4_0"},      {3, "Q4_1"},    {7, "Q8_0"},
      {8, "Q5_0"},     {9, "Q5_1"},     {10, "Q2_K"},     {11, "Q3_K_S"}, {12, "Q3_K_M"},
      {13, "Q3_K_L"},  {14, "Q4_K_S"},  {15, "Q4_K_M"},   {16, "Q5_K_S"}, {17, "Q5_K_M"},
      {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"},   {21, "Q2_K_S"}, {22, "IQ3_XS"},
      {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"},   {26, "IQ3_S"},  {27, "IQ3_M"},
      {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"},   {31, "IQ1_M"},  {32, "BF16"},
      {36, "TQ1_0"},   {37, "TQ2_0"},   {38, "MXFP4_MOE"}};
  const auto it = kNames.find(ft);
  return it == kNames.end() ? "" : it->second;
}

ModelInfo describe_model(const ModelEntry& entry) {
  ModelInfo info;
  info.entry = entry;
  info.error = entry.error;
  if (!info.error.empty()) return info;
  try {
    if (entry.hf_folder)
      describe_hf_folder(info);
    else
      describe_gguf(info);
  } catch (const std::exception& e) {
    info.error = e.what();
  }
  return info;
}

json to_json(const ModelInfo& info) {
  json j = {{"name", info.entry.name},
            {"store", info.entry.store},
            {"architecture", info.architecture},
            {"parameters", info.parameters},
            {"quantization", info.quantization},
            {"size_bytes", info.size_bytes},
            {"context_length", info.context_length},
            {"path", info.entry.path},
            {"format", info.entry.hf_folder ? "safetensors" : "gguf"}};
  if (!info.entry.shards.empty()) j["shards"] = info.entry.shards;
  if (!info.entry.mmproj.empty()) j["mmproj"] = info.entry.mmproj;
  if (!info.error.empty()) j["error"] = info.error;
  return j;
}

}  // namespace hearth::store
